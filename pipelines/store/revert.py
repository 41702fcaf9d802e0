"""Undo and redo over the append-only audit log, exactly once per entry even with concurrent callers.

An undo appends an `undo` entry (`undo_of` = the change it reverts); a redo appends a `redo` entry
(`undo_of` = the undo it reverts). Both also set `reverts` to that id, under a unique index: the entry is
written with INSERT ... ON CONFLICT DO NOTHING after the change was applied, and when another transaction got
there first, this one is rolled back and the next candidate is taken (on PostgreSQL the conflicting insert waits
for the other transaction, so "first" is decided by the database, not by a read that may be stale).

Candidates (`user`'s own entries, optionally on one episode that still exists):
- undo: the newest tag/segment/notes/state/grounding-annotation change or redo not reverted yet;
- redo: the newest undo not redone yet that is newer than the user's newest change there (a new change clears
  the redo chain, as in editors).
Reverting an entry takes the episode from its `after` to its `before`; the undo's own before/after are what it
actually changed (a tag keeps its author and creation time both ways).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, aliased

from pipelines.store import field_actions, field_values, grounding, mapping, tags
from pipelines.store.audit import UNDOABLE, AuditAction, AuditEntry
from pipelines.store.errors import Conflict
from pipelines.store.models import AuditRow, EpisodeRow
from protos.rlds_creator import study_pb2

_ATTEMPTS = 200
_TAG = {AuditAction.EPISODE_TAG_ADD, AuditAction.EPISODE_TAG_REMOVE, AuditAction.STEP_TAG_ADD,
        AuditAction.STEP_TAG_REMOVE}  # fmt: skip
_SEGMENT = {AuditAction.STEP_SEGMENT_ADD, AuditAction.STEP_SEGMENT_REMOVE}
# Grounding annotations (issue 11) are undoable too; their own module says how (`grounding.swap`).
_CHANGES = [str(a) for a in UNDOABLE] + list(grounding.AUDIT_ACTIONS) + list(field_actions.AUDIT_ACTIONS)

# (session, episode row, user, what) -> None or PermissionDenied: may `user` change others' tags/state here?
Guard = Callable[[Session, EpisodeRow, str, str], None]


class _Taken(Exception):
    """Another transaction reverted the candidate first: roll back and pick the next one."""


def _not_reverted() -> Any:
    later = aliased(AuditRow)
    return ~sa.exists().where(later.undo_of == AuditRow.id)


def _candidate(s: Session, user: str, episode_id: str | None, redo: bool) -> AuditRow | None:
    query = (
        sa.select(AuditRow)
        .join(EpisodeRow, EpisodeRow.id == AuditRow.episode_id)
        .where(AuditRow.user == user, _not_reverted())
    )
    if episode_id is not None:
        query = query.where(AuditRow.episode_id == episode_id)
    if redo:
        newest_change = sa.select(sa.func.coalesce(sa.func.max(AuditRow.id), 0)).where(
            AuditRow.user == user, AuditRow.action.in_(_CHANGES)
        )
        if episode_id is not None:
            newest_change = newest_change.where(AuditRow.episode_id == episode_id)
        query = query.where(
            AuditRow.action == str(AuditAction.UNDO), AuditRow.id > newest_change.scalar_subquery()
        )
    else:
        query = query.where(AuditRow.action.in_([*_CHANGES, str(AuditAction.REDO)]))
    return s.scalars(query.order_by(AuditRow.id.desc()).limit(1)).first()


def root_action(s: Session, row: AuditRow) -> str:
    """The action of the change at the root of an undo/redo chain."""
    seen = 0
    while row.action in (AuditAction.UNDO, AuditAction.REDO) and row.undo_of is not None and seen < 10_000:
        parent = s.get(AuditRow, row.undo_of)
        if parent is None:
            break
        row, seen = parent, seen + 1
    return row.action


def entry(s: Session, row: AuditRow) -> AuditEntry:
    """The AuditEntry of a row, `reverted_action` filled in for undo/redo entries."""
    base = mapping.audit_entry(row)
    if row.action not in (AuditAction.UNDO, AuditAction.REDO):
        return base
    return AuditEntry(**{**base.__dict__, "reverted_action": root_action(s, row)})


def _original_author(s: Session, row: AuditRow, episode: EpisodeRow, label: str) -> dict[str, Any]:
    """Author and time of a tag removed by an entry written before removals recorded them: the newest add of
    that label there before the removal, else the episode's own user at registration (tags of `add_episode`)."""
    add = AuditAction.STEP_TAG_ADD if row.step_index is not None else AuditAction.EPISODE_TAG_ADD
    query = sa.select(AuditRow).where(
        AuditRow.episode_id == row.episode_id, AuditRow.id < row.id, AuditRow.action == str(add)
    )
    if row.step_index is not None:
        query = query.where(AuditRow.step_index == row.step_index)
    for candidate in s.scalars(query.order_by(AuditRow.id.desc()).limit(200)):
        if isinstance(candidate.after, dict) and candidate.after.get("label") == label:
            return tags.tag_json(label, candidate.user, candidate.time)
    return tags.tag_json(label, episode.user, episode.registered_time)


def _check_unchanged_since(s: Session, row: AuditRow, current: dict[str, Any], kind: str) -> None:
    """Reverting a value someone changed since would silently drop their change: refuse instead."""
    if current == row.after:
        return
    later = s.scalars(
        sa.select(AuditRow)
        .where(AuditRow.episode_id == row.episode_id, AuditRow.id > row.id)
        .where(AuditRow.action.in_([kind, str(AuditAction.UNDO), str(AuditAction.REDO)]))
        .order_by(AuditRow.id.desc())
        .limit(1)
    ).first()
    by = f" by {later.user} at {mapping.utc(later.time):%Y-%m-%d %H:%M:%S} UTC" if later else ""
    field = next(iter(current))
    raise Conflict(f"cannot revert {kind} on episode {row.episode_id!r}: its {field} changed since{by}")


def _apply(
    s: Session, row: AuditRow, kind: str, episode: EpisodeRow, user: str, guard: Guard
) -> tuple[Any, Any]:
    """Take the episode from `row.after` back to `row.before`; returns (before, after) of that change."""
    if kind in grounding.AUDIT_ACTIONS:  # issue 11 hook: an annotation is taken from `after` back to `before`
        return grounding.swap(s, episode, row.after, row.before, user, guard)
    if kind in field_actions.AUDIT_ACTIONS:  # issue 26: a field value, taken from `after` back to `before`
        return field_values.swap(s, episode, row.after, row.before, user, guard)
    action = AuditAction(kind)
    target, current = row.before, row.after
    if action in _TAG:
        step = row.step_index if action in (AuditAction.STEP_TAG_ADD, AuditAction.STEP_TAG_REMOVE) else None
        if target is None:  # the entry added the tag: remove it
            if current is None:
                return None, None
            taken = tags.take(s, episode.id, step, current["label"])
            if taken is not None and taken.get("user") != user:
                guard(s, episode, user, f"remove {taken.get('user')}'s tag {taken['label']!r}")
            return taken, None
        tag = target if target.get("user") else _original_author(s, row, episode, target["label"])
        if not tags.put(s, episode.id, step, tag, user):
            return None, None  # someone put it back meanwhile: nothing to change (and nothing to redo)
        return None, tag
    if action in _SEGMENT:
        if target is None or not target.get("tags"):  # the entry added tags on these steps: remove them
            if current is None:
                return None, None
            taken = tags.take_steps(
                s, episode.id, current["label"], [t["step"] for t in current.get("tags", [])]
            )
            others = sorted({str(t.get("user")) for t in taken if t.get("user") != user})
            if others:
                guard(s, episode, user, f"remove tags of {', '.join(others)}")
            side = {k: current[k] for k in ("label", "start", "end")}
            return {**side, "tags": taken}, None
        by_step = {t["step"]: t for t in target["tags"]}
        added = tags.put_steps(s, episode.id, target, user, list(by_step), authors=by_step)
        side = {k: target[k] for k in ("label", "start", "end")}
        return None, {**side, "tags": [by_step[i] for i in added]}
    if action == AuditAction.EPISODE_NOTES:
        now = {"notes": episode.notes or ""}
        _check_unchanged_since(s, row, now, kind)
        episode.notes = target["notes"] or None
        return now, {"notes": target["notes"]}
    # EPISODE_STATE
    now = {"state": _state_name(episode.state)}
    _check_unchanged_since(s, row, now, kind)
    if episode.user != user:
        guard(s, episode, user, "change the state")
    episode.state = study_pb2.Episode.State.Value(target["state"])
    return now, {"state": target["state"]}


def _state_name(value: int) -> str:
    try:
        return study_pb2.Episode.State.Name(value)
    except ValueError:
        return str(value)


def _claim(s: Session, values: dict[str, Any]) -> int:
    """Insert the undo/redo entry unless one already reverts the same entry; its id, or raise _Taken."""
    table = AuditRow.__table__
    dialect = s.get_bind().dialect.name
    if dialect in ("sqlite", "postgresql"):
        insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
        new_id = s.scalar(insert(table).values(**values).on_conflict_do_nothing().returning(table.c.id))
    else:
        try:
            with s.begin_nested():
                new_id = s.scalar(sa.insert(table).values(**values).returning(table.c.id))
        except sa.exc.IntegrityError:
            new_id = None
    if new_id is None:
        raise _Taken
    return int(new_id)


def revert_last(
    open_write: Callable[[], Any], user: str, episode_id: str | None, *, redo: bool, guard: Guard, now: Any
) -> AuditEntry | None:
    """Undo (or redo) `user`'s newest candidate; the new entry, or None when there is nothing to revert."""
    for _ in range(_ATTEMPTS):
        try:
            with open_write() as s:
                if episode_id is not None:  # lock first: the candidate is then read after any rival committed
                    s.get(EpisodeRow, episode_id, with_for_update={"key_share": True})
                row = _candidate(s, user, episode_id, redo)
                if row is None:
                    return None
                episode = s.get(EpisodeRow, row.episode_id, with_for_update={"key_share": True})
                assert episode is not None  # joined above, locked now
                kind = root_action(s, row)
                before, after = _apply(s, row, kind, episode, user, guard)
                new_id = _claim(
                    s,
                    {
                        "time": now(),
                        "user": user,
                        "action": str(AuditAction.REDO if redo else AuditAction.UNDO),
                        "study_id": episode.study_id,
                        "session_id": episode.session_id,
                        "episode_id": episode.id,
                        "step_index": row.step_index,
                        "before": before,
                        "after": after,
                        "undo_of": row.id,
                        "reverts": row.id,
                    },
                )
                s.flush()
                return entry(s, s.get(AuditRow, new_id))
        except _Taken:
            continue
    raise Conflict(f"could not {'redo' if redo else 'undo'} for {user}: every attempt lost a race; try again")

"""Grounding annotations on UI steps (issue 11): which object an action acted on, object labels, missing and
wrong boxes. A layer beside the converted records, which it never edits; exports apply it
(`pipelines/exporters/grounding.py`). Documented in schemas/store.md ("Grounding annotations").

An annotation is keyed by episode, step and the object's stable `Object.id` (schemas/objects.md), so it
survives a re-conversion of the same trace; one that names an object the step no longer has is reported by
`orphans`, never dropped. Each annotation keeps its author: two annotators annotate the same step side by side.
A newer annotation of the same author and *slot* replaces the older one (a second target choice replaces the
first; a label is one slot per object and label). Permissions as for tags: anyone may annotate; removing
someone else's annotation needs the episode's user, the study's creator or a reviewer (`_require_review`).

Every change is one transaction with its audit row (`grounding.add`: before = the replaced annotation or None,
after = the new one; `grounding.remove`: before = the removed one). `swap` is what `revert.py` calls to undo or
redo them: it takes the step from one side to the other, re-creating an annotation under its original author
and time.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from pipelines.store import mapping
from pipelines.store.access import EpisodeAccess, EpisodeRef, now
from pipelines.store.errors import Conflict, StoreError
from pipelines.store.grounding_kinds import (  # noqa: F401 (part of this module's interface)
    ADD,
    AUDIT_ACTIONS,
    BOX,
    KINDS,
    LABEL,
    NO_TARGET,
    REMOVE,
    TARGET,
    WRONG_BOX,
    describe,
)  # fmt: skip
from pipelines.store.models import EpisodeRow, GroundingAnnotationRow
from protos.llm4mobile import episode_pb2

#: The label set a study offers when it defines none (`label_set`).
DEFAULT_LABELS = ("goal_element", "wrong_box", "decorative", "missing_text")
MAX_LABEL = 256
MAX_TEXT = 2000
MAX_COORD = 2**31 - 1
#: Drawn boxes get an id of their own: "h" + 15 hex digits, never a converter id (those are 16 hex digits).
DRAWN_PREFIX = "h"


@dataclass(frozen=True)
class Annotation:
    """One stored annotation. `payload` by kind: target/label/wrong_box carry `object_index` (where the object
    was when annotated; the id is what counts); label `label`; box and wrong_box `box` [l, t, r, b] in the
    step's output space; box `type` (an ObjectType name) and `text`."""

    id: int
    episode_id: str
    step: int
    kind: str
    object_id: str | None
    user: str
    time: datetime
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str | None:
        return self.payload.get("label")

    @property
    def box(self) -> list[int] | None:
        return self.payload.get("box")

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "episode_id": self.episode_id, "step": self.step, "kind": self.kind,
            "object_id": self.object_id, "user": self.user, "time": mapping.utc(self.time).isoformat(),
            **self.payload,
        }  # fmt: skip


@dataclass(frozen=True)
class Orphan:
    """An annotation whose step or object is gone from the converted episode (after a re-conversion)."""

    annotation: Annotation
    reason: str


# -- validation (pure) ----------------------------------------------------------------------------------------


def _slot(kind: str, object_id: str | None, label: str | None) -> str:
    if kind in (TARGET, NO_TARGET):
        return "target"
    if kind == LABEL:
        return f"label:{object_id}:{label}"
    return f"{kind}:{object_id}"


def check_box(box: Any) -> list[int]:
    """[left, top, right, bottom] as whole numbers with left < right and top < bottom, else StoreError."""
    if not isinstance(box, list | tuple) or len(box) != 4:
        raise StoreError("a box is [left, top, right, bottom]")
    out = []
    for v in box:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise StoreError(f"box coordinates must be numbers, got {v!r}")
        if not -MAX_COORD <= v <= MAX_COORD:
            raise StoreError(f"box coordinate {v} is out of range")
        out.append(int(round(v)))
    if out[0] >= out[2] or out[1] >= out[3]:
        raise StoreError(f"box {out} is empty: left must be < right and top < bottom")
    return out


def _text(value: Any, what: str, limit: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise StoreError(f"{what} must be text")
    value = value.strip()
    if len(value) > limit:
        raise StoreError(f"{what} is {len(value)} characters long; the limit is {limit}")
    return value


def build(
    kind: str,
    *,
    object_id: str | None = None,
    object_index: int | None = None,
    label: str | None = None,
    box: Any = None,
    type: str | None = None,  # noqa: A002 - the field's name in the route contract
    text: str | None = None,
) -> tuple[str | None, dict[str, Any]]:
    """The (object_id, payload) of a new annotation, checked; StoreError says what is wrong."""
    if kind not in KINDS:
        raise StoreError(f"unknown annotation kind {kind!r}; one of {', '.join(KINDS)}")
    payload: dict[str, Any] = {}
    if kind in (TARGET, LABEL, WRONG_BOX):
        if not object_id or not isinstance(object_id, str) or len(object_id) > 64:
            raise StoreError(f"a {kind} annotation needs the object's id")
        if object_index is not None:
            payload["object_index"] = int(object_index)
    if kind == NO_TARGET:
        object_id = None
    if kind == LABEL:
        name = _text(label, "a label", MAX_LABEL)
        if not name:
            raise StoreError("a label annotation needs a non-empty label")
        payload["label"] = name
    if kind in (BOX, WRONG_BOX):
        payload["box"] = check_box(box)
    if kind == BOX:
        type_name = (type or "UNKNOWN_TYPE").strip().upper()
        if type_name not in episode_pb2.ObjectType.keys():
            raise StoreError(f"unknown object type {type!r} (an ObjectType name such as BUTTON, TEXTVIEW)")
        payload["type"] = type_name
        payload["text"] = _text(text, "the box's text", MAX_TEXT)
        object_id = DRAWN_PREFIX + uuid.uuid4().hex[:15]
    return object_id, payload


# -- rows <-> JSON ---------------------------------------------------------------------------------------------


def _annotation(row: GroundingAnnotationRow) -> Annotation:
    return Annotation(
        row.id, row.episode_id, row.step_index, row.kind, row.object_id, row.user,
        mapping.utc(row.created_time), dict(row.payload or {}),
    )  # fmt: skip


def _json(row: GroundingAnnotationRow) -> dict[str, Any]:
    """How the audit log describes an annotation: enough to re-create it under its author and time."""
    return {
        "kind": row.kind, "object_id": row.object_id, "slot": row.slot, "payload": dict(row.payload or {}),
        "user": row.user, "created_time": mapping.utc(row.created_time).isoformat(), "step": row.step_index,
        # audit.describe reads "label": the label, or the kind for the other annotations
        "label": (row.payload or {}).get("label") or row.kind,
    }  # fmt: skip


def _same(row: GroundingAnnotationRow, value: dict[str, Any]) -> bool:
    return (row.kind, row.object_id, dict(row.payload or {})) == (
        value.get("kind"), value.get("object_id"), value.get("payload") or {}
    )


def _slot_row(s: Session, episode_id: str, value: dict[str, Any]) -> GroundingAnnotationRow | None:
    return s.scalars(
        sa.select(GroundingAnnotationRow).where(
            GroundingAnnotationRow.episode_id == episode_id,
            GroundingAnnotationRow.step_index == value["step"],
            GroundingAnnotationRow.user == value["user"],
            GroundingAnnotationRow.slot == value["slot"],
        ).with_for_update()
    ).first()


def _insert(s: Session, episode_id: str, value: dict[str, Any]) -> int | None:
    """Insert unless the author's slot is taken (race-free); the new row's id, None if not inserted."""
    from pipelines.store import tags  # parse_time: one home for audit-log times

    values = {
        "episode_id": episode_id, "step_index": value["step"], "kind": value["kind"],
        "object_id": value.get("object_id"), "slot": value["slot"], "payload": value.get("payload") or {},
        "user": value["user"], "created_time": tags.parse_time(value.get("created_time")) or _now(),
    }  # fmt: skip
    table = GroundingAnnotationRow.__table__
    dialect = s.get_bind().dialect.name
    if dialect in ("sqlite", "postgresql"):
        insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
        stmt = insert(table).values(**values).on_conflict_do_nothing().returning(table.c.id)
        return s.scalar(stmt)
    try:
        with s.begin_nested():
            return s.scalar(sa.insert(table).values(**values).returning(table.c.id))
    except sa.exc.IntegrityError:
        return None


def _now() -> datetime:
    return now()


# -- undo / redo hook (called by revert.py) --------------------------------------------------------------------


def swap(
    s: Session, episode: EpisodeRow, current: dict[str, Any] | None, target: dict[str, Any] | None, user: str,
    guard: Any,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Take a step from `current` (an annotation JSON, or None) to `target`: remove the first, re-create the
    second under its own author and time. Returns (removed, created) for the undo/redo entry. Refuses
    (Conflict) when the slot holds something else by now; removing someone else's annotation goes through
    `guard` (the tag rule)."""
    removed = created = None
    if current is not None:
        row = _slot_row(s, episode.id, current)
        if row is not None and not _same(row, current):
            raise Conflict(
                f"cannot revert: {row.user}'s {row.kind} annotation on step {row.step_index} of episode "
                f"{episode.id!r} changed since"
            )
        if row is not None:
            if row.user != user:
                guard(s, episode, user, f"remove {row.user}'s {row.kind} annotation")
            removed = _json(row)
            s.delete(row)
            s.flush()
    if target is not None:
        existing = _slot_row(s, episode.id, target)
        if existing is not None and not _same(existing, target):
            raise Conflict(
                f"cannot revert: {existing.user} has another {existing.kind} annotation on step "
                f"{existing.step_index} of episode {episode.id!r} now"
            )
        if existing is None and _insert(s, episode.id, target) is not None:
            created = dict(target)
    return removed, created


# -- operations over a Repository (typed by its EpisodeAccess part) ------------------------------------------


def add(
    repo: EpisodeAccess, ref: EpisodeRef, step: int, kind: str, user: str, **fields: Any
) -> Annotation:
    """Store one annotation by `user` on step `step` (fields: see `build`); it replaces `user`'s earlier
    annotation of the same slot. Audited; undone by `Repository.undo_last`."""
    object_id, payload = build(kind, **fields)
    slot = _slot(kind, object_id, payload.get("label"))
    with repo._write() as s:
        row = repo._episode_row(s, ref, lock=True)
        repo._check_step(row, step)
        old = s.scalars(
            sa.select(GroundingAnnotationRow).where(
                GroundingAnnotationRow.episode_id == row.id, GroundingAnnotationRow.step_index == step,
                GroundingAnnotationRow.user == user, GroundingAnnotationRow.slot == slot,
            ).with_for_update()
        ).first()  # fmt: skip
        before = None
        if old is not None:
            before = _json(old)
            s.delete(old)
            s.flush()
        value = {"step": step, "kind": kind, "object_id": object_id, "slot": slot, "payload": payload, "user": user}
        new_id = _insert(s, row.id, value)
        if new_id is None:  # the same author wrote this slot in a concurrent transaction
            raise Conflict(f"{user}'s {kind} annotation on step {step} changed meanwhile: try again")
        new = s.get(GroundingAnnotationRow, new_id)
        repo._audit(s, user, ADD, **repo._where(row), step_index=step, before=before, after=_json(new))
        return _annotation(new)


def remove(repo: EpisodeAccess, ref: EpisodeRef, annotation_id: int, user: str) -> Annotation | None:
    """Remove one annotation (None if it is gone already); someone else's needs the review right."""
    with repo._write() as s:
        row = repo._episode_row(s, ref, lock=True)
        found = s.get(GroundingAnnotationRow, int(annotation_id), with_for_update=True)
        if found is None or found.episode_id != row.id:
            return None
        if found.user != user:
            repo._require_review(s, row, user, f"remove {found.user}'s {found.kind} annotation")
        gone = _annotation(found)
        before = _json(found)
        s.delete(found)
        s.flush()
        repo._audit(s, user, REMOVE, **repo._where(row), step_index=gone.step, before=before)
        return gone


def for_step(repo: EpisodeAccess, ref: EpisodeRef, step: int) -> list[Annotation]:
    """The step's annotations, oldest first (every author)."""
    with repo._read() as s:
        row = repo._episode_row(s, ref)
        query = sa.select(GroundingAnnotationRow).where(
            GroundingAnnotationRow.episode_id == row.id, GroundingAnnotationRow.step_index == step
        )
        return [_annotation(r) for r in s.scalars(query.order_by(GroundingAnnotationRow.id))]


def for_episodes(repo: EpisodeAccess, episode_ids: Iterable[str]) -> dict[str, list[Annotation]]:
    """Every annotation of these store episodes (by store episode id), oldest first; episodes without any are
    left out. Read in chunks so a long list never makes one huge IN clause."""
    with repo._read() as s:
        return in_session(s, episode_ids)


def in_session(s: Session, episode_ids: Iterable[str]) -> dict[str, list[Annotation]]:
    """`for_episodes` inside the caller's transaction (`stepmark evaluate` reads them in its write one)."""
    ids = list(dict.fromkeys(episode_ids))
    out: dict[str, list[Annotation]] = {}
    for i in range(0, len(ids), 500):
        query = sa.select(GroundingAnnotationRow).where(GroundingAnnotationRow.episode_id.in_(ids[i : i + 500]))
        for r in s.scalars(query.order_by(GroundingAnnotationRow.id)):
            out.setdefault(r.episode_id, []).append(_annotation(r))
    return out


def label_set(repo: EpisodeAccess, study_id: str) -> list[str]:
    """The labels the player offers in a study: the defaults, then labels annotators of the study already used
    (free text becomes a choice for the next annotator), in first-use order."""
    with repo._read() as s:
        query = (
            sa.select(GroundingAnnotationRow.payload)
            .join(EpisodeRow, EpisodeRow.id == GroundingAnnotationRow.episode_id)
            .where(EpisodeRow.study_id == study_id, GroundingAnnotationRow.kind == LABEL)
            .order_by(GroundingAnnotationRow.id)
            .limit(10_000)
        )
        used = [p.get("label") for p in s.scalars(query) if isinstance(p, dict) and p.get("label")]
    return list(dict.fromkeys([*DEFAULT_LABELS, *used]))


# -- after a re-conversion (pure) ------------------------------------------------------------------------------


def orphans(annotations: Sequence[Annotation], ui_episode: Any) -> list[Orphan]:
    """Annotations the converted episode can no longer place: the step is gone, or the object id is neither
    among the step's objects nor a box drawn on that step (drawn boxes and `no_target` are never orphans)."""
    steps = ui_episode.episode.time_steps
    ids: dict[int, set[str]] = {}
    drawn: dict[int, set[str]] = {}
    for a in annotations:
        if a.kind == BOX and a.object_id:
            drawn.setdefault(a.step, set()).add(a.object_id)
    out = []
    for a in annotations:
        if not 0 <= a.step < len(steps):
            out.append(Orphan(a, f"step {a.step} is not in the episode ({len(steps)} steps)"))
            continue
        if a.kind in (NO_TARGET, BOX):
            continue
        if a.step not in ids:
            ids[a.step] = {o.id for o in steps[a.step].observation.objects} | drawn.get(a.step, set())
        if a.object_id not in ids[a.step]:
            out.append(Orphan(a, f"object {a.object_id} is not on step {a.step} any more"))
    return out

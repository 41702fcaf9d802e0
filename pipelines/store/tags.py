"""Tag rows in and out, inside a caller's write transaction, with the author and time each tag carries.

A tag is described in the audit log as `{"label": l, "user": author, "created_time": ISO-8601 UTC}` (plus
`"step"` inside a segment's `"tags"` list), so that undoing a removal, or redoing one, re-creates it under its
original author and time. Inserts are INSERT ... ON CONFLICT DO NOTHING under the unique constraints and deletes
are DELETE ... RETURNING: the caller learns exactly which rows it changed, even with concurrent writers.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from pipelines.store import mapping
from pipelines.store.models import EpisodeTagRow, StepTagRow

_CHUNK = 500  # rows per multi-row INSERT (SQLite's limit on bound parameters)


def tag_json(
    label: str, user: str | None, created: datetime | None, step: int | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"label": label, "user": user}
    out["created_time"] = mapping.utc(created).isoformat() if created is not None else None
    if step is not None:
        out["step"] = step
    return out


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def insert_new(s: Session, model: type, values: list[dict[str, Any]], returning: sa.Column) -> list[Any]:
    """Insert rows, skipping those a unique constraint says exist; the `returning` values of those inserted."""
    table = model.__table__  # type: ignore[attr-defined]
    dialect = s.get_bind().dialect.name
    out: list[Any] = []
    for i in range(0, len(values), _CHUNK):
        chunk = values[i : i + _CHUNK]
        if dialect in ("sqlite", "postgresql"):
            insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
            stmt = insert(table).values(chunk).on_conflict_do_nothing().returning(returning)
            out.extend(s.scalars(stmt).all())
        else:  # other databases: row by row in savepoints
            for value in chunk:
                try:
                    with s.begin_nested():
                        out.append(s.execute(sa.insert(table).values(**value).returning(returning)).scalar())
                except sa.exc.IntegrityError:
                    pass
    return out


def put(s: Session, episode_id: str, step: int | None, tag: dict[str, Any], user: str) -> bool:
    """Add one tag (episode tag when `step` is None) under `tag`'s author and time (else `user`, now)."""
    return bool(put_steps(s, episode_id, tag, user, [step] if step is not None else None))


def put_steps(
    s: Session,
    episode_id: str,
    tag: dict[str, Any],
    user: str,
    steps: Iterable[int] | None = None,
    *,
    authors: dict[int, dict[str, Any]] | None = None,
) -> list[int]:
    """Add a label to each of `steps` (or the episode when `steps` is None); returns the steps actually added.

    `authors` maps a step to its own `{"user", "created_time"}` (a segment restored tag by tag).
    """
    now = datetime.now(UTC)
    base = {
        "episode_id": episode_id,
        "label": tag["label"],
        "user": tag.get("user") or user,
        "created_time": parse_time(tag.get("created_time")) or now,
    }
    if steps is None:
        return [-1] if insert_new(s, EpisodeTagRow, [base], EpisodeTagRow.id) else []
    values = []
    for index in steps:
        value = dict(base, step_index=index)
        own = (authors or {}).get(index)
        if own is not None:
            value["user"] = own.get("user") or base["user"]
            value["created_time"] = parse_time(own.get("created_time")) or base["created_time"]
        values.append(value)
    return sorted(insert_new(s, StepTagRow, values, StepTagRow.step_index))


def take(s: Session, episode_id: str, step: int | None, label: str) -> dict[str, Any] | None:
    """Remove one tag; its `tag_json` (author, time) or None when it was not there."""
    if step is None:
        got = s.execute(
            sa.delete(EpisodeTagRow)
            .where(EpisodeTagRow.episode_id == episode_id, EpisodeTagRow.label == label)
            .returning(EpisodeTagRow.user, EpisodeTagRow.created_time)
        ).first()
        return None if got is None else tag_json(label, got.user, got.created_time)
    taken = take_steps(s, episode_id, label, [step])
    return taken[0] if taken else None


def take_steps(
    s: Session,
    episode_id: str,
    label: str,
    steps: Iterable[int] | None = None,
    span: tuple[int, int] | None = None,
) -> list[dict[str, Any]]:
    """Remove a label from the given steps (or every step in `span`, inclusive); `tag_json`s with "step"."""
    query = sa.delete(StepTagRow).where(StepTagRow.episode_id == episode_id, StepTagRow.label == label)
    if span is not None:
        query = query.where(StepTagRow.step_index.between(*span))
    out: list[dict[str, Any]] = []
    wanted = None if steps is None else sorted(set(steps))
    chunks = [None] if wanted is None else [wanted[i : i + _CHUNK] for i in range(0, len(wanted), _CHUNK)]
    for chunk in chunks:
        stmt = query if chunk is None else query.where(StepTagRow.step_index.in_(chunk))
        rows = s.execute(stmt.returning(StepTagRow.step_index, StepTagRow.user, StepTagRow.created_time))
        out.extend(tag_json(label, r.user, r.created_time, r.step_index) for r in rows.all())
    return sorted(out, key=lambda t: t["step"])

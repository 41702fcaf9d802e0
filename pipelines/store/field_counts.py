"""A study's field values counted per field, as the trigger of migration 10 keeps them (issue 21).

Every write of a value appends a change (+/-1 value, its timing, the place and episode it filled or emptied) to
`field_count_changes`; `compact` moves a study's changes into its sums in `field_counts` (a row per field and
annotator, and one of user "" per field for places and episodes). The figures are the sums plus the changes
not compacted yet, read in one statement, so they cost a row per field and annotator and the changes since
the last compaction, whatever the size of the study. Writers only append: they share no row, so an import
and an annotator saving in another episode never wait on each other. `tests/pipelines/store/
test_field_counts.py` holds the figures to a GROUP BY over the values after every kind of write.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines.store.database import WRITE
from pipelines.store.models import FieldCountChangeRow, FieldCountRow

COMPACT_AT = 5000  # changes of a study past which a reader moves them into the sums first
_SUMS = ("entries", "timed", "seconds", "places", "episodes")
_PG_LOCK = 0x6669656C << 32  # pg_advisory_xact_lock's key: "fiel" in ASCII, then the study's crc32


@dataclass(frozen=True)
class FieldCounts:
    values: int  # every annotator's values
    annotators: int  # who gave at least one
    timed: int  # values the player timed
    seconds: float  # their seconds
    places: int  # places (steps, segments, the episode) holding at least one value
    episodes: int  # episodes holding at least one value

    @property
    def seconds_mean(self) -> float | None:
        return self.seconds / self.timed if self.timed else None


def study_field_counts(s: Session, study_id: str) -> dict[str, FieldCounts]:
    """Field name -> its counts in the study (every episode of it; fields without a value are absent)."""
    both = sa.union_all(*(
        sa.select(t.field, t.user, *(getattr(t, c) for c in _SUMS)).where(t.study_id == study_id)
        for t in (FieldCountRow, FieldCountChangeRow)
    )).subquery()  # fmt: skip
    rows = s.execute(
        sa.select(both.c.field, both.c.user, *(sa.func.sum(both.c[c]) for c in _SUMS)).group_by(
            both.c.field, both.c.user
        )
    ).all()
    fields: dict[str, dict[str, Any]] = {}
    for field, _user, entries, timed, seconds, places, episodes in rows:
        f = fields.setdefault(field, {"values": 0, "annotators": 0, "timed": 0, "seconds": 0.0, "places": 0,
                                      "episodes": 0})  # fmt: skip
        f["places"] += int(places or 0)
        f["episodes"] += int(episodes or 0)
        if entries:
            f["values"] += int(entries)
            f["annotators"] += 1
            f["timed"] += int(timed or 0)
            # sums of floats added and taken away leave residue (-2.8e-17 for nothing timed): none when no
            # value is timed, never below 0
            f["seconds"] += max(0.0, float(seconds or 0.0)) if timed else 0.0
    return {field: FieldCounts(**f) for field, f in fields.items() if f["values"]}


def pending(s: Session, study_id: str, limit: int = COMPACT_AT) -> int:
    """How many changes of the study wait to be compacted, counted up to `limit`."""
    first = sa.select(FieldCountChangeRow.id).where(FieldCountChangeRow.study_id == study_id).limit(limit)
    return int(s.scalar(sa.select(sa.func.count()).select_from(first.subquery())) or 0)


def _sums(source: str) -> tuple[str, str]:
    """The SELECTs that sum the changes `source` ("FROM ... [WHERE ...]") names into rows of `field_counts` of
    study :s: per field and annotator, and per field (user "") for places and episodes."""
    return (
        f'SELECT :s, field, "user", SUM(entries), SUM(timed), SUM(seconds), 0, 0 {source} GROUP BY field, "user"',
        f"SELECT :s, field, '', 0, 0, 0, SUM(places), SUM(episodes) {source} GROUP BY field",
    )


def compact(engine: sa.Engine, study_id: str) -> int:
    """Move the study's changes into its sums, in one transaction; returns how many were moved. On PostgreSQL
    the changes are deleted and summed in one statement (exactly those deleted are added, whatever commits
    meanwhile), under a lock per study so two compactions add their sums one after the other; SQLite has one
    writer at a time."""
    c = ", ".join(_SUMS)
    insert = f'INSERT INTO field_counts (study_id, field, "user", {c})'
    upsert = (
        'ON CONFLICT (study_id, field, "user") DO UPDATE SET '
        + ", ".join(f"{x} = field_counts.{x} + excluded.{x}" for x in _SUMS)
    )
    with engine.execution_options(**{WRITE: True}).begin() as conn:  # BEGIN IMMEDIATE on SQLite
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK | zlib.crc32(study_id.encode())})
            per_user, per_field = _sums("FROM moved")
            moved = conn.execute(sa.text(
                f'WITH moved AS (DELETE FROM field_count_changes WHERE study_id = :s RETURNING field, "user", {c}), '
                f'counted AS ({insert} {per_user} UNION ALL {per_field} {upsert}) SELECT COUNT(*) FROM moved'
            ), {"s": study_id}).scalar()  # fmt: skip
        else:
            last = conn.execute(sa.text("SELECT MAX(id) FROM field_count_changes WHERE study_id = :s"),
                                {"s": study_id}).scalar()  # fmt: skip
            if last is None:
                return 0
            where = "FROM field_count_changes WHERE study_id = :s AND id <= :last"
            for select in _sums(where):
                conn.execute(sa.text(f"{insert} {select} {upsert}"), {"s": study_id, "last": last})
            moved = conn.execute(sa.text(f"DELETE {where}"), {"s": study_id, "last": last}).rowcount
        conn.execute(sa.text("DELETE FROM field_counts WHERE study_id = :s AND entries = 0 AND places = 0 "
                             "AND episodes = 0"), {"s": study_id})  # fmt: skip
    return int(moved or 0)

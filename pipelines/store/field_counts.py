"""A study's field values counted per field, as the triggers of migration 10 keep them (issue 21).

`field_value_counts` (per study, field and annotator) and `field_place_counts` (per study and field) are kept
by the database on every write of a value, so these figures cost a row per field and annotator whatever the
size of the study. `tests/pipelines/store/test_field_counts.py` holds them to a GROUP BY over the values after
every kind of write.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines.store.models import FieldPlaceCountRow, FieldValueCountRow


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
    c, p = FieldValueCountRow, FieldPlaceCountRow
    per_user = s.execute(
        sa.select(c.field, sa.func.sum(c.entries), sa.func.count(), sa.func.sum(c.timed), sa.func.sum(c.seconds))
        .where(c.study_id == study_id, c.entries > 0)
        .group_by(c.field)
    ).all()
    places = {f: (n, e) for f, n, e in s.execute(sa.select(p.field, p.places, p.episodes).where(p.study_id == study_id))}
    return {
        field: FieldCounts(int(n), int(users), int(timed or 0), float(seconds or 0.0), *places.get(field, (0, 0)))
        for field, n, users, timed, seconds in per_user
    }

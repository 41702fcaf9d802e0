"""A study's own fields in the quality report (issue 26): per field, how much of the study is filled in, by how
many annotators, how long they spent, and how well they agree (`pipelines/store/field_agreement.py`).

Fill rate: the share of the places a field can take a value that hold at least one annotator's value: every
step of the study's episodes for step fields (`num_steps` each), every episode for episode and segment fields
(a segment field counts an episode with any segment). Time: the seconds the player measured from showing a
step's form to saving the value (values imported or set elsewhere have none). Counted by the database as
values are written (migration 10), not by grouping the values.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines.store import field_counts
from pipelines.store import field_values as fv
from pipelines.store.field_agreement import FieldAgreement, study_field_agreement
from pipelines.store.models import EpisodeRow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FieldStat:
    field: str
    kind: str
    scope: str
    active: bool
    values: int  # every annotator's values
    filled: int  # places holding at least one value
    places: int  # places the field can take a value
    annotators: int
    seconds_mean: float | None  # per value, where the player measured it
    seconds_total: float
    alpha: float | None
    similarity: float | None
    disputed: int

    @property
    def fill_rate(self) -> float | None:
        return self.filled / self.places if self.places else None


def field_stats(repo, study_id: str) -> list[FieldStat]:
    return field_summary(repo, study_id)[0]


def field_summary(
    repo, study_id: str, size: tuple[int, int] | None = None
) -> tuple[list[FieldStat], list[FieldAgreement]]:
    """The study's field statistics and its field agreement. The statistics are the counts the database keeps
    as values are written (`pipelines/store/field_counts.py`: a row per field and annotator, whatever the
    study's size; a backlog of changes is compacted first); agreement reads the places two or more annotators
    gave a value. `size`: the study's episodes and steps (INVALID sessions' included), when the caller has them."""
    defs = fv.definitions(repo, study_id, include_removed=True)
    if not defs:
        return [], []
    with Session(repo.engine) as s, s.begin():
        backlog = field_counts.pending(s, study_id)
    if backlog >= field_counts.COMPACT_AT:
        try:
            field_counts.compact(repo.engine, study_id)
        except sa.exc.DBAPIError as exc:  # e.g. a read-only role: the figures read the changes as they are
            log.warning("field counts of study %s not compacted (%s); read with %s+ changes", study_id,
                        str(exc.orig).splitlines()[0] if exc.orig else exc, backlog)  # fmt: skip
    with Session(repo.engine) as s, s.begin():
        if size is None:
            size = s.execute(
                sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(EpisodeRow.num_steps), 0)).where(
                    EpisodeRow.study_id == study_id
                )
            ).one()
        counts = field_counts.study_field_counts(s, study_id)
    episodes, steps = size
    agreements = study_field_agreement(repo, study_id)
    agreement = {a.field: a for a in agreements}
    out = []
    for d in defs:
        c = counts.get(d.name)
        if not d.active and c is None:
            continue
        a = agreement.get(d.name)
        out.append(FieldStat(
            d.name, d.kind, d.scope, d.active, c.values if c else 0,
            (c.places if d.scope == "step" else c.episodes) if c else 0, int(steps if d.scope == "step" else episodes),
            c.annotators if c else 0, c.seconds_mean if c else None, c.seconds if c else 0.0,
            a.alpha if a else None, a.similarity if a else None, a.disputed_count if a else 0,
        ))  # fmt: skip
    return out, agreements

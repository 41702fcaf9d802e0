"""A study's own fields in the quality report (issue 26): per field, how much of the study is filled in, by how
many annotators, how long they spent, and how well they agree (`pipelines/store/field_agreement.py`).

Fill rate: the share of the places a field can take a value that hold at least one annotator's value: every
step of the study's episodes for step fields (`num_steps` each), every episode for episode and segment fields
(a segment field counts an episode with any segment). Time: the seconds the player measured from showing a
step's form to saving the value (values imported or set elsewhere have none). SQL aggregates only.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines.store import field_values as fv
from pipelines.store.field_agreement import FieldAgreement, study_field_agreement
from pipelines.store.models import EpisodeRow, FieldValueRow


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


def field_summary(repo, study_id: str) -> tuple[list[FieldStat], list[FieldAgreement]]:
    """The study's field statistics and its field agreement. Each is an aggregate over every value of the study
    (a million values: 1-3 s each on SQLite), independent of the others, so they run side by side on their own
    connections (the database does the work, outside the GIL) rather than one after another."""
    defs = fv.definitions(repo, study_id, include_removed=True)
    if not defs:
        return [], []
    in_study = sa.select(EpisodeRow.id).where(EpisodeRow.study_id == study_id)

    def read(query: sa.Select) -> list[Any]:
        with Session(repo.engine) as s, s.begin():
            return list(s.execute(query).all())

    places = (
        sa.select(FieldValueRow.field, FieldValueRow.episode_id, FieldValueRow.step_index)
        .where(FieldValueRow.episode_id.in_(in_study))
        .distinct()
        .subquery()
    )
    queries = {
        "size": sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(EpisodeRow.num_steps), 0)).where(
            EpisodeRow.study_id == study_id
        ),
        "per_field": sa.select(
            FieldValueRow.field, sa.func.count(), sa.func.count(sa.distinct(FieldValueRow.user)),
            sa.func.avg(FieldValueRow.seconds), sa.func.coalesce(sa.func.sum(FieldValueRow.seconds), 0.0),
        ).where(FieldValueRow.episode_id.in_(in_study)).group_by(FieldValueRow.field),  # fmt: skip
        "filled_steps": sa.select(places.c.field, sa.func.count()).group_by(places.c.field),
        "episodes_with": sa.select(FieldValueRow.field, sa.func.count(sa.distinct(FieldValueRow.episode_id)))
        .where(FieldValueRow.episode_id.in_(in_study))
        .group_by(FieldValueRow.field),
    }
    url = repo.engine.url
    in_memory = url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")  # a connection each
    workers = 1 if in_memory else len(queries) + 1  # thread would be an empty database of its own
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="field-stats") as pool:
        agreed = pool.submit(study_field_agreement, repo, study_id)
        rows = {name: pool.submit(read, query) for name, query in queries.items()}
        ((episodes, steps),) = rows["size"].result()
        per_field = {name: (n, users, mean, total) for name, n, users, mean, total in rows["per_field"].result()}
        filled_steps = dict(rows["filled_steps"].result())
        episodes_with = dict(rows["episodes_with"].result())
        agreements = agreed.result()
    agreement = {a.field: a for a in agreements}
    out = []
    for d in defs:
        n, users, mean, total = per_field.get(d.name, (0, 0, None, 0.0))
        if not d.active and not n:
            continue
        filled = filled_steps.get(d.name, 0) if d.scope == "step" else episodes_with.get(d.name, 0)
        a = agreement.get(d.name)
        out.append(FieldStat(
            d.name, d.kind, d.scope, d.active, int(n), int(filled), int(steps if d.scope == "step" else episodes),
            int(users), None if mean is None else float(mean), float(total or 0.0),
            a.alpha if a else None, a.similarity if a else None, a.disputed_count if a else 0,
        ))  # fmt: skip
    return out, agreements

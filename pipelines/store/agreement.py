"""Inter-annotator agreement on step tags, and adjudication of the steps annotators disagree on.

The statistics come from well-kept libraries (Krippendorff's alpha from `krippendorff`, Cohen's kappa from
scikit-learn); this module only arranges the labels into their inputs. A unit is one step of an episode that
at least two annotators marked done in the study's queue; an annotator's value on a unit is the set of labels
they gave the step (the empty set is a value too: "no tag").

- overall alpha: nominal alpha over label sets (each distinct set is one category);
- per label: nominal alpha over "has the label / has not" across annotators, and Cohen's kappa per pair;
- per annotator: how often their label set equals the majority's (a set more than half of the unit's
  annotators gave; units without such a majority are not counted);
- disagreements: units whose annotators did not all give the same set, with any adjudicated consensus.

An adjudicator's choice becomes the step's tags (what exports read) and is kept in `adjudications`.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import krippendorff
import numpy as np
import sqlalchemy as sa
from sklearn.metrics import cohen_kappa_score
from sqlalchemy.orm import Session

from pipelines.store import listing
from pipelines.store.database import WRITE
from pipelines.store.errors import NotFound
from pipelines.store.models import AdjudicationRow, AuditRow, EpisodeRow
from pipelines.store.queue import EpisodeLabels, done_labels
from pipelines.store.repository import Repository
from protos.rlds_creator import client_pb2

ADJUDICATE = "step.adjudicate"
LABEL_SET = "(label set)"  # the pseudo-label of statistics over whole label sets


@dataclass(frozen=True)
class Unit:
    episode_id: str
    step_index: int
    values: dict[str, frozenset[str]]  # annotator -> labels


@dataclass(frozen=True)
class LabelAgreement:
    label: str
    alpha: float | None  # None: undefined (every value the same, or fewer than two annotators per unit)
    marks: int  # how many (annotator, unit) pairs carry the label


@dataclass(frozen=True)
class PairKappa:
    label: str
    user_a: str
    user_b: str
    kappa: float | None
    units: int


@dataclass(frozen=True)
class AnnotatorAgreement:
    user: str
    units: int  # units they labelled
    with_majority: int  # units that had a majority
    agree: int  # of those, units where their set equals the majority's

    @property
    def rate(self) -> float | None:
        return self.agree / self.with_majority if self.with_majority else None


@dataclass(frozen=True)
class Disagreement:
    episode_id: str
    step_index: int
    labels: dict[str, list[str]]
    majority: list[str] | None
    consensus: list[str] | None  # adjudicated


@dataclass
class AgreementReport:
    study_id: str
    episodes: int = 0
    units: int = 0
    annotators: list[str] = field(default_factory=list)
    alpha: float | None = None
    labels: list[LabelAgreement] = field(default_factory=list)
    pairs: list[PairKappa] = field(default_factory=list)
    per_annotator: list[AnnotatorAgreement] = field(default_factory=list)
    disagreements: list[Disagreement] = field(default_factory=list)

    def to_json(self) -> dict:
        out = asdict(self)
        for row, item in zip(out["per_annotator"], self.per_annotator, strict=True):
            row["rate"] = item.rate
        return out


def units_of(episodes: Sequence[EpisodeLabels]) -> list[Unit]:
    """Every step of every episode with two or more done annotators."""
    units = []
    for episode in episodes:
        if len(episode.by_user) < 2:
            continue
        last = max([episode.num_steps - 1, *(max(s, default=-1) for s in episode.by_user.values())])
        for step in range(last + 1):
            values = {user: steps.get(step, frozenset()) for user, steps in episode.by_user.items()}
            units.append(Unit(episode.episode_id, step, values))
    return units


def _alpha(matrix: list[list[float]]) -> float | None:
    """Nominal Krippendorff's alpha of an annotators x units matrix (NaN: no value); None if undefined."""
    data = np.array(matrix, dtype=float)
    if data.size == 0 or len(np.unique(data[~np.isnan(data)])) < 2:
        return None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        value = krippendorff.alpha(reliability_data=data, level_of_measurement="nominal")
    return None if math.isnan(value) else float(value)


def _kappa(a: list[str], b: list[str]) -> float | None:
    if not a or len(set(a) | set(b)) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = cohen_kappa_score(a, b)
    return None if math.isnan(value) else float(value)


def _key(labels: frozenset[str]) -> str:
    return " + ".join(sorted(labels))


def majority(values: Sequence[frozenset[str]]) -> frozenset[str] | None:
    """The label set more than half of the values are; None when no set is."""
    (top, n), *_ = Counter(values).most_common(1)
    return top if n * 2 > len(values) else None


def compute(
    study_id: str,
    episodes: Sequence[EpisodeLabels],
    consensus: dict[tuple[str, int], list[str]] | None = None,
) -> AgreementReport:
    """Every figure of the report from the annotators' labels (pure: no store access)."""
    consensus = consensus or {}
    units = units_of(episodes)
    users = sorted({u for unit in units for u in unit.values})
    report = AgreementReport(study_id, len({u.episode_id for u in units}), len(units), users)
    if not units:
        return report

    categories = {key: i for i, key in enumerate(sorted({_key(v) for u in units for v in u.values.values()}))}
    nan = float("nan")
    report.alpha = _alpha(
        [[categories[_key(u.values[user])] if user in u.values else nan for u in units] for user in users]
    )
    labels = sorted({label for u in units for v in u.values.values() for label in v})
    for label in labels:
        matrix = [
            [float(label in u.values[user]) if user in u.values else nan for u in units] for user in users
        ]
        marks = sum(label in v for u in units for v in u.values.values())
        report.labels.append(LabelAgreement(label, _alpha(matrix), marks))

    for a, b in itertools.combinations(users, 2):
        shared = [u for u in units if a in u.values and b in u.values]
        if not shared:
            continue
        report.pairs.append(
            PairKappa(
                LABEL_SET, a, b,
                _kappa([_key(u.values[a]) for u in shared], [_key(u.values[b]) for u in shared]),
                len(shared),
            )
        )  # fmt: skip
        for label in labels:
            ya = [str(label in u.values[a]) for u in shared]
            yb = [str(label in u.values[b]) for u in shared]
            report.pairs.append(PairKappa(label, a, b, _kappa(ya, yb), len(shared)))

    counts = {user: [0, 0, 0] for user in users}
    for unit in units:
        top = majority(list(unit.values.values()))
        for user, value in unit.values.items():
            counts[user][0] += 1
            if top is not None:
                counts[user][1] += 1
                counts[user][2] += value == top
        if len(set(unit.values.values())) > 1:
            report.disagreements.append(
                Disagreement(
                    unit.episode_id,
                    unit.step_index,
                    {user: sorted(v) for user, v in sorted(unit.values.items())},
                    sorted(top) if top is not None else None,
                    consensus.get((unit.episode_id, unit.step_index)),
                )
            )
    report.per_annotator = [AnnotatorAgreement(user, *counts[user]) for user in users]
    return report


def adjudications(repo: Repository, study_id: str) -> dict[tuple[str, int], list[str]]:
    with Session(repo.engine) as s, s.begin():
        rows = s.execute(
            sa.select(AdjudicationRow.episode_id, AdjudicationRow.step_index, AdjudicationRow.labels).where(
                listing.in_study(AdjudicationRow.episode_id, study_id)
            )
        ).all()
    return {(e, i): list(labels) for e, i, labels in rows}


def study_agreement(repo: Repository, study_id: str) -> AgreementReport:
    repo.get_study(study_id)  # NotFound names the study
    return compute(study_id, done_labels(repo, study_id), adjudications(repo, study_id))


def adjudicate(
    repo: Repository, episode_id: str, step_index: int, labels: Sequence[str], user: str
) -> list[str]:
    """Make `labels` the consensus of a step: its tags become exactly these (each change audited as a tag
    change) and the decision is recorded (replacing an earlier one). Returns the consensus, sorted.
    """
    chosen = sorted({label.strip() for label in labels if label.strip()})
    ref = client_pb2.EpisodeRef(episode_id=episode_id)
    episode = repo.get_episode(ref)  # NotFound if it does not exist
    current = (
        {t.label for t in episode.step_metadata[step_index].tags}
        if step_index in episode.step_metadata
        else set()
    )
    for label in chosen:
        if label not in current:
            repo.add_step_tag(ref, step_index, label, user)
    for label in sorted(current - set(chosen)):
        repo.remove_step_tag(ref, step_index, label, user)
    now = datetime.now(UTC)
    with Session(repo.engine.execution_options(**{WRITE: True})) as s, s.begin():
        if s.get(EpisodeRow, episode_id) is None:
            raise NotFound(f"episode {episode_id!r} not found")
        row = s.scalars(
            sa.select(AdjudicationRow).where(
                AdjudicationRow.episode_id == episode_id, AdjudicationRow.step_index == step_index
            )
        ).first()
        before = list(row.labels) if row is not None else None
        if row is None:
            s.add(
                AdjudicationRow(
                    episode_id=episode_id, step_index=step_index, labels=chosen, user=user, time=now
                )
            )
        else:
            row.labels, row.user, row.time = chosen, user, now
        s.add(
            AuditRow(
                time=now, user=user, action=ADJUDICATE, study_id=episode.study_id,
                session_id=episode.session_id or None,
                episode_id=episode_id, step_index=step_index,
                before=None if before is None else {"labels": before}, after={"labels": chosen},
            )
        )  # fmt: skip
    return chosen

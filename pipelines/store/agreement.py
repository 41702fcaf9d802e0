"""Inter-annotator agreement on step tags, and adjudication of the steps annotators disagree on.

A unit is one step of an episode that at least two annotators marked done in the study's queue; an
annotator's value on a unit is the set of labels they gave the step (the empty set is a value too: "no tag").

- overall alpha: nominal alpha over label sets (each distinct set is one category);
- per label: nominal alpha over "has the label / has not" across annotators, and Cohen's kappa per pair;
- per annotator: how often their label set equals the majority's (a set more than half of the unit's
  annotators gave; units without such a majority are not counted);
- disagreements: units whose annotators did not all give the same set, with any adjudicated consensus: all
  of them counted (`disputed`), the first MAX_DISAGREEMENTS in registration order listed.

The labels are read a batch of episodes at a time (`queue.done_labels`) and each episode's units folded into
running sums (`reliability`) and dropped, so memory does not grow with the study; the figures are those of
the `krippendorff` package and scikit-learn's `cohen_kappa_score` (the tests' reference).

An adjudicator's choice becomes the step's tags (what exports read) and is kept in `adjudications`.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines.store.database import WRITE
from pipelines.store.errors import NotFound
from pipelines.store.models import AdjudicationRow, AuditRow, EpisodeRow
from pipelines.store.queue import LABEL_BATCH, EpisodeLabels, done_labels
from pipelines.store.reliability import CohenKappa, NominalAlpha
from pipelines.store.repository import Repository
from protos.rlds_creator import client_pb2

ADJUDICATE = "step.adjudicate"
LABEL_SET = "(label set)"  # the pseudo-label of statistics over whole label sets
MAX_DISAGREEMENTS = 1_000  # disputed steps listed (all are counted): what a person can go through
_FIRST = datetime.min.replace(tzinfo=UTC)  # the place of an episode without a registration time
_NONE: frozenset[str] = frozenset()


Values = tuple[tuple[str, frozenset[str]], ...]  # a unit's (annotator, labels), in annotator order


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
    disagreements: list[Disagreement] = field(default_factory=list)  # the first MAX_DISAGREEMENTS
    disputed: int = 0  # every disputed step, listed or not

    @property
    def disagreements_title(self) -> str:
        """How many disputed steps are listed: "15" when all are, "1,000 of 25,000" when not."""
        shown = len(self.disagreements)
        return f"{shown:,}" if shown == self.disputed else f"{shown:,} of {self.disputed:,}"

    def to_json(self) -> dict:
        out = asdict(self)
        for row, item in zip(out["per_annotator"], self.per_annotator, strict=True):
            row["rate"] = item.rate
        return out


def units_of(episode: EpisodeLabels) -> Iterator[tuple[int, Values]]:
    """Every step of the episode with each done annotator's labels (the empty set: they gave none), when two
    or more annotators are done with it; none otherwise."""
    users = sorted(episode.by_user)
    if len(users) < 2:
        return
    steps = [episode.by_user[user] for user in users]
    last = max([episode.num_steps - 1, *(max(s, default=-1) for s in steps)])
    for step in range(last + 1):
        yield step, tuple((user, given.get(step, _NONE)) for user, given in zip(users, steps, strict=True))


def _key(labels: frozenset[str]) -> str:
    return " + ".join(sorted(labels))


def majority(values: Sequence[frozenset[str]]) -> frozenset[str] | None:
    """The label set more than half of the values are; None when no set is."""
    (top, n), *_ = Counter(values).most_common(1)
    return top if n * 2 > len(values) else None


class _Tally:
    """The report's running sums, in memory bounded by the annotators, labels and label sets, not the units.

    Units are counted by their values first (`patterns`: most steps look like many others, e.g. everyone
    "no tag"), and the distinct ones folded into the sums (`_fold`) when FOLD of them wait, and at the end.
    Per label, only the units where someone gave the label are added; the others ("has not" from everyone)
    are padded in at the end from the count of values (and of shared units per pair)."""

    FOLD = 10_000

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.episodes = self.units = self.values = self.disputed = 0
        self.patterns: Counter[Values] = Counter()
        self.sets = NominalAlpha()
        self.by_label: dict[str, NominalAlpha] = {}
        self.shared: Counter[tuple[str, str]] = Counter()  # pair -> units both labelled
        self.set_kappa: dict[tuple[str, str], CohenKappa] = {}
        self.label_kappa: dict[tuple[str, str, str], CohenKappa] = {}  # (a, b, label)
        self.counts: dict[str, list[int]] = {}  # user -> [units, with majority, agree]
        # (decided?, registered, episode, step) of each listed disputed step; open ones sort first
        self.kept: list[tuple[tuple[bool, datetime, str, int], Disagreement]] = []
        self.cutoff: tuple[bool, datetime, str, int] | None = None

    def add_episode(self, episode: EpisodeLabels, decided: Mapping[tuple[str, int], list[str]]) -> None:
        """One episode's units; `decided`: the consensus of its adjudicated steps (at least)."""
        registered = episode.registered or _FIRST
        units = 0
        for step, values in units_of(episode):
            units += 1
            self.patterns[values] += 1
            if len({labels for _, labels in values}) > 1:
                self.disputed += 1
                self._keep((registered, episode.episode_id, step), values, decided.get((episode.episode_id, step)))
        self.units += units
        self.episodes += units > 0
        if len(self.patterns) >= self.FOLD:
            self._fold()

    def _keep(self, place: tuple[datetime, str, int], values: Values, consensus: list[str] | None) -> None:
        """Steps without a consensus are listed first (in place order), then decided ones if room is left:
        adjudicating the listed steps brings the next open ones into the list."""
        key = (consensus is not None, *place)
        if self.limit <= 0 or (self.cutoff is not None and key >= self.cutoff):
            return
        top = majority([labels for _, labels in values])
        labels = {user: sorted(given) for user, given in values}
        disputed = Disagreement(place[1], place[2], labels, None if top is None else sorted(top), consensus)
        self.kept.append((key, disputed))
        if len(self.kept) >= 2 * self.limit:
            self._trim()

    def _trim(self) -> None:
        """Keep the first `limit` disputed steps; later ones than the last of them can never be listed."""
        self.kept.sort(key=lambda kept: kept[0])
        del self.kept[self.limit :]
        if self.limit and len(self.kept) == self.limit:
            self.cutoff = self.kept[-1][0]

    def _fold(self) -> None:
        for values, times in self.patterns.items():
            m = len(values)
            self.values += m * times
            self.sets.add(Counter(_key(labels) for _, labels in values), times)
            for label, k in Counter(label for _, labels in values for label in labels).items():
                alpha = self.by_label.get(label)
                if alpha is None:
                    alpha = self.by_label[label] = NominalAlpha()
                alpha.add({True: k, False: m - k}, times)
            for (a, la), (b, lb) in itertools.combinations(values, 2):
                self.shared[a, b] += times
                kappa = self.set_kappa.get((a, b))
                if kappa is None:
                    kappa = self.set_kappa[a, b] = CohenKappa()
                kappa.add(_key(la), _key(lb), times)
                for label in la | lb:
                    kappa = self.label_kappa.get((a, b, label))
                    if kappa is None:
                        kappa = self.label_kappa[a, b, label] = CohenKappa()
                    kappa.add(label in la, label in lb, times)
            top = majority([labels for _, labels in values])
            for user, labels in values:
                row = self.counts.get(user)
                if row is None:
                    row = self.counts[user] = [0, 0, 0]
                row[0] += times
                if top is not None:
                    row[1] += times
                    row[2] += times * (labels == top)
        self.patterns.clear()

    def report(self, study_id: str) -> AgreementReport:
        self._fold()
        users = sorted(self.counts)
        report = AgreementReport(study_id, self.episodes, self.units, users, disputed=self.disputed)
        if not self.units:
            return report
        report.alpha = self.sets.value()
        labels = sorted(self.by_label)
        for label in labels:
            alpha = self.by_label[label]
            marks = alpha.totals[True]
            alpha.pad(False, self.values)
            report.labels.append(LabelAgreement(label, alpha.value(), marks))
        for pair in itertools.combinations(users, 2):
            shared = self.shared[pair]
            if not shared:
                continue
            report.pairs.append(PairKappa(LABEL_SET, *pair, self.set_kappa[pair].value(), shared))
            for label in labels:
                kappa = self.label_kappa.get((*pair, label), CohenKappa())
                kappa.pad(False, shared)
                report.pairs.append(PairKappa(label, *pair, kappa.value(), shared))
        report.per_annotator = [AnnotatorAgreement(user, *self.counts[user]) for user in users]
        self._trim()
        report.disagreements = [d for _, d in sorted(self.kept, key=lambda kept: kept[0][1:])]  # place order
        return report


def compute(
    study_id: str,
    episodes: Iterable[EpisodeLabels],
    consensus: Mapping[tuple[str, int], list[str]] | None = None,
    limit: int | None = None,
) -> AgreementReport:
    """Every figure of the report from the annotators' labels (pure: no store access), one episode at a time.
    `limit`: disputed steps listed (default MAX_DISAGREEMENTS); `consensus`: adjudicated ones by step."""
    tally = _Tally(MAX_DISAGREEMENTS if limit is None else limit)
    for episode in episodes:
        tally.add_episode(episode, consensus or {})
    return tally.report(study_id)


def adjudications(repo: Repository, episode_ids: Sequence[str]) -> dict[tuple[str, int], list[str]]:
    """The consensus of each adjudicated step of `episode_ids` (a few hundred looked up at a time)."""
    out: dict[tuple[str, int], list[str]] = {}
    with Session(repo.engine) as s, s.begin():
        for start in range(0, len(episode_ids), 500):
            rows = s.execute(
                sa.select(
                    AdjudicationRow.episode_id, AdjudicationRow.step_index, AdjudicationRow.labels
                ).where(AdjudicationRow.episode_id.in_(episode_ids[start : start + 500]))
            )
            out |= {(e, i): list(labels) for e, i, labels in rows}
    return out


def study_agreement(repo: Repository, study_id: str) -> AgreementReport:
    """The study's report, its labels streamed from the store (`queue.done_labels`), the adjudications of each
    batch of episodes looked up with it (so the disputed steps listed are the open ones first)."""
    repo.get_study(study_id)  # NotFound names the study
    tally = _Tally(MAX_DISAGREEMENTS)
    batch: list[EpisodeLabels] = []

    def flush() -> None:
        decided = adjudications(repo, [e.episode_id for e in batch])
        for episode in batch:
            tally.add_episode(episode, decided)
        batch.clear()

    for episode in done_labels(repo, study_id, least=2):
        batch.append(episode)
        if len(batch) >= LABEL_BATCH:
            flush()
    flush()
    return tally.report(study_id)


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

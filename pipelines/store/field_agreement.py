"""Agreement on a study's own fields (issue 26), per field, with the measure that fits its kind.

A unit is one place of one field (a step, a segment, or the episode) that two or more annotators gave a value.
Krippendorff's alpha is computed with the distance of the field's kind:
- choice, boolean: nominal (0 when equal, 1 otherwise);
- number: interval (squared difference);
- multi_choice: Jaccard distance between the option sets (1 - |A ∩ B| / |A ∪ B|);
- text: normalised edit distance (Levenshtein distance / length of the longer text, `rapidfuzz`); text fields
  also get `similarity`, the mean of 1 - that distance over every pair of values in a unit, and the units whose
  mean similarity is below `TEXT_DISPUTED` are listed as disputed.
For the other kinds a unit is disputed when its values are not all equal. Adjudicated values are shown beside.

Memory does not grow with the study (issue 21): the store hands over only the places two or more annotators
gave a value (`field_places`, counted by the database as values are written), one place at a time from a
stream read in batches, and alpha is kept as running sums (`Alpha`): the observed disagreement per unit, and
for the expected one the count of each distinct value (nominal; exact), the mean and sum of squared deviations
(interval; exact), or the counts of at most MAX_DISTINCT distinct values and else a seeded reservoir sample
(Jaccard, text). The `krippendorff`
package is the reference the tests hold this to. At most MAX_DISPUTED disputed places are listed per field
(those without a consensus first); `disputed_count` says how many there are.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlalchemy as sa
from rapidfuzz.distance import Levenshtein

from pipelines.store import field_values as fv
from pipelines.store import listing
from pipelines.store.field_defs import FieldDef
from pipelines.store.models import EpisodeRow, FieldAdjudicationRow, FieldPlaceRow, FieldValueRow
from pipelines.store.reliability import NominalAlpha

MAX_DISTINCT = 1500  # above this many distinct values, D_e of Jaccard and text is estimated from a sample
MAX_DISPUTED = 200  # disputed places listed per field (all are counted)
TEXT_DISPUTED = 0.8  # a text unit whose mean pairwise similarity is below this is listed as disputed
BATCH = 2000  # rows read from the store at a time
METRICS = {"choice": "nominal", "boolean": "nominal", "number": "interval", "multi_choice": "jaccard",
           "text": "normalised edit distance"}  # fmt: skip

Place = tuple[str, int, int]  # (episode, step, end)
PLACE_KEY = ("episode_id", "field", "step_index", "end_index")  # a place of a field, in the store's tables


@dataclass(frozen=True)
class FieldDispute:
    episode_id: str
    step: int  # -1: the episode
    end: int
    values: dict[str, Any]  # annotator -> value
    similarity: float | None = None  # text fields: mean pairwise similarity
    consensus: Any = None  # adjudicated value, if any


@dataclass
class FieldAgreement:
    field: str
    kind: str
    scope: str
    metric: str
    units: int = 0
    annotators: list[str] = field(default_factory=list)
    alpha: float | None = None  # None: undefined (no unit, or no variation at all)
    similarity: float | None = None  # text fields only
    disputed: list[FieldDispute] = field(default_factory=list)  # at most MAX_DISPUTED, in place order
    disputed_count: int = 0  # every disputed place
    disputed_open: int = 0  # of those, the places without an adjudicated value

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def jaccard(a: Any, b: Any) -> float:
    sa_, sb = set(a or ()), set(b or ())
    union = sa_ | sb
    return 0.0 if not union else 1.0 - len(sa_ & sb) / len(union)


def text_distance(a: Any, b: Any) -> float:
    return float(Levenshtein.normalized_distance(str(a), str(b)))


def _key(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def pair_distances(values: list[Any], distance: Callable[[Any, Any], float]) -> dict[tuple[int, int], float]:
    """(i, j) -> distance of values i and j, for i < j (every distance here is symmetric)."""
    return {(i, j): distance(values[i], values[j]) for i, j in itertools.combinations(range(len(values)), 2)}


class Alpha:
    """Krippendorff's alpha, 1 - D_o / D_e, from units added one at a time (each with two or more values).

    D_o is the mean distance within units (each unit weighted by 1/(m_u - 1)) and D_e the mean over every pair
    of values. `level` picks the distance and how D_e is kept, in memory that does not grow with the units:
    - "nominal": `reliability.NominalAlpha` (the tags' alpha: counts of each distinct value, bounded by the
      field's options); exact;
    - "interval": the values' mean and sum of squared deviations (Welford), since the mean squared difference
      over all pairs is 2 * M2 / (n - 1); exact;
    - "jaccard", "text": the count of each distinct value while there are at most MAX_DISTINCT of them (exact;
      D_e over the distinct pairs weighted by their counts), else the pairs of a reservoir sample of
      MAX_DISTINCT values, seeded so the figure is the same on every run.
    """

    def __init__(self, level: str) -> None:
        self.level = level
        self.distance: Callable[[Any, Any], float] = {
            "nominal": lambda a, b: float(_key(a) != _key(b)),
            "interval": lambda a, b: (float(a) - float(b)) ** 2,
            "jaccard": jaccard,
            "text": text_distance,
        }[level]
        self.n = 0
        self.nominal = NominalAlpha() if level == "nominal" else None  # one home for nominal alpha
        self.observed = 0.0  # sum over units of their within-unit distances / (m_u - 1)
        self.counts: dict[Any, list[Any]] | None = {}  # distinct key -> [value, count]; None: too many
        self.mean = self.m2 = 0.0
        self.sample: list[Any] = []
        self._rng = random.Random(0)

    def add(self, values: list[Any], distances: dict[tuple[int, int], float] | None = None, times: int = 1) -> None:
        """One unit's values (`times` units alike: counted by the database); `distances`: `pair_distances` of
        them, when the caller has them already."""
        m = len(values)
        if m < 2:
            return
        if self.nominal is not None:
            self.nominal.add(Counter(_key(v) for v in values), times)
            self.n += m * times
            return
        if distances is None:
            distances = pair_distances(values, self.distance)
        pairs = itertools.permutations(range(m), 2)  # each pair both ways, as the definition sums them
        within = sum(distances[(i, j) if i < j else (j, i)] for i, j in pairs) / (m - 1)
        for v in (v for _ in range(times) for v in values):
            self.n += 1
            if self.level == "interval":
                delta = float(v) - self.mean
                self.mean += delta / self.n
                self.m2 += delta * (float(v) - self.mean)
                continue
            if self.counts is not None:
                self.counts.setdefault(_key(v), [v, 0])[1] += 1
                if self.level != "nominal" and len(self.counts) > MAX_DISTINCT:
                    self.counts = None
            if self.level != "nominal":  # reservoir sample (Algorithm R) of every value so far
                if len(self.sample) < MAX_DISTINCT:
                    self.sample.append(v)
                else:
                    j = self._rng.randrange(self.n)
                    if j < MAX_DISTINCT:
                        self.sample[j] = v
        self.observed += within * times

    def expected(self) -> float:
        n = self.n
        if self.level == "interval":
            return 2 * self.m2 / (n - 1)
        if self.counts is not None:
            distinct = list(self.counts.values())
            return 2 * sum(
                na * nb * self.distance(a, b) for (a, na), (b, nb) in itertools.combinations(distinct, 2)
            ) / (n * (n - 1))
        m = len(self.sample)
        return 2 * sum(self.distance(a, b) for a, b in itertools.combinations(self.sample, 2)) / (m * (m - 1))

    def value(self) -> float | None:
        """Alpha; None when undefined (fewer than two values, or no variation: D_e = 0)."""
        if self.nominal is not None:
            return self.nominal.value()
        if self.n < 2:
            return None
        expected = self.expected()
        if expected <= 0:
            return None
        return 1.0 - (self.observed / self.n) / expected


def alpha_for(definition: FieldDef) -> Alpha:
    """An empty alpha with the distance of the field's kind (METRICS)."""
    return Alpha(METRICS[definition.kind] if definition.kind != "text" else "text")


class Tally:
    """One field's agreement from its units, added in place order (`add`), in bounded memory (`result`)."""

    def __init__(self, definition: FieldDef) -> None:
        self.out = FieldAgreement(definition.name, definition.kind, definition.scope, METRICS[definition.kind])
        self.alpha = alpha_for(definition)
        self.annotators: set[str] = set()
        self.similarity = 0.0
        self.open: list[FieldDispute] = []  # the first MAX_DISPUTED without a consensus
        self.decided: list[FieldDispute] = []  # the first MAX_DISPUTED with one

    def add(self, place: Place, values: dict[str, Any], consensus: Any = None) -> None:
        """A place's values (annotator -> value, in the order they were given); fewer than two: not a unit."""
        if len(values) < 2:
            return
        out = self.out
        out.units += 1
        self.annotators.update(values)
        given = list(values.values())
        similarity = None
        if out.kind == "text":
            distances = pair_distances(given, text_distance)
            similarity = sum(1.0 - d for d in distances.values()) / len(distances)
            self.similarity += similarity
            self.alpha.add(given, distances)
            disputed = similarity < TEXT_DISPUTED
        else:
            self.alpha.add(given)
            disputed = len({_key(v) for v in given}) > 1
        if not disputed:
            return
        out.disputed_count += 1
        out.disputed_open += consensus is None
        kept = self.open if consensus is None else self.decided
        if len(kept) < MAX_DISPUTED:
            kept.append(FieldDispute(*place, dict(sorted(values.items())), similarity, consensus))

    def result(self) -> FieldAgreement:
        out = self.out
        out.annotators = sorted(self.annotators)
        out.alpha = self.alpha.value()
        if out.kind == "text" and out.units:
            out.similarity = self.similarity / out.units
        listed = self.open + self.decided[: MAX_DISPUTED - len(self.open)]  # the ones to decide first
        out.disputed = sorted(listed, key=lambda d: (d.episode_id, d.step, d.end))
        return out


def compute(
    definition: FieldDef,
    places: dict[Place, dict[str, Any]],
    decided: dict[tuple[str, str, int, int], Any] | None = None,
) -> FieldAgreement:
    """Agreement on one field from its values by place: (episode, step, end) -> {annotator: value}. Pure."""
    decided = decided or {}
    tally = Tally(definition)
    for (episode_id, step, end), values in sorted(places.items()):
        tally.add((episode_id, step, end), values, decided.get((episode_id, definition.name, step, end)))
    return tally.result()


def shared_places(repo: Any, study_id: str) -> Iterator[tuple[str, Place, dict[str, Any], Any]]:
    """(field, place, {annotator: value}, adjudicated value or None) of each place of the study's episodes
    (not of INVALID sessions) that two or more annotators gave a value, by field then place; values in the
    order they were given. Rows come BATCH at a time.

    The places are those `field_places` counts two or more annotators at (kept by the database as values
    are written, migration 10), read in order from its partial index: the read grows with the shared places,
    not with every value of the store (grouping every value by place took 2.0 s on PostgreSQL at 1M
    episodes with 1.05M values, of which 36k places were shared)."""
    value, adjudication, place = FieldValueRow, FieldAdjudicationRow, FieldPlaceRow

    def same(table: Any) -> sa.ColumnElement[bool]:
        return sa.and_(*(getattr(table, c) == getattr(place, c) for c in PLACE_KEY))

    with repo._read() as s:
        valid = listing.valid_only(s, listing.EpisodeQuery(study_id=study_id))
        query = (
            sa.select(place.field, place.episode_id, place.step_index, place.end_index, value.user, value.value,
                      adjudication.value.label("consensus"))  # fmt: skip
            .join(value, same(value))
            .outerjoin(adjudication, same(adjudication))
            # the partial index's own condition, as a literal: a bound 2 would not let the planner use it
            .where(place.study_id == study_id, sa.text("field_places.annotators >= 2"))
            .order_by(place.field, place.episode_id, place.step_index, place.end_index, value.id)
            .execution_options(yield_per=BATCH)
        )
        if valid is not None:
            query = query.join(EpisodeRow, EpisodeRow.id == place.episode_id).where(valid)
        current: tuple[str, Place] | None = None
        values: dict[str, Any] = {}
        consensus = None
        for name, episode_id, step, end, user, given, decided in s.execute(query):
            key = (name, (episode_id, step, end))
            if key != current:
                if current is not None:
                    yield current[0], current[1], values, consensus
                current, values, consensus = key, {}, decided
            values[user] = given
        if current is not None:
            yield current[0], current[1], values, consensus


def _with_values(repo: Any, study_id: str, names: list[str]) -> set[str]:
    """Which of these fields have any value in the study (removed fields are shown when they do)."""
    out = set()
    with repo._read() as s:
        valid = listing.valid_only(s, listing.EpisodeQuery(study_id=study_id))
        for name in names:
            query = (
                sa.select(FieldValueRow.id).join(EpisodeRow, EpisodeRow.id == FieldValueRow.episode_id)
                .where(FieldValueRow.field == name, EpisodeRow.study_id == study_id,
                       *([] if valid is None else [valid])).limit(1)
            )  # fmt: skip
            if s.scalar(query) is not None:
                out.add(name)
    return out


def study_field_agreement(repo: Any, study_id: str) -> list[FieldAgreement]:
    """Agreement on every field of the study (removed ones too, when they have values), in field order."""
    repo.get_study(study_id)  # NotFound names the study
    defs = fv.definitions(repo, study_id, include_removed=True)
    if not defs:
        return []
    tallies = {d.name: Tally(d) for d in defs}
    for name, place, values, consensus in shared_places(repo, study_id):
        if name in tallies:
            tallies[name].add(place, values, consensus)
    removed = [d.name for d in defs if not d.active and not tallies[d.name].out.units]
    shown = _with_values(repo, study_id, removed) if removed else set()
    return [tallies[d.name].result() for d in defs if d.active or tallies[d.name].out.units or d.name in shown]


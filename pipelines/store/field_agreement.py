"""Agreement on a study's own fields (issue 26), per field, with the measure that fits its kind.

A unit is one place of one field (a step, a segment, or the episode) that two or more annotators gave a value.
Krippendorff's alpha is computed with the distance of the field's kind:
- choice, boolean: nominal (0 when equal, 1 otherwise; the `krippendorff` package);
- number: interval (squared difference; the `krippendorff` package);
- multi_choice: Jaccard distance between the option sets (1 - |A ∩ B| / |A ∪ B|);
- text: normalised edit distance (Levenshtein distance / length of the longer text, `rapidfuzz`); text fields
  also get `similarity`, the mean of 1 - that distance over every pair of values in a unit, and the units whose
  mean similarity is below `TEXT_DISPUTED` are listed as disputed.
For the other kinds a unit is disputed when its values are not all equal. Adjudicated values are shown beside.
"""

from __future__ import annotations

import itertools
import math
import random
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import krippendorff
import numpy as np
from rapidfuzz.distance import Levenshtein

from pipelines.store import field_values as fv
from pipelines.store.field_defs import FieldDef

MAX_DISTINCT = 1500  # above this many distinct values, D_e is estimated from a sample (see alpha_with)
TEXT_DISPUTED = 0.8  # a text unit whose mean pairwise similarity is below this is listed as disputed
METRICS = {"choice": "nominal", "boolean": "nominal", "number": "interval", "multi_choice": "jaccard",
           "text": "normalised edit distance"}  # fmt: skip


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
    disputed: list[FieldDispute] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def jaccard(a: Any, b: Any) -> float:
    sa, sb = set(a or ()), set(b or ())
    union = sa | sb
    return 0.0 if not union else 1.0 - len(sa & sb) / len(union)


def text_distance(a: Any, b: Any) -> float:
    return float(Levenshtein.normalized_distance(str(a), str(b)))


def alpha_with(units: Sequence[Sequence[Any]], distance: Callable[[Any, Any], float]) -> float | None:
    """Krippendorff's alpha for any distance (pairable values: units with two or more values):
    1 - D_o / D_e, D_o the mean distance within units (each unit weighted by 1/(m_u - 1)), D_e the mean over
    every pair of pairable values. None when undefined (no pairable values, or D_e = 0).

    D_e is computed over the distinct values weighted by their counts (exact, and quick when values repeat:
    choices, option sets); with more than MAX_DISTINCT distinct values (free text) it is estimated from the
    pairs of a seeded random sample of MAX_DISTINCT values (the same figure on every run)."""
    pairable = [list(u) for u in units if len(u) >= 2]
    values = [v for u in pairable for v in u]
    n = len(values)
    if n < 2:
        return None
    observed = sum(
        sum(distance(a, b) for a, b in itertools.permutations(u, 2)) / (len(u) - 1) for u in pairable
    ) / n
    counts: dict[Any, list[Any]] = {}
    for v in values:
        counts.setdefault(_key(v), [v, 0])[1] += 1
    if len(counts) <= MAX_DISTINCT:
        distinct = list(counts.values())
        expected = 2 * sum(
            na * nb * distance(a, b) for (a, na), (b, nb) in itertools.combinations(distinct, 2)
        ) / (n * (n - 1))
    else:
        sample = random.Random(0).sample(values, MAX_DISTINCT)
        m = len(sample)
        expected = 2 * sum(distance(a, b) for a, b in itertools.combinations(sample, 2)) / (m * (m - 1))
    if expected == 0:
        return None
    return 1.0 - observed / expected


def _package_alpha(units: Sequence[dict[str, Any]], users: list[str], level: str) -> float | None:
    """Nominal or interval alpha from the `krippendorff` package (annotators x units, NaN: no value)."""
    if level == "nominal":
        codes: dict[Any, int] = {}
        encode = lambda v: float(codes.setdefault(_key(v), len(codes)))  # noqa: E731
    else:
        encode = float
    data = np.array([[encode(u[user]) if user in u else np.nan for u in units] for user in users], dtype=float)
    if data.size == 0 or len(np.unique(data[~np.isnan(data)])) < 2:
        return None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        value = krippendorff.alpha(reliability_data=data, level_of_measurement=level)
    return None if math.isnan(value) else float(value)


def _key(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def compute(
    definition: FieldDef,
    places: dict[tuple[str, int, int], dict[str, Any]],
    decided: dict[tuple[str, str, int, int], Any] | None = None,
) -> FieldAgreement:
    """Agreement on one field from its values by place: (episode, step, end) -> {annotator: value}. Pure."""
    decided = decided or {}
    kind = definition.kind
    out = FieldAgreement(definition.name, kind, definition.scope, METRICS[kind])
    units = {p: v for p, v in sorted(places.items()) if len(v) >= 2}
    out.units = len(units)
    out.annotators = sorted({u for v in units.values() for u in v})
    if not units:
        return out
    rows = list(units.values())
    if kind in ("choice", "boolean", "number"):
        out.alpha = _package_alpha(rows, out.annotators, "nominal" if kind != "number" else "interval")
    else:
        distance = jaccard if kind == "multi_choice" else text_distance
        out.alpha = alpha_with([list(v.values()) for v in rows], distance)
    similarities = []
    for (episode_id, step, end), values in units.items():
        similarity = None
        if kind == "text":
            pairs = list(itertools.combinations(values.values(), 2))
            similarity = sum(1.0 - text_distance(a, b) for a, b in pairs) / len(pairs)
            similarities.append(similarity)
            disputed = similarity < TEXT_DISPUTED
        else:
            disputed = len({_key(v) for v in values.values()}) > 1
        if disputed:
            out.disputed.append(FieldDispute(episode_id, step, end, dict(sorted(values.items())),
                                             similarity, decided.get((episode_id, definition.name, step, end))))  # fmt: skip
    if kind == "text":
        out.similarity = sum(similarities) / len(similarities)
    return out


def study_field_agreement(repo: Any, study_id: str, episode_ids: Sequence[str] | None = None) -> list[FieldAgreement]:
    """Agreement on every field of the study (removed ones too, when they have values), in field order.
    `episode_ids`: the episodes to look at (default: every episode of the study, read in batches)."""
    from pipelines.store import listing

    repo.get_study(study_id)  # NotFound names the study
    defs = fv.definitions(repo, study_id, include_removed=True)
    if not defs:
        return []
    places: dict[str, dict[tuple[str, int, int], dict[str, Any]]] = {d.name: {} for d in defs}
    batches = [list(episode_ids)] if episode_ids is not None else repo.iter_episode_ids(listing.EpisodeQuery(study_id=study_id))
    for batch in batches:
        for episode_id, given in fv.values(repo, batch).items():
            for v in given:
                if v.field in places:
                    places[v.field].setdefault((episode_id, v.step, v.end), {})[v.user] = v.value
    decided = fv.adjudications(repo, study_id)
    return [compute(d, places[d.name], decided) for d in defs if d.active or places[d.name]]

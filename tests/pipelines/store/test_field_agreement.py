"""Agreement per study field (pipelines/store/field_agreement.py): the generic alpha equals the `krippendorff`
package where both apply, each kind gets its measure, and text disputes are listed."""

from __future__ import annotations

import math

import krippendorff
import numpy as np
import pytest

from pipelines.store import field_agreement as fa
from pipelines.store.field_defs import FieldDef


def test_generic_alpha_equals_the_package_for_nominal_and_interval() -> None:
    # Krippendorff's own example (2011, "Computing Krippendorff's alpha-reliability"), missing values as None
    data = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
        [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
    ]
    units = [[row[i] for row in data if row[i] is not None] for i in range(len(data[0]))]
    matrix = np.array([[np.nan if v is None else v for v in row] for row in data], dtype=float)
    nominal = fa.alpha_with(units, lambda a, b: float(a != b))
    interval = fa.alpha_with(units, lambda a, b: float(a - b) ** 2)
    assert nominal == pytest.approx(krippendorff.alpha(matrix, level_of_measurement="nominal"))
    assert interval == pytest.approx(krippendorff.alpha(matrix, level_of_measurement="interval"))
    assert nominal == pytest.approx(0.743, abs=1e-3)  # the paper's figure
    assert fa.alpha_with([[1, 1], [1, 1]], lambda a, b: float(a != b)) is None  # no variation: undefined


def test_each_kind_gets_its_measure_and_disputes_are_listed() -> None:
    choice = FieldDef("ok", "step", "choice", options=("yes", "no"))
    places = {("e", 0, 0): {"a": "yes", "b": "yes"}, ("e", 1, 1): {"a": "no", "b": "yes"},
              ("e", 2, 2): {"a": "no", "b": "no"}, ("e", 3, 3): {"a": "no"}}  # fmt: skip
    got = fa.compute(choice, places, {("e", "ok", 1, 1): "no"})
    assert (got.metric, got.units, got.annotators) == ("nominal", 3, ["a", "b"])
    assert got.alpha == pytest.approx(krippendorff.alpha(np.array([[1, 0, 0], [1, 1, 0]], float), level_of_measurement="nominal"))
    assert [(d.step, d.values, d.consensus) for d in got.disputed] == [(1, {"a": "no", "b": "yes"}, "no")]

    multi = FieldDef("bad", "step", "multi_choice", options=("x", "y", "z"))
    got = fa.compute(multi, {("e", 0, 0): {"a": ["x", "y"], "b": ["x"]}, ("e", 1, 1): {"a": ["z"], "b": ["z"]}})
    assert got.metric == "jaccard" and fa.jaccard(["x", "y"], ["x"]) == 0.5 and fa.jaccard([], []) == 0.0
    assert got.alpha == pytest.approx(fa.alpha_with([[["x", "y"], ["x"]], [["z"], ["z"]]], fa.jaccard))

    text = FieldDef("instruction", "step", "text")
    got = fa.compute(text, {("e", 0, 0): {"a": "open the menu", "b": "open the menu"},
                            ("e", 1, 1): {"a": "tap the search bar", "b": "go back"}})  # fmt: skip
    assert got.metric == "normalised edit distance" and 0 < got.similarity < 1
    (dispute,) = got.disputed
    assert dispute.step == 1 and dispute.similarity < fa.TEXT_DISPUTED
    assert math.isclose(got.similarity, (1 + dispute.similarity) / 2)


def test_many_distinct_texts_estimate_the_expected_distance_from_a_seeded_sample(monkeypatch) -> None:
    import random

    rng = random.Random(7)
    words = "tap open the settings menu search bar type pizza scroll down go back".split()
    units = []
    for _ in range(150):
        text = " ".join(rng.choices(words, k=5))
        units.append([text, text if rng.random() < 0.7 else " ".join(rng.choices(words, k=5))])
    exact = fa.alpha_with(units, fa.text_distance)
    monkeypatch.setattr(fa, "MAX_DISTINCT", 120)  # fewer than the ~250 distinct texts: sampled
    sampled = fa.alpha_with(units, fa.text_distance)
    assert sampled == fa.alpha_with(units, fa.text_distance)  # the same figure every time
    assert sampled != exact and abs(sampled - exact) < 0.05

"""The running-sum alpha and kappa against the libraries they replace (krippendorff, scikit-learn), on random
data: missing values, many categories, units of 2 to 6 coders, units added in any order, padded units."""

from __future__ import annotations

import math
import random
import warnings

import krippendorff
import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from pipelines.store.reliability import CohenKappa, NominalAlpha


def library_alpha(matrix: list[list[float]]) -> float | None:
    """The krippendorff package on a coders x units matrix (NaN: no value); None when it is undefined."""
    data = np.array(matrix, dtype=float)
    if len(np.unique(data[~np.isnan(data)])) < 2:
        return None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        value = krippendorff.alpha(reliability_data=data, level_of_measurement="nominal")
    return None if math.isnan(value) else float(value)


def library_kappa(a: list, b: list) -> float | None:
    if not a or len(set(a) | set(b)) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = cohen_kappa_score(a, b)
    return None if math.isnan(value) else float(value)


def same(ours: float | None, theirs: float | None) -> bool:
    return (ours is None and theirs is None) or (
        ours is not None and theirs is not None and abs(ours - theirs) < 1e-9
    )


@pytest.mark.parametrize("seed", range(40))
def test_alpha_is_the_krippendorff_package_s(seed: int) -> None:
    rng = random.Random(seed)
    coders, units = rng.randint(2, 7), rng.randint(1, 300)
    categories = rng.choice([1, 2, 3, 10, 60])
    skew = rng.random()  # how often a coder repeats the unit's first value
    matrix = [[math.nan] * units for _ in range(coders)]
    for u in range(units):
        first = rng.randrange(categories)
        for c in range(coders):
            if rng.random() < 0.3:
                continue  # missing
            matrix[c][u] = first if rng.random() < skew else rng.randrange(categories)
    alpha = NominalAlpha()
    for u in rng.sample(range(units), units):  # any order
        values = [int(matrix[c][u]) for c in range(coders) if not math.isnan(matrix[c][u])]
        alpha.add({v: values.count(v) for v in set(values)})
    assert same(alpha.value(), library_alpha(matrix))


def test_alpha_padded_units_are_units_everyone_agrees_on() -> None:
    rng = random.Random(7)
    matrix = [[float(rng.random() < 0.2) for _ in range(50)] + [0.0] * 30 for _ in range(3)]
    alpha = NominalAlpha()
    for u in range(50):
        k = sum(int(row[u]) for row in matrix)
        if k:
            alpha.add({True: k, False: 3 - k})
    alpha.pad(False, 3 * 80)
    assert alpha.n == 240
    assert same(alpha.value(), library_alpha(matrix))


def test_alpha_undefined_without_two_values() -> None:
    alpha = NominalAlpha()
    assert alpha.value() is None
    alpha.add({"x": 3})
    alpha.add({"x": 1})  # one value: not pairable, not counted
    assert (alpha.value(), alpha.n) == (None, 3)


@pytest.mark.parametrize("seed", range(40))
def test_kappa_is_scikit_learn_s(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(0, 300)
    categories = [f"set{i}" for i in range(rng.choice([1, 2, 4, 30]))]
    agree = rng.random()
    a = [rng.choice(categories) for _ in range(n)]
    b = [x if rng.random() < agree else rng.choice(categories) for x in a]
    kappa = CohenKappa()
    for x, y in zip(a, b, strict=True):
        kappa.add(x, y)
    assert same(kappa.value(), library_kappa(a, b))
    padded = rng.randint(n, n + 100)
    kappa.pad("set0", padded)
    extra = ["set0"] * (padded - n)
    assert same(kappa.value(), library_kappa(a + extra, b + extra))


def test_kappa_of_two_opposite_coders() -> None:
    kappa = CohenKappa()
    kappa.add("x", "y", 10)
    assert same(kappa.value(), library_kappa(["x"] * 10, ["y"] * 10))

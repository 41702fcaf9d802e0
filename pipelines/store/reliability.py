"""Nominal Krippendorff's alpha and Cohen's kappa as running sums, fed one unit at a time.

Why not the libraries: `krippendorff.alpha` needs the whole annotators x units matrix (and builds a units x
values x values array from it: 19 GB for 200,000 steps), `cohen_kappa_score` both label lists whole. A study's
agreement must not grow with its episodes, so the figures are folded here from integer counts, which also
makes them independent of the order units come in. The libraries stay the reference in the tests
(tests/pipelines/store/test_reliability.py), to 1e-9.

Alpha (Krippendorff 2011, nominal metric). A unit u has m_u >= 2 values, m_uc of them equal to c. Each ordered
pair of values of different coders in u adds 1 / (m_u - 1) to the coincidence o_ck; n_c = sum_k o_ck is how
often c was given, n = sum_c n_c. With the nominal distance (1 when c != k),

    alpha = 1 - D_o / D_e = 1 - (n - 1) * sum_{c != k} o_ck / sum_{c != k} n_c n_k
    sum_{c != k} o_ck = sum_u (m_u^2 - sum_c m_uc^2) / (m_u - 1)
    sum_{c != k} n_c n_k = n^2 - sum_c n_c^2

so the off-diagonal coincidences are never needed one by one: the integers m_u^2 - sum_c m_uc^2 summed per
m_u (0 for a unit everyone agrees on) and the totals n_c are enough. Undefined (None) with fewer than two
distinct values (D_e = 0).

Kappa (Cohen 1960). Over n units both coders of a pair valued, with a_c and b_c how often each gave c and
A the units where they gave the same value: p_o = A / n, p_e = sum_c a_c b_c / n^2, and

    kappa = (p_o - p_e) / (1 - p_e) = 1 - n (n - A) / (n^2 - sum_c a_c b_c)

Undefined (None) with no units or fewer than two distinct values between the two coders.

Both take `pad(value, total)`: units not added one by one because every coder gave them `value` (a label
nobody gave a step: "has not"), so that per-label figures cost only the units where the label occurs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping


class NominalAlpha:
    """Krippendorff's alpha (nominal) of the units added so far."""

    def __init__(self) -> None:
        self.totals: Counter[Hashable] = Counter()  # n_c
        self.disagreeing: dict[int, int] = {}  # m_u -> sum over such units of m_u^2 - sum_c m_uc^2

    @property
    def n(self) -> int:
        return sum(self.totals.values())

    def add(self, counts: Mapping[Hashable, int], times: int = 1) -> None:
        """One unit (`times` alike), as how many of its values are each value (fewer than two: not pairable)."""
        m = sum(counts.values())
        if m < 2:
            return
        for value, k in counts.items():
            self.totals[value] += k * times
        apart = m * m - sum(k * k for k in counts.values())
        if apart:
            self.disagreeing[m] = self.disagreeing.get(m, 0) + apart * times

    def pad(self, value: Hashable, total: int) -> None:
        """Count `value` until n is `total`: the pairable units not added, on which every coder gave it."""
        missing = total - self.n
        if missing > 0:
            self.totals[value] += missing

    def value(self) -> float | None:
        if sum(1 for k in self.totals.values() if k) < 2:
            return None
        n = self.n
        observed = sum(apart / (m - 1) for m, apart in self.disagreeing.items())
        expected = n * n - sum(k * k for k in self.totals.values())
        return 1.0 - (n - 1) * observed / expected if expected else None


class CohenKappa:
    """Cohen's kappa of two coders over the units added so far."""

    def __init__(self) -> None:
        self.n = 0
        self.same = 0  # units where both gave the same value
        self.first: Counter[Hashable] = Counter()  # a_c
        self.second: Counter[Hashable] = Counter()  # b_c

    def add(self, a: Hashable, b: Hashable, times: int = 1) -> None:
        self.n += times
        self.same += times * (a == b)
        self.first[a] += times
        self.second[b] += times

    def pad(self, value: Hashable, total: int) -> None:
        """Add (value, value) until there are `total` units."""
        if total > self.n:
            self.add(value, value, total - self.n)

    def value(self) -> float | None:
        n = self.n
        if not n or len({c for c, k in (self.first + self.second).items() if k}) < 2:
            return None
        chance = sum(k * self.second[c] for c, k in self.first.items())
        return 1.0 - n * (n - self.same) / (n * n - chance) if n * n != chance else None

"""Agreement per study field (pipelines/store/field_agreement.py): the streamed alpha equals the `krippendorff`
package (nominal, interval) and the direct pairwise formula (Jaccard, text) on random data, each kind gets its
measure, disputes are listed up to a bound and counted, and the store streams the same figures as the values
read whole (SQLite and PostgreSQL)."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import krippendorff
import numpy as np
import pytest

from pipelines.store import field_agreement as fa
from pipelines.store import field_values as fv
from pipelines.store.field_defs import FieldDef, parse_text
from protos.rlds_creator import client_pb2, study_pb2
from tests.pipelines.store.conftest import env_episode, study_spec

WORDS = "tap open the settings menu search bar type pizza scroll down go back".split()


def streamed(units: list[list[Any]], level: str) -> float | None:
    alpha = fa.Alpha(level)
    for unit in units:
        alpha.add(unit)
    return alpha.value()


def package(units: list[list[Any]], level: str) -> float | None:
    """The `krippendorff` package's alpha (annotators x units, NaN: no value); None where it is undefined."""
    codes: dict[Any, float] = {}
    width = max(len(u) for u in units)
    encode = (lambda v: codes.setdefault(v, float(len(codes)))) if level == "nominal" else float
    data = np.array([[encode(u[i]) if i < len(u) else np.nan for u in units] for i in range(width)], dtype=float)
    if len(np.unique(data[~np.isnan(data)])) < 2:
        return None
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement=level))


def pairwise(units: list[list[Any]], distance) -> float | None:
    """Alpha as the definition reads, over every pair of values (the computation before streaming)."""
    values = [v for u in units for v in u]
    n = len(values)
    observed = sum(sum(distance(a, b) for a, b in itertools.permutations(u, 2)) / (len(u) - 1) for u in units) / n
    counts: dict[Any, list[Any]] = {}
    for v in values:
        counts.setdefault(fa._key(v), [v, 0])[1] += 1
    distinct = list(counts.values())
    pairs = itertools.combinations(distinct, 2)
    expected = 2 * sum(na * nb * distance(a, b) for (a, na), (b, nb) in pairs) / (n * (n - 1))
    return None if expected == 0 else 1.0 - observed / expected


def random_units(rng: random.Random, n: int, pick) -> list[list[Any]]:
    """n units of 2 to 4 values; a unit's values agree more often than chance."""
    units = []
    for _ in range(n):
        first = pick()
        units.append([first if rng.random() < 0.6 else pick() for _ in range(rng.randint(2, 4))])
    return units


def test_streamed_alpha_equals_the_package_for_nominal_and_interval() -> None:
    # Krippendorff's own example (2011, "Computing Krippendorff's alpha-reliability"), missing values as None
    data = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
        [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
    ]
    units = [u for i in range(len(data[0])) if len(u := [row[i] for row in data if row[i] is not None]) >= 2]
    assert streamed(units, "nominal") == pytest.approx(0.743, abs=1e-3)  # the paper's figure
    assert streamed(units, "interval") == pytest.approx(0.849, abs=1e-3)
    rng = random.Random(3)
    cases = [
        (random_units(rng, 300, lambda: rng.choice(["yes", "no", "unsure"])), "nominal"),
        (random_units(rng, 300, lambda: rng.random() < 0.7), "nominal"),
        (random_units(rng, 300, lambda: rng.randint(1, 5)), "interval"),
        (random_units(rng, 300, lambda: rng.uniform(-1e3, 1e3)), "interval"),
        (random_units(rng, 80, lambda: rng.gauss(1e6, 3.0)), "interval"),  # far from 0: no cancellation
    ]
    for units, level in cases:
        assert streamed(units, level) == pytest.approx(package(units, level), rel=1e-9)
    many = random_units(rng, 400, lambda: rng.gauss(1e6, 3.0))  # ~700 distinct values, far from 0
    assert streamed(many, "interval") == pytest.approx(pairwise(many, lambda a, b: (a - b) ** 2), rel=1e-9)
    assert streamed([[1, 1], [1, 1]], "nominal") is None  # no variation: undefined
    assert streamed([[2.5, 2.5], [2.5, 2.5]], "interval") is None
    assert streamed([["a", "a"], ["b", "b"]], "nominal") == 1.0


def test_streamed_jaccard_and_text_equal_the_pairwise_formula() -> None:
    rng = random.Random(5)
    options = ["slow", "loop", "popup", "ad"]
    sets = random_units(rng, 400, lambda: sorted(rng.sample(options, rng.randint(1, 3))))
    texts = random_units(rng, 300, lambda: " ".join(rng.choices(WORDS, k=4)))
    assert len({" ".join(u) for u in texts}) < fa.MAX_DISTINCT  # exact: the same sums in the same order
    assert streamed(sets, "jaccard") == pairwise(sets, fa.jaccard)
    assert streamed(texts, "text") == pairwise(texts, fa.text_distance)
    assert fa.jaccard(["x", "y"], ["x"]) == 0.5 and fa.jaccard([], []) == 0.0


def test_many_distinct_texts_estimate_the_expected_distance_from_a_seeded_reservoir(monkeypatch) -> None:
    rng = random.Random(7)
    units = []
    for _ in range(150):
        text = " ".join(rng.choices(WORDS, k=5))
        units.append([text, text if rng.random() < 0.7 else " ".join(rng.choices(WORDS, k=5))])
    exact = streamed(units, "text")
    assert exact == pairwise(units, fa.text_distance)
    monkeypatch.setattr(fa, "MAX_DISTINCT", 120)  # fewer than the ~250 distinct texts: sampled
    sampled = streamed(units, "text")
    assert sampled == streamed(units, "text")  # the same figure every time
    assert sampled != exact and abs(sampled - exact) < 0.05


def test_each_kind_gets_its_measure_and_disputes_are_listed() -> None:
    choice = FieldDef("ok", "step", "choice", options=("yes", "no"))
    places = {("e", 0, 0): {"a": "yes", "b": "yes"}, ("e", 1, 1): {"a": "no", "b": "yes"},
              ("e", 2, 2): {"a": "no", "b": "no"}, ("e", 3, 3): {"a": "no"}}  # fmt: skip
    got = fa.compute(choice, places, {("e", "ok", 1, 1): "no"})
    assert (got.metric, got.units, got.annotators) == ("nominal", 3, ["a", "b"])
    assert got.alpha == pytest.approx(krippendorff.alpha(np.array([[1, 0, 0], [1, 1, 0]], float), level_of_measurement="nominal"))
    assert [(d.step, d.values, d.consensus) for d in got.disputed] == [(1, {"a": "no", "b": "yes"}, "no")]
    assert (got.disputed_count, got.disputed_open) == (1, 0)

    multi = FieldDef("bad", "step", "multi_choice", options=("x", "y", "z"))
    got = fa.compute(multi, {("e", 0, 0): {"a": ["x", "y"], "b": ["x"]}, ("e", 1, 1): {"a": ["z"], "b": ["z"]}})
    assert got.metric == "jaccard"
    assert got.alpha == pairwise([[["x", "y"], ["x"]], [["z"], ["z"]]], fa.jaccard)

    number = FieldDef("score", "episode", "number")
    got = fa.compute(number, {("e", -1, -1): {"a": 3, "b": 4.5}, ("f", -1, -1): {"a": 1, "b": 1, "c": 2}})
    assert got.metric == "interval" and got.alpha == pytest.approx(package([[3, 4.5], [1, 1, 2]], "interval"))

    text = FieldDef("instruction", "step", "text")
    got = fa.compute(text, {("e", 0, 0): {"a": "open the menu", "b": "open the menu"},
                            ("e", 1, 1): {"a": "tap the search bar", "b": "go back"}})  # fmt: skip
    assert got.metric == "normalised edit distance" and 0 < got.similarity < 1
    (dispute,) = got.disputed
    assert dispute.step == 1 and dispute.similarity < fa.TEXT_DISPUTED
    assert math.isclose(got.similarity, (1 + dispute.similarity) / 2)


def test_disputes_are_listed_up_to_a_bound_undecided_first_and_all_counted(monkeypatch) -> None:
    monkeypatch.setattr(fa, "MAX_DISPUTED", 4)
    choice = FieldDef("ok", "step", "choice", options=("yes", "no"))
    places = {("e", i, i): {"a": "yes", "b": "no" if i % 2 else "yes"} for i in range(20)}  # 10 disputed
    decided = {("e", "ok", i, i): "no" for i in (1, 3, 5, 7)}  # the first four of them
    got = fa.compute(choice, places, decided)
    assert (got.units, got.disputed_count, got.disputed_open) == (20, 10, 6)
    assert [d.step for d in got.disputed] == [9, 11, 13, 15]  # the first undecided ones, in place order
    got = fa.compute(choice, places, {key: "no" for key in [("e", "ok", i, i) for i in range(1, 20, 2)][2:]})
    assert [(d.step, d.consensus) for d in got.disputed] == [(1, None), (3, None), (5, "no"), (7, "no")]
    assert got.to_json()["disputed_count"] == 10 and len(got.to_json()["disputed"]) == 4


FIELDS = """fields:
  - {name: ok, scope: step, kind: choice, options: [yes, no, unsure]}
  - {name: done, scope: episode, kind: boolean}
  - {name: score, scope: step, kind: number, min: 0, max: 10}
  - {name: problems, scope: segment, kind: multi_choice, options: [slow, loop, popup]}
  - {name: note, scope: step, kind: text}
  - {name: old, scope: episode, kind: choice, options: [a, b]}
"""


def ref(episode: study_pb2.Episode) -> client_pb2.EpisodeRef:
    return client_pb2.EpisodeRef(episode_id=episode.id)


def test_the_store_streams_the_figures_of_the_values_read_whole(repo, monkeypatch) -> None:
    """Random values of three annotators (some places with one value) on every kind and scope; an INVALID
    session's episode, another study's values and a removed field with single values only; rows read 7 at a
    time."""
    rng = random.Random(11)
    study = repo.create_study(study_spec(), "lead")
    session, bad = repo.create_session(study.id, "lead"), repo.create_session(study.id, "lead")
    episodes = repo.add_episodes([env_episode(study.id, session, num_steps=6) for _ in range(5)])
    ignored = repo.add_episode(env_episode(study.id, bad, num_steps=6))
    repo.set_session_state(bad.id, study_pb2.Session.STATE_INVALID)
    fv.define(repo, study.id, parse_text(FIELDS, "f.yaml"), "lead")
    pick = {
        "ok": lambda: rng.choice(["yes", "no", "unsure"]), "done": lambda: rng.random() < 0.5,
        "score": lambda: rng.randint(0, 10), "problems": lambda: rng.sample(["slow", "loop", "popup"], rng.randint(1, 2)),
        "note": lambda: " ".join(rng.choices(WORDS[:5], k=3)), "old": lambda: "a",
    }  # fmt: skip
    for episode in [*episodes, ignored]:
        for name, scope in (("ok", "step"), ("done", "episode"), ("score", "step"), ("problems", "segment"),
                            ("note", "step"), ("old", "episode")):  # fmt: skip
            places = {"episode": [(None, None)], "step": [(s, s) for s in range(6)], "segment": [(0, 2), (3, 5)]}[scope]
            for step, end in places:
                users = ["ann"] if name == "old" else rng.sample(["ann", "bea", "cid"], rng.randint(1, 3))
                first = pick[name]()
                for user in users:
                    value = first if rng.random() < 0.5 else pick[name]()
                    fv.set_value(repo, ref(episode), name, user, value, step=step, end=end)
    fv.adjudicate(repo, ref(episodes[0]), "ok", "lead", "no", step=1)
    other = repo.create_study(study_spec("Other study"), "lead")  # its places are grouped too, then left out
    elsewhere = repo.add_episode(env_episode(other.id, repo.create_session(other.id, "lead"), num_steps=6))
    fv.define(repo, other.id, parse_text(FIELDS, "f.yaml"), "lead")
    for user, answer in (("ann", "yes"), ("bea", "no")):
        fv.set_value(repo, ref(elsewhere), "ok", user, answer, step=0)
    removed = FIELDS[: FIELDS.index("  - {name: old")]
    fv.define(repo, study.id, parse_text(removed, "f.yaml"), "lead")  # `old` removed: its values are kept

    whole: dict[str, dict[tuple[str, int, int], dict[str, Any]]] = {}
    for episode_id, given in fv.values(repo, [e.id for e in episodes]).items():
        for v in given:
            whole.setdefault(v.field, {}).setdefault((episode_id, v.step, v.end), {})[v.user] = v.value
    decided = fv.adjudications(repo, study.id)
    monkeypatch.setattr(fa, "BATCH", 7)
    got = {a.field: a for a in fa.study_field_agreement(repo, study.id)}
    assert list(got) == ["ok", "done", "score", "problems", "note", "old"]  # the removed field has values
    assert got["old"].units == 0 and got["old"].alpha is None
    for d in fv.definitions(repo, study.id, include_removed=True):
        assert got[d.name] == fa.compute(d, whole[d.name], decided), d.name
    units = {name: [list(v.values()) for _, v in sorted(whole[name].items()) if len(v) >= 2] for name in whole}
    assert got["ok"].alpha == pytest.approx(package(units["ok"], "nominal"), rel=1e-9)
    assert got["score"].alpha == pytest.approx(package(units["score"], "interval"), rel=1e-9)
    assert got["problems"].alpha == pytest.approx(pairwise(units["problems"], fa.jaccard), rel=1e-12)
    assert got["note"].alpha == pytest.approx(pairwise(units["note"], fa.text_distance), rel=1e-12)
    assert got["ok"].units > 5 and got["ok"].disputed_count > 0
    assert any(d.consensus == "no" for d in got["ok"].disputed)
    assert all(d.episode_id not in (ignored.id, elsewhere.id) for a in got.values() for d in a.disputed)

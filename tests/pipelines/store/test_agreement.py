"""Agreement figures checked against worked examples from the literature, through the store and alone."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.orm import Session

from pipelines.store import Repository, agreement, queue
from pipelines.store.agreement import (
    AgreementReport,
    AnnotatorAgreement,
    Disagreement,
    LabelAgreement,
    PairKappa,
)
from pipelines.store.models import QueueAssignmentRow
from pipelines.store.queue import EpisodeLabels, QueueConfig
from protos.rlds_creator import client_pb2
from tests.pipelines.store.conftest import env_episode, study_spec
from tests.pipelines.store.test_reliability import library_alpha, library_kappa, same

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: four observers, twelve units,
# nominal values 1-5, missing values as None. The paper computes alpha (nominal) = 0.743.
KRIPPENDORFF_2011 = {
    "A": [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    "B": [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    "C": [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    "D": [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
}


def test_krippendorff_2011_worked_example() -> None:
    episodes = [
        EpisodeLabels(
            f"unit-{j}",
            1,
            {user: {0: frozenset({str(v[j])})} for user, v in KRIPPENDORFF_2011.items() if v[j] is not None},
        )
        for j in range(12)
    ]
    report = agreement.compute("s", episodes)
    assert report.alpha == pytest.approx(0.743, abs=5e-4)
    assert report.units == 11  # unit 12 has one value: not pairable, left out
    assert report.annotators == ["A", "B", "C", "D"]
    # Unit 6 (1, 2, 3, 4) has no majority; unit 2 (2, 2, 3, 2) has "2", which C missed.
    assert {d.episode_id: d.majority for d in report.disagreements} == {
        "unit-1": ["2"], "unit-5": None, "unit-7": ["1"]
    }  # fmt: skip
    by_user = {a.user: (a.units, a.with_majority, a.agree) for a in report.per_annotator}
    assert by_user == {"A": (9, 8, 8), "B": (10, 9, 9), "C": (10, 9, 7), "D": (11, 10, 10)}


def _labelled_study(repo: Repository) -> tuple[str, str]:
    """Cohen's kappa example (Wikipedia, "Cohen's kappa", worked example): 50 proposals read by A and B;
    both yes 20, A yes B no 5, A no B yes 10, both no 15. Here: 50 steps of one episode, labels yes/no.
    """
    study = repo.create_study(study_spec(), "lead")
    session = repo.create_session(study.id, "lead")
    episode = repo.add_episode(
        env_episode(study.id, session, num_steps=49)
    )  # 49 transitions + final = 50 steps
    queue.set_queue(repo, QueueConfig(study.id, overlap=2), "lead")
    pairs = [("yes", "yes")] * 20 + [("yes", "no")] * 5 + [("no", "yes")] * 10 + [("no", "no")] * 15
    for user, column in (("ann", 0), ("bea", 1)):
        assert queue.next_episode(repo, study.id, user).episode_id == episode.id
        for step, pair in enumerate(pairs):
            assert queue.set_step_label(repo, episode.id, user, step, pair[column])
        queue.mark_done(repo, episode.id, user)
    return study.id, episode.id


def test_cohen_kappa_worked_example_through_the_store(repo: Repository) -> None:
    study_id, episode_id = _labelled_study(repo)
    report = agreement.study_agreement(repo, study_id)
    assert (report.episodes, report.units, report.annotators) == (1, 50, ["ann", "bea"])
    pair = {(p.label, p.user_a, p.user_b): p for p in report.pairs}
    assert pair[(agreement.LABEL_SET, "ann", "bea")].kappa == pytest.approx(0.4)  # (0.7 - 0.5) / (1 - 0.5)
    assert pair[("yes", "ann", "bea")].kappa == pytest.approx(0.4)
    assert pair[("yes", "ann", "bea")].units == 50
    # Alpha by hand: 100 values (55 yes, 45 no), 15 disagreeing units -> 1 - 99 * 30 / (2 * 55 * 45) = 0.4.
    assert report.alpha == pytest.approx(0.4)
    assert {a.label: a.marks for a in report.labels} == {"no": 45, "yes": 55}
    # Two annotators: a majority exists only where they agree (35 units).
    assert [(a.user, a.with_majority, a.agree, a.rate) for a in report.per_annotator] == [
        ("ann", 35, 35, 1.0), ("bea", 35, 35, 1.0)
    ]  # fmt: skip
    assert len(report.disagreements) == 15
    first = report.disagreements[0]
    assert (first.step_index, first.labels, first.majority) == (20, {"ann": ["yes"], "bea": ["no"]}, None)


def test_adjudication_becomes_the_steps_tags(repo: Repository) -> None:
    study_id, episode_id = _labelled_study(repo)
    ref = client_pb2.EpisodeRef(episode_id=episode_id)
    repo.add_step_tag(ref, 20, "unsure", "ann")
    assert agreement.adjudicate(repo, episode_id, 20, ["yes", " "], "lead") == ["yes"]
    assert [t.label for t in repo.get_episode(ref).step_metadata[20].tags] == ["yes"]
    assert agreement.adjudicate(repo, episode_id, 20, ["no"], "lead") == [
        "no"
    ]  # a later decision replaces it
    assert [t.label for t in repo.get_episode(ref).step_metadata[20].tags] == ["no"]
    report = agreement.study_agreement(repo, study_id)
    assert report.disagreements[0].consensus == ["no"]
    assert report.disagreements[1].consensus is None
    log = repo.audit_log(ref)
    assert (
        log[0].action == "step.adjudicate" and log[0].before == {"labels": ["yes"]} and log[0].user == "lead"
    )


@dataclass(frozen=True)
class Unit:
    episode_id: str
    step_index: int
    values: dict[str, frozenset[str]]  # annotator -> labels


def reference(study_id: str, episodes: list[EpisodeLabels]) -> AgreementReport:
    """The report as it was computed before it was streamed: every unit in memory, annotators x units matrices
    for the krippendorff package, whole label lists for scikit-learn (disagreements in input order)."""
    units = [Unit(e.episode_id, step, dict(values)) for e in episodes for step, values in agreement.units_of(e)]
    users = sorted({u for unit in units for u in unit.values})
    disputed = [u for u in units if len(set(u.values.values())) > 1]
    report = AgreementReport(study_id, len({u.episode_id for u in units}), len(units), users, disputed=len(disputed))
    if not units:
        return report
    key = agreement._key
    categories = {k: i for i, k in enumerate(sorted({key(v) for u in units for v in u.values.values()}))}
    nan = float("nan")
    report.alpha = library_alpha(
        [[categories[key(u.values[user])] if user in u.values else nan for u in units] for user in users]
    )
    labels = sorted({label for u in units for v in u.values.values() for label in v})
    for label in labels:
        matrix = [[float(label in u.values[user]) if user in u.values else nan for u in units] for user in users]
        marks = sum(label in v for u in units for v in u.values.values())
        report.labels.append(LabelAgreement(label, library_alpha(matrix), marks))
    for a, b in itertools.combinations(users, 2):
        shared = [u for u in units if a in u.values and b in u.values]
        if not shared:
            continue
        kappa = library_kappa([key(u.values[a]) for u in shared], [key(u.values[b]) for u in shared])
        report.pairs.append(PairKappa(agreement.LABEL_SET, a, b, kappa, len(shared)))
        for label in labels:
            kappa = library_kappa([str(label in u.values[a]) for u in shared], [str(label in u.values[b]) for u in shared])
            report.pairs.append(PairKappa(label, a, b, kappa, len(shared)))
    counts = {user: [0, 0, 0] for user in users}
    for unit in units:
        top = agreement.majority(list(unit.values.values()))
        for user, value in unit.values.items():
            counts[user][0] += 1
            if top is not None:
                counts[user][1] += 1
                counts[user][2] += value == top
    report.per_annotator = [AnnotatorAgreement(user, *counts[user]) for user in users]
    report.disagreements = [
        Disagreement(u.episode_id, u.step_index, {user: sorted(v) for user, v in sorted(u.values.items())},
                     None if (top := agreement.majority(list(u.values.values()))) is None else sorted(top), None)
        for u in disputed
    ]  # fmt: skip
    return report


def random_episodes(rng: random.Random, count: int) -> list[EpisodeLabels]:
    """Episodes of 0-12 steps done by 1-5 of 6 annotators, labels from a pool of 1-12, most steps empty,
    registered in list order."""
    users = [f"user{i}" for i in range(6)]
    pool = [f"label{i}" for i in range(rng.randint(1, 12))]
    start = datetime(2026, 1, 1, tzinfo=UTC)
    episodes = []
    for e in range(count):
        steps = rng.randint(0, 12)
        by_user: dict[str, dict[int, frozenset[str]]] = {}
        truth = [frozenset(rng.sample(pool, rng.randint(1, min(3, len(pool))))) if rng.random() < 0.4 else frozenset()
                 for _ in range(steps + 1)]  # fmt: skip
        for user in rng.sample(users, rng.randint(1, 5)):
            given = {}
            for step in range(steps + (rng.random() < 0.1)):  # now and then a label past the last step
                value = truth[step] if rng.random() < 0.7 else frozenset(rng.sample(pool, rng.randint(0, len(pool))))
                if value:
                    given[step] = value
            by_user[user] = given
        episodes.append(EpisodeLabels(f"ep{rng.getrandbits(32):08x}", steps, by_user, start + timedelta(seconds=e)))
    return episodes


def figures(report: AgreementReport) -> dict:
    """The report with its floats rounded away, to compare two reports to 1e-9 field by field."""
    out = report.to_json()
    floats = {"alpha": out.pop("alpha")}
    for i, row in enumerate(out["labels"]):
        floats[f"label {i}"] = row.pop("alpha")
    for i, row in enumerate(out["pairs"]):
        floats[f"pair {i}"] = row.pop("kappa")
    return {"floats": floats, "rest": out}


def assert_same_report(ours: AgreementReport, theirs: AgreementReport) -> None:
    a, b = figures(ours), figures(theirs)
    assert a["rest"] == b["rest"]
    assert a["floats"].keys() == b["floats"].keys()
    for name, value in a["floats"].items():
        assert same(value, b["floats"][name]), (name, value, b["floats"][name])


@pytest.mark.parametrize("seed", range(25))
def test_streamed_report_is_the_libraries_on_random_labels(seed: int, monkeypatch) -> None:
    monkeypatch.setattr(agreement._Tally, "FOLD", 1 + seed % 3)  # distinct units folded in as they come too
    rng = random.Random(seed)
    episodes = random_episodes(rng, rng.randint(0, 40))
    expected = reference("s", episodes)
    shuffled = rng.sample(episodes, len(episodes))  # the store streams in id order: the report must not care
    assert_same_report(agreement.compute("s", shuffled, limit=10**6), expected)
    capped = agreement.compute("s", shuffled, limit=5)
    assert capped.disagreements == expected.disagreements[:5] and capped.disputed == expected.disputed


def test_disagreements_beyond_the_cap_are_counted_not_listed() -> None:
    episodes = random_episodes(random.Random(3), 60)
    expected = reference("s", episodes)
    assert expected.disputed > 40
    report = agreement.compute("s", episodes, limit=40)
    assert len(report.disagreements) == 40 and report.disputed == expected.disputed
    assert report.disagreements == expected.disagreements[:40]  # the first in registration and step order
    assert report.disagreements_title == f"40 of {expected.disputed}"
    assert report.to_json()["disputed"] == expected.disputed
    assert agreement.compute("s", episodes, limit=10**6).disagreements_title == str(expected.disputed)


def test_the_store_caps_disagreements_and_counts_them_all(repo: Repository, monkeypatch) -> None:
    study_id, episode_id = _labelled_study(repo)
    agreement.adjudicate(repo, episode_id, 21, ["no"], "lead")
    monkeypatch.setattr(agreement, "MAX_DISAGREEMENTS", 3)
    report = agreement.study_agreement(repo, study_id)
    assert (len(report.disagreements), report.disputed) == (3, 15)
    # The open ones are listed first: the adjudicated step 21 makes room for step 23.
    assert [(d.step_index, d.consensus) for d in report.disagreements] == [(20, None), (22, None), (23, None)]
    assert report.disagreements_title == "3 of 15"
    for step in (20, 22, 23):  # adjudicating what is listed brings the next open steps into the list
        agreement.adjudicate(repo, episode_id, step, ["no"], "lead")
    assert [d.step_index for d in agreement.study_agreement(repo, study_id).disagreements] == [24, 25, 26]
    monkeypatch.setattr(agreement, "MAX_DISAGREEMENTS", 100)  # room for all: every one, in place order
    listed = agreement.study_agreement(repo, study_id).disagreements
    assert [d.step_index for d in listed] == list(range(20, 35))
    assert [d.step_index for d in listed if d.consensus == ["no"]] == [20, 21, 22, 23]


def _random_study(repo: Repository, rng: random.Random) -> tuple[str, list[EpisodeLabels]]:
    """Seven episodes done by two or three of four annotators (one by a single one), with random labels."""
    now = datetime.now(UTC)
    study = repo.create_study(study_spec(), "lead")
    session = repo.create_session(study.id, "lead")
    queue.set_queue(repo, QueueConfig(study.id, overlap=3), "lead")
    made = []
    for e, (steps, users) in enumerate([(4, 2), (0, 2), (6, 3), (3, 2), (5, 1), (2, 3), (7, 2)]):
        episode = repo.add_episode(env_episode(study.id, session, num_steps=steps))
        by_user: dict[str, dict[int, frozenset[str]]] = {}
        for user in ["ann", "bea", "cid", "dan"][e % 2 : e % 2 + users]:
            given: dict[int, set[str]] = {}
            for step in range(steps + 1):
                for label in rng.sample(["a", "b", "c"], rng.choice([0, 0, 1, 2])):
                    queue.set_step_label(repo, episode.id, user, step, label)
                    given.setdefault(step, set()).add(label)
            with Session(repo.engine) as s, s.begin():  # the queue's own order would pick other episodes
                s.add(QueueAssignmentRow(study_id=study.id, episode_id=episode.id, user=user, slot=len(by_user),
                                         state="done", assigned_time=now, done_time=now))  # fmt: skip
            by_user[user] = {k: frozenset(v) for k, v in given.items()}
        made.append(EpisodeLabels(episode.id, steps + 1, by_user))
    return study.id, made


def test_the_store_streams_in_batches_with_the_same_figures(repo: Repository, monkeypatch) -> None:
    study_id, episodes = _random_study(repo, random.Random(5))
    whole = agreement.study_agreement(repo, study_id)
    assert_same_report(whole, reference(study_id, episodes))  # registration order: the order made
    assert whole.episodes == 6 and whole.disputed > 0
    seen: list[int] = []
    real = queue.done_labels

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        for episode in real(*args, **kwargs):
            seen.append(len(episode.by_user))
            yield episode

    monkeypatch.setattr(queue, "LABEL_BATCH", 2)
    monkeypatch.setattr(agreement, "done_labels", counted)
    batched = agreement.study_agreement(repo, study_id)
    assert_same_report(batched, whole)
    assert sorted(seen) == [2, 2, 2, 2, 3, 3]  # only episodes of two or more annotators are read
    ids = [e.episode_id for e in real(repo, study_id)]
    assert ids == sorted(e.episode_id for e in episodes)  # id order, every done episode, across batches
    assert Counter(len(e.by_user) for e in real(repo, study_id, least=3)) == {3: 2}

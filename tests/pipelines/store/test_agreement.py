"""Agreement figures checked against worked examples from the literature, through the store and alone."""

from __future__ import annotations

import pytest

from pipelines.store import Repository, agreement, queue
from pipelines.store.queue import EpisodeLabels, QueueConfig
from protos.rlds_creator import client_pb2
from tests.pipelines.store.conftest import env_episode, study_spec

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

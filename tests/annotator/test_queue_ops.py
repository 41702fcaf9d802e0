"""The team pages' store functions (annotator/queue_ops.py): which study a page opens on, which studies hand out
episodes, and the fingerprint that tells the Quality page to draw itself again."""

from __future__ import annotations

import pytest

from annotator import queue_ops
from annotator.operations import Operations, ref_of
from pipelines.store import agreement, queue
from pipelines.store.queue import QueueConfig
from tests.annotator.annotator_data import ALICE, BOB, build_env_data, procgen_study_spec

CAROL = "carol@example.com"


@pytest.fixture
def team(tmp_path):
    env = build_env_data(tmp_path, episodes=2, max_steps=6)
    spec = procgen_study_spec()
    spec.name = "Second study"
    second = env.repo.create_study(spec, BOB)
    return env, second


def ops_for(env, user: str) -> Operations:
    return Operations(env.repo, env.data_dir, user)


def test_only_a_queue_someone_set_hands_out_episodes(team):
    env, second = team
    alice = ops_for(env, ALICE)
    assert queue_ops.queued_studies(alice, [env.study.id, second.id]) == set()
    assert queue_ops.take_next(alice, env.study.id) is None  # the store's implicit overlap-1 queue: refused
    assert queue.assignments(env.repo, env.study.id) == []
    queue.set_queue(env.repo, QueueConfig(env.study.id, overlap=1), ALICE)
    assert queue_ops.queued_studies(alice, [env.study.id, second.id]) == {env.study.id}
    assert queue_ops.take_next(alice, env.study.id) is not None
    assert [a.user for a in queue.assignments(env.repo, env.study.id)] == [ALICE]


def test_a_page_opens_on_the_study_last_worked_on(team):
    env, second = team
    ids = [env.study.id, second.id]
    carol = ops_for(env, CAROL)
    # Nothing done yet: the first study (no queue anywhere), then the first study with a queue.
    assert queue_ops.default_study(carol, ids) == env.study.id
    queue.set_queue(env.repo, QueueConfig(second.id, overlap=2), BOB)
    assert queue_ops.default_study(carol, ids) == second.id
    # Her newest change names the study: a tag in the first one.
    env.repo.add_step_tag(ref_of(env.episodes[0]), 1, "jump", CAROL)
    assert queue_ops.last_study(carol, ids) == env.study.id
    assert queue_ops.default_study(carol, ids) == env.study.id
    # Bob's changes are his own.
    assert queue_ops.last_study(ops_for(env, BOB), ids) == second.id  # he set the queue there
    # An episode Alice holds in a queue wins for the Label page, whatever she touched since.
    alice = ops_for(env, ALICE)
    queue.set_queue(env.repo, QueueConfig(env.study.id, overlap=2), ALICE)
    held = queue.next_episode(env.repo, env.study.id, ALICE)
    queue.set_step_label(env.repo, held.episode_id, ALICE, 1, "x")
    spec = procgen_study_spec()
    spec.name = "Third study"
    other = env.repo.create_study(spec, ALICE)  # her newest change: another study
    ids = [*ids, other.id]
    assert queue_ops.last_study(alice, ids) == other.id
    assert queue_ops.default_study(alice, ids, holding=True) == env.study.id
    queue.mark_done(env.repo, held.episode_id, ALICE, snapshot=False)
    assert queue_ops.last_study(alice, [second.id], holding=True) is None  # nothing of hers there


def test_activity_changes_with_what_the_quality_page_shows(team):
    env, _ = team
    alice = ops_for(env, ALICE)
    queue.set_queue(env.repo, QueueConfig(env.study.id, overlap=2), ALICE)
    seen = [queue_ops.activity(alice, env.study.id)]

    def changed() -> bool:
        seen.append(queue_ops.activity(alice, env.study.id))
        return seen[-1] != seen[-2]

    a = queue.next_episode(env.repo, env.study.id, ALICE)
    assert changed()
    queue.set_step_label(env.repo, a.episode_id, ALICE, 1, "jump")
    assert not changed()  # labels in progress count for nothing yet
    queue.mark_done(env.repo, a.episode_id, ALICE, snapshot=False)
    assert changed()
    b = queue.next_episode(env.repo, env.study.id, BOB)
    assert changed()
    assert queue.release(env.repo, b.episode_id, BOB)
    assert changed()
    agreement.adjudicate(env.repo, a.episode_id, 1, ["jump"], ALICE)
    assert changed()
    queue.set_queue(env.repo, QueueConfig(env.study.id, overlap=3), ALICE)
    assert changed()


def test_activity_reads_the_adjudications_not_the_study(team):
    """The fingerprint runs on every rerun of the team pages (and their follow fragment): it starts from the
    study's few adjudications, each one's episode looked up by key. A join from the study's episodes let SQLite
    walk a 1M-episode study on every rerun (0.2-0.4 s); only an adjudication of this study counts."""
    import sqlalchemy as sa

    env, second = team
    alice = ops_for(env, ALICE)
    statements: list[str] = []

    def capture(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        statements.append(" ".join(statement.split()))

    sa.event.listen(env.repo.engine, "before_cursor_execute", capture)
    try:
        before = queue_ops.activity(alice, second.id)
    finally:
        sa.event.remove(env.repo.engine, "before_cursor_execute", capture)
    adjudications = [s for s in statements if "FROM adjudications" in s]
    assert adjudications and not any("JOIN episodes" in s for s in adjudications), adjudications
    agreement.adjudicate(env.repo, env.episodes[0].id, 1, ["jump"], ALICE)  # an episode of the other study
    assert queue_ops.activity(alice, second.id) == before
    assert queue_ops.activity(alice, env.study.id)[1][0] == 1


def test_the_quality_summaries_are_made_once_per_change_of_the_store(team):
    """The Quality page reruns on every click and whenever the team moves: its summaries (seconds at a million
    episodes) are remembered until the store changes, and made again at once when it does."""
    env, _ = team
    env.repo._summaries._max_age = 3600.0  # only a change of the store may make them again here
    alice = ops_for(env, ALICE)
    first = queue_ops.quality(alice, env.study.id)
    assert queue_ops.quality(ops_for(env, BOB), env.study.id) is first  # nothing changed: the same figures
    assert first.stats.tags_by_label.get("jump", 0) == 0 and first.plots
    env.repo.add_step_tag(ref_of(env.episodes[0]), 1, "jump", CAROL)
    again = queue_ops.quality(alice, env.study.id)
    assert again is not first and again.stats.tags_by_label["jump"] == 1
    queue.set_queue(env.repo, QueueConfig(env.study.id, overlap=2), ALICE)  # a queue change moves them too
    held = queue.next_episode(env.repo, env.study.id, ALICE)
    assert held is not None
    assert queue_ops.quality(alice, env.study.id).stats.queue.slots_total == 4


def test_the_quality_summaries_of_a_study_outlive_changes_in_other_studies(team):
    """With annotators busy in several studies, a quiet study's Quality page (7-9 s to make at a million
    episodes) is not made again after every click elsewhere: its summaries follow its own changes only."""
    from annotator.recorder import record_batch
    from tests.annotator.annotator_data import ENV_ID

    env, second = team
    env.repo._summaries._max_age = 3600.0  # only a change of the study may make them again here
    alice = ops_for(env, ALICE)
    first = queue_ops.quality(alice, env.study.id)
    (recorded,) = record_batch(env.repo, env.data_dir, second.id, ENV_ID, 1, "random", user=BOB, seed=4,
                               progress=False)  # fmt: skip
    env.repo.add_step_tag(ref_of(recorded), 1, "jump", BOB)
    queue.set_queue(env.repo, QueueConfig(second.id, overlap=2), BOB)
    assert queue_ops.quality(alice, env.study.id) is first  # the other study moved, this one did not
    assert queue_ops.quality(alice, second.id).stats.tags_by_label["jump"] == 1
    env.repo.add_step_tag(ref_of(env.episodes[0]), 1, "jump", CAROL)
    again = queue_ops.quality(alice, env.study.id)
    assert again is not first and again.stats.tags_by_label["jump"] == 1

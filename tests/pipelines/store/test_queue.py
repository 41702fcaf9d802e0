"""The work queue: overlap, filters, done/release, progress, and concurrent takers (SQLite and PostgreSQL)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipelines.store import NotFound, PermissionDenied, Repository, StoreError, open_store, queue
from pipelines.store.database import WRITE
from pipelines.store.models import QueueAssignmentRow
from pipelines.store.queue import QueueConfig
from protos.rlds_creator import study_pb2
from tests.pipelines.store.conftest import env_episode, study_spec


def _study_with_episodes(repo: Repository, n: int, creator: str = "lead") -> tuple[str, list[str]]:
    # A creator's study names are unique (schema version 4): one name per study made here.
    taken = {s.name for s in repo.list_studies(creator=creator)}
    name = next(f"Maze study {i}" for i in range(1, 1000) if f"Maze study {i}" not in taken)
    study = repo.create_study(study_spec(name), creator)
    session = repo.create_session(study.id, creator)
    ids = []
    for i in range(n):
        episode = env_episode(study.id, session, "maze" if i % 2 == 0 else "pong", num_steps=5)
        ids.append(repo.add_episode(episode).id)
    return study.id, ids


def test_overlap_spreads_episodes_and_each_user_labels_an_episode_once(repo: Repository) -> None:
    study_id, ids = _study_with_episodes(repo, 3)
    queue.set_queue(repo, QueueConfig(study_id, overlap=2), "lead")

    a = queue.next_episode(repo, study_id, "ann")
    assert a is not None and a.episode_id == ids[0] and a.slot == 0
    # Pressing Next again without finishing returns the same open episode.
    assert queue.next_episode(repo, study_id, "ann") == a
    # The next annotator completes the started episode first.
    b = queue.next_episode(repo, study_id, "bea")
    assert (b.episode_id, b.slot) == (ids[0], 1)
    c = queue.next_episode(repo, study_id, "cid")
    assert c.episode_id == ids[1]
    queue.mark_done(repo, ids[0], "ann")
    a2 = queue.next_episode(repo, study_id, "ann")
    assert a2.episode_id == ids[1]  # never ids[0] again
    queue.mark_done(repo, ids[1], "ann")
    assert queue.next_episode(repo, study_id, "ann").episode_id == ids[2]
    queue.mark_done(repo, ids[2], "ann")
    assert queue.next_episode(repo, study_id, "ann") is None

    progress = queue.progress(repo, study_id)
    assert (progress.episodes, progress.slots_done, progress.slots_total, progress.episodes_complete) == (
        3, 3, 6, 0,
    )  # fmt: skip
    per_episode = [p for p, _ in queue.episode_progress(repo, study_id)]
    assert [p.episode_id for p in per_episode] == ids
    assert [p.done for p in per_episode] == [1, 1, 1]
    assert per_episode[0].open_by == ("bea",)
    queue.mark_done(repo, ids[0], "bea")
    progress = queue.progress(repo, study_id)
    assert (progress.slots_done, progress.episodes_complete) == (4, 1)


def test_filter_done_release_and_rules(repo: Repository) -> None:
    study_id, ids = _study_with_episodes(repo, 4)
    repo.add_episode_tag(repo.ref(repo.list_episodes(study_id=study_id)[3]), "hard", "lead")
    with pytest.raises(PermissionDenied):
        queue.set_queue(repo, QueueConfig(study_id, overlap=2), "ann")
    with pytest.raises(StoreError, match="overlap"):
        queue.set_queue(repo, QueueConfig(study_id, overlap=0), "lead")
    with pytest.raises(StoreError, match="STATE_NOPE"):
        queue.set_queue(repo, QueueConfig(study_id, states=("STATE_NOPE",)), "lead")

    queue.set_queue(repo, QueueConfig(study_id, overlap=1, environment_id="pong"), "lead")
    assert list(p.episode_id for p in queue.iter_episode_progress(repo, study_id)) == [ids[1], ids[3]]
    assert queue.progress(repo, study_id).episodes == 2
    queue.set_queue(repo, QueueConfig(study_id, overlap=1, tag="hard", states=("STATE_COMPLETED",)), "lead")
    assert list(p.episode_id for p in queue.iter_episode_progress(repo, study_id)) == [ids[3]]

    taken = queue.next_episode(repo, study_id, "ann")
    assert taken.episode_id == ids[3]
    assert queue.next_episode(repo, study_id, "bea") is None  # overlap 1: the only episode is taken
    assert queue.release(repo, ids[3], "ann")
    assert not queue.release(repo, ids[3], "ann")
    assert queue.next_episode(repo, study_id, "bea").episode_id == ids[3]
    with pytest.raises(NotFound, match="not in ann's queue"):
        queue.mark_done(repo, ids[3], "ann")

    # Done freezes the episode's step tags at that moment as bea's labels.
    ref = repo.ref(repo.list_episodes(study_id=study_id)[3])
    repo.add_step_tag(ref, 2, "grasp", "bea")
    done = queue.mark_done(repo, ids[3], "bea")
    assert done.state == "done" and done.done_time is not None
    assert queue.mark_done(repo, ids[3], "bea") == done  # idempotent
    repo.add_step_tag(ref, 3, "later", "lead")
    [labels] = queue.done_labels(repo, study_id)
    assert labels.by_user == {"bea": {2: frozenset({"grasp"})}}
    assert labels.num_steps == 6  # 5 transitions + the final observation
    actions = ["step.tag.add", "queue.done", "step.tag.add", "queue.take"]
    assert [e.action for e in repo.audit_log(ref)][:4] == actions
    # Labelling apart from the shared tags: no snapshot, "no label" is the answer.
    queue.set_queue(repo, QueueConfig(study_id, overlap=2, tag="hard"), "lead")
    assert queue.next_episode(repo, study_id, "cid").episode_id == ids[3]
    queue.mark_done(repo, ids[3], "cid", snapshot=False)
    [labels] = queue.done_labels(repo, study_id)
    assert labels.by_user["cid"] == {}


def take_until_empty(url: str | None, data_dir: str, study_id: str, user: str, barrier) -> None:  # noqa: ANN001
    """One annotator pressing Next (and Done) as fast as it can until the queue has nothing left for them."""
    with open_store(url, data_dir) as repo:
        barrier.wait(timeout=60)
        while (assignment := queue.next_episode(repo, study_id, user)) is not None:
            time.sleep(0.001)
            queue.mark_done(repo, assignment.episode_id, user)


@pytest.mark.parametrize("overlap", [2, 3])
def test_concurrent_next_never_exceeds_overlap(
    repo: Repository, store_url: str | None, data_dir: Path, overlap: int
) -> None:
    study_id, ids = _study_with_episodes(repo, 12)
    queue.set_queue(repo, QueueConfig(study_id, overlap=overlap), "lead")
    users = ["ann", "bea", "cid", "dan"]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(users))
    workers = [
        ctx.Process(target=take_until_empty, args=(store_url, str(data_dir), study_id, user, barrier))
        for user in users
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    assert [w.exitcode for w in workers] == [0] * len(users)

    taken = queue.assignments(repo, study_id)
    per_episode = Counter(a.episode_id for a in taken)
    # Every episode reached its overlap and none went beyond it; nobody labelled an episode twice.
    assert per_episode == {i: overlap for i in ids}
    assert len({(a.episode_id, a.user) for a in taken}) == len(taken)
    assert all(a.state == "done" for a in taken)
    assert {a.user for a in taken} <= set(users)
    progress = queue.progress(repo, study_id)
    assert progress.slots_done == progress.slots_total == overlap * len(ids)


def test_episode_of_another_study_is_not_queued(repo: Repository) -> None:
    study_id, _ = _study_with_episodes(repo, 1)
    other_id, other_ids = _study_with_episodes(repo, 1)
    assert queue.next_episode(repo, other_id, "ann").episode_id == other_ids[0]
    assert queue.next_episode(repo, study_id, "ann").episode_id != other_ids[0]
    with pytest.raises(NotFound):
        queue.next_episode(repo, "nope", "ann")
    assert study_pb2.Episode.State.Name(repo.list_episodes(study_id=study_id)[0].state) == "STATE_COMPLETED"


def test_the_database_refuses_a_second_taker_of_a_slot(repo: Repository) -> None:
    """The guarantee does not rest on the code reading free slots: the unique (episode, slot) constraint holds
    even for a writer that bypasses it."""
    study_id, ids = _study_with_episodes(repo, 1)
    taken = queue.next_episode(repo, study_id, "ann")
    row = {"study_id": study_id, "episode_id": ids[0], "user": "bea", "slot": taken.slot, "state": "open",
           "assigned_time": taken.assigned_time}  # fmt: skip
    with pytest.raises(sa.exc.IntegrityError), repo.engine.begin() as conn:
        conn.execute(sa.insert(QueueAssignmentRow.__table__).values(**row))
    assert queue.next_episode(repo, study_id, "bea") is None  # overlap 1, taken


def test_a_taker_racing_an_uncommitted_slot_gets_nothing(repo: Repository) -> None:
    """The race itself: one writer holds the last slot in an open transaction while another presses Next.
    On PostgreSQL the second one reads the slot as free, its insert waits on the unique index and then does
    nothing; on SQLite it waits for the write lock. Either way it ends with no slot, not a second one."""
    study_id, ids = _study_with_episodes(repo, 1)
    row = {"study_id": study_id, "episode_id": ids[0], "user": "ann", "slot": 0, "state": "open",
           "assigned_time": datetime.now(UTC)}  # fmt: skip
    result: list[object] = []
    with repo.engine.execution_options(**{WRITE: True}).connect() as conn:
        transaction = conn.begin()
        conn.execute(sa.insert(QueueAssignmentRow.__table__).values(**row))
        racer = threading.Thread(target=lambda: result.append(queue.next_episode(repo, study_id, "bea")))
        racer.start()
        racer.join(timeout=0.5)  # let it reach the insert (PostgreSQL) or the lock (SQLite)
        transaction.commit()
    racer.join(timeout=60)
    assert result == [None]
    assert [(a.user, a.slot) for a in queue.assignments(repo, study_id)] == [("ann", 0)]


def test_progress_pages_and_totals_follow_the_filter_and_the_overlap(repo: Repository) -> None:
    """Totals come from aggregates and per-episode rows a page at a time; lowering the overlap after work
    was done counts at most `overlap` labellings per episode."""
    study_id, ids = _study_with_episodes(repo, 7)
    queue.set_queue(repo, QueueConfig(study_id, overlap=2), "lead")
    for user in ("ann", "bea"):
        for _ in range(3):
            a = queue.next_episode(repo, study_id, user)
            queue.mark_done(repo, a.episode_id, user)
    progress = queue.progress(repo, study_id)
    assert (progress.episodes, progress.slots_done, progress.episodes_complete) == (7, 6, 3)
    pages, after = [], None
    while page := queue.episode_progress(repo, study_id, after, 3):
        pages.append([p.episode_id for p, _ in page])
        after = page[-1][1]
    assert [len(p) for p in pages] == [3, 3, 1] and sum(pages, []) == ids
    assert [p.done for p in queue.iter_episode_progress(repo, study_id, batch=2)] == [2, 2, 2, 0, 0, 0, 0]
    queue.set_queue(repo, QueueConfig(study_id, overlap=1, environment_id="maze"), "lead")
    progress = queue.progress(repo, study_id)  # maze: ids 0, 2, 4, 6; ids 0 and 2 done twice
    assert (progress.episodes, progress.slots_done, progress.episodes_complete) == (4, 2, 2)

"""Two processes annotating the same episode at once lose nothing (SQLite file and PostgreSQL)."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from pipelines.store import Repository, open_store
from protos.rlds_creator import client_pb2
from tests.pipelines.store.conftest import env_episode, study_spec

EDITS = 50


def annotate(url: str | None, data_dir: str, ref_bytes: bytes, name: str, barrier) -> None:  # noqa: ANN001
    """One annotator: 50 step tags, 50 episode tags and 50 note edits on the same episode, each its own write."""
    ref = client_pb2.EpisodeRef.FromString(ref_bytes)
    with open_store(url, data_dir) as repo:
        barrier.wait(timeout=60)
        for i in range(EDITS):
            assert repo.add_step_tag(ref, i, f"{name}-{i}", name)
            assert repo.add_episode_tag(ref, f"{name}-{i}", name)
            assert repo.set_notes(ref, f"{name} edit {i}", name)
            # Pause between edits so the other writer gets the lock now and then (SQLite's busy handler
            # backs off, so a writer that never pauses tends to finish alone): the edits interleave.
            time.sleep(0.003)


def test_two_writer_processes_lose_nothing(repo: Repository, store_url: str | None, data_dir: Path) -> None:
    study = repo.create_study(study_spec(), "alice")
    session = repo.create_session(study.id, "alice")
    episode = repo.add_episode(env_episode(study.id, session, num_steps=EDITS))
    ref = Repository.ref(episode)

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    workers = [
        ctx.Process(target=annotate, args=(store_url, str(data_dir), ref.SerializeToString(), name, barrier))
        for name in ("ann", "bea")
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    assert [w.exitcode for w in workers] == [0, 0]

    got = repo.get_episode(ref)
    step_labels = {(i, t.label) for i, meta in got.step_metadata.items() for t in meta.tags}
    assert step_labels == {(i, f"{n}-{i}") for n in ("ann", "bea") for i in range(EDITS)}
    assert {t.label for t in got.tags} == {f"{n}-{i}" for n in ("ann", "bea") for i in range(EDITS)}

    # Every note edit was a read-modify-write under a lock: the history is one unbroken chain.
    notes = [e for e in reversed(repo.audit_log(ref)) if e.action == "episode.notes"]
    assert len(notes) == 2 * EDITS
    assert notes[0].before == {"notes": ""}
    for previous, entry in zip(notes, notes[1:], strict=False):
        assert entry.before == previous.after
    assert got.notes == notes[-1].after["notes"]
    assert {e.user for e in notes} == {"ann", "bea"}

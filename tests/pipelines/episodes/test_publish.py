"""Atomic registration and recovery of leftovers (the SIGKILL cases run in tests/annotator/test_recorder.py)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import PurePosixPath

import pytest

from annotator.envs import registry
from annotator.envs.render import encode_jpeg
from pipelines.episodes import EnvSpecs, create_writer, layout, open_episode, publish
from pipelines.errors import StepmarkError
from pipelines.store import StudyDisabled
from protos.rlds_creator import client_pb2, study_pb2
from tests.pipelines.episodes.helpers import CREATOR, USER, make_study, new_store, procgen_spec
from tests.pipelines.episodes.test_envlogger_store import META, record_episode

State = study_pb2.Episode.State


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def setup(tmp_path):
    repo = new_store(tmp_path)
    study = make_study(repo)
    session = repo.create_session(study.id, USER)
    yield repo, tmp_path, study, session
    repo.close()


def written_episode(data, study, session, episode_id: str, pid: int | None = None):
    """A closed envlogger episode in its temp folder, and the Episode proto the recorder would register."""
    paths = layout.episode_paths(data, study.id, session.id, "maze", episode_id, pid=pid)
    written = record_episode(paths.temp, n=6)
    episode = study_pb2.Episode(
        id=episode_id, study_id=study.id, session_id=session.id, environment_id="maze",
        user=study_pb2.User(email=USER), state=State.STATE_COMPLETED, num_steps=len(written["actions"]),
    )  # fmt: skip
    episode.storage.environment_logger.tag_directory = str(paths.relative)
    return paths, episode


def test_publish_renames_then_registers_then_confirms(setup):
    repo, data, study, session = setup
    paths, episode = written_episode(data, study, session, "e1")
    registered = publish.publish(repo, paths, episode)
    assert registered.id == "e1" and not paths.temp.exists()
    assert (paths.final / layout.EPISODE_FILE).is_file()
    body = json.loads((paths.final / layout.EPISODE_FILE).read_text())
    assert body["episode"]["id"] == "e1"
    with open_episode(repo.get_episode(repo.ref(registered)), data) as reader:
        assert len(reader) == episode.num_steps + 1


def test_publish_refused_by_the_store_deletes_the_files(setup):
    repo, data, study, session = setup
    paths, episode = written_episode(data, study, session, "e2")
    repo.enable_study(study.id, False, CREATOR)
    with pytest.raises(StudyDisabled):
        publish.publish(repo, paths, episode)
    assert not paths.temp.exists() and not paths.final.exists()


def test_recovery_leaves_live_recorders_alone_and_keeps_dead_broken_ones(setup):
    repo, data, study, session = setup
    live, _ = written_episode(data, study, session, "live")  # this process: a recorder still running
    dead = layout.episode_paths(data, study.id, session.id, "maze", "dead", pid=dead_pid())
    dead.temp.mkdir(parents=True)
    (dead.temp / "metadata.riegeli").write_bytes(b"half written")
    # Without a started marker, a young folder may be a recorder's (on another host) about to write it.
    report = publish.recover_abandoned(repo, data)
    assert sorted(report.live) == sorted([live.temp, dead.temp]) and report.quarantined == []
    old = time.time() - publish.NO_MARKER_GRACE - 1
    os.utime(dead.temp, (old, old))
    report = publish.recover_abandoned(repo, data)
    assert report.deleted == [] and not dead.temp.exists()  # never deleted unregistered: quarantined instead
    assert report.live == [live.temp] and live.temp.exists()
    [(folder, moved, why)] = report.quarantined
    assert folder == dead.temp and "no episode marker" in why
    assert (moved / "metadata.riegeli").read_bytes() == b"half written"
    assert moved == data / layout.QUARANTINE_DIR / "~".join(dead.temp.parts[-4:])
    assert repo.list_episodes(study_id=study.id) == []


def reset_only(folder) -> None:
    env = registry.create(procgen_spec(max_steps=5), seed=0)
    writer = create_writer("envlogger", folder, PurePosixPath("s/se/maze/reset-only"),
                           EnvSpecs(env.observation_spec(), env.action_spec()))  # fmt: skip
    first = env.reset()
    writer.write_first(first.observation, image=encode_jpeg(env.render()), info=first.info)
    writer.close(META)
    env.close()


def test_recovery_deletes_dead_recordings_that_hold_no_step(setup):
    """kill -9 of `record` before its first step reached a file left `<id>.tmp-PID/` with only its started
    marker, kept "for inspection" forever: such folders (and those whose files hold no transition, which the
    recorder drops itself) are now deleted by the next recovery; one with steps is registered ABANDONED."""
    repo, data, study, session = setup
    pid = dead_pid()
    marker_only = layout.episode_paths(data, study.id, session.id, "maze", "marker-only", pid=pid)
    marker_only.temp.mkdir(parents=True)
    started = study_pb2.Episode(id="marker-only", study_id=study.id, session_id=session.id, environment_id="maze",
                                user=study_pb2.User(email=USER))  # fmt: skip
    started.storage.environment_logger.tag_directory = str(marker_only.relative)
    publish.write_started(marker_only.temp, started)
    no_transition = layout.episode_paths(data, study.id, session.id, "maze", "reset-only", pid=pid)
    reset_only(no_transition.temp)  # an envlogger folder of the reset observation only
    episode = study_pb2.Episode()
    episode.CopyFrom(started)
    episode.id = "reset-only"
    episode.storage.environment_logger.tag_directory = str(no_transition.relative)
    publish.write_started(no_transition.temp, episode)
    kept, kept_episode = written_episode(data, study, session, "with-steps", pid=pid)
    kept_episode.ClearField("state")
    publish.write_started(kept.temp, kept_episode)
    report = publish.recover_abandoned(repo, data)
    assert sorted(report.deleted) == sorted([marker_only.temp, no_transition.temp]), report
    assert not marker_only.temp.exists() and not no_transition.temp.exists()
    assert [e.id for e in report.registered] == ["with-steps"] and report.skipped == []
    assert layout.temp_folders(data) == []
    assert [e.state for e in repo.list_episodes(study_id=study.id)] == [State.STATE_ABANDONED]


def test_recovery_registers_an_interrupted_recording_from_its_started_marker(setup):
    """Killed mid-episode (no pending marker), files closed by the writer child: ABANDONED with its steps."""
    repo, data, study, session = setup
    pid = dead_pid()
    paths, episode = written_episode(data, study, session, "cut", pid=pid)
    started = study_pb2.Episode()
    started.CopyFrom(episode)
    started.ClearField("state")
    started.ClearField("num_steps")
    publish.write_started(paths.temp, started)
    report = publish.recover_abandoned(repo, data)
    [got] = report.registered
    assert got.id == "cut" and got.state == State.STATE_ABANDONED and got.num_steps == episode.num_steps
    assert got.metadata["interrupted"] is True and got.metadata["recovered"] is True
    assert not paths.temp.exists() and (paths.final / layout.EPISODE_FILE).is_file()
    assert not (paths.final / publish.STARTED_FILE).exists()
    with open_episode(got, data) as reader:
        assert len(reader) == episode.num_steps + 1


def test_recovery_of_complete_temp_folder_and_of_already_registered(setup):
    repo, data, study, session = setup
    pid = dead_pid()
    # Killed after the marker was written but before the rename.
    paths, episode = written_episode(data, study, session, "closed", pid=pid)
    publish.write_pending(paths.temp, episode)
    _rewrite_pid(paths.temp, pid)
    # Killed after registration but before the marker was confirmed.
    paths2, episode2 = written_episode(data, study, session, "registered", pid=pid)
    publish.write_pending(paths2.temp, episode2)
    _rewrite_pid(paths2.temp, pid)
    paths2.temp.rename(paths2.final)
    repo.add_episode(episode2)

    report = publish.recover_abandoned(repo, data)
    assert [e.id for e in report.registered] == ["closed"] and report.confirmed == [paths2.final]
    got = repo.get_episode(client_pb2.EpisodeRef(study_id=study.id, episode_id="closed"))
    assert got.state == State.STATE_ABANDONED and got.metadata["intended_state"] == "STATE_COMPLETED"
    assert repo.get_episode(repo.ref(episode2)).state == State.STATE_COMPLETED  # untouched
    assert (paths.final / layout.EPISODE_FILE).is_file() and not layout.temp_folders(data)


def test_recovery_keeps_a_pending_episode_whose_files_are_unreadable(setup):
    repo, data, study, session = setup
    paths, episode = written_episode(data, study, session, "gone", pid=dead_pid())
    publish.write_pending(paths.temp, episode)
    _rewrite_pid(paths.temp, dead_pid())
    paths.temp.rename(paths.final)
    for riegeli in paths.final.rglob("steps.riegeli"):
        riegeli.write_bytes(b"")
    (paths.final / "metadata.riegeli").write_bytes(b"corrupt")
    report = publish.recover_abandoned(repo, data)
    assert report.deleted == [] and report.registered == [] and report.skipped == []
    [(folder, moved, why)] = report.quarantined
    assert (folder, why) == (paths.final, "its files cannot be read") and not paths.final.exists()
    assert (moved / "metadata.riegeli").read_bytes() == b"corrupt"


def test_unreadable_marker_is_reported_not_fatal(setup):
    repo, data, study, session = setup
    folder = data / study.id / session.id / "maze" / "x"
    folder.mkdir(parents=True)
    (folder / layout.PENDING_FILE).write_text("{not json")
    report = publish.recover_abandoned(repo, data)
    [(path, moved, reason)] = report.quarantined
    assert path == folder and "unreadable registration marker" in reason
    assert (moved / layout.PENDING_FILE).read_text() == "{not json"


def test_layout_components_are_safe():
    paths = layout.episode_paths("/d", "st/../udy", "se ss", "env:1", "e1", pid=42)
    assert paths.relative == PurePosixPath("st_.._udy/se_ss/env_1/e1")
    assert paths.temp.name == "e1.tmp-42" and layout.temp_pid(paths.temp) == 42
    assert layout.final_name(paths.temp) == "e1"
    for bad in ("", "..", "."):
        with pytest.raises(StepmarkError):
            layout.episode_paths("/d", "s", "s", "e", bad)
    assert layout.resolve("/d", "a/b") == layout.Path("/d/a/b")
    assert layout.resolve("/d", "/abs/x") == layout.Path("/abs/x")


def _rewrite_pid(folder, pid: int) -> None:
    path = folder / layout.PENDING_FILE
    body = json.loads(path.read_text())
    body["pid"] = pid
    path.write_text(json.dumps(body))


def test_one_recovery_at_a_time_per_data_directory(setup):
    """Two commands started together must not both salvage one folder: the second finds the lock taken
    and leaves the work to the first (flock: another open of the file conflicts, in this process too)."""
    repo, data, study, session = setup
    paths, episode = written_episode(data, study, session, "cut", pid=dead_pid())
    episode.ClearField("state")
    publish.write_started(paths.temp, episode)
    lock = data / layout.RECORDING_DIR / ".lock"
    with lock.open("a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        assert publish.recover_recorded(repo, data) == publish.RecoveryReport()
        assert publish.recover_abandoned(repo, data) == publish.RecoveryReport()
        assert paths.temp.is_dir()
    [got] = publish.recover_abandoned(repo, data).registered  # the index entry names this process: full walk
    assert got.id == "cut" and not paths.temp.exists()

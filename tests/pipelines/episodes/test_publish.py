"""Atomic registration and recovery of leftovers (the SIGKILL cases run in tests/annotator/test_recorder.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import PurePosixPath

import pytest

from pipelines.episodes import layout, open_episode, publish
from pipelines.errors import StepmarkError
from pipelines.store import StudyDisabled
from protos.rlds_creator import client_pb2, study_pb2
from tests.pipelines.episodes.helpers import CREATOR, USER, make_study, new_store
from tests.pipelines.episodes.test_envlogger_store import record_episode

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


def test_recovery_leaves_live_recorders_alone_and_deletes_dead_broken_ones(setup):
    repo, data, study, session = setup
    live, _ = written_episode(data, study, session, "live")  # this process: a recorder still running
    dead = layout.episode_paths(data, study.id, session.id, "maze", "dead", pid=dead_pid())
    dead.temp.mkdir(parents=True)
    (dead.temp / "metadata.riegeli").write_bytes(b"half written")
    report = publish.recover_abandoned(repo, data)
    assert report.deleted == [dead.temp] and not dead.temp.exists()
    assert [p for p, _ in report.skipped] == [live.temp] and live.temp.exists()
    assert repo.list_episodes(study_id=study.id) == []


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


def test_recovery_deletes_pending_episode_whose_files_are_unreadable(setup):
    repo, data, study, session = setup
    paths, episode = written_episode(data, study, session, "gone", pid=dead_pid())
    publish.write_pending(paths.temp, episode)
    _rewrite_pid(paths.temp, dead_pid())
    paths.temp.rename(paths.final)
    for riegeli in paths.final.rglob("steps.riegeli"):
        riegeli.write_bytes(b"")
    (paths.final / "metadata.riegeli").write_bytes(b"corrupt")
    report = publish.recover_abandoned(repo, data)
    assert report.deleted == [paths.final] and report.registered == []
    assert not paths.final.exists()


def test_unreadable_marker_is_reported_not_fatal(setup):
    repo, data, study, session = setup
    folder = data / study.id / session.id / "maze" / "x"
    folder.mkdir(parents=True)
    (folder / layout.PENDING_FILE).write_text("{not json")
    report = publish.recover_abandoned(repo, data)
    [(path, reason)] = report.skipped
    assert path == folder and "unreadable registration marker" in reason


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

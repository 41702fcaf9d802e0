"""`stepmark record`: batch recording from the command line into a real data directory."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from pipelines.episodes import layout, open_episode, stats
from protos.rlds_creator import study_pb2
from stepmark.cli import main
from tests.conftest import REPO_ROOT
from tests.pipelines.episodes.helpers import make_study, new_store, procgen_spec


def test_record_prints_a_summary_and_registers_completed_episodes(tmp_path, capsys):
    with new_store(tmp_path) as repo:
        study = make_study(repo, procgen_spec(max_steps=12))
    code = main(
        ["record", "--data", str(tmp_path), "--study", study.id, "--env", "maze", "--episodes", "2",
         "--seed", "5", "--user", "cli@example.com", "--no-progress"]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert f"recorded 2 episode(s) of 'maze' in study '{study.id}' as cli@example.com" in out
    rows = re.findall(r"^([0-9a-f]{32})\s+(\d+)\s+(\S+)\s+(true|false)\s+(\S+)$", out, re.M)
    assert len(rows) == 2
    with new_store(tmp_path) as repo:
        episodes = {e.id: e for e in repo.list_episodes(study_id=study.id)}
        assert set(episodes) == {r[0] for r in rows}
        for episode_id, steps, ret, success, rel in rows:
            e = episodes[episode_id]
            figures = stats.stats_of_episode(e)
            assert e.state == study_pb2.Episode.STATE_COMPLETED and e.user.email == "cli@example.com"
            assert (int(steps), float(ret), success == "true") == (figures.l, figures.r, figures.s)
            assert rel == e.storage.environment_logger.tag_directory and (tmp_path / rel).is_dir()
            with open_episode(e, tmp_path) as reader:
                assert len(reader) == figures.l + 1
    assert f"files under {tmp_path}" in out


def test_record_pickle_with_step_cap_and_default_user(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("USER", "loginname")
    monkeypatch.setattr("stepmark.cli.default_user", lambda: "loginname")
    with new_store(tmp_path) as repo:
        study = make_study(repo, procgen_spec(max_steps=0))
    code = main(
        ["record", "--data", str(tmp_path), "--study", study.id, "--env", "maze", "--policy", "noop",
         "--max-steps", "4", "--storage", "pickle", "--no-progress"]
    )  # fmt: skip
    assert code == 0
    with new_store(tmp_path) as repo:
        [episode] = repo.list_episodes(study_id=study.id)
    assert episode.user.email == "loginname" and episode.num_steps == 4
    assert episode.storage.pickle.path.endswith("episode.pkl")


def test_record_errors_are_one_line(tmp_path, capsys):
    with new_store(tmp_path) as repo:
        study = make_study(repo, procgen_spec())
    assert main(["record", "--data", str(tmp_path), "--study", "nope", "--env", "maze"]) == 2
    assert capsys.readouterr().err.strip() == "stepmark record: error: study 'nope' not found"
    assert main(["record", "--data", str(tmp_path), "--study", study.id, "--env", "x", "--no-progress"]) == 2
    assert "has no environment 'x'" in capsys.readouterr().err
    assert (
        main(["record", "--data", str(tmp_path), "--study", study.id, "--env", "maze", "--episodes", "0"])
        == 2
    )
    assert "--episodes must be >= 1" in capsys.readouterr().err


def test_record_refuses_a_disabled_study_and_an_unusable_data_dir_before_starting(tmp_path, capsys):
    with new_store(tmp_path) as repo:
        study = make_study(repo, procgen_spec())
        repo.enable_study(study.id, False, study.creator.email)
    argv = ["record", "--data", str(tmp_path), "--study", study.id, "--env", "maze"]
    assert main(argv) == 2  # progress bar on: it must not show for a run that cannot start
    assert capsys.readouterr().err.strip() == (
        f"stepmark record: error: study {study.id!r} is disabled: it takes no new episodes"
    )
    with new_store(tmp_path) as repo:
        assert repo.list_episodes(study_id=study.id) == []
        assert repo.list_sessions(study.id) == []  # no session opened for a refused run

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    argv = ["record", "--data", str(blocker / "data"), "--study", study.id, "--env", "maze"]
    assert main(argv) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"stepmark record: error: --data {blocker / 'data'}: cannot create the data dir")


def test_record_an_environment_that_cannot_run_here_is_one_line(tmp_path, capsys):
    dmlab = study_pb2.EnvironmentSpec(
        id="lab", dmlab=study_pb2.EnvironmentSpec.DMLab(id="seekavoid_arena_01")
    )
    with new_store(tmp_path) as repo:
        study = make_study(repo, dmlab)
    assert main(["record", "--data", str(tmp_path), "--study", study.id, "--env", "lab"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("stepmark record: error: DMLab environments are not available")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_batch_at_a_clean_point(tmp_path, signum):
    """Ctrl-C (to the whole process group, as a terminal sends it: the writer child too) or SIGTERM: the
    batch stops at its next step, keeps what it saved, registers the unfinished episode as ABANDONED (or
    drops it when empty), prints its summary and leaves no temporary folder behind."""
    with new_store(tmp_path) as repo:
        study = make_study(repo, procgen_spec(max_steps=400, rand_seed=3))
    argv = ["record", "--data", str(tmp_path), "--study", study.id, "--env", "maze", "--episodes", "100000"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepmark", *argv, "--no-progress"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, signalled as a terminal would
    )
    try:
        for _ in range(1200):  # wait (bounded) until a first episode is registered
            with new_store(tmp_path) as repo:
                if repo.list_episodes(study_id=study.id):
                    break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        os.killpg(proc.pid, signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("interrupted: the unfinished episode")
    assert layout.temp_folders(tmp_path) == [] and layout.pending_folders(tmp_path) == []
    with new_store(tmp_path) as repo:
        episodes = repo.list_episodes(study_id=study.id)
    states = [e.state for e in episodes]
    completed = [e for e in episodes if e.state == study_pb2.Episode.STATE_COMPLETED]
    assert completed and states.count(study_pb2.Episode.STATE_ABANDONED) <= 1
    assert set(states) <= {study_pb2.Episode.STATE_COMPLETED, study_pb2.Episode.STATE_ABANDONED}
    assert f"recorded {len(completed)} episode(s)" in out  # the summary lists what the batch saved

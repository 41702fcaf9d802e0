"""Nothing a killed recorder left stays behind: the next command that opens the store, whatever it is,
registers its steps as ABANDONED or removes an empty folder, through the recording index (issue 22, item 4).

The recorder processes here are real and are killed with SIGKILL (tests/annotator/test_recorder.py's CHILD:
a Recorder with the background envlogger writer, killed mid-episode, before its first step, or between the
files being complete and registration)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.episodes import layout, open_episode, publish
from protos.rlds_creator import study_pb2
from stepmark.cli import main
from tests.annotator.test_recorder import run_child, writer_exits
from tests.conftest import REPO_ROOT
from tests.pipelines.episodes.helpers import make_study, new_store, procgen_spec

State = study_pb2.Episode.State


def index_entries(data: Path) -> list[Path]:
    return [entry for entry, _ in layout.recording_entries(data)]


def killed_recording(data: Path, mode: str) -> str:
    """A study with one recording killed in `mode`; returns the study id once the writer child is gone."""
    with new_store(data) as repo:
        study = make_study(repo, procgen_spec(max_steps=0))
    writer_pid = run_child(data, study.id, mode, "background")
    if writer_pid:
        assert writer_exits(writer_pid)
    return study.id


@pytest.mark.parametrize(
    "argv",
    [["study", "list"], ["queue", "show", "--study", "{study}"], ["agreement", "--study", "{study}", "--json"]],
    ids=["study-list", "queue-show", "agreement"],
)
def test_the_next_command_registers_a_recording_killed_mid_episode(tmp_path, capsys, argv):
    study_id = killed_recording(tmp_path, "mid-episode")
    [temp] = layout.temp_folders(tmp_path)
    assert [e.name for e in index_entries(tmp_path)] == ["~".join((*temp.parts[-4:-1], layout.final_name(temp)))]
    code = main([*(a.format(study=study_id) for a in argv), "--data", str(tmp_path)])
    err = capsys.readouterr().err
    assert code in (0, 1), err  # agreement exits 1 when there is nothing to agree on; recovery happened first
    assert "as ABANDONED: its recorder was killed" in err
    assert not temp.exists() and index_entries(tmp_path) == [] and layout.pending_folders(tmp_path) == []
    with new_store(tmp_path) as repo:
        [episode] = repo.list_episodes(study_id=study_id)
    assert episode.state == State.STATE_ABANDONED and episode.metadata["interrupted"] is True
    assert episode.user.email == "killed@example.com" and episode.num_steps == 19
    with open_episode(episode, tmp_path) as reader:
        assert len(reader) == 20
    # Nothing left: the next command says nothing and changes nothing.
    assert main(["study", "list", "--data", str(tmp_path)]) == 0
    assert "stepmark:" not in capsys.readouterr().err


def test_a_recording_killed_before_its_first_step_is_removed_by_the_next_command(tmp_path, capsys):
    study_id = killed_recording(tmp_path, "before-first-step")
    [temp] = layout.temp_folders(tmp_path)
    assert main(["study", "list", "--data", str(tmp_path)]) == 0
    assert f"removed {temp}: a recording killed before its first step" in capsys.readouterr().err
    assert not temp.exists() and index_entries(tmp_path) == []
    with new_store(tmp_path) as repo:
        assert repo.list_episodes(study_id=study_id) == []


def test_a_recording_killed_before_registration_is_registered_by_an_export(tmp_path, capsys):
    study_id = killed_recording(tmp_path, "before-registration")
    [folder] = layout.pending_folders(tmp_path)
    out = tmp_path / "export"
    code = main(["export", "--data", str(tmp_path), "--study", study_id, "--out", str(out), "--include-incomplete"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "as ABANDONED: its recorder was killed" in err
    assert (folder / layout.EPISODE_FILE).is_file() and index_entries(tmp_path) == []
    with new_store(tmp_path) as repo:
        [episode] = repo.list_episodes(study_id=study_id)
    assert episode.metadata["intended_state"] == "STATE_COMPLETED" and episode.num_steps == 20


def test_a_live_recording_is_left_alone_and_a_finished_one_leaves_no_entry(tmp_path, capsys):
    """A recorder still running keeps its folder and entry; episodes recorded normally leave no entry, so the
    index stays as small as the number of recordings in flight (plus folders kept for inspection)."""
    with new_store(tmp_path) as repo:
        study = make_study(repo, procgen_spec(max_steps=3))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD_LIVE, str(tmp_path), study.id],
        stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "READY"
        [temp] = layout.temp_folders(tmp_path)
        with new_store(tmp_path) as repo:
            report = publish.recover_recorded(repo, tmp_path)
        assert report.live == [temp] and not (report.registered or report.deleted or report.skipped)
        assert temp.is_dir() and len(index_entries(tmp_path)) == 1
    finally:
        proc.kill()
        proc.wait(timeout=60)
    capsys.readouterr()
    assert main(["record", "--data", str(tmp_path), "--study", study.id, "--env", "maze", "--episodes", "2",
                 "--no-progress"]) == 0  # fmt: skip
    # Killed with its files never closed (in-process writer) and no transition readable: moved to the
    # quarantine folder, entry and all (tests/stepmark/test_killed_record.py); the two episodes recorded since
    # came and went without a trace in the index.
    quarantined = tmp_path / layout.QUARANTINE_DIR / "~".join(temp.parts[-4:])
    assert f"moved {temp} to {quarantined}: no step can be read" in capsys.readouterr().err
    assert index_entries(tmp_path) == [] and layout.temp_folders(tmp_path) == [] and quarantined.is_dir()
    with new_store(tmp_path) as repo:
        assert len(repo.list_episodes(study_id=study.id)) == 2


CHILD_LIVE = """
import sys, time
from pipelines.store import open_store
from annotator.recorder import Recorder
data, study = sys.argv[1], sys.argv[2]
rec = Recorder(open_store(None, data), data, study, "maze", "live@example.com", seed=0, flush_steps=True)
rec.start()
rec.act(["ArrowRight"])
print("READY", flush=True)
time.sleep(600)
"""


def test_stale_and_foreign_entries_are_handled_without_walking_episode_folders(tmp_path):
    """An entry whose folders are gone (registered elsewhere, or deleted by hand) is dropped; a name that is
    not four components is ignored; a pre-index leftover (no entry) is not looked for: `record` and the
    annotator's start walk the whole data directory for those."""
    with new_store(tmp_path) as repo:
        index = tmp_path / layout.RECORDING_DIR
        index.mkdir()
        (index / "s~sess~env~gone").write_text("123")
        (index / "not-an-entry").write_text("1")
        old = tmp_path / "s" / "sess" / "env" / f"ep{layout.TMP_MARK}999999"
        old.mkdir(parents=True)
        report = publish.recover_recorded(repo, tmp_path)
        assert report == publish.RecoveryReport()
        assert sorted(p.name for p in index.iterdir()) == [".lock", "not-an-entry"] and old.is_dir()
        # The full walk still finds the pre-index folder (no started marker: quarantined and reported, once
        # it is too old to be a recorder about to write its marker).
        assert publish.recover_abandoned(repo, tmp_path).live == [old]
        past = time.time() - publish.NO_MARKER_GRACE - 1
        os.utime(old, (past, past))
        [(folder, _, why)] = publish.recover_abandoned(repo, tmp_path).quarantined
        assert folder == old and "no episode marker" in why and not old.exists()


def test_every_command_opens_the_store_through_recovery():
    """Structural guard: a new command that opened the store directly would skip recovery."""
    allowed = {REPO_ROOT / "pipelines/episodes/publish.py", REPO_ROOT / "annotator/web/context.py"}
    offenders = []
    for root in ("stepmark", "pipelines", "annotator"):
        for path in sorted((REPO_ROOT / root).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "pipelines.store":
                    if any(a.name == "open_store" for a in node.names) and path not in allowed:
                        offenders.append(str(path.relative_to(REPO_ROOT)))
    assert offenders == []


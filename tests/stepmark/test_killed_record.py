"""A batch `record` killed with SIGKILL, writer child and all (issue 32, item 6).

Each test really runs `python -m stepmark record` on an Atari game that never ends by itself (Montezuma's
Revenge with the no-op policy: the player stands still), with a relative `--data` as a person types it, waits
until the writer's once-a-second flush put steps on disk, kills the process group (recorder and envlogger
writer child: nobody closes the files), then runs later commands in subprocesses the same way and checks:
the steps that were complete are registered as one ABANDONED episode (record for record the ones on disk),
the unclosed files are in `<data>/.quarantine/`, the tmp folder is gone, it is said once, and no absl,
envlogger or ALE noise reaches stderr.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from envlogger.backends.python import riegeli_dataset_reader
from envlogger.proto import storage_pb2
from PIL import Image

from pipelines.episodes import layout, open_episode, publish
from protos.rlds_creator import study_pb2
from tests.conftest import REPO_ROOT
from tests.pipelines.episodes.helpers import new_store

State = study_pb2.Episode.State
STUDY = """\
name: Endless Montezuma
environment_specs:
  - id: mr
    name: Montezuma's Revenge
    sync: true
    max_episode_steps: 0
    atari:
      id: MontezumaRevenge
"""
NOISE = ("A.L.E", "Powered by Stella", "absl", "forgot to call close", "Traceback", "riegeli", "WARNING")
ENV = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")


def stepmark(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stepmark", *argv], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def assert_quiet(stderr: str) -> None:
    assert not [word for word in NOISE if word in stderr], stderr


def study_in(cwd: Path) -> str:
    (cwd / "study.yaml").write_text(STUDY, encoding="utf-8")
    created = stepmark(cwd, "study", "create", "study.yaml", "--data", "data")
    assert created.returncode == 0, created.stderr
    assert_quiet(created.stderr)  # creating it checks the game: ALE used to print its banner here
    return created.stdout.split()[-1]


def written(temp: Path, storage: str) -> bool:
    """Steps flushed to disk: envlogger's step offsets (written by a flush) or the pickle journal's records."""
    if storage == "envlogger":
        return any(p.stat().st_size > 0 for p in temp.rglob("step_offsets.riegeli"))
    journal = temp / layout.JOURNAL_NAME
    return journal.is_file() and journal.stat().st_size > 200_000


def killed_record(cwd: Path, study_id: str, storage: str) -> tuple[Path, str]:
    """Runs `record` until steps are on disk, then SIGKILLs its process group; its temp folder and stderr."""
    data = cwd / "data"
    with (cwd / "record.err").open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stepmark", "record", "--study", study_id, "--env", "mr", "--policy", "noop",
             "--episodes", "1", "--no-progress", "--storage", storage, "--data", "data"],
            cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 240
            while not (temps := layout.temp_folders(data)) or not written(temps[0], storage):
                assert proc.poll() is None and time.monotonic() < deadline, (cwd / "record.err").read_text()
                time.sleep(0.05)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the recorder and its writer child
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    [temp] = temps
    return temp, (cwd / "record.err").read_text()


def envlogger_records(folder: Path) -> list[storage_pb2.Data]:
    """Every record envlogger's dataset reader gives from `folder` (closed or not), parsed."""
    reader = riegeli_dataset_reader.RiegeliDatasetReader()
    reader.init(str(folder))
    try:
        return [storage_pb2.Data.FromString(reader.serialized_step(i)) for i in range(reader.num_steps)]
    finally:
        reader.close()


def journal_records(path: Path) -> list[object]:
    """The journal's complete pickled records (the test's own reading: plain pickle, its own file)."""
    out = []
    with path.open("rb") as f:
        while True:
            try:
                out.append(pickle.load(f))  # noqa: S301 - a file this test's recorder wrote
            except (EOFError, pickle.UnpicklingError, ValueError, AttributeError, IndexError):
                return out[1:]  # the first is the specs header


@pytest.mark.parametrize("storage", ["envlogger", "pickle"])
def test_a_killed_record_is_registered_abandoned_with_its_complete_steps_and_said_once(tmp_path, storage):
    study_id = study_in(tmp_path)
    temp, record_err = killed_record(tmp_path, study_id, storage)
    assert_quiet(record_err)
    assert not any(temp.rglob("episode_index.riegeli")) or all(
        p.stat().st_size == 0 for p in temp.rglob("episode_index.riegeli")
    )  # nobody closed the files: envlogger's index was never written

    later = stepmark(tmp_path, "study", "list", "--data", "data")
    assert later.returncode == 0, later.stderr
    data = (tmp_path / "data").resolve()
    with new_store(data) as repo:
        [episode] = repo.list_episodes(study_id=study_id)
    lines = [line for line in later.stderr.splitlines() if line.startswith("stepmark:")]
    moved = data / layout.QUARANTINE_DIR / "~".join(temp.parts[-4:])
    assert lines == [
        f"stepmark: recovered episode {episode.id} ({episode.num_steps} steps) as ABANDONED: its recorder was killed",
        f"stepmark: moved {temp.resolve()} to {moved}: " + lines[1].split(": ", 2)[2],
    ], later.stderr
    assert re.search(r"files never closed.*; \d+ complete records recovered$", lines[1])
    assert_quiet(later.stderr)

    assert episode.state == State.STATE_ABANDONED and episode.num_steps >= 1
    assert episode.metadata["interrupted"] is True and episode.metadata["salvaged"] is True
    assert episode.metadata["quarantine"] == moved.relative_to(data).as_posix()
    assert layout.temp_folders(data) == [] and layout.recording_entries(data) == []
    assert not temp.exists() and moved.is_dir()
    with open_episode(episode, data) as reader:
        assert len(reader) == episode.num_steps + 1
        frames = [Image.open(io.BytesIO(reader.step(i).image)) for i in (0, len(reader) - 1)]
        assert all(f.size == (160, 210) for f in frames)
    # Record for record what the killed writer's files hold (the quarantine keeps them as they were).
    if storage == "envlogger":
        original = envlogger_records(moved)
        assert original and envlogger_records(data / episode.storage.environment_logger.tag_directory) == original
    else:
        original = journal_records(moved / layout.JOURNAL_NAME)
        with open_episode(episode, data) as reader:
            assert [reader.step(i).image for i in range(len(reader))] == [r[2]["image"] for r in original]
    assert len(original) == episode.num_steps + 1

    # Said once: the next command finds nothing left and says nothing.
    again = stepmark(tmp_path, "study", "list", "--data", "data")
    assert again.returncode == 0 and "stepmark:" not in again.stderr, again.stderr
    assert_quiet(again.stderr)


def test_a_leftover_of_another_host_or_with_a_reused_pid(tmp_path):
    """The started marker names the recorder (host, pid, start time): a folder another host is writing is
    never touched (a pid there means nothing here), and a pid reused by a later process here does not make
    a dead recorder's folder look alive."""
    study_id = study_in(tmp_path)
    temp, _ = killed_record(tmp_path, study_id, "envlogger")
    marker = temp / publish.STARTED_FILE
    body = json.loads(marker.read_text())
    assert body["owner"]["pid"] == layout.temp_pid(temp) and body["owner"]["host"] and body["owner"]["start"]

    body["owner"]["host"] = "another-host"
    marker.write_text(json.dumps(body))
    later = stepmark(tmp_path, "study", "list", "--data", "data")
    assert later.returncode == 0 and "stepmark:" not in later.stderr, later.stderr
    assert temp.is_dir() and marker.is_file()

    # The same host, but the pid now belongs to another process (started later).
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        reused = temp.with_name(f"{layout.final_name(temp)}{layout.TMP_MARK}{sleeper.pid}")
        temp.rename(reused)
        layout.recording_entry(reused).write_text(str(sleeper.pid))
        body["owner"].update(host=socket.gethostname(), pid=sleeper.pid)
        (reused / publish.STARTED_FILE).write_text(json.dumps(body))
        later = stepmark(tmp_path, "study", "list", "--data", "data")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert later.returncode == 0, later.stderr
    assert f"stepmark: recovered episode {layout.final_name(temp)} (" in later.stderr
    assert not reused.exists() and layout.temp_folders(tmp_path / "data") == []


def test_the_demo_study_is_created_without_the_ale_banner(tmp_path):
    created = stepmark(tmp_path, "study", "create", str(REPO_ROOT / "schemas/examples/procgen_study.yaml"),
                       "--data", "data")  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert created.stderr == ""

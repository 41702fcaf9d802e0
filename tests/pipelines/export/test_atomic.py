"""A killed export leaves nothing that looks finished: SIGKILL the `stepmark export` process midway."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pipelines import export
from pipelines.store import open_store
from tests.conftest import REPO_ROOT
from tests.pipelines.export.export_data import ExportData, copy_data, register_copies

# `stepmark ...` with each chunk's outcome file wrapped (the first chunks hold one episode each): the fourth
# chunk's worker waits forever once it has written its files, so the export stalls with 3 (or, with parallel
# bundles, a few more) of 80 done.
_BLOCK_AFTER_THREE = """
import sys, threading
from pipelines.exporters import episode_fn
from stepmark.cli import main

_record, _done, _lock = episode_fn._record_chunk, [0], threading.Lock()

def record_then_stall(*args, **kwargs):
    _record(*args, **kwargs)
    with _lock:
        _done[0] += 1
        stall = _done[0] > 3
    if stall:
        threading.Event().wait()

episode_fn._record_chunk = record_then_stall
sys.argv[0] = "stepmark"
sys.exit(main())
"""


def test_sigkill_midway_leaves_no_output(export_data: ExportData, tmp_path: Path) -> None:
    data_dir = copy_data(export_data, tmp_path / "data")
    study = register_copies(data_dir, export_data.nethack[0], 80)
    out = tmp_path / "killed"
    # The export process blocks for good once a few episodes are written, so "some written, not all" is a
    # state it reaches and stays in whatever the machine's speed (an export of 80 episodes can take less than
    # one progress poll).
    proc = subprocess.Popen(
        [sys.executable, "-c", _BLOCK_AFTER_THREE, *["export", "--data", str(data_dir), "--study", study]]
        + ["--out", str(out)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    watchdog = threading.Timer(300, os.killpg, (proc.pid, signal.SIGTERM))  # never hang the suite
    watchdog.start()
    seen = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("export:"):
                pct = float(line.split()[1].rstrip("%"))
                seen.append(pct)
                if 0.0 < pct < 90.0:  # some episodes written, not all
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"export ended before it was killed (progress {seen})"
    time.sleep(0.5)
    assert not out.exists()
    # Whatever is left is a temporary folder with no summary: nothing looks like a finished dataset.
    left = [p for p in tmp_path.iterdir() if p.name.startswith("killed")]
    assert all(".tmp-" in p.name for p in left)
    assert not any((p / export.SUMMARY_FILE).exists() for p in left)
    # No dataset-level metadata: envlogger.Reader cannot take a leftover for a dataset (workers' scratch
    # folders inside it may hold their own writer files; they go with the folder).
    assert not any((p / "metadata.riegeli").exists() for p in left)
    # Nothing ran the killed export's cleanup: the next export to the same --out removes its folder.
    assert left, "the killed export left no temporary folder to clean up"
    with open_store(None, data_dir) as repo:
        one = repo.list_episodes(study_id=study)[0]
    export.export_episodes(export.ExportRequest(data_dir=str(data_dir), out=str(out), refs=[repo.ref(one)]))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("killed")] == ["killed"]

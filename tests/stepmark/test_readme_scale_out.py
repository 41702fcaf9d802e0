"""The "Buckets and a cluster" page (docs/buckets_and_clusters.md, linked from the README) runs as printed:
its three bash blocks, one after the other in one shell, in a fresh folder that holds only `samples/` and `.venv` (links to the repository's). Only what cannot be
the same here changes: the ports (free ones instead of 9000 and 8786), and in the "real bucket and cluster"
block the bucket (the local S3 server's), the scheduler (the local one) and the PostgreSQL URL (a throwaway
server's). Then the annotator line, served over what the blocks imported."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.object_store import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def section_blocks() -> tuple[list[str], str]:
    section = (REPO / "docs" / "buckets_and_clusters.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    annotate = re.search(r"`(\.venv/bin/stepmark annotate [^`]*)`", section)
    assert len(blocks) == 3 and annotate is not None
    return blocks, annotate.group(1)


def test_the_docs_scale_out_section_runs_as_printed(tmp_path: Path, pg_url: str) -> None:
    blocks, annotate = section_blocks()
    s3_port, dask_port, ui_port = free_port(), free_port(), free_port()
    local = "\n".join(blocks[:2]).replace("9000", str(s3_port)).replace("8786", str(dask_port))
    real = (
        blocks[2]
        .replace("gs://bucket", "s3://stepmark-demo")
        .replace("tcp://scheduler:8786", f"tcp://127.0.0.1:{dask_port}")
        .replace("postgresql+psycopg://user@db/stepmark", pg_url)
    )
    real = re.sub(r"^stepmark ", ".venv/bin/stepmark ", real, flags=re.M)
    script = "set -euo pipefail\n" + local + "\n" + real + f"\n{annotate} --port {ui_port} > annotate.log 2>&1 &\nwait\n"
    (tmp_path / "samples").symlink_to(REPO / "samples")
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "STORAGE_EMULATOR"))}
    env["PYTHONPATH"] = str(REPO)  # the workers import this checkout (as an editable install would give them)
    shell = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{ui_port}/_stcore/health"
        deadline = time.monotonic() + 900
        healthy = False
        while time.monotonic() < deadline and shell.poll() is None and not healthy:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    healthy = r.read() == b"ok"
            except OSError:
                time.sleep(1)
        assert healthy, f"the blocks failed or the annotator did not start (exit {shell.poll()})"
    finally:
        os.killpg(shell.pid, signal.SIGTERM)
        output = shell.communicate(timeout=60)[0]
    assert "converted 7 of 7 episodes" in output and "s3://stepmark-demo/episodes-dask" in output, output
    assert "7 episodes in 4 shard(s)" in output  # inspect on the bucket
    parquet = sorted(p.relative_to(tmp_path / "ui-parquet").as_posix() for p in (tmp_path / "ui-parquet").rglob("*"))
    assert "stepmark_export.json" in parquet and any(p.startswith("data/train-") for p in parquet), parquet
    assert output.count("exported 3 episode(s)") >= 2, output  # parquet (local run), envlogger (on the cluster)
    # The "real" block imported into PostgreSQL, keeping the bucket's URLs.
    from pipelines.store import open_store

    with open_store(pg_url, str(tmp_path / "pg-data")) as repo:
        study = next(s for s in repo.list_studies() if s.name == "Android in the Wild")
        episodes = repo.list_episodes(study_id=study.id)
        assert len(episodes) == 7
        assert all(e.metadata["ui_record"]["shard"].startswith("s3://stepmark-demo/converted/") for e in episodes)

"""The "Study fields" block (docs/study_fields.md, linked from the README) runs as printed (bash, in a fresh
folder holding only `samples/` and `.venv`, links to the repository's), and its outputs hold what the block
promises."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def block() -> str:
    text = (REPO / "docs" / "study_fields.md").read_text(encoding="utf-8")
    (bash,) = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return bash


def test_the_docs_fields_block_runs_as_printed(tmp_path: Path) -> None:
    (tmp_path / "samples").symlink_to(REPO / "samples")
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + block()], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "imported 9 value(s) and 2 suggestion(s)" in done.stdout
    assert re.search(r"action_correct\s+choice\s+nominal\s+3\s+", done.stdout)
    assert "disputed field values (2):" in done.stdout
    rows = sorted(pq.read_table(tmp_path / "fields-demo" / "parquet" / "data").to_pylist(), key=lambda r: r["step_index"])
    assert [r["field:action_correct"] for r in rows[:3]] == ["yes", "unsure", "yes"]  # --annotations all: newest
    assert rows[0]["field:instruction:origin"] == "imported" and rows[0]["field:task_success"] is True
    page = (tmp_path / "fields-demo" / "report.html").read_text()
    assert '<tr id="field-action_correct"><td>action_correct</td><td>choice</td><td>step</td><td>100.0% (3 of 3)' in page

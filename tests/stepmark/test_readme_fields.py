"""The "Study fields" block (docs/study_fields.md, linked from the README) runs as printed (bash, in a fresh
folder holding only `samples/` and `.venv`, links to the repository's), and its outputs hold what the block
promises."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.stepmark.doc_blocks import run_block

pytestmark = pytest.mark.slow


def test_the_docs_fields_block_runs_as_printed(tmp_path: Path) -> None:
    done = run_block("docs/study_fields.md", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "imported 9 value(s) and 2 suggestion(s)" in done.stdout
    assert re.search(r"action_correct\s+choice\s+nominal\s+3\s+", done.stdout)
    assert "disputed field values (2):" in done.stdout
    rows = sorted(pq.read_table(tmp_path / "fields-demo" / "parquet" / "data").to_pylist(), key=lambda r: r["step_index"])
    assert [r["field:action_correct"] for r in rows[:3]] == ["yes", "unsure", "yes"]  # --annotations all: newest
    assert rows[0]["field:instruction:origin"] == "imported" and rows[0]["field:task_success"] is True
    page = (tmp_path / "fields-demo" / "report.html").read_text()
    assert '<tr id="field-action_correct"><td>action_correct</td><td>choice</td><td>step</td><td>100.0% (3 of 3)' in page

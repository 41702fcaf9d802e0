"""The "Model suggestions" block (docs/model_suggestions.md, linked from the README) runs as printed (bash, in a
fresh folder holding only `samples/` and `.venv`, links to the repository's), and stores the instructions it
promises."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipelines.store import open_store
from pipelines.store.models import FieldSuggestionRow

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def block() -> str:
    text = (REPO / "docs" / "model_suggestions.md").read_text(encoding="utf-8")
    (bash,) = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return bash


def test_the_docs_suggest_block_runs_as_printed(tmp_path: Path) -> None:
    (tmp_path / "samples").symlink_to(REPO / "samples")
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + block()], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"suggest model:grounded-instructions@1 on study \w+: 1 episode\(s\), 3 step\(s\) asked, "
                     r"3 suggestion\(s\) stored, 0 place\(s\) already suggested, 0 dead letter\(s\)", done.stdout)
    shown = json.loads(done.stdout[done.stdout.index('{\n  "fields"'):])
    counts = {f["name"]: f["suggestions"] for f in shown["fields"]}
    assert counts["instruction"] == {"model:grounded-instructions@1": 3} and counts["action_correct"] == {}
    with open_store(None, tmp_path / "suggest-demo" / "data") as repo, repo._read() as s:
        rows = s.execute(sa.select(FieldSuggestionRow.step_index, FieldSuggestionRow.value)).all()
    assert sorted(rows) == [(0, "Click on 'Yes, turn it on'"), (1, "Click on 'I'm New'"),
                            (2, "Click on 'Sign up with Facebook'")]  # fmt: skip

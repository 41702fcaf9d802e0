"""The "Model suggestions" block (docs/model_suggestions.md, linked from the README) runs as printed (bash, in a
fresh folder holding only `samples/` and `.venv`, links to the repository's), and stores the instructions it
promises."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipelines.store import open_store
from pipelines.store.models import FieldSuggestionRow
from tests.stepmark.doc_blocks import run_block

pytestmark = pytest.mark.slow


def test_the_docs_suggest_block_runs_as_printed(tmp_path: Path) -> None:
    done = run_block("docs/model_suggestions.md", tmp_path)
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

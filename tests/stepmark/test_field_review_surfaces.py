"""The review of suggestions (pipelines/store/field_review.py) where people read it: `stepmark agreement --json`
(`field_review`) and its text, `stepmark report`, and the Quality page's table (annotator/field_ops.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from annotator import field_ops
from pipelines.store import field_review, open_store
from stepmark.cli import main
from tests.pipelines.store.test_field_review import MODEL, build


def test_agreement_report_and_quality_table_show_the_review(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    data = tmp_path / "data"
    with open_store(None, data) as repo:
        study_id = build(repo, tmp_path)
        reviews = field_review.study_field_review(repo, study_id)
    capsys.readouterr()
    assert main(["agreement", "--study", study_id, "--json", "--data", str(data)]) == 0
    got = json.loads(capsys.readouterr().out)
    ok = next(r for r in got["field_review"] if (r["field"], r["source"]) == ("ok", MODEL))
    assert {k: ok[k] for k in ("suggestions", "unseen", "answers", "accepted", "edited", "replaced", "units")} == {
        "suggestions": 5, "unseen": 2, "answers": 5, "accepted": 2, "edited": 0, "replaced": 3, "units": 6}  # fmt: skip
    assert ok["alpha"] == pytest.approx(15 / 106) and ok["accepted_rate"] == pytest.approx(0.4)
    assert [(r["field"], r["source"]) for r in got["field_review"]] == [
        ("ok", MODEL), ("ok", "other-tool"), ("note", MODEL), ("problems", MODEL)]  # fmt: skip

    assert main(["agreement", "--study", study_id, "--data", str(data)]) == 0
    text = capsys.readouterr().out
    assert "review of suggestions (per field and source):" in text
    row = next(line for line in text.splitlines() if line.startswith("ok") and MODEL in line)
    assert row.split() == ["ok", MODEL, "5", "2", "2", "0", "3", "0.142", "6", "0.000", "3"]

    out = tmp_path / "report.html"
    assert main(["report", "--study", study_id, "--out", str(out), "--data", str(data)]) == 0
    page = out.read_text()
    assert "<h2>Review of suggestions</h2>" in page
    assert (f"<tr><td>ok</td><td>{MODEL}</td><td>5</td><td>2</td><td>2</td><td>0</td><td>3</td><td>0.142</td>"
            "<td>6</td><td>0.000</td><td>3</td></tr>") in page  # fmt: skip

    table = field_ops.review_table(reviews)
    assert list(table.columns) == field_ops.REVIEW_COLUMNS
    first = table.iloc[0]
    assert (first["field"], first["source"], first["accepted"], first["replaced"], first["unseen"]) == (
        "ok", MODEL, 2, 3, 2)  # fmt: skip
    assert first["alpha with the source"] == pytest.approx(15 / 106) and first["people units"] == 3

"""Runs in the store on SQLite and PostgreSQL: the failed-episodes filter of the lists, one episode's rows (what
the player draws), and --replace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.evaluation import runs
from pipelines.store import Repository, StoreError, open_store
from pipelines.store.listing import EpisodeQuery
from tests.pipelines.evaluation.helpers import import_samples, recorded_actions, write_predictions

LEAD = "lead@example.com"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Repository]:
    url = None if request.param == "sqlite" else request.getfixturevalue("pg_url")
    with open_store(url, tmp_path / "data") as repository:
        yield repository


def test_failed_episodes_filter_step_rows_and_replace(repo: Repository, tmp_path: Path) -> None:
    study = import_samples(repo, tmp_path / "data", LEAD)
    steps = recorded_actions(repo, tmp_path / "data", study.id)
    rico = next(row for row, _, _ in steps if row.source_key == "ui:rico_trace/com.done.faasos")
    far = {"action_type": "click", "x": 0, "y": 0}
    path = write_predictions(tmp_path / "p.jsonl", steps, {(rico.id, 2): far})
    summary = runs.evaluate(repo, study.id, str(path), "agent", LEAD)
    assert (summary["steps"], summary["matched"], summary["episodes_succeeded"]) == (12, 11, 2)
    q = EpisodeQuery(study_id=study.id, failed_in_run="agent")
    assert repo.count_episodes(q) == 1
    assert [e.id for e, _ in repo.page_episodes(q)] == [rico.id]
    assert repo.count_episodes(EpisodeQuery(study_id=study.id, failed_in_run="no such run")) == 0

    rows = runs.step_results(repo, study.id, "agent", rico.id)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4, 5]  # step 6, the last screen, has no action
    assert rows[2]["predicted"] == {"action_type": "click", "x": 0.0, "y": 0.0} and rows[2]["reason"] == "point"
    assert rows[2]["recorded"]["x"] == 270 and rows[2]["recorded"]["box"] == [0, 441, 540, 526]
    assert all(r["matched"] for i, r in enumerate(rows) if i != 2)

    with pytest.raises(StoreError, match="already has a run named 'agent'"):
        runs.evaluate(repo, study.id, str(path), "agent", LEAD)
    fixed = write_predictions(tmp_path / "fixed.jsonl", steps)
    assert runs.evaluate(repo, study.id, str(fixed), "agent", LEAD, replace=True)["matched"] == 12
    assert repo.count_episodes(q) == 0  # the remembered count followed the replaced run
    assert [r["run"] for r in runs.runs(repo, study.id)] == ["agent"]

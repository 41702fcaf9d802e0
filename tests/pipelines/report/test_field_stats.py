"""Study fields in `stepmark report` (pipelines/report/field_stats.py): fill rate, time spent and agreement per
field, in the figures and on the page."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.report.field_stats import field_stats
from pipelines.store import field_values as fv
from pipelines.store import open_store
from pipelines.store.field_defs import parse_text
from stepmark.cli import main
from tests.pipelines.store.conftest import env_episode, study_spec

FIELDS = """fields:
  - {name: ok, scope: step, kind: choice, options: [yes, no]}
  - {name: done, scope: episode, kind: boolean}
  - {name: unused, scope: step, kind: text}
"""


def test_fill_rate_time_and_agreement_per_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    with open_store(None, data) as repo:
        study = repo.create_study(study_spec(), "lead")
        session = repo.create_session(study.id, "lead")
        a, b = (repo.add_episode(env_episode(study.id, session, num_steps=5)) for _ in range(2))
        fv.define(repo, study.id, parse_text(FIELDS, "f.yaml"), "lead")
        for user, values, seconds in (("ann", ["yes", "no", "yes"], 2.0), ("bea", ["yes", "yes", "yes"], 4.0)):
            for step, value in enumerate(values):
                fv.set_value(repo, repo.ref(a), "ok", user, value, step=step, seconds=seconds)
        fv.set_value(repo, repo.ref(b), "done", "ann", True)
        stats = {s.field: s for s in field_stats(repo, study.id)}
    ok, done, unused = stats["ok"], stats["done"], stats["unused"]
    assert (ok.values, ok.filled, ok.places, ok.annotators) == (6, 3, 10, 2)  # 3 of the 10 steps of 2 episodes
    assert ok.fill_rate == pytest.approx(0.3) and ok.seconds_mean == pytest.approx(3.0) and ok.seconds_total == 18
    assert ok.disputed == 1 and ok.alpha is not None
    assert (done.filled, done.places, done.fill_rate, done.seconds_mean) == (1, 2, 0.5, None)
    assert (unused.values, unused.fill_rate, unused.alpha) == (0, 0.0, None)

    out = tmp_path / "report.html"
    assert main(["report", "--study", study.id, "--out", str(out), "--data", str(data)]) == 0
    page = out.read_text()
    assert "<h2>Study fields</h2>" in page
    assert '<tr id="field-ok"><td>ok</td><td>choice</td><td>step</td><td>30.0% (3 of 10)</td><td>6</td><td>2</td>' \
           "<td>3.0</td><td>18</td>" in page  # fmt: skip
    capsys.readouterr()

"""`stepmark queue`, `stepmark agreement` and `stepmark adjudicate` through `stepmark.cli.main`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.store import agreement, open_store, queue
from stepmark.cli import main
from tests.pipelines.store.conftest import env_episode, study_spec


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_queue_agreement_and_adjudication(capsys, tmp_path: Path, monkeypatch) -> None:
    data = str(tmp_path / "data")
    with open_store(None, data) as repo:
        study = repo.create_study(study_spec(), "lead")
        session = repo.create_session(study.id, "lead")
        episodes = [repo.add_episode(env_episode(study.id, session, num_steps=3)) for _ in range(2)]

    setting = ("queue", "set", "--study", study.id, "--overlap", "2", "--data", data, "--user")
    code, _, err = run(capsys, *setting, "x")
    assert code == 2 and "only the study's creator (lead)" in err
    code, out, _ = run(capsys, *setting, "lead")
    assert code == 0 and "overlap 2, all episodes; 2 episode(s), 0 complete, 0 of 4 labellings done" in out

    with open_store(None, data) as repo:
        for user, labels in (("ann", ["grasp", "lift", "", ""]), ("bea", ["grasp", "", "", "drop"])):
            taken = queue.next_episode(repo, study.id, user)
            assert taken.episode_id == episodes[0].id
            for step, label in enumerate(labels):
                if label:
                    queue.set_step_label(repo, taken.episode_id, user, step, label)
            queue.mark_done(repo, taken.episode_id, user)

    code, out, _ = run(capsys, "queue", "show", "--study", study.id, "--episodes", "--data", data)
    lines = out.strip().splitlines()
    assert "1 complete, 2 of 4 labellings done" in lines[0]
    assert lines[1].split() == ["EPISODE", "DONE", "DONE", "BY", "OPEN", "BY"]
    assert lines[2].split() == [episodes[0].id, "2/2", "ann,bea", "-"]  # streamed: "-" for nobody
    assert lines[3].split() == [episodes[1].id, "0/2", "-", "-"]

    code, out, _ = run(capsys, "agreement", "--study", study.id, "--json", "--data", data)
    report = json.loads(out)
    assert (report["episodes"], report["units"], report["annotators"]) == (1, 4, ["ann", "bea"])
    assert report["disputed"] == 2
    assert [(d["step_index"], d["labels"]) for d in report["disagreements"]] == [
        (1, {"ann": ["lift"], "bea": []}),
        (3, {"ann": [], "bea": ["drop"]}),
    ]
    assert {p["label"]: p["kappa"] for p in report["pairs"]}["grasp"] == 1.0  # both: grasp on step 0 only

    code, out, _ = run(
        capsys, "adjudicate", "--episode", episodes[0].id, "--step", "1", "--label", "lift",
        "--data", data, "--user", "lead",
    )  # fmt: skip
    assert code == 0 and "consensus lift by lead" in out
    code, out, _ = run(capsys, "agreement", "--study", study.id, "--data", data)
    assert "annotators: ann, bea" in out and "disagreements (2):" in out
    row = next(line for line in out.splitlines() if line.startswith(episodes[0].id) and " 1 " in line)
    assert row.split()[-1] == "lift"
    # More disputed steps than are listed: both outputs say how many there are.
    monkeypatch.setattr(agreement, "MAX_DISAGREEMENTS", 1)
    code, out, _ = run(capsys, "agreement", "--study", study.id, "--data", data)
    assert "disagreements (1 of 2, those without a consensus first):" in out
    code, out, _ = run(capsys, "agreement", "--study", study.id, "--json", "--data", data)
    report = json.loads(out)
    assert (report["disputed"], [d["step_index"] for d in report["disagreements"]]) == (2, [3])  # 1 is decided
    code, _, err = run(capsys, "agreement", "--study", "nope", "--data", data)
    assert code == 2 and "study 'nope' not found" in err

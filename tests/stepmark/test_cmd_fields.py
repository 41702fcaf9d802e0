"""`stepmark study fields`, `stepmark fields import|show`, and study fields in `stepmark agreement` and
`stepmark adjudicate --field`, through `stepmark.cli.main`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.store import field_agreement, field_values, open_store
from stepmark.cli import main
from tests.pipelines.store.conftest import env_episode, study_spec

FIELDS = """fields:
  - {name: action_correct, scope: step, kind: choice, options: [yes, no, unsure], keys: [y, n, u]}
  - {name: note, scope: step, kind: text}
  - {name: task_success, scope: episode, kind: boolean}
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_fields_import_agreement_and_adjudication(capsys, tmp_path: Path, monkeypatch) -> None:
    data = str(tmp_path / "data")
    with open_store(None, data) as repo:
        study = repo.create_study(study_spec(), "lead")
        session = repo.create_session(study.id, "lead")
        episode = repo.add_episode(env_episode(study.id, session, num_steps=4))
    path = tmp_path / "fields.yaml"
    path.write_text(FIELDS)
    code, _, err = run(capsys, "study", "fields", "--study", study.id, str(path), "--data", data, "--user", "ann")
    assert code == 2 and "only the creator (lead) or a reviewer may define the fields" in err
    code, out, _ = run(capsys, "study", "fields", "--study", study.id, str(path), "--data", data, "--user", "lead")
    assert code == 0 and out.startswith(f"study {study.id}: 3 field(s): action_correct, note, task_success")
    bad = tmp_path / "bad.yaml"
    bad.write_text("fields: [{name: x, scope: step, kind: choice}]\n")
    code, _, err = run(capsys, "study", "fields", "--study", study.id, str(bad), "--data", data, "--user", "lead")
    assert code == 2 and err.strip() == f"stepmark study: error: {bad}: fields[0] (x): a choice field needs options"

    lines = [
        {"episode": episode.id, "step": 1, "field": "action_correct", "value": "yes", "user": "ann"},
        {"episode": episode.id, "step": 1, "field": "action_correct", "value": "no", "user": "bea"},
        {"episode": episode.id, "step": 2, "field": "action_correct", "value": "no", "user": "ann"},
        {"episode": episode.id, "step": 2, "field": "action_correct", "value": "no", "user": "bea"},
        {"episode": episode.id, "step": 1, "field": "note", "value": "jumps over the gap", "user": "ann"},
        {"episode": episode.id, "step": 1, "field": "note", "value": "falls into the pit", "user": "bea"},
        {"episode": episode.id, "step": None, "field": "task_success", "value": True, "source": "model-x"},
    ]
    values = tmp_path / "values.jsonl"
    values.write_text("\n".join(json.dumps(x) for x in [*lines, {**lines[0], "value": "maybe"}]) + "\n")
    code, _, err = run(capsys, "fields", "import", "--study", study.id, str(values), "--data", data, "--user", "ann")
    assert code == 2 and "only the creator (lead) or a reviewer may import field values" in err
    code, _, err = run(capsys, "fields", "import", "--study", study.id, str(values), "--data", data, "--user", "lead")
    assert code == 2 and f"{values}:8: field action_correct: 'maybe' is not one of its options" in err
    values.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    code, out, _ = run(capsys, "fields", "import", "--study", study.id, str(values), "--data", data, "--user", "lead")
    assert out.strip() == f"imported 6 value(s) and 1 suggestion(s) into study {study.id}"

    code, out, _ = run(capsys, "agreement", "--study", study.id, "--json", "--data", data)
    fields = {f["field"]: f for f in json.loads(out)["fields"]}
    assert (fields["action_correct"]["units"], fields["action_correct"]["metric"]) == (2, "nominal")
    assert [(d["step"], d["values"]) for d in fields["action_correct"]["disputed"]] == [(1, {"ann": "yes", "bea": "no"})]
    assert fields["note"]["metric"] == "normalised edit distance" and fields["note"]["similarity"] < 0.8
    assert fields["task_success"]["units"] == 0  # a suggestion is no annotator's value
    code, out, _ = run(capsys, "agreement", "--study", study.id, "--data", data)
    assert "study fields:" in out and "disputed field values (2):" in out

    adjudicate = ("adjudicate", "--episode", episode.id, "--step", "1", "--field", "action_correct", "--data", data)
    code, _, err = run(capsys, *adjudicate, "--value", '"yes"', "--user", "ann")
    assert code == 2 and "adjudicate field action_correct" in err  # not a reviewer
    code, out, _ = run(capsys, *adjudicate, "--value", '"yes"', "--user", "lead")
    assert code == 0 and out.strip().endswith('consensus action_correct = "yes" by lead')
    code, out, _ = run(capsys, "agreement", "--study", study.id, "--json", "--data", data)
    (dispute,) = next(f for f in json.loads(out)["fields"] if f["field"] == "action_correct")["disputed"]
    assert dispute["consensus"] == "yes"
    monkeypatch.setattr(field_agreement, "MAX_DISPUTED", 0)  # more disputed places than are listed
    code, out, _ = run(capsys, "agreement", "--study", study.id, "--json", "--data", data)
    listed = next(f for f in json.loads(out)["fields"] if f["field"] == "action_correct")
    assert (listed["disputed"], listed["disputed_count"], listed["disputed_open"]) == ([], 1, 0)
    code, out, _ = run(capsys, "agreement", "--study", study.id, "--data", data)
    assert "action_correct: 0 of 1 disputed places listed, those without a consensus first (0 without one)" in out
    monkeypatch.undo()
    with open_store(None, data) as repo:
        assert field_values.adjudications(repo, study.id) == {(episode.id, "action_correct", 1, 1): "yes"}

    code, out, _ = run(capsys, "fields", "show", "--study", study.id, "--data", data)
    assert [f["name"] for f in json.loads(out)["fields"]] == ["action_correct", "note", "task_success"]


def test_fields_import_takes_the_export_episode_reference(capsys, tmp_path: Path) -> None:
    """`STUDY/SESSION/EPISODE`, as `stepmark export --episode` takes it (one parser: store/access.py); a reference
    to another study or session, or a malformed one, is an invalid line naming it."""
    data = str(tmp_path / "data")
    with open_store(None, data) as repo:
        study = repo.create_study(study_spec(), "lead")
        session = repo.create_session(study.id, "lead")
        other = repo.create_session(study.id, "lead")
        episode = repo.add_episode(env_episode(study.id, session, num_steps=4))
    path = tmp_path / "fields.yaml"
    path.write_text(FIELDS)
    assert run(capsys, "study", "fields", "--study", study.id, str(path), "--data", data, "--user", "lead")[0] == 0
    values = tmp_path / "values.jsonl"
    ref = f"{study.id}/{session.id}/{episode.id}"
    for bad, message in (
        (f"{study.id}/{other.id}/{episode.id}", f"{values}:1: episode {episode.id!r} is not in session {other.id!r}"),
        (f"elsewhere/{session.id}/{episode.id}", f"{values}:1: episode 'elsewhere/{session.id}/{episode.id}' is not in"),
        (f"{study.id}//{episode.id}", "is not STUDY/SESSION/EPISODE"),
    ):
        values.write_text(json.dumps({"episode": bad, "step": 1, "field": "note", "value": "x", "user": "ann"}) + "\n")
        code, _, err = run(capsys, "fields", "import", "--study", study.id, str(values), "--data", data, "--user", "lead")
        assert code == 2 and message in err, err
    values.write_text(json.dumps({"episode": ref, "step": 1, "field": "note", "value": "jumps", "user": "ann"}) + "\n")
    code, out, _ = run(capsys, "fields", "import", "--study", study.id, str(values), "--data", data, "--user", "lead")
    assert code == 0 and out.strip() == f"imported 1 value(s) and 0 suggestion(s) into study {study.id}"
    with open_store(None, data) as repo:
        stored = field_values.values(repo, [episode.id])[episode.id]
    assert [(v.field, v.step, v.user, v.value, v.origin) for v in stored] == [("note", 1, "ann", "jumps", "imported")]

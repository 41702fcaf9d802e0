"""A study's own fields in the store (pipelines/store/field_defs.py, field_values.py) on the UI episode converted
from the real DroidBot run in ../shared/fixtures: definitions from a file, values per annotator with audit and
undo/redo, origins against suggestions, removed fields kept, and imports refused whole on one bad line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines import convert
from pipelines.store import InvalidSpec, PermissionDenied, Repository, StoreError
from pipelines.store import field_values as fv
from pipelines.store.audit import describe
from pipelines.store.field_defs import FieldValueError, load_fields, parse_text
from pipelines.ui_import import import_ui

ALICE, BOB = "alice@example.com", "bob@example.com"
FIELDS = """
fields:
  - {name: step_instruction, scope: step, kind: text, guideline: What the user asked for at this step}
  - {name: action_correct, scope: step, kind: choice, options: [yes, no, unsure], keys: [y, n, u]}
  - {name: task_success, scope: episode, kind: boolean}
  - {name: confidence, scope: step, kind: number, min: 0, max: 5, integer: true}
  - {name: problems, scope: segment, kind: multi_choice, options: [slow, wrong_app, loop]}
"""


@pytest.fixture(scope="module")
def converted(tmp_path_factory, fixtures_dir) -> Path:
    out = tmp_path_factory.mktemp("fields") / "converted"
    assert convert.run([str(fixtures_dir / "droidbot"), str(out), "--runner=FnApiRunner", "--quiet"]) in (0, None)
    return out


@pytest.fixture
def ui(repo: Repository, converted: Path, tmp_path: Path):
    """(study id, ref of the imported DroidBot episode) with FIELDS defined by ALICE (the creator)."""
    study = import_ui(repo, str(converted), "fields", ALICE)
    (episode,) = repo.list_episodes(study_id=study.id)
    path = tmp_path / "fields.yaml"
    path.write_text(FIELDS)
    fv.define(repo, study.id, load_fields(path), ALICE)
    return study.id, Repository.ref(episode)


def test_definitions_from_yaml_keep_words_and_refuse_bad_files(tmp_path: Path) -> None:
    fields = parse_text(FIELDS, "f.yaml")
    assert [f.name for f in fields] == ["step_instruction", "action_correct", "task_success", "confidence", "problems"]
    assert fields[1].options == ("yes", "no", "unsure")  # YAML 1.2 booleans: "yes" stays a word
    assert fields[1].option_keys() == ("y", "n", "u") and fields[2].option_keys() == ("y", "n")
    assert fields[4].option_keys() == ("1", "2", "3")
    bad = {
        "fields: [{name: a, scope: step, kind: colour}]": "fields[0].kind: 'colour' is not one of",
        "fields: [{name: a, scope: step, kind: choice}]": "fields[0] (a): a choice field needs options",
        "fields: [{name: a, scope: step, kind: text}, {name: a, scope: step, kind: text}]": "used twice",
        "fields: [{name: a, scope: step, kind: number, min: 3, max: 1}]": "min 3 is larger than max 1",
        "fields: [{name: a, scope: step, kind: choice, options: [x, y], keys: [q]}]": "1 keys for 2 options",
        "fields: [{name: A b, scope: step, kind: text}]": "fields[0].name: 'A b' does not match",
        "fields: [{name: a, scope: step, kind: text, colour: red}]": "Additional properties are not allowed",
        "fields: [": "invalid YAML at line 1",
    }
    for text, message in bad.items():
        with pytest.raises(InvalidSpec, match="^bad.yaml: ") as err:
            parse_text(text, "bad.yaml")
        assert message in str(err.value), text
    (tmp_path / "f.txt").write_text(FIELDS)
    with pytest.raises(InvalidSpec, match=r"f\.txt: a fields file must end in \.json, \.yaml or \.yml"):
        load_fields(tmp_path / "f.txt")


def test_values_per_annotator_with_origin_audit_and_undo(repo: Repository, ui) -> None:
    study_id, ref = ui
    a = fv.set_value(repo, ref, "action_correct", ALICE, "yes", step=1, seconds=4.5)
    b = fv.set_value(repo, ref, "action_correct", BOB, "no", step=1)
    assert (a.value, a.origin, a.seconds, b.value) == ("yes", "scratch", 4.5, "no")
    # a step text of the converted episode, passed in by the caller, makes the value accepted or edited
    assert fv.set_value(repo, ref, "step_instruction", ALICE, " open the menu ", step=1,
                        suggested=["open the menu"]).origin == "accepted"  # fmt: skip
    assert fv.set_value(repo, ref, "step_instruction", BOB, "open settings", step=1,
                        suggested=["open the menu"]).origin == "edited"  # fmt: skip
    assert fv.set_value(repo, ref, "task_success", ALICE, True).place == (-1, -1)
    assert fv.set_value(repo, ref, "problems", ALICE, ["loop", "slow"], step=0, end=2).value == ["slow", "loop"]
    # a newer value replaces the author's older one; each change has its audit row
    fv.set_value(repo, ref, "action_correct", ALICE, "unsure", step=1)
    mine = fv.values(repo, [ref.episode_id], user=ALICE)[ref.episode_id]
    assert sorted((v.field, v.place, v.value) for v in mine) == [
        ("action_correct", (1, 1), "unsure"), ("problems", (0, 2), ["slow", "loop"]),
        ("step_instruction", (1, 1), "open the menu"), ("task_success", (-1, -1), True),
    ]  # fmt: skip
    entry = repo.undo_last(ALICE, ref)
    assert "Undid: field 'action_correct' set to 'unsure' on step 1" in describe(entry)
    assert {v.value for v in fv.values(repo, [ref.episode_id], user=ALICE)[ref.episode_id]
            if v.field == "action_correct"} == {"yes"}  # fmt: skip
    repo.redo_last(ALICE, ref)
    fv.set_value(repo, ref, "action_correct", ALICE, None, step=1)  # clear
    assert not [v for v in fv.values(repo, [ref.episode_id], user=ALICE)[ref.episode_id] if v.field == "action_correct"]
    repo.undo_last(ALICE, ref)  # the clear undone: the value is back under its author and time
    (back,) = [v for v in fv.values(repo, [ref.episode_id], user=ALICE)[ref.episode_id] if v.field == "action_correct"]
    assert back.value == "unsure" and back.user == ALICE
    # BOB's value is untouched by ALICE's undo history
    assert [v.value for v in fv.values(repo, [ref.episode_id], user=BOB)[ref.episode_id]
            if v.field == "action_correct"] == ["no"]  # fmt: skip


def test_values_that_do_not_fit_are_refused(repo: Repository, ui) -> None:
    _, ref = ui
    cases = [
        ("action_correct", "maybe", {"step": 0}, "'maybe' is not one of its options"),
        ("confidence", 7, {"step": 0}, "7 is above its maximum 5"),
        ("confidence", 2.5, {"step": 0}, "2.5 is not a whole number"),
        ("confidence", True, {"step": 0}, "a number value is a finite number"),
        ("task_success", True, {"step": 3}, "given to the episode, not to step 3"),
        ("action_correct", "yes", {}, "it needs a step"),
        ("problems", ["slow"], {"step": 2, "end": 1}, "needs an end >= 2"),
        ("nope", "x", {"step": 0}, "has no field 'nope'"),
    ]
    for field, value, place, message in cases:
        with pytest.raises(FieldValueError, match=message):
            fv.set_value(repo, ref, field, ALICE, value, **place)
    with pytest.raises(StoreError, match="step 999 is out of range"):
        fv.set_value(repo, ref, "action_correct", ALICE, "yes", step=999)


def test_redefining_keeps_removed_fields_and_their_values(repo: Repository, ui) -> None:
    study_id, ref = ui
    fv.set_value(repo, ref, "action_correct", ALICE, "yes", step=0)
    fewer = parse_text("fields: [{name: task_success, scope: episode, kind: boolean}]", "f.yaml")
    with pytest.raises(PermissionDenied, match="only the creator"):
        fv.define(repo, study_id, fewer, BOB)
    fv.define(repo, study_id, fewer, ALICE)
    assert [d.name for d in fv.definitions(repo, study_id)] == ["task_success"]
    removed = [d for d in fv.definitions(repo, study_id, include_removed=True) if not d.active]
    assert "action_correct" in {d.name for d in removed}
    assert [v.value for v in fv.values(repo, [ref.episode_id])[ref.episode_id]] == ["yes"]  # still readable
    with pytest.raises(FieldValueError, match="has no field 'action_correct'"):  # no new values
        fv.set_value(repo, ref, "action_correct", ALICE, "no", step=0)
    changed = parse_text("fields: [{name: action_correct, scope: step, kind: text}]", "f.yaml")
    with pytest.raises(InvalidSpec, match="its kind and scope cannot change"):
        fv.define(repo, study_id, changed, ALICE)


def test_import_refuses_the_whole_file_on_one_bad_line(repo: Repository, ui, tmp_path: Path) -> None:
    study_id, ref = ui
    good = [
        {"episode": ref.episode_id, "step": 0, "field": "step_instruction", "value": "tap OK", "source": "model-x"},
        {"episode": ref.episode_id, "step": None, "field": "task_success", "value": False, "user": BOB},
    ]
    bad_lines = [
        ({"episode": ref.episode_id, "step": 0, "field": "colour", "value": "x", "source": "m"}, "unknown field 'colour'"),
        ({"episode": ref.episode_id, "step": 0, "field": "action_correct", "value": "maybe", "source": "m"},
         "'maybe' is not one of its options"),
        ({"episode": "nope", "step": 0, "field": "action_correct", "value": "yes", "source": "m"},
         "episode 'nope' is not in study"),
        ({"episode": ref.episode_id, "step": 0, "field": "confidence", "value": 9, "source": "m"}, "above its maximum 5"),
    ]
    for line, message in bad_lines:
        path = tmp_path / "values.jsonl"
        path.write_text("\n".join(json.dumps(x) for x in [*good, line]) + "\n")
        with pytest.raises(StoreError, match=f"values.jsonl:3: .*{message}"):
            fv.import_values(repo, study_id, path, ALICE)
        assert fv.suggestions(repo, [ref.episode_id]) == {} and fv.values(repo, [ref.episode_id]) == {}
    path.write_text("\n".join(json.dumps(x) for x in good) + "\n")
    assert fv.import_values(repo, study_id, path, ALICE) == fv.ImportResult(values=1, suggestions=1)
    (suggestion,) = fv.suggestions(repo, [ref.episode_id])[ref.episode_id]
    assert (suggestion.user, suggestion.value, suggestion.place) == ("model-x", "tap OK", (0, 0))
    (imported,) = fv.values(repo, [ref.episode_id])[ref.episode_id]
    assert (imported.user, imported.value, imported.origin) == (BOB, False, "imported")
    # the imported suggestion decides the origin of an annotator's value at that place
    assert fv.set_value(repo, ref, "step_instruction", ALICE, "tap OK", step=0).origin == "accepted"
    assert fv.set_value(repo, ref, "step_instruction", BOB, "tap Cancel", step=0).origin == "edited"


def test_audit_entries_read_in_plain_words(repo: Repository, ui) -> None:
    study_id, ref = ui
    fv.set_value(repo, ref, "problems", ALICE, ["slow"], step=2, end=4)
    fv.set_value(repo, ref, "task_success", ALICE, False)
    fv.adjudicate(repo, ref, "task_success", ALICE, True)
    words = [describe(e) for e in repo.audit_log(ref)][:3]
    assert words[0].startswith("consensus of field 'task_success' set to 'True' on the episode")
    assert words[1].startswith("field 'task_success' set to 'False' on the episode")
    assert words[2].startswith("field 'problems' set to \"['slow']\" on steps 2–4")


def test_an_empty_multi_choice_value_is_no_value(repo: Repository, ui) -> None:
    """Nothing picked is not a value: [] stores nothing (no `scratch` value counted as filled) and clears a value
    that was saved, as null does."""
    _, ref = ui
    assert fv.set_value(repo, ref, "problems", ALICE, [], step=2, end=3) is None
    assert fv.values(repo, [ref.episode_id]) == {}
    assert fv.set_value(repo, ref, "problems", ALICE, ["loop"], step=2, end=3).value == ["loop"]
    assert fv.set_value(repo, ref, "problems", ALICE, [], step=2, end=3) is None
    assert fv.values(repo, [ref.episode_id]) == {}
    assert describe(repo.audit_log(ref)[0]).startswith("field 'problems' cleared")


def test_import_needs_a_lead_and_never_overwrites_a_value_entered_by_hand(
    repo: Repository, ui, tmp_path: Path
) -> None:
    study_id, ref = ui
    path = tmp_path / "values.jsonl"

    def write(*lines: dict) -> Path:
        path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        return path

    line = {"episode": ref.episode_id, "step": 1, "field": "action_correct", "value": "no", "user": BOB}
    with pytest.raises(PermissionDenied, match="only the creator .* or a reviewer may import field values"):
        fv.import_values(repo, study_id, write(line), BOB)  # BOB is no reviewer: nothing read, nothing stored
    assert fv.values(repo, [ref.episode_id]) == {}
    repo.set_reviewers(study_id, [BOB], ALICE)
    assert fv.import_values(repo, study_id, write(line), BOB).values == 1  # a reviewer may
    # a later import replaces what an earlier import put there
    assert fv.import_values(repo, study_id, write({**line, "value": "unsure"}), ALICE).values == 1
    (imported,) = fv.values(repo, [ref.episode_id])[ref.episode_id]
    assert (imported.value, imported.origin) == ("unsure", "imported")
    # ... but never a value BOB entered himself: the file is refused whole, naming the line
    fv.set_value(repo, ref, "action_correct", BOB, "yes", step=2)
    other = {"episode": ref.episode_id, "step": 0, "field": "step_instruction", "value": "tap", "source": "m"}
    with pytest.raises(StoreError, match=r"values.jsonl:3: bob@example.com already has a value of action_correct "
                                         r"on step 2 .*origin scratch.*refused whole, nothing imported"):  # fmt: skip
        fv.import_values(repo, study_id, write(other, {**line, "value": "yes"}, {**line, "step": 2, "value": "no"}),
                         ALICE)  # fmt: skip
    by_step = {v.step: (v.value, v.origin) for v in fv.values(repo, [ref.episode_id])[ref.episode_id]}
    assert by_step == {1: ("unsure", "imported"), 2: ("yes", "scratch")}
    assert fv.suggestions(repo, [ref.episode_id]) == {}
    # an empty multi_choice value imported under a user is no value: it stores nothing
    empty = {"episode": ref.episode_id, "step": 2, "end": 3, "field": "problems", "value": [], "user": BOB}
    assert fv.import_values(repo, study_id, write(empty), ALICE).values == 0
    assert not [v for v in fv.values(repo, [ref.episode_id])[ref.episode_id] if v.field == "problems"]


def test_an_option_in_use_cannot_be_removed_and_adjudications_count(repo: Repository, ui, tmp_path: Path) -> None:
    study_id, ref = ui
    fv.set_value(repo, ref, "action_correct", ALICE, "unsure", step=0)
    fv.set_value(repo, ref, "action_correct", BOB, "unsure", step=1)
    fv.set_value(repo, ref, "problems", ALICE, ["slow", "loop"], step=1, end=2)
    fv.adjudicate(repo, ref, "task_success", ALICE, True)  # an adjudication is the only thing stored for it
    (tmp_path / "s.jsonl").write_text(json.dumps({"episode": ref.episode_id, "step": 3, "field": "action_correct",
                                                  "value": "no", "source": "model-x"}) + "\n")  # fmt: skip
    fv.import_values(repo, study_id, tmp_path / "s.jsonl", ALICE)

    def redefine(old: str, new: str) -> None:
        assert old in FIELDS
        fv.define(repo, study_id, parse_text(FIELDS.replace(old, new), "f.yaml"), ALICE)

    with pytest.raises(InvalidSpec, match=r"^field action_correct: option\(s\) still used cannot be removed or "
                                          r"renamed \('unsure': 2 value\(s\)\)"):  # fmt: skip
        redefine("options: [yes, no, unsure], keys: [y, n, u]", "options: [yes, no], keys: [y, n]")
    with pytest.raises(InvalidSpec, match=r"\('no': 1 suggestion\(s\)\)"):
        redefine("options: [yes, no, unsure], keys: [y, n, u]", "options: [yes, nope, unsure], keys: [y, n, u]")
    with pytest.raises(InvalidSpec, match=r"^field problems: .*\('slow': 1 value\(s\); 'loop': 1 value\(s\)\)"):
        redefine("options: [slow, wrong_app, loop]", "options: [wrong_app]")
    with pytest.raises(InvalidSpec, match="field task_success: it has 1 adjudication.* cannot change"):
        redefine("{name: task_success, scope: episode, kind: boolean}", "{name: task_success, scope: step, kind: boolean}")
    # an unused option may go, and a new one may come
    redefine("options: [slow, wrong_app, loop]", "options: [slow, loop, popup]")
    assert next(d for d in fv.definitions(repo, study_id) if d.name == "problems").options == ("slow", "loop", "popup")

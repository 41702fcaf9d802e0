"""A study's own fields in the store (pipelines/store/field_defs.py, field_values.py) on the UI episode converted
from the real DroidBot run in ../shared/fixtures: definitions from a file, values per annotator with audit and
undo/redo, origins against suggestions, removed fields kept, and imports refused whole on one bad line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipelines import convert
from pipelines.store import Conflict, InvalidSpec, PermissionDenied, Repository, StoreError
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


def test_a_change_replaces_only_the_value_the_form_showed(repo: Repository, ui) -> None:
    """Issue 32: `replaces` is the value the person's form showed at the place. Saving one field leaves another
    alone, and a clear or change sent from a form that showed a stale value (blank where the store holds one) is
    refused whole: nothing cleared, no `field.clear` audited."""
    _, ref = ui

    def mine() -> dict:
        return {(v.field, v.place): v.value for v in fv.values(repo, [ref.episode_id], user=ALICE)[ref.episode_id]}

    fv.set_value(repo, ref, "task_success", ALICE, True, replaces=None)
    fv.set_value(repo, ref, "action_correct", ALICE, "yes", step=1, replaces=None)
    assert mine() == {("task_success", (-1, -1)): True, ("action_correct", (1, 1)): "yes"}
    message = f"^{ALICE}'s task_success on the episode holds true by now, not nothing as shown: nothing changed$"
    with pytest.raises(Conflict, match=message):
        fv.set_value(repo, ref, "task_success", ALICE, None, replaces=None)  # a blank form's clear
    with pytest.raises(Conflict, match="holds true by now, not false as shown"):
        fv.set_value(repo, ref, "task_success", ALICE, None, replaces=False)
    with pytest.raises(Conflict, match="^.*action_correct on step 1 holds 'yes' .* by now, not nothing"):
        fv.set_value(repo, ref, "action_correct", ALICE, "no", step=1, replaces=None)
    assert mine() == {("task_success", (-1, -1)): True, ("action_correct", (1, 1)): "yes"}
    assert "field.clear" not in [e.action for e in repo.audit_log(ref)]
    # True is not 1, 2 is 2.0; a change to what the slot holds by now changes nothing and is no conflict
    fv.set_value(repo, ref, "confidence", ALICE, 1, step=2)
    with pytest.raises(Conflict):
        fv.set_value(repo, ref, "confidence", ALICE, 3, step=2, replaces=True)
    assert fv.set_value(repo, ref, "confidence", ALICE, 2, step=2, replaces=1.0).value == 2
    assert fv.set_value(repo, ref, "confidence", ALICE, 2, step=2, replaces=4).value == 2
    # a segment: nothing picked ([]) is nothing, on both sides
    fv.set_value(repo, ref, "problems", ALICE, ["slow"], step=3, end=5, replaces=[])
    with pytest.raises(Conflict):
        fv.set_value(repo, ref, "problems", ALICE, [], step=3, end=5, replaces=[])
    # what the form showed is replaced, or cleared
    assert fv.set_value(repo, ref, "task_success", ALICE, False, replaces=True).value is False
    assert fv.set_value(repo, ref, "task_success", ALICE, None, replaces=False) is None
    assert fv.set_value(repo, ref, "problems", ALICE, [], step=3, end=5, replaces=["slow"]) is None
    assert mine() == {("action_correct", (1, 1)): "yes", ("confidence", (2, 2)): 2}


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


def _import_suggestion(repo: Repository, study_id: str, ref, tmp_path: Path, field: str, step: int, value) -> None:
    """A suggestion of model-x (a later one replaces it: the only way a suggestion changes)."""
    path = tmp_path / "suggestion.jsonl"
    path.write_text(json.dumps({"episode": ref.episode_id, "step": step, "field": field, "value": value,
                                "source": "model-x"}) + "\n")  # fmt: skip
    fv.import_values(repo, study_id, path, ALICE)


def _confidence(repo: Repository, study_id: str, spec: str) -> InvalidSpec | None:
    """Define FIELDS with confidence as `spec` ("min: 0, max: 5"); the refusal, or None when accepted."""
    old = "{name: confidence, scope: step, kind: number, min: 0, max: 5, integer: true}"
    try:
        fv.define(repo, study_id, parse_text(FIELDS.replace(old, f"{{name: confidence, scope: step, kind: number, "
                                                                 f"{spec}}}"), "f.yaml"), ALICE)  # fmt: skip
    except InvalidSpec as exc:
        return exc
    return None


def test_a_number_field_cannot_narrow_while_stored_values_fall_outside(repo: Repository, ui, tmp_path: Path) -> None:
    """A raised min, a lowered max or integer added is refused, naming the constraint, the counts and examples,
    while a value, a suggestion or an adjudication lies outside; accepted once they fit; widening always is."""
    study_id, ref = ui
    assert _confidence(repo, study_id, "min: -1, max: 10") is None  # widening: integer dropped, range wider
    fv.set_value(repo, ref, "confidence", ALICE, 7.5, step=0)
    fv.set_value(repo, ref, "confidence", BOB, 2, step=0)
    _import_suggestion(repo, study_id, ref, tmp_path, "confidence", 1, 9)
    fv.adjudicate(repo, ref, "confidence", ALICE, 0.5, step=0)
    then = fv.definitions(repo, study_id)
    refused = {
        "min: -1, max: 5": r"^field confidence: max lowered from 10 to 5, but 1 value\(s\), 1 suggestion\(s\) "
                           r"stored would not fit \(e\.g\. 7\.5, 9\); clear or change those first, or give the new "
                           r"field another name$",
        "min: 1, max: 10": r"^field confidence: min raised from -1 to 1, but 1 adjudication\(s\) stored would not "
                           r"fit \(e\.g\. 0\.5\); ",
        "min: -1, max: 10, integer: true": r"^field confidence: integer: true added, but 1 value\(s\), "
                                           r"1 adjudication\(s\) stored would not fit \(e\.g\. 7\.5, 0\.5\); ",
        "max: 8": r"^field confidence: max lowered from 10 to 8, but 1 suggestion\(s\) stored would not fit "
                  r"\(e\.g\. 9\); ",  # min dropped (wider) while max is lowered: still refused
        "min: 1, max: 100": r"^field confidence: min raised from -1 to 1, but 1 adjudication\(s\) ",
    }  # fmt: skip
    for spec, message in refused.items():
        error = _confidence(repo, study_id, spec)
        assert error is not None and re.match(message, str(error)), (spec, error)
        assert "\n" not in str(error)
    assert fv.definitions(repo, study_id) == then  # nothing changed by a refusal
    # once what lay outside is cleared or changed, the same narrowing is accepted
    fv.set_value(repo, ref, "confidence", ALICE, None, step=0)
    _import_suggestion(repo, study_id, ref, tmp_path, "confidence", 1, 4)
    fv.adjudicate(repo, ref, "confidence", ALICE, 2, step=0)
    assert _confidence(repo, study_id, "min: 0, max: 5, integer: true") is None
    confidence = next(d for d in fv.definitions(repo, study_id) if d.name == "confidence")
    assert (confidence.min, confidence.max, confidence.integer) == (0, 5, True)


def test_a_text_field_cannot_shorten_below_stored_texts(repo: Repository, ui, tmp_path: Path) -> None:
    study_id, ref = ui
    old = "{name: step_instruction, scope: step, kind: text, guideline: What the user asked for at this step}"

    def limit(n: int) -> None:
        new = f"{{name: step_instruction, scope: step, kind: text, max_length: {n}}}"
        fv.define(repo, study_id, parse_text(FIELDS.replace(old, new), "f.yaml"), ALICE)

    fv.set_value(repo, ref, "step_instruction", ALICE, "open the settings menu", step=0)
    _import_suggestion(repo, study_id, ref, tmp_path, "step_instruction", 1, "tap OK")
    with pytest.raises(InvalidSpec, match=r"^field step_instruction: max_length lowered from 5000 to 10, but "
                                          r"1 value\(s\) stored would not fit \(e\.g\. 'open the settings me…' "
                                          r"\(22 characters\)\); clear or change those first"):  # fmt: skip
        limit(10)
    limit(22)  # every stored text fits
    with pytest.raises(InvalidSpec, match=r"max_length lowered from 22 to 5, but 1 value\(s\), 1 suggestion\(s\)"):
        limit(5)
    limit(100)  # widening
    fv.set_value(repo, ref, "step_instruction", ALICE, "tap", step=0)
    with pytest.raises(InvalidSpec, match=r"lowered from 100 to 5, but 1 suggestion\(s\) stored would not fit "
                                          r"\(e\.g\. 'tap OK' \(6 characters\)\)"):  # fmt: skip
        limit(5)
    limit(6)


def test_narrowing_counts_every_value_but_quotes_two(repo: Repository, ui, monkeypatch) -> None:
    """Values are streamed in batches (here 2 rows a round trip) and counted to the end; two are quoted."""
    study_id, ref = ui
    monkeypatch.setattr(fv, "_BATCH", 2)
    for step in range(5):
        fv.set_value(repo, ref, "confidence", ALICE, 5, step=step)
        fv.set_value(repo, ref, "confidence", BOB, 4, step=step)
    error = _confidence(repo, study_id, "min: 0, max: 3, integer: true")
    assert re.match(r"^field confidence: max lowered from 5 to 3, but 10 value\(s\) stored would not fit "
                    r"\(e\.g\. (5, 4|4, 5)\); ", str(error)), error  # fmt: skip


def test_a_change_that_cannot_refuse_a_value_reads_no_values(repo: Repository, ui) -> None:
    """Guidelines, keys, option order, an added option or a widened limit: stored values are not read at all;
    a narrowing reads them (so the count below sees reads when there are some)."""
    study_id, ref = ui
    fv.set_value(repo, ref, "confidence", ALICE, 3, step=0)
    fv.set_value(repo, ref, "action_correct", ALICE, "yes", step=0)
    fv.set_value(repo, ref, "step_instruction", ALICE, "open the menu", step=0)
    reads: list[str] = []

    def seen(conn, cursor, statement: str, *args) -> None:
        if any(t in statement for t in ("field_values", "field_suggestions", "field_adjudications")):
            reads.append(statement)

    sa.event.listen(repo.engine, "before_cursor_execute", seen)
    try:
        unchanged = [
            ("guideline: What the user asked for at this step", "guideline: The words the user typed"),
            ("options: [yes, no, unsure], keys: [y, n, u]", "options: [unsure, no, yes, skip], keys: [u, n, y, s]"),
            ("min: 0, max: 5, integer: true", "min: -5, max: 50"),
            ("kind: text,", "kind: text, max_length: 6000,"),
        ]
        text = FIELDS
        for old, new in unchanged:
            assert old in text
            text = text.replace(old, new)
            fv.define(repo, study_id, parse_text(text, "f.yaml"), ALICE)
        assert reads == []
        fv.define(repo, study_id, parse_text(text.replace("max: 50", "max: 4"), "f.yaml"), ALICE)
        assert reads  # a narrowing reads the stored values (and finds they all fit)
    finally:
        sa.event.remove(repo.engine, "before_cursor_execute", seen)
    defs = {d.name: d for d in fv.definitions(repo, study_id)}
    assert defs["step_instruction"].guideline == "The words the user typed" and defs["confidence"].max == 4
    assert defs["action_correct"].options == ("unsure", "no", "yes", "skip")

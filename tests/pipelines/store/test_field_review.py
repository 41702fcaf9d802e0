"""Review of suggestions (pipelines/store/field_review.py): per field and source, exact counts of accepted,
edited, replaced and unseen suggestions on a hand-built study, and alpha with the model as one more annotator
against the hand computation (and the `krippendorff` package), SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.store import field_review as fr
from pipelines.store import field_values as fv
from pipelines.store.field_defs import FieldDef, parse_text
from protos.rlds_creator import client_pb2, study_pb2
from tests.pipelines.store.conftest import env_episode, study_spec
from tests.pipelines.store.test_field_agreement import package

FIELDS = """fields:
  - {name: ok, scope: step, kind: choice, options: ['yes', 'no', unsure]}
  - {name: note, scope: step, kind: text}
  - {name: problems, scope: step, kind: multi_choice, options: [slow, loop, popup]}
"""
MODEL = "model:demo-vlm@1"


def ref(episode: study_pb2.Episode) -> client_pb2.EpisodeRef:
    return client_pb2.EpisodeRef(episode_id=episode.id)


def write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def build(repo, tmp_path: Path) -> str:
    """The hand-built study (see each line's comment: what it makes of the suggestion there)."""
    study = repo.create_study(study_spec(), "lead")
    session, bad = repo.create_session(study.id, "lead"), repo.create_session(study.id, "lead")
    episode = repo.add_episode(env_episode(study.id, session, num_steps=6))
    ignored = repo.add_episode(env_episode(study.id, bad, num_steps=6))
    fv.define(repo, study.id, parse_text(FIELDS, "f.yaml"), "lead")
    e = ref(episode)
    fv.set_value(repo, e, "ok", "ann", "no", step=3)  # written before the suggestion came: it stays unseen
    suggestions = [
        (0, "ok", "yes"), (1, "ok", "no"), (2, "ok", "yes"), (3, "ok", "no"), (4, "ok", "unsure"),
        (0, "note", "open the settings menu"), (1, "note", "tap the search bar"), (2, "note", "scroll down"),
        (3, "note", "type pizza"), (0, "problems", ["slow", "loop"]), (1, "problems", ["popup"]),
    ]  # fmt: skip
    lines = [{"episode": episode.id, "step": step, "field": name, "value": value, "source": MODEL}
             for step, name, value in suggestions]  # fmt: skip
    lines += [
        {"episode": episode.id, "step": 1, "field": "ok", "value": "yes", "source": "other-tool"},
        {"episode": episode.id, "step": 2, "field": "ok", "value": "no", "user": "cid"},  # imported: no answer
        {"episode": ignored.id, "step": 0, "field": "ok", "value": "no", "source": MODEL},  # INVALID session
    ]
    fv.import_values(repo, study.id, write(tmp_path / "suggestions.jsonl", lines), "lead")
    answers = [
        ("ann", 0, "ok", "yes"), ("bea", 0, "ok", "yes"),  # model: 2 accepted
        ("ann", 1, "ok", "yes"),  # model: replaced; other-tool: accepted
        ("ann", 4, "ok", "yes"), ("bea", 4, "ok", "no"),  # model: 2 replaced
        ("ann", 5, "ok", "yes"), ("bea", 5, "ok", "yes"),  # no suggestion there
        ("ann", 0, "note", "open the settings menu"),  # accepted
        ("ann", 1, "note", "tap on the search bar"),  # edited (similarity 18/21)
        ("ann", 2, "note", "go back to the home screen"),  # replaced
        ("ann", 0, "problems", ["slow"]), ("bea", 0, "problems", ["popup"]),  # edited, replaced
    ]
    for user, step, name, value in answers:
        fv.set_value(repo, e, name, user, value, step=step)
    fv.set_value(repo, ref(ignored), "ok", "ann", "yes", step=0)
    repo.set_session_state(bad.id, study_pb2.Session.STATE_INVALID)
    return study.id


def test_review_counts_and_alpha_with_the_model(repo, tmp_path: Path, monkeypatch) -> None:
    study_id = build(repo, tmp_path)
    monkeypatch.setattr(fr, "BATCH", 3)
    got = {(r.field, r.source): r for r in fr.study_field_review(repo, study_id)}
    assert list(got) == [("ok", MODEL), ("ok", "other-tool"), ("note", MODEL), ("problems", MODEL)]
    counts = {key: (r.suggestions, r.unseen, r.answers, r.accepted, r.edited, r.replaced) for key, r in got.items()}
    assert counts == {
        ("ok", MODEL): (5, 2, 5, 2, 0, 3),  # steps 2 (only an import there) and 3 (answered before) unseen
        ("ok", "other-tool"): (1, 0, 1, 1, 0, 0),
        ("note", MODEL): (4, 1, 3, 1, 1, 1),
        ("problems", MODEL): (2, 1, 2, 0, 1, 1),
    }
    assert got[("ok", MODEL)].accepted_rate == pytest.approx(2 / 5)

    # People only, units (steps 0, 4, 5) {yes, yes}, {yes, no}, {yes, yes}: n = 6 (5 yes, 1 no), the one
    # disagreeing pair counted both ways: alpha = 1 - (n - 1) * 2 / (n^2 - 25 - 1) = 1 - 10 / 10 = 0.
    ok = got[("ok", MODEL)]
    assert (ok.people_units, ok.alpha_people) == (3, pytest.approx(0.0, abs=1e-12))
    # With the model: step 0 {yes x3}, 1 {yes, no}, 2 {no (cid, imported), yes}, 3 {no, no}, 4 {yes, no,
    # unsure}, 5 {yes, yes}: n = 14 (8 yes, 5 no, 1 unsure); disagreement 2 + 2 + 6 / 2 = 7;
    # alpha = 1 - 13 * 7 / (196 - 64 - 25 - 1) = 1 - 91 / 106.
    assert (ok.units, ok.alpha) == (6, pytest.approx(15 / 106, rel=1e-12))
    units = [["yes", "yes", "yes"], ["yes", "no"], ["no", "yes"], ["no", "no"], ["yes", "no", "unsure"], ["yes", "yes"]]
    assert ok.alpha == pytest.approx(package(units, "nominal"), rel=1e-9)
    # other-tool joins the people's units at step 1 only ({yes, yes}): n = 8 (7 yes, 1 no): 1 - 7 * 2 / 14.
    other = got[("ok", "other-tool")]
    assert (other.units, other.alpha, other.alpha_people) == (4, pytest.approx(0.0, abs=1e-12), ok.alpha_people)
    note = got[("note", MODEL)]  # one person per place: a unit only with the model
    assert (note.people_units, note.alpha_people, note.units) == (0, None, 3)
    assert note.to_json()["accepted_rate"] == pytest.approx(1 / 3)


def test_an_answer_is_accepted_edited_or_replaced_by_the_kind_of_the_field() -> None:
    text = FieldDef.from_json({"name": "note", "scope": "step", "kind": "text"})
    choice = FieldDef.from_json({"name": "ok", "scope": "step", "kind": "choice", "options": ["a", "b"]})
    multi = FieldDef.from_json({"name": "p", "scope": "step", "kind": "multi_choice", "options": ["a", "b", "c"]})
    number = FieldDef.from_json({"name": "n", "scope": "step", "kind": "number"})
    assert fr.answer_kind(text, "tap the search bar", "tap on the search bar") == "edited"
    assert fr.answer_kind(text, "scroll down", "go back to the home screen") == "replaced"
    assert fr.answer_kind(choice, "a", "a") == "accepted" and fr.answer_kind(choice, "a", "b") == "replaced"
    assert fr.answer_kind(multi, ["a", "b"], ["a"]) == "edited" and fr.answer_kind(multi, ["a"], ["c"]) == "replaced"
    assert fr.answer_kind(number, 3, 3.0) == "accepted" and fr.answer_kind(number, 3, 4) == "replaced"


def test_a_study_without_suggestions_has_no_review(repo) -> None:
    study = repo.create_study(study_spec(), "lead")
    assert fr.study_field_review(repo, study.id) == []
    fv.define(repo, study.id, parse_text(FIELDS, "f.yaml"), "lead")
    assert fr.study_field_review(repo, study.id) == []

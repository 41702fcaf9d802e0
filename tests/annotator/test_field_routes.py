"""The study-field routes of the player (annotator/web/field_routes.py) in process (Starlette's TestClient), over
a real store holding the UI episode converted from ../shared/fixtures/droidbot."""

from __future__ import annotations

import json

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.testclient import TestClient

from annotator.operations import ref_key, ref_of
from annotator.web import context, field_routes, guard
from pipelines.store import field_values as fv
from pipelines.store import open_store
from pipelines.store.field_defs import parse_text
from tests.annotator.annotator_data import ALICE, BOB, import_ui_fixtures
from tests.pipelines.export.test_export_android_control import control  # noqa: F401 (a fixture used here)

pytestmark = pytest.mark.slow
FIELDS = """
fields:
  - {name: instruction, scope: step, kind: text}
  - {name: action_correct, scope: step, kind: choice, options: [yes, no, unsure], keys: [y, n, u]}
  - {name: task_success, scope: episode, kind: boolean}
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory, fixtures_dir):
    data_dir = tmp_path_factory.mktemp("field_routes")
    study = import_ui_fixtures(data_dir, fixtures_dir)
    repo = open_store(None, data_dir)
    fv.define(repo, study.id, parse_text(FIELDS, "f.yaml"), study.creator.email)
    (episode,) = repo.list_episodes(study_id=study.id)
    settings = context.Settings(data_dir=data_dir, store=None, user=None)
    app = Starlette(routes=field_routes.routes(settings),
                    middleware=[Middleware(guard.OriginGuard, allowed_hosts=guard.LOOPBACK_NAMES)])  # fmt: skip
    with TestClient(app, base_url="http://127.0.0.1:8501") as client:
        yield client, repo, episode, data_dir
    repo.close()


def url(episode, step: int) -> str:
    return f"/api/fields/{ref_key(ref_of(episode))}/steps/{step}"


def auth(user: str = ALICE) -> dict[str, str]:
    return {"X-Stepmark-Token": context.mint(user)}


def test_form_values_are_per_annotator_and_go_to_the_named_step(world, tmp_path):
    client, repo, episode, _ = world
    form = client.get(url(episode, 2), headers=auth()).json()
    assert [f["name"] for f in form["fields"]] == ["instruction", "action_correct", "task_success"]
    assert form["fields"][1]["option_keys"] == ["y", "n", "u"] and form["fields"][2]["option_keys"] == ["y", "n"]
    assert form["values"] == {} and form["step"] == 2
    lines = [{"episode": episode.id, "step": 2, "field": "instruction", "value": "open the app drawer",
              "source": "model-x"}]  # fmt: skip
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    fv.import_values(repo, episode.study_id, tmp_path / "s.jsonl", ALICE)
    form = client.get(url(episode, 2), headers=auth()).json()
    assert form["suggestions"] == {"instruction": [{"source": "model-x", "value": "open the app drawer"}]}

    reply = client.post(url(episode, 2), json={"field": "instruction", "value": "open the app drawer",
                                               "seconds": 3}, headers=auth()).json()  # fmt: skip
    assert reply["message"] == "Saved instruction on step 2 (accepted)"
    assert reply["values"]["instruction"]["value"] == "open the app drawer"
    client.post(url(episode, 2), json={"field": "action_correct", "value": "no"}, headers=auth(BOB))
    reply = client.post(url(episode, 5), json={"field": "task_success", "value": True}, headers=auth()).json()
    assert reply["message"] == "Saved task_success on the episode (scratch)"
    # each annotator sees only their own values; an episode value shows on every step
    mine = client.get(url(episode, 2), headers=auth()).json()["values"]
    assert set(mine) == {"instruction", "task_success"}
    assert set(client.get(url(episode, 2), headers=auth(BOB)).json()["values"]) == {"action_correct"}
    assert client.get(url(episode, 3), headers=auth()).json()["values"].keys() == {"task_success"}
    stored = {(v.user, v.field, v.step) for v in fv.values(repo, [episode.id])[episode.id]}
    assert stored == {(ALICE, "instruction", 2), (BOB, "action_correct", 2), (ALICE, "task_success", -1)}


def test_bad_values_and_requests_are_refused_in_plain_words(world):
    client, _, episode, _ = world
    cases = [
        ({"field": "action_correct", "value": "maybe"}, 400, "'maybe' is not one of its options"),
        ({"field": "colour", "value": "x"}, 400, "has no field 'colour'"),
        ({"value": "x"}, 400, "needs the field's name"),
        ({"field": "instruction", "value": "x", "seconds": "soon"}, 400, "seconds must be a number"),
    ]
    for body, status, message in cases:
        r = client.post(url(episode, 1), json=body, headers=auth())
        assert r.status_code == status and message in r.json()["error"], body
    r = client.post(url(episode, 10_000), json={"field": "instruction", "value": "x"}, headers=auth())
    assert r.status_code == 400 and "out of range" in r.json()["error"]
    r = client.post(url(episode, 1), content=b'{"field": "instruction", "value": "x"}', headers={
        **auth(), "content-type": "text/plain"})  # fmt: skip
    assert r.status_code == 415
    assert client.get(url(episode, 1)).status_code == 401


def test_a_converted_step_instruction_is_the_suggestion(control, tmp_path):  # noqa: F811 (the fixture)
    """An AndroidControl episode (written from real fixture screens, converted by convert-ui): the study field
    named `instruction` suggests each step's instruction (pipelines/step_text.py); keeping it is `accepted`."""
    repo = open_store(None, control.data_dir)
    study = repo.get_study(control.study_id)
    fv.define(repo, study.id, parse_text(FIELDS, "f.yaml"), study.creator.email)
    (episode,) = repo.list_episodes(study_id=study.id)
    settings = context.Settings(data_dir=control.data_dir, store=None, user=None)
    app = Starlette(routes=field_routes.routes(settings),
                    middleware=[Middleware(guard.OriginGuard, allowed_hosts=guard.LOOPBACK_NAMES)])  # fmt: skip
    expected = control.record.actions[1].instruction
    assert expected == "Scroll down to the settings \u2713"
    with TestClient(app, base_url="http://127.0.0.1:8501") as client:
        form = client.get(url(episode, 1), headers=auth()).json()
        assert form["suggestions"] == {"instruction": [{"source": "episode", "value": expected}]}
        reply = client.post(url(episode, 1), json={"field": "instruction", "value": expected}, headers=auth()).json()
        assert reply["message"] == "Saved instruction on step 1 (accepted)"
        reply = client.post(url(episode, 1), json={"field": "instruction", "value": "Scroll to settings"},
                            headers=auth(BOB)).json()  # fmt: skip
        assert reply["message"] == "Saved instruction on step 1 (edited)"
    repo.close()


def test_a_segment_field_takes_its_span_and_shows_on_every_step_of_it(world):
    client, repo, episode, _ = world
    study = repo.get_study(episode.study_id)
    fv.define(repo, study.id, parse_text(FIELDS + "  - {name: problems, scope: segment, kind: multi_choice, "
                                         "options: [slow, loop]}\n", "f.yaml"), study.creator.email)  # fmt: skip
    reply = client.post(url(episode, 4), json={"field": "problems", "value": ["loop"], "end": 6}, headers=auth(BOB))
    assert reply.json()["message"] == "Saved problems on steps 4–6 (scratch)"
    for step, shown in ((3, False), (4, True), (5, True), (6, True), (7, False)):
        values = client.get(url(episode, step), headers=auth(BOB)).json()["values"]
        assert ("problems" in values) is shown, step
    assert values == {} or "problems" not in values
    r = client.post(url(episode, 6), json={"field": "problems", "value": ["slow"], "end": 2}, headers=auth(BOB))
    assert r.status_code == 400 and "needs an end >= 6" in r.json()["error"]


def test_a_segment_value_is_cleared_or_changed_from_any_step_inside_it(world):
    """The player sends the saved segment's start and end ("start", "end") from a step inside it: clearing reaches
    that segment (not an empty one-step slot) and a change replaces it (no overlapping one-step segment). An
    empty multi_choice value is no value: it stores nothing and clears."""
    client, repo, episode, _ = world
    study = repo.get_study(episode.study_id)
    fv.define(repo, study.id, parse_text(FIELDS + "  - {name: problems, scope: segment, kind: multi_choice, "
                                         "options: [slow, loop]}\n", "f.yaml"), study.creator.email)  # fmt: skip

    def problems() -> list:
        return [(v.step, v.end, v.value) for v in fv.values(repo, [episode.id], user=ALICE).get(episode.id, [])
                if v.field == "problems"]  # fmt: skip

    r = client.post(url(episode, 8), json={"field": "problems", "value": [], "end": 8}, headers=auth())  # nothing picked
    assert r.status_code == 200 and problems() == []
    client.post(url(episode, 8), json={"field": "problems", "value": ["slow"], "start": 8, "end": 10}, headers=auth())
    assert problems() == [(8, 10, ["slow"])]
    reply = client.post(url(episode, 9), json={"field": "problems", "value": ["slow", "loop"], "start": 8, "end": 10},
                        headers=auth()).json()  # fmt: skip
    assert reply["message"] == "Saved problems on steps 8–10 (scratch)" and reply["step"] == 9
    assert reply["values"]["problems"]["value"] == ["slow", "loop"]
    assert problems() == [(8, 10, ["slow", "loop"])]
    reply = client.post(url(episode, 10), json={"field": "problems", "value": [], "start": 8, "end": 10},
                        headers=auth()).json()  # fmt: skip
    assert reply["message"] == "Cleared problems on steps 8–10" and "problems" not in reply["values"]
    assert problems() == []
    r = client.post(url(episode, 11), json={"field": "problems", "value": ["slow"], "start": 8, "end": 10},
                    headers=auth())  # fmt: skip
    assert r.status_code == 400 and "does not hold step 11" in r.json()["error"]
    r = client.post(url(episode, 3), json={"field": "instruction", "value": "x", "start": 1}, headers=auth())
    assert r.status_code == 400 and "'start' is for segment fields" in r.json()["error"]


def test_a_save_sends_the_value_shown_and_never_clears_what_the_form_did_not_show(world):
    """Issue 32: the player sends with each value the one its form showed ("replaces"). A save of one field leaves
    the episode's value alone; a clear from a form that showed it blank is refused (409, nothing cleared, no
    `field.clear`), and the form it answers with holds the episode value on every step."""
    client, repo, episode, _ = world

    def task_success() -> list:
        return [v.value for v in fv.values(repo, [episode.id], user=BOB).get(episode.id, []) if v.field == "task_success"]

    def clears() -> int:
        return sum(e.action == "field.clear" and e.user == BOB for e in repo.audit_log(ref_of(episode)))

    before = clears()
    reply = client.post(url(episode, 0), json={"field": "task_success", "value": True, "replaces": None},
                        headers=auth(BOB)).json()  # fmt: skip
    assert reply["values"]["task_success"]["value"] is True
    reply = client.post(url(episode, 1), json={"field": "action_correct", "value": "yes", "replaces": None},
                        headers=auth(BOB)).json()  # fmt: skip
    assert reply["message"] == "Saved action_correct on step 1 (scratch)"
    assert reply["values"]["task_success"]["value"] is True and task_success() == [True]
    r = client.post(url(episode, 1), json={"field": "task_success", "value": None, "replaces": None}, headers=auth(BOB))
    assert r.status_code == 409
    assert r.json()["error"] == f"{BOB}'s task_success on the episode holds true by now, not nothing as shown: nothing changed"
    assert task_success() == [True] and clears() == before
    form = client.get(url(episode, 2), headers=auth(BOB)).json()
    assert form["values"]["task_success"]["value"] is True
    # the value shown is replaced, then cleared; without "replaces" a value is set as before
    reply = client.post(url(episode, 2), json={"field": "task_success", "value": False, "replaces": True},
                        headers=auth(BOB)).json()  # fmt: skip
    assert reply["message"] == "Saved task_success on the episode (scratch)" and task_success() == [False]
    reply = client.post(url(episode, 2), json={"field": "task_success", "value": None, "replaces": False},
                        headers=auth(BOB)).json()  # fmt: skip
    assert reply["message"] == "Cleared task_success on the episode" and task_success() == [] and clears() == before + 1
    client.post(url(episode, 2), json={"field": "task_success", "value": True}, headers=auth(BOB))
    assert task_success() == [True]

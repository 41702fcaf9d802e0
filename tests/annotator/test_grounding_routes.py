"""The grounding routes of the player (annotator/web/grounding_routes.py) in process (Starlette's TestClient),
over a real store holding the UI episode converted from ../shared/fixtures/droidbot and recorded env episodes."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.testclient import TestClient

from annotator.operations import ref_key, ref_of
from annotator.web import context, grounding_routes, guard
from pipelines.episodes import open_episode
from pipelines.exporters import grounding as eg
from pipelines.store import grounding as store
from tests.annotator.annotator_data import ALICE, BOB, build_env_data, import_ui_fixtures

pytestmark = pytest.mark.slow
CAROL = "carol@example.com"


@pytest.fixture(scope="module")
def world(tmp_path_factory, fixtures_dir):
    data_dir = tmp_path_factory.mktemp("grounding_routes")
    ui_study = import_ui_fixtures(data_dir, fixtures_dir)
    env = build_env_data(data_dir, episodes=1, max_steps=10)
    (episode,) = env.repo.list_episodes(study_id=ui_study.id)
    record = open_episode(episode, data_dir).record
    settings = context.Settings(data_dir=data_dir, store=None, user=None)
    app = Starlette(
        routes=grounding_routes.routes(settings),
        middleware=[Middleware(guard.OriginGuard, allowed_hosts=guard.LOOPBACK_NAMES)],
    )
    with TestClient(app, base_url="http://127.0.0.1:8501") as client:
        yield client, env, episode, record


def url(episode, path: str) -> str:
    return f"/api/grounding/{ref_key(ref_of(episode))}/{path}"


def auth(user: str = ALICE) -> dict[str, str]:
    return {"X-Stepmark-Token": context.mint(user)}


def test_a_step_starts_with_the_converters_target(world):
    client, _, episode, record = world
    body = client.get(url(episode, "steps/0"), headers=auth()).json()
    a = record.actions[0]
    assert body["ok"] and body["annotations"] == [] and body["drawn"] == [] and body["user"] == ALICE
    assert body["target"]["index"] == a.target_index and body["target"]["source"] == "converter"
    assert body["target"]["rule"] == a.target_rule
    assert body["object_ids"] == [o.id for o in record.episode.time_steps[0].observation.objects]
    assert body["labels"][:4] == ["goal_element", "wrong_box", "decorative", "missing_text"]
    labels = client.get(url(episode, "labels"), headers=auth()).json()
    assert "BUTTON" in labels["types"] and labels["kinds"] == list(store.KINDS)


def test_retarget_draw_label_remove_and_undo(world):
    client, env, episode, record = world
    step = 1
    a = record.actions[step]
    runner = a.target_candidates[0]
    post = lambda body, user=ALICE: client.post(url(episode, f"steps/{step}"), json=body, headers=auth(user))  # noqa: E731

    reply = post({"kind": "target", "object_index": runner}).json()
    assert reply["ok"] and reply["message"].startswith(f"Step {step}: target set to object {runner}")
    assert reply["target"]["index"] == runner and reply["target"]["source"] == "annotator"
    assert reply["target"]["authors"] == [ALICE] and reply["target"]["converter_index"] == a.target_index
    # the converter's rule stays named beside the correction (the player shows both)
    assert reply["target"]["rule"] == "annotator" and reply["target"]["converter_rule"] == a.target_rule != ""
    assert reply["consensus_target"]["index"] == runner  # ALICE is the step's only annotator so far
    assert client.get(url(episode, f"steps/{step}"), headers=auth(BOB)).json()["my_target"]["source"] == "converter"

    drawn = post({"kind": "box", "box": [100, 200, 400, 300], "type": "button", "text": "Skip"}).json()
    (box,) = drawn["drawn"]
    n = len(drawn["object_ids"])
    assert box["i"] == n and box["type"] == "BUTTON" and box["text"] == "Skip" and box["user"] == ALICE
    assert drawn["message"] == f"Step {step}: box drawn (button)"
    labelled = post({"kind": "label", "object_index": n, "label": "goal_element"}, user=BOB).json()
    assert labelled["annotation"]["object_id"] == box["id"] and labelled["annotation"]["user"] == BOB
    assert labelled["annotation"]["object_index"] == n and labelled["annotation"]["mine"]  # BOB asked
    assert labelled["orphans"] == []  # a label on a drawn box is placed
    assert "drawn box" in labelled["message"] and "labelled 'goal_element'" in labelled["message"]

    # what an export of everyone's annotations would hold
    ui_ref = ref_of(episode)
    applied = eg.apply_annotations(record, store.for_episodes(env.repo, [ui_ref.episode_id])[ui_ref.episode_id], "all")
    assert applied.actions[step].target_index == runner
    extra = applied.episode.time_steps[step].observation.objects[n]
    assert extra.id == box["id"] and extra.text == "Skip"
    (mark,) = applied.step_info[step].object_annotations
    assert mark.human_drawn and list(mark.labels) == ["goal_element"]

    # CAROL may not remove BOB's label on ALICE's episode; BOB may
    label_id = labelled["annotation"]["id"]
    refused = client.delete(url(episode, f"steps/{step}/annotations/{label_id}"), headers=auth(CAROL))
    assert refused.status_code == 403 and "may not remove bob@example.com's label" in refused.json()["error"]
    removed = client.post(url(episode, f"steps/{step}/annotations/{label_id}/remove"), json={}, headers=auth(BOB))
    assert removed.json()["message"] == f"Step {step}: removed your label"
    again = client.post(url(episode, f"steps/{step}/annotations/{label_id}/remove"), json={}, headers=auth(BOB))
    assert not again.json()["ok"] and "already gone" in again.json()["message"]

    undo = client.post(url(episode, "undo"), json={}, headers=auth()).json()  # ALICE's newest: the drawn box
    assert undo["ok"] and undo["message"] == f"Undid: box drawn (BUTTON) (step {step})" and undo["drawn"] == []
    undo = client.post(url(episode, "undo"), json={}, headers=auth()).json()
    assert undo["message"].startswith("Undid: target set to object") and undo["target"]["source"] == "converter"
    redo = client.post(url(episode, "redo"), json={}, headers=auth()).json()
    assert redo["target"]["index"] == runner and redo["message"].startswith("Redid: target set to")
    # BOB's own undo brings his removed label back (its drawn box is gone: now an orphan, reported)
    back = client.post(url(episode, "undo"), json={}, headers=auth(BOB)).json()
    assert back["ok"] and [o["annotation"]["user"] for o in back["orphans"]] == [BOB]
    assert "no longer" in back["orphans"][0]["reason"] or "not on step" in back["orphans"][0]["reason"]


def test_bad_requests_say_why(world):
    client, env, episode, record = world
    post = lambda body, step=0: client.post(url(episode, f"steps/{step}"), json=body, headers=auth())  # noqa: E731
    n = len(record.episode.time_steps[0].observation.objects)
    obs = record.episode.time_steps[0].observation
    cases = [
        ({"kind": "paint"}, "kind must be one of"),
        ({"kind": "target"}, "needs object_id or object_index"),
        ({"kind": "target", "object_index": n + 5}, "out of range"),
        ({"kind": "target", "object_id": "nope"}, "is not on step 0"),
        ({"kind": "target", "object_id": record.episode.time_steps[0].observation.objects[1].id,
          "object_index": 2}, "object_index 2 is object"),
        ({"kind": "label", "object_index": 1, "label": ""}, "non-empty label"),
        ({"kind": "box", "box": [0, 0, obs.screen_width + 1, 10]}, "not inside"),
        ({"kind": "box", "box": [5, 5, 2, 9]}, "empty"),
        ({"kind": "box", "box": [0, 0, 9, 9], "type": "SPACESHIP"}, "unknown object type"),
    ]  # fmt: skip
    for body, reason in cases:
        reply = post(body)
        assert reply.status_code == 400 and reason in reply.json()["error"], (body, reply.json())
    assert post({"kind": "no_target"}, step=999).status_code == 400
    assert client.get(url(episode, "steps/0")).status_code == 401
    env_episode = env.episodes[0]
    refused = client.get(url(env_episode, "steps/0"), headers=auth())
    assert refused.status_code == 400 and "not a UI episode" in refused.json()["error"]

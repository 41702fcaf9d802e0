"""Screenshot-first episodes (issue 25) in the player's routes, in process (Starlette's TestClient) over a real
store: a GUI-Odyssey episode (screenshot-only) and an Android-in-the-Zoo episode (detector boxes, chain-of-
action-thought) converted by convert-ui and imported. The steps carry their texts as plain data, the frames
are served, steps take tags, and grounding works where it makes sense (an action point with no object: a drawn
box, "no valid target"; a detector box: a target)."""

from __future__ import annotations

import io

import pytest
from PIL import Image
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.testclient import TestClient

from annotator.operations import ref_key, ref_of
from annotator.web import context, grounding_routes, guard, replay_routes
from pipelines import convert, ui_import
from pipelines.episodes import open_episode
from pipelines.step_text import step_texts
from pipelines.store import open_store
from tests.annotator.annotator_data import ALICE
from tests.pipelines.screenshot_first import build_aitz, build_gui_odyssey

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("screenshot_first_replay")
    inp = data_dir / "in"
    build_aitz(inp / "aitz")
    build_gui_odyssey(inp / "odyssey")
    assert convert.run([str(inp), str(data_dir / "converted"), "--quiet", "--runner=FnApiRunner"]) == 0
    repo = open_store(None, data_dir)
    study = ui_import.import_ui(repo, str(data_dir / "converted"), "Screenshot first", ALICE)
    episodes = {}
    for episode in repo.list_episodes(study_id=study.id):
        record = open_episode(episode, data_dir).record
        episodes[record.source] = (episode, record)
    settings = context.Settings(data_dir=data_dir, store=None, user=None)
    app = Starlette(
        routes=replay_routes.routes(settings) + grounding_routes.routes(settings),
        middleware=[Middleware(guard.OriginGuard, allowed_hosts=guard.LOOPBACK_NAMES)],
    )
    with TestClient(app, base_url="http://127.0.0.1:8501") as client:
        yield client, repo, episodes


def url(episode, path: str, api: str = "replay") -> str:
    return f"/api/{api}/{ref_key(ref_of(episode))}/{path}"


def auth() -> dict[str, str]:
    return {"X-Stepmark-Token": context.mint(ALICE)}


def test_steps_carry_their_texts_as_plain_data(world):
    client, _, episodes = world
    episode, record = episodes["aitz"]
    steps = client.get(url(episode, "steps"), params={"start": 0, "end": 4}, headers=auth()).json()["steps"]
    for i, step in enumerate(steps):
        want = {k: v for k, v in step_texts(record, i).items() if v}
        assert {t["name"]: t["text"] for t in step["texts"]} == want
        assert [t["label"] for t in step["texts"]] == [
            "Screen description", "Action thought", "Action description", "Action result"]  # fmt: skip
    assert [o["text"] for o in steps[0]["objects"]][:3] == ["M", "Set", "up email"]
    assert steps[2]["target"] == record.actions[2].target_index

    episode, record = episodes["gui_odyssey"]
    steps = client.get(url(episode, "steps"), params={"start": 0, "end": 6}, headers=auth()).json()["steps"]
    assert [s["texts"] for s in steps[:1]] == [[
        {"name": "instruction", "label": "Instruction", "text": "Open the DuckDuckGo app."},
        {"name": "screen_description", "label": "Screen description", "text": "The home screen with app icons."},
        {"name": "action_thought", "label": "Action thought", "text": "I open DuckDuckGo to search for the event."},
    ]]  # fmt: skip
    assert steps[5]["texts"] == []  # the COMPLETE step has no low_level_instruction (its ps is the action's text)
    first = steps[0]
    assert first["has_frame"] and first["objects"] == [] and first["size"] == [270, 600]
    assert first["touch"][:2] == [135, 72] and first["target"] is None
    frame = client.get(url(episode, "frames/0"), headers=auth())
    assert frame.status_code == 200 and Image.open(io.BytesIO(frame.content)).size == (270, 600)


def test_screenshot_only_steps_take_tags_and_grounding(world):
    client, repo, episodes = world
    episode, record = episodes["gui_odyssey"]
    reply = client.post(url(episode, "tags"), json={"op": "add", "scope": "step", "step": 2, "label": "scroll"},
                        headers=auth()).json()  # fmt: skip
    assert reply["ok"] and reply["step_tags"] == {"2": ["scroll"]}
    assert repo.get_episode(ref_of(episode)).step_metadata[2].tags[0].label == "scroll"
    grounding = lambda step, body: client.post(url(episode, f"steps/{step}", "grounding"), json=body, headers=auth())  # noqa: E731
    start = client.get(url(episode, "steps/0", "grounding"), headers=auth()).json()
    assert start["ok"] and start["object_ids"] == [] and start["target"]["index"] is None
    drawn = grounding(0, {"kind": "box", "box": [100, 50, 170, 95], "type": "button", "text": "DuckDuckGo"}).json()
    (box,) = drawn["drawn"]
    assert box["i"] == 0 and box["text"] == "DuckDuckGo"
    target = grounding(0, {"kind": "target", "object_index": 0}).json()
    assert target["ok"] and target["target"]["index"] == 0 and target["target"]["source"] == "annotator"
    none = grounding(1, {"kind": "no_target"}).json()
    assert none["ok"] and none["target"]["index"] is None and none["target"]["source"] == "annotator"
    # A detector box is an object like any other: it can be the target.
    episode, record = episodes["aitz"]
    reply = client.post(url(episode, "steps/2", "grounding"), json={"kind": "target", "object_index": 0},
                        headers=auth()).json()  # fmt: skip
    assert reply["ok"] and reply["target"]["converter_index"] == record.actions[2].target_index


def test_text_rows_keep_the_contract_order_skip_empty_ones_and_are_bounded():
    from annotator.web.player_data import MAX_TEXT_CHARS, step_text_rows
    from pipelines.step_text import STEP_TEXT_FIELDS

    texts = dict.fromkeys(STEP_TEXT_FIELDS, "")
    texts.update(action_result="x" * (MAX_TEXT_CHARS + 10), instruction="<b>tap</b>")
    rows = step_text_rows(texts)
    assert [r["name"] for r in rows] == ["instruction", "action_result"]
    assert rows[0] == {"name": "instruction", "label": "Instruction", "text": "<b>tap</b>"}  # as data, not markup
    assert rows[1]["text"] == "x" * MAX_TEXT_CHARS + " …"

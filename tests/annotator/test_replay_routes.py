"""The step player's routes and the origin guard, in process (Starlette's TestClient) over a real store with
recorded Procgen episodes and UI episodes converted from ../shared/fixtures/droidbot."""

from __future__ import annotations

import io
import json

import pytest
from PIL import Image
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from annotator.operations import ref_key, ref_of
from annotator.web import context, guard, player_data, replay_routes, routes_common
from pipelines.episodes import open_episode
from pipelines.episodes.base import Step
from tests.annotator.annotator_data import ALICE, BOB, build_env_data, import_ui_fixtures

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(tmp_path_factory, fixtures_dir):
    data_dir = tmp_path_factory.mktemp("routes")
    ui_study = import_ui_fixtures(data_dir, fixtures_dir)
    env = build_env_data(data_dir, episodes=2, max_steps=30)
    env.repo.set_palette(env.study.id, ["good", "bad"], ALICE)
    ui_episode = env.repo.list_episodes(study_id=ui_study.id)[0]
    return data_dir, env, ui_episode


@pytest.fixture(scope="module")
def client(store):
    data_dir = store[0]
    settings = context.Settings(data_dir=data_dir, store=None, user=None)
    app = Starlette(
        routes=replay_routes.routes(settings),
        middleware=[Middleware(guard.OriginGuard, allowed_hosts=guard.LOOPBACK_NAMES)],
    )
    with TestClient(app, base_url="http://127.0.0.1:8501") as c:
        yield c


def url(episode, path: str) -> str:
    return f"/api/replay/{ref_key(ref_of(episode))}/{path}"


def auth(user: str = ALICE) -> dict[str, str]:
    return {"X-Stepmark-Token": context.mint(user)}


def test_meta_describes_an_environment_episode(client, store):
    _, env, _ = store
    episode = env.repo.get_episode(ref_of(env.episodes[0]))
    body = client.get(url(episode, "meta"), headers=auth()).json()
    assert body["kind"] == "env"
    assert body["num_steps"] == episode.num_steps + 1  # transitions + the final observation
    assert body["transitions"] == episode.num_steps  # the count every page and the CLI show
    assert len(body["rewards"]) == body["num_steps"]
    assert body["palette"] == ["good", "bad"]
    assert body["user"] == ALICE and body["state"] == "STATE_COMPLETED"


def test_steps_and_frames_of_an_environment_episode(client, store):
    data_dir, env, _ = store
    episode = env.episodes[0]
    body = client.get(url(episode, "steps"), params={"start": 0, "end": 5}, headers=auth()).json()
    assert [s["index"] for s in body["steps"]] == [0, 1, 2, 3, 4]
    first = body["steps"][0]
    reader = open_episode(env.repo.get_episode(ref_of(episode)), data_dir)
    assert first["has_frame"] and json.loads(first["action"]) == int(reader.step(0).action)
    assert first["reward"] == reader.step(0).reward
    frame = client.get(url(episode, "frames/3"), headers=auth())
    assert frame.status_code == 200 and frame.headers["content-type"] == "image/jpeg"
    assert "immutable" in frame.headers["cache-control"]
    assert Image.open(io.BytesIO(frame.content)).size == (64, 64)  # as recorded: the browser enlarges it
    # An <img> cannot send headers: the token may ride in the query string instead.
    assert client.get(url(episode, "frames/3"), params={"t": context.mint(ALICE)}).status_code == 200
    out_of_range = client.get(url(episode, f"frames/{episode.num_steps + 5}"), headers=auth())
    assert out_of_range.status_code == 400 and "out of range" in out_of_range.json()["error"]


def test_ui_steps_carry_objects_and_frames_are_display_sized(client, store):
    _, _, episode = store
    body = client.get(url(episode, "steps"), params={"start": 0, "end": 3}, headers=auth()).json()
    step = body["steps"][0]
    assert step["objects_total"] == len(step["objects"]) > 0
    assert step["action_text"] and step["size"][0] > 0
    boxed = [o for o in step["objects"] if o["box"]]
    assert boxed and all(o["box"][2] > o["box"][0] and o["box"][3] > o["box"][1] for o in boxed)
    frame = client.get(url(episode, "frames/0"), headers=auth())
    width, height = Image.open(io.BytesIO(frame.content)).size
    assert height <= player_data.DISPLAY_HEIGHT
    assert abs(width / height - step["size"][0] / step["size"][1]) < 0.02


def test_a_decompression_bomb_is_refused_before_decoding():
    image = Image.new("L", (9000, 9000))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    step = Step(index=0, observation=None, action=None, reward=0.0, discount=1.0, is_first=True,
                is_last=False, is_terminal=False, image=buf.getvalue())  # fmt: skip
    with pytest.raises(player_data.FrameError, match="too large to show"):
        player_data.frame(step, "env")


def test_tags_land_on_the_step_the_browser_sends_and_undo_redo_stay_on_the_episode(client, store):
    _, env, _ = store
    a, b = env.episodes
    post = lambda ep, path, body, user=ALICE: client.post(url(ep, path), json=body, headers=auth(user))  # noqa: E731
    assert post(a, "tags", {"op": "add", "scope": "step", "step": 4, "label": "good"}).json()["ok"]
    reply = post(b, "tags", {"op": "add", "scope": "segment", "step": 2, "end": 6, "label": "fall"}).json()
    assert reply["ok"] and all(reply["step_tags"][str(i)] == ["fall"] for i in range(2, 7))
    reply = post(b, "tags", {"op": "add", "scope": "episode", "label": "tricky"}).json()
    assert reply["episode_tags"] == ["tricky"]
    undo = post(b, "undo", {}).json()
    assert undo["ok"] and "tricky" in undo["message"] and undo["episode_tags"] == []
    undo = post(b, "undo", {}).json()
    assert undo["ok"] and "fall" in undo["message"] and undo["step_tags"] == {}
    nothing = post(b, "undo", {}).json()
    assert not nothing["ok"] and nothing["message"] == "Nothing of yours to undo on this episode"
    assert env.repo.get_episode(ref_of(a)).step_metadata[4].tags[0].label == "good"  # A untouched
    redo = post(b, "redo", {}).json()
    assert redo["ok"] and len(redo["step_tags"]) == 5
    # Bob may not remove Alice's tags on Alice's episode (the store's rule), and is told so.
    refused = post(b, "tags", {"op": "remove", "scope": "step", "step": 3, "label": "fall"}, user=BOB)
    assert refused.status_code == 403
    assert client.get(url(b, "tags"), headers=auth()).json()["step_tags"]["3"] == ["fall"]


@pytest.mark.parametrize(
    "body, reason",
    [
        ({"op": "add", "scope": "step", "step": "x", "label": "a"}, "whole number"),
        ({"op": "add", "scope": "step", "step": 1, "label": "  "}, "non-empty"),
        ({"op": "drop", "scope": "step", "step": 1, "label": "a"}, "op must be"),
        ({"op": "add", "scope": "step", "step": 1, "label": "a" * 300}, "at most"),
    ],
)
def test_bad_requests_say_why(client, store, body, reason):
    _, env, _ = store
    reply = client.post(url(env.episodes[0], "tags"), json=body, headers=auth())
    assert reply.status_code == 400 and reason in reply.json()["error"]


def test_bad_bodies_and_steps_out_of_range_are_refused(client, store):
    _, env, _ = store
    episode = env.episodes[0]
    as_json = {**auth(), "Content-Type": "application/json"}
    reply = client.post(url(episode, "tags"), content=b"[1, 2", headers=as_json)
    assert reply.status_code == 400 and "not JSON" in reply.json()["error"]
    reply = client.post(url(episode, "tags"), content=b"x" * (routes_common.MAX_BODY + 1), headers=as_json)
    assert reply.status_code == 413 and "too large" in reply.text
    beyond = {"op": "add", "scope": "step", "step": 10_000, "label": "a"}
    assert client.post(url(episode, "tags"), json=beyond, headers=auth()).status_code >= 400
    assert 10_000 not in env.repo.get_episode(ref_of(episode)).step_metadata


def test_requests_without_a_token_of_this_server_are_refused(client, store):
    _, env, _ = store
    episode = env.episodes[0]
    assert client.get(url(episode, "meta")).status_code == 401
    assert client.get(url(episode, "meta"), headers={"X-Stepmark-Token": "abc.def"}).status_code == 401
    forged = context.mint(ALICE)[:-2] + "xx"
    assert client.get(url(episode, "meta"), headers={"X-Stepmark-Token": forged}).status_code == 401
    expired = context.mint(ALICE, seconds=-1)
    reply = client.get(url(episode, "meta"), headers={"X-Stepmark-Token": expired})
    assert reply.status_code == 401 and "expired" in reply.json()["error"]
    reply = client.post(url(episode, "tags"), json={"op": "add", "scope": "episode", "label": "x"})
    assert reply.status_code == 401
    assert list(env.repo.get_episode(ref_of(episode)).tags) == []


def test_token_round_trip():
    token = context.mint("someone@example.com")
    claims = context.verify(token)
    assert claims.user == "someone@example.com"
    with pytest.raises(context.TokenError):
        context.verify(token + "a")
    with pytest.raises(context.TokenError):
        context.verify(None)


def _echo_app() -> Starlette:
    async def echo(websocket):
        await websocket.accept()
        await websocket.send_text(await websocket.receive_text())
        await websocket.close()

    return Starlette(
        routes=[WebSocketRoute("/ws", echo)],
        middleware=[Middleware(guard.OriginGuard, allowed_hosts=guard.LOOPBACK_NAMES)],
    )


def test_the_guard_refuses_foreign_hosts_and_origins_and_sends_a_csp(client, store):
    _, env, _ = store
    episode = env.episodes[0]
    ok = client.get(url(episode, "meta"), headers=auth())
    assert ok.status_code == 200
    assert "default-src 'self'" in ok.headers["content-security-policy"]
    rebound = client.get(url(episode, "meta"), headers={**auth(), "Host": "rebind.attacker.example:8700"})
    assert rebound.status_code == 403
    with TestClient(_echo_app(), base_url="http://127.0.0.1:8501") as ws_client:
        same = {"Origin": "http://127.0.0.1:8501", "Host": "127.0.0.1:8501"}
        with ws_client.websocket_connect("/ws", headers=same) as ws:
            ws.send_text("hi")
            assert ws.receive_text() == "hi"
        for origin, host in (
            ("http://rebind.attacker.example:8501", "127.0.0.1:8501"),
            ("http://127.0.0.1:8501", "rebind.attacker.example:8501"),
            ("http://localhost:9999", "127.0.0.1:8501"),
        ):
            with pytest.raises(WebSocketDisconnect):
                with ws_client.websocket_connect("/ws", headers={"Origin": origin, "Host": host}):
                    pass


def test_tags_payload_version_changes_with_the_tags(store):
    _, env, _ = store
    episode = env.repo.get_episode(ref_of(env.episodes[1]))
    before = player_data.tags_payload(episode)
    env.repo.add_step_tag(ref_of(episode), 1, "versioned", ALICE)
    after = player_data.tags_payload(env.repo.get_episode(ref_of(episode)))
    assert before["version"] != after["version"]
    assert after["step_tags"]["1"][-1] == "versioned"
    assert json.dumps(after)  # JSON-ready as sent


def test_labels_are_the_annotators_own_and_apart_from_the_shared_tags(client, store):
    _, env, _ = store
    episode = env.episodes[0]
    route = url(episode, "x").replace("/api/replay/", "/api/labels/").removesuffix("/x")
    reply = client.post(route, json={"op": "add", "step": 6, "label": "ledge"}, headers=auth(BOB)).json()
    assert reply["ok"] and reply["step_tags"] == {"6": ["ledge"]} and reply["episode_tags"] == []
    assert client.get(route, headers=auth(ALICE)).json()["step_tags"] == {}  # Bob's labels are his alone
    assert 6 not in env.repo.get_episode(ref_of(episode)).step_metadata  # not a shared tag
    beyond = client.post(route, json={"op": "add", "step": 10_000, "label": "x"}, headers=auth(BOB))
    assert beyond.status_code == 400 and "out of range" in beyond.json()["error"]
    gone = client.post(route, json={"op": "remove", "step": 6, "label": "ledge"}, headers=auth(BOB)).json()
    assert gone["ok"] and gone["step_tags"] == {}


def test_the_evaluation_route_serves_a_runs_rows_of_the_episode(client, store, tmp_path):
    """`/evaluation?run=` gives the episode's rows of a run by step (what the player draws); it needs the token,
    a run name, and names an unknown run as such."""
    from pipelines.evaluation import runs
    from pipelines.store import open_store

    data_dir, _, ui_episode = store
    repo = open_store(None, data_dir)
    path = tmp_path / "agent.jsonl"
    path.write_text(json.dumps({"episode": ui_episode.id, "step": 0, "action": {"action_type": "navigate_back"}}) + "\n")
    name = f"route-{tmp_path.name}"
    summary = runs.evaluate(repo, ui_episode.study_id, str(path), name, ALICE)
    assert summary["predictions"] == 1
    assert client.get(url(ui_episode, f"evaluation?run={name}")).status_code == 401  # no token
    assert client.get(url(ui_episode, "evaluation"), headers=auth()).status_code == 400
    assert client.get(url(ui_episode, "evaluation?run=nothing"), headers=auth()).status_code == 404
    body = client.get(url(ui_episode, f"evaluation?run={name}"), headers=auth()).json()
    assert body["run"] == name
    first = body["steps"]["0"]
    assert first["predicted"] == {"action_type": "navigate_back"} and first["matched"] is False
    assert first["reason"] == "type" and first["recorded"]["action_type"] == "click"
    assert all(row["reason"] == "missing" for step, row in body["steps"].items() if step != "0")
    assert len(body["steps"]) == summary["steps"]


def test_the_player_is_told_which_tags_the_viewer_may_not_remove_and_a_refusal_is_one_short_line(client, store):
    _, env, _ = store
    a = env.episodes[0]  # Alice's episode
    post = lambda body, user: client.post(url(a, "tags"), json=body, headers=auth(user))  # noqa: E731
    assert post({"op": "add", "scope": "step", "step": 7, "label": "alices"}, ALICE).json()["ok"]
    assert post({"op": "add", "scope": "episode", "label": "alices"}, ALICE).json()["ok"]
    mine = post({"op": "add", "scope": "step", "step": 7, "label": "bobs"}, BOB).json()
    assert mine["step_tags"]["7"] == ["alices", "bobs"]
    assert mine["locked"]["step_tags"]["7"] == ["alices"] and mine["locked"]["episode_tags"] == ["alices"]
    for path in ("meta", "tags"):
        bob = client.get(url(a, path), headers=auth(BOB)).json()
        assert bob["locked"] == mine["locked"]
        alice = client.get(url(a, path), headers=auth(ALICE)).json()  # her episode: she may remove any
        assert alice["locked"] == {"episode_tags": [], "step_tags": {}}
    refused = post({"op": "remove", "scope": "step", "step": 7, "label": "alices"}, BOB)
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert "\n" not in error and len(error) <= 100 and "alices" in error and "Traceback" not in error
    assert post({"op": "remove", "scope": "step", "step": 7, "label": "bobs"}, BOB).json()["ok"]
    assert post({"op": "remove", "scope": "episode", "label": "alices"}, ALICE).json()["ok"]
    assert post({"op": "remove", "scope": "step", "step": 7, "label": "alices"}, ALICE).json()["ok"]

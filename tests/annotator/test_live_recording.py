"""The live recorder's WebSocket route over real Procgen games, a real SQLite store and real envlogger files.

Served by uvicorn (the same route the annotator's server mounts) and driven with the `websockets` client; the
browser side is tested in tests/e2e/test_record_browser.py.
"""

from __future__ import annotations

import json
import struct
import threading
import time

import pytest
import uvicorn
from starlette.applications import Starlette
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from annotator.launch import free_port
from annotator.live import routes as live_routes
from annotator.live.session import InputError, parse_command, parse_gamepad
from annotator.web import context
from pipelines.episodes import open_episode
from protos.rlds_creator import study_pb2
from tests.pipelines.episodes.helpers import USER, jpeg_size, make_study, new_store, procgen_spec

State = study_pb2.Episode.State
KEYS = ["ArrowRight", "ArrowUp", "ArrowLeft", "ArrowDown", "d"]


class Client:
    def __init__(self, url: str) -> None:
        self.url = url

    def websocket_connect(self, path: str):
        return connect(self.url + path, max_size=None)


@pytest.fixture
def live(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPMARK_DATA", str(tmp_path))
    monkeypatch.setattr("sys.argv", ["server.py"])
    repo = new_store(tmp_path)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=live_routes.routes()), host="127.0.0.1", port=port,
                                           log_level="warning"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield Client(f"ws://127.0.0.1:{port}"), repo, tmp_path
    server.should_exit = True
    thread.join(60)
    repo.close()


def wait_closed() -> None:
    """The server learns of the closed connection a moment later; it registers the episode, then lets go."""
    deadline = time.monotonic() + 60
    while live_routes.open_sessions() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_routes.open_sessions() == 0


class Browser:
    """The browser's side of the protocol: reads events and frames, acknowledges every frame."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.events: list[dict] = []
        self.frames: list[dict] = []

    def hello(self, study_id: str, env_id: str, **settings) -> None:
        self.ws.send(json.dumps({"t": "hello", "token": context.mint(USER), "study": study_id,
                                      "env": env_id, **settings}))  # fmt: skip

    def send(self, **message) -> None:
        self.ws.send(json.dumps(message))

    def read(self) -> dict:
        message = self.ws.recv(timeout=60)
        if isinstance(message, bytes):
            data = message
            (size,) = struct.unpack(">I", data[:4])
            header = json.loads(data[4 : 4 + size])
            header["jpeg"] = data[4 + size :]
            self.frames.append(header)
            self.send(t="ack", n=header["n"])
            return header
        event = json.loads(message)
        self.events.append(event)
        return event

    def until(self, predicate, limit: int = 500) -> dict:
        for _ in range(limit):
            item = self.read()
            if predicate(item):
                return item
        raise AssertionError(f"not seen in {limit} messages; last events {self.events[-3:]}")

    def state(self, name: str) -> dict:
        return self.until(lambda e: e.get("t") == "state" and e.get("state") == name)


def test_sync_presses_are_actions_in_order_and_the_save_flow_works(live):
    client, repo, data = live
    study = make_study(repo, procgen_spec(max_steps=0))
    pressed = [[KEYS[i % len(KEYS)]] for i in range(30)]
    with client.websocket_connect(live_routes.PATH) as ws:
        browser = Browser(ws)
        browser.hello(study.id, "maze")
        ready = browser.state("running")
        assert ready["sync"] is True and "ArrowRight" in ready["keys"]
        first = browser.until(lambda f: "step" in f)
        assert first["step"] == 0 and jpeg_size(first["jpeg"]) == (64, 64)
        for keys in pressed:  # all sent before any frame is read: none may be dropped
            browser.send(t="press", keys=keys)
        browser.until(lambda f: f.get("step") == 30)
        # Esc pauses: presses while paused are no actions.
        browser.send(t="pause", paused=True)
        browser.state("paused")
        browser.send(t="press", keys=["ArrowRight"])
        browser.send(t="save", accept=True, completed=True)
        saved = browser.until(lambda e: e.get("t") == "saved")
        assert saved["steps"] == 30 and saved["status"] == "Completed"
        browser.state("ready")
        browser.send(t="enter")  # Enter starts the next episode
        browser.state("running")
    [episode] = [e for e in repo.list_episodes(study_id=study.id) if e.state == State.STATE_COMPLETED]
    assert episode.num_steps == 30
    with open_episode(episode, data) as reader:
        assert [reader.step(i).keys for i in range(30)] == pressed
        actions = [int(reader.step(i).action) for i in range(30)]
    assert actions[:5] == [7, 5, 1, 3, 9]  # Procgen combos: RIGHT, UP, LEFT, DOWN, D


def test_closing_the_connection_keeps_the_steps_as_abandoned(live):
    client, repo, data = live
    study = make_study(repo, procgen_spec(max_steps=0))
    with client.websocket_connect(live_routes.PATH) as ws:
        browser = Browser(ws)
        browser.hello(study.id, "maze")
        browser.state("running")
        for i in range(7):
            browser.send(t="press", keys=[KEYS[i % 4]])
        browser.until(lambda f: f.get("step") == 7)
    wait_closed()
    [episode] = repo.list_episodes(study_id=study.id)
    assert episode.state == State.STATE_ABANDONED and episode.num_steps == 7
    with open_episode(episode, data) as reader:
        assert len(reader) == 8 and reader.step(6).keys == [KEYS[2]]


def test_async_clock_steps_with_held_keys_and_pause_stops_it(live):
    client, repo, data = live
    study = make_study(repo, procgen_spec(sync=False, max_steps=0))
    with client.websocket_connect(live_routes.PATH) as ws:
        browser = Browser(ws)
        browser.hello(study.id, "maze", fps=30, quality="auto")
        paused = browser.state("paused")  # an async recording waits for the player
        assert paused["sync"] is False and paused["fps"] == 30
        browser.send(t="hold", keys=["ArrowRight"])
        browser.send(t="enter")
        browser.state("running")
        browser.until(lambda f: f.get("step", 0) >= 12)
        browser.send(t="hold", keys=[])
        browser.send(t="pause", paused=True)
        browser.state("paused")
        browser.send(t="save", accept=True, completed=False)
        saved = browser.until(lambda e: e.get("t") == "saved")
    [episode] = repo.list_episodes(study_id=study.id)
    assert episode.state == State.STATE_CANCELLED and episode.num_steps == saved["steps"] >= 12
    with open_episode(episode, data) as reader:
        keys = [reader.step(i).keys for i in range(episode.num_steps)]
    assert keys[:10] == [["ArrowRight"]] * 10  # held: it acted on every frame
    assert episode.metadata["storage_format"] == "envlogger"


def test_refused_token_and_bad_input(live):
    client, repo, _ = live
    study = make_study(repo, procgen_spec(max_steps=0))
    with client.websocket_connect(live_routes.PATH) as ws:
        ws.send(json.dumps({"t": "hello", "token": "x.y", "study": study.id, "env": "maze"}))
        with pytest.raises(ConnectionClosed) as refused:
            ws.recv(timeout=30)
        assert refused.value.rcvd.code == live_routes.CLOSE_UNAUTHORIZED
    with client.websocket_connect(live_routes.PATH) as ws:
        browser = Browser(ws)
        browser.hello(study.id, "maze")
        browser.state("running")
        browser.send(t="press", keys=["x" * 100])
        error = browser.until(lambda e: e.get("t") == "error")
        assert "bad key name" in error["message"]
    with client.websocket_connect(live_routes.PATH) as ws:
        browser = Browser(ws)
        browser.hello(study.id, "no-such-env")
        error = browser.until(lambda e: e.get("t") == "error")
        assert "no environment 'no-such-env'" in error["message"] and error["fatal"]


@pytest.mark.parametrize(
    "text, reason",
    [
        ('{"t": "press", "keys": ["\\ud800"]}', "surrogate"),
        ('{"t": "fps", "fps": NaN}', "not JSON"),
        ('{"t": "fps", "fps": Infinity}', "not JSON"),
        ('{"t": "press", "keys": ' + "[" * 40 + "]" * 40 + "}", "nested"),
        ("[" * 5000 + "]" * 5000, "not JSON|nested"),
        ('["hello"]', "JSON object"),
    ],
)
def test_messages_are_parsed_as_strictly_as_http_bodies(text, reason):
    """Lone surrogates, NaN/Infinity and deep nesting used to reach the session (a key name no store can
    hold, a clock of NaN fps): refused like the HTTP routes' bodies."""
    with pytest.raises(InputError, match=reason):
        live_routes.parse_message(text)


@pytest.mark.parametrize("message", [{"t": "fps", "fps": 1e308}, {"t": "fps", "fps": 0}, {"t": "fps", "fps": "5"},
                                     {"t": "fps", "fps": True}, {"t": "camera", "index": 10**6},
                                     {"t": "camera", "index": 1.5}, {"t": "camera", "index": -1}])  # fmt: skip
def test_settings_messages_are_bounded_like_the_hello(message):
    with pytest.raises(InputError):
        parse_command(message)
    assert parse_command({"t": "fps", "fps": 30}).value == 30.0
    assert parse_command({"t": "camera", "index": 2}).value == 2


def test_gamepad_state_is_parsed_and_bounded():
    pad = parse_gamepad({"id": "Xbox", "buttons": {"0": [True, 1.0], "13": [False, 0.7]}, "axes": {"1": 0.9}})
    assert pad.id == "Xbox" and pad.buttons[0].pressed and pad.buttons[13].value == pytest.approx(0.7)
    assert pad.axes[1] == pytest.approx(0.9)
    command = parse_command({"t": "press", "keys": [], "gamepad": {"buttons": {"12": [True, 1]}}})
    assert command.kind == "press" and command.gamepad.buttons[12].pressed
    with pytest.raises(InputError):
        parse_gamepad({"axes": {"0": float("nan")}})
    with pytest.raises(InputError):
        parse_gamepad({"buttons": {str(i): [True, 1] for i in range(100)}})


def test_closing_at_the_save_prompt_keeps_every_step_as_abandoned(live):
    client, repo, data = live
    study = make_study(repo, procgen_spec(max_steps=3))
    with client.websocket_connect(live_routes.PATH) as ws:
        browser = Browser(ws)
        browser.hello(study.id, "maze")
        browser.state("running")
        for key in KEYS[:3]:
            browser.send(t="press", keys=[key])
        ended = browser.state("ended")
        assert ended["completed"] is True
        browser.send(t="press", keys=["ArrowRight"])  # no action after the end
    wait_closed()
    [episode] = repo.list_episodes(study_id=study.id)
    assert episode.state == State.STATE_ABANDONED and episode.num_steps == 3
    with open_episode(episode, data) as reader:
        assert [reader.step(i).keys for i in range(3)] == [[k] for k in KEYS[:3]]
        assert reader.step(2).info["episode"]["l"] == 3


def test_recordings_per_server_are_bounded(live, monkeypatch):
    client, repo, _ = live
    study = make_study(repo, procgen_spec(max_steps=0))
    monkeypatch.setattr(live_routes, "MAX_SESSIONS", 1)
    with client.websocket_connect(live_routes.PATH) as first:
        Browser(first).hello(study.id, "maze")
        Browser(first).state("running")
        with client.websocket_connect(live_routes.PATH) as second:
            Browser(second).hello(study.id, "maze")
            with pytest.raises(ConnectionClosed) as refused:
                second.recv(timeout=30)
            assert refused.value.rcvd.code == live_routes.CLOSE_BUSY
        with client.websocket_connect(live_routes.PATH) as third:
            third.send(json.dumps({"t": "hello", "token": context.mint(USER), "study": study.id, "env": "maze",
                                   "camera": "x"}))  # fmt: skip
            with pytest.raises(ConnectionClosed) as bad:
                third.recv(timeout=30)
            assert bad.value.rcvd.code == live_routes.CLOSE_BAD_INPUT
    wait_closed()

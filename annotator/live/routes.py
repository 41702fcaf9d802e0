"""The recorder's WebSocket route: `/api/record/ws`, one live recording (`LiveSession`) per connection.

Protocol (schemas/live_recording.md): the browser's first message is `hello` with the page's token and the
study/environment/settings; then key and gamepad input, Esc/Enter, save decisions and settings as JSON text
messages, and an `ack` for each frame it has drawn. The server answers with JSON status events and binary
frames (`uint32 header length, JSON header, JPEG`). At most `MAX_IN_FLIGHT` frames are unacknowledged: a
slow browser gets the newest frame when it is ready and misses the ones between (inputs are never dropped).

A refused token closes the connection with code 4401, bad input with 1008, too many recordings with 1013.
When the connection ends for any reason the session closes: an episode with steps becomes ABANDONED.
"""

from __future__ import annotations

import asyncio
import collections
import json
import struct
import sys
import threading
from typing import Any

import anyio.to_thread
from starlette.routing import BaseRoute, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from annotator.live.session import QUALITIES, Command, InputError, LiveSession, parse_command
from annotator.web import context, routes_common

PATH = "/api/record/ws"
# Live recordings at once on one server (each has a thread, an environment, a writer process).
MAX_SESSIONS = 8
MAX_IN_FLIGHT = 2
MAX_MESSAGE = 16 * 1024
HELLO_SECONDS = 15.0
CLOSE_UNAUTHORIZED, CLOSE_BAD_INPUT, CLOSE_BUSY = 4401, 1008, 1013

_sessions: set[LiveSession] = set()
_lock = threading.Lock()
_hooked = False


def open_sessions() -> int:
    with _lock:
        return len(_sessions)


def close_all() -> None:
    """Server shutdown: every live recording is closed (its episode registered ABANDONED) before exit."""
    with _lock:
        sessions = list(_sessions)
    for session in sessions:
        session.close(timeout=60)


def encode_frame(header: dict[str, Any], jpeg: bytes) -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">I", len(head)) + head + jpeg


class Outbox:
    """What goes to one browser: events in order, and only the newest frame (see the module docstring)."""

    def __init__(self, websocket: WebSocket, loop: asyncio.AbstractEventLoop) -> None:
        self._ws = websocket
        self._loop = loop
        self._events: collections.deque[str] = collections.deque()
        self._frame: bytes | None = None
        self._in_flight = 0
        self._wake = asyncio.Event()
        self.sent_frames = 0
        self.dropped_frames = 0

    # Called from the session's thread.
    def frame(self, header: dict[str, Any], jpeg: bytes) -> None:
        self._call(self._offer_frame, encode_frame(header, jpeg))

    def event(self, event: dict[str, Any]) -> None:
        self._call(self._offer_event, json.dumps(event, separators=(",", ":")))

    def _call(self, fn, *args) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the event loop is gone (server stopped): nobody to show it to
            pass

    # On the event loop.
    def _offer_frame(self, data: bytes) -> None:
        if self._frame is not None:
            self.dropped_frames += 1
        self._frame = data
        self._wake.set()

    def _offer_event(self, text: str) -> None:
        self._events.append(text)
        self._wake.set()

    def ack(self) -> None:
        self._in_flight = max(0, self._in_flight - 1)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._ws.client_state != WebSocketState.CONNECTED:
                return
            while self._events:
                await self._ws.send_text(self._events.popleft())
            if self._frame is not None and self._in_flight < MAX_IN_FLIGHT:
                data, self._frame = self._frame, None
                self._in_flight += 1
                self.sent_frames += 1
                await self._ws.send_bytes(data)


def parse_message(text: str) -> dict[str, Any]:
    """A browser message as a JSON object, parsed as strictly as the HTTP routes' bodies (no NaN/Infinity,
    no lone surrogate, bounded nesting: `routes_common.parse_json`); InputError otherwise."""
    try:
        return routes_common.parse_json(text.encode("utf-8", "surrogatepass"))
    except routes_common.RequestError as exc:
        raise InputError(str(exc).replace("request body", "message")) from None


def _hello(text: str) -> tuple[context.Claims, dict[str, Any]]:
    try:
        hello = parse_message(text)
    except InputError as exc:
        raise InputError(f"the first message must be a JSON object (hello): {exc}") from exc
    if not isinstance(hello, dict) or hello.get("t") != "hello":
        raise InputError("the first message must be hello")
    claims = context.verify(hello.get("token"))
    for name in ("study", "env"):
        if not isinstance(hello.get(name), str) or not hello[name] or len(hello[name]) > 200:
            raise InputError(f"hello needs a {name} id")
    if hello.get("quality", "auto") not in QUALITIES:
        raise InputError("unknown quality")
    fps, camera = hello.get("fps"), hello.get("camera") or 0
    if fps is not None and (not isinstance(fps, (int, float)) or not 0 < fps <= 120):
        raise InputError("fps must be a number in (0, 120]")
    if not isinstance(camera, int) or not 0 <= camera < 64:
        raise InputError("camera must be a small index")
    return claims, hello


def _recorder_factory(claims: context.Claims, hello: dict[str, Any]):
    from annotator.recorder import Recorder

    settings = context.settings()
    repo = context.repository(settings.store, str(settings.data_dir))

    def make() -> Recorder:
        return Recorder(
            repo,
            settings.data_dir,
            hello["study"],
            hello["env"],
            claims.user,
            quality=QUALITIES[hello.get("quality", "auto")],
            background_writer=True,  # a killed server leaves files the writer child closes (recoverable)
            flush_steps=True,
        )

    return make


async def record_socket(websocket: WebSocket) -> None:
    await websocket.accept()
    try:
        text = await asyncio.wait_for(websocket.receive_text(), HELLO_SECONDS)
        if len(text) > MAX_MESSAGE:
            raise InputError("hello too large")
        claims, hello = _hello(text)
    except context.TokenError as exc:
        await websocket.close(CLOSE_UNAUTHORIZED, reason=str(exc)[:120])
        return
    except (TimeoutError, InputError, KeyError) as exc:
        await websocket.close(CLOSE_BAD_INPUT, reason=str(exc)[:120] or "no hello")
        return
    except WebSocketDisconnect:
        return
    outbox = Outbox(websocket, asyncio.get_running_loop())
    fps = hello.get("fps")
    session = LiveSession(
        _recorder_factory(claims, hello),
        outbox.frame,
        outbox.event,
        fps=float(fps) if fps else None,
        camera=int(hello.get("camera") or 0),
    )
    with _lock:  # checked and taken at once: two connections cannot both take the last place
        busy = len(_sessions) >= MAX_SESSIONS
        if not busy:
            _sessions.add(session)
    if busy:
        await websocket.close(CLOSE_BUSY, reason=f"{MAX_SESSIONS} recordings already run on this server")
        return
    session.start()
    sender = asyncio.create_task(outbox.run())
    try:
        await _receive(websocket, session, outbox)
    finally:
        await anyio.to_thread.run_sync(session.close)  # the episode is registered before we let go
        with _lock:
            _sessions.discard(session)
        sender.cancel()
        if websocket.client_state == WebSocketState.CONNECTED:
            try:
                await websocket.close()
            except RuntimeError:
                pass


async def _receive(websocket: WebSocket, session: LiveSession, outbox: Outbox) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text")
        try:
            if text is None or len(text) > MAX_MESSAGE:
                raise InputError("messages are JSON text of at most 16 KB")
            data = parse_message(text)
            if data.get("t") == "ack":
                outbox.ack()
                continue
            command = parse_command(data)
        except (InputError, ValueError) as exc:
            outbox.event({"t": "error", "message": str(exc)[:200], "fatal": True})
            session.put(Command("close"))
            await asyncio.sleep(0.1)  # let the error reach the browser
            await websocket.close(CLOSE_BAD_INPUT, reason=str(exc)[:120])
            return
        session.put(command)


def recover_at_start() -> None:
    """A server killed mid-recording left temp folders: register them now (the writer child closed their
    files), not only when someone next records. Runs beside the server's start; failures are only reported."""
    from pipelines.episodes import publish

    try:
        settings = context.settings()
        report = publish.recover_abandoned(context.repository(settings.store, str(settings.data_dir)),
                                           settings.data_dir)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the next recorder start tries again
        print(f"stepmark: recovering interrupted recordings failed: {exc}", file=sys.stderr)
        return
    publish.print_report(report)


def routes() -> list[BaseRoute]:
    global _hooked
    if not _hooked:
        context.on_shutdown(close_all)
        threading.Thread(target=recover_at_start, name="stepmark-recovery", daemon=True).start()
        _hooked = True
    return [WebSocketRoute(PATH, record_socket)]

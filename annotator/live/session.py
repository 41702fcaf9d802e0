"""One browser's live recording: a `Recorder` stepped by a thread of its own, fed by the browser's input.

The WebSocket route (`routes.py`) turns the browser's messages into `Command`s on this session's inbox and
sends what the session emits. Everything that touches the recorder runs on the session's thread, in order:

- sync environments: each `press` is one transition, in the order pressed; none is ever dropped (the inbox
  is a FIFO of inputs);
- async environments: a clock at the set fps steps with the keys/gamepad held now, plus any key pressed and
  released since the last frame (a tap shorter than a frame still acts once);
- Esc pauses (Shift+Esc in games whose key map has Esc, e.g. NetHack; no step while paused), Enter resumes or starts the next episode; at the end of an episode the
  browser answers with `save` (accept / completed), as the reference client's save dialog does;
- `stop` keeps an episode with steps as CANCELLED and ends the session; it also ends on `close` (tab closed, connection lost, server shutdown): the recorder closes, so an
  episode with steps is registered as ABANDONED with its files complete, the environment and the writer
  process stop, and the thread exits.

Frames go out through `emit_frame(header, jpeg)`: the route keeps only the newest one for a slow browser
(frames are dropped, inputs never). Status changes go through `emit_event(dict)` in order.
"""

from __future__ import annotations

import ctypes
import gc
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from annotator.recorder import Recorder
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2, study_pb2

State = study_pb2.Episode.State
QUALITIES = {
    "auto": None,
    "low": client_pb2.SetQualityRequest.QUALITY_LOW,
    "medium": client_pb2.SetQualityRequest.QUALITY_MEDIUM,
    "high": client_pb2.SetQualityRequest.QUALITY_HIGH,
}
MAX_KEYS = 16  # keys held at once that an input may name (a keyboard has no more rollover than that)
MAX_KEY_LENGTH = 32
MAX_GAMEPAD_ENTRIES = 64
IDLE_CHECK_SECONDS = 5.0

# What the session is doing (sent to the browser as `state`).
READY, RUNNING, PAUSED, ENDED, CLOSED = "ready", "running", "paused", "ended", "closed"


class InputError(StepmarkError):
    """A browser message that is not a valid input (the connection is closed with a reason)."""


@dataclass
class Command:
    kind: str
    keys: list[str] = field(default_factory=list)
    gamepad: client_pb2.GamepadInput | None = None
    value: Any = None


def parse_keys(value: Any) -> list[str]:
    """Key names from the browser, bounded (`KeyboardEvent.key` values)."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_KEYS:
        raise InputError(f"keys must be a list of at most {MAX_KEYS} key names")
    keys = []
    for key in value:
        if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
            raise InputError(f"bad key name {str(key)[:40]!r}")
        keys.append(key)
    return keys


def parse_gamepad(value: Any) -> client_pb2.GamepadInput | None:
    """The Gamepad API state the browser polled: {id, buttons: {index: [pressed, value]}, axes: {index: value}}."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InputError("gamepad must be an object")
    buttons, axes = value.get("buttons") or {}, value.get("axes") or {}
    if not isinstance(buttons, dict) or not isinstance(axes, dict):
        raise InputError("gamepad buttons and axes must be objects")
    if len(buttons) > MAX_GAMEPAD_ENTRIES or len(axes) > MAX_GAMEPAD_ENTRIES:
        raise InputError("too many gamepad buttons or axes")
    pad = client_pb2.GamepadInput(id=str(value.get("id") or "")[:200])
    try:
        for index, state in buttons.items():
            pressed, amount = state if isinstance(state, list) else (bool(state), 1.0 if state else 0.0)
            pad.buttons[int(index)].pressed = bool(pressed)
            pad.buttons[int(index)].value = _finite(amount)
        for index, amount in axes.items():
            pad.axes[int(index)] = _finite(amount)
    except (TypeError, ValueError) as exc:
        raise InputError(f"bad gamepad state: {exc}") from exc
    return pad


def _finite(value: Any) -> float:
    f = float(value)
    if not math.isfinite(f):
        raise ValueError(f"not a finite number: {value!r}")
    return max(-1.0, min(1.0, f))


def parse_command(message: dict[str, Any]) -> Command:
    """A browser message (already JSON-decoded) as a Command; InputError when it is not one."""
    kind = message.get("t")
    if kind in ("press", "hold"):
        return Command(kind, parse_keys(message.get("keys")), parse_gamepad(message.get("gamepad")))
    if kind == "pause":
        return Command(kind, value=bool(message.get("paused", True)))
    if kind in ("start", "enter"):
        return Command("enter")
    if kind in ("end", "stop"):
        return Command(kind)
    if kind == "save":
        return Command(kind, value=(bool(message.get("accept")), bool(message.get("completed", True))))
    if kind == "fps":
        fps = message.get("fps")
        if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not 0 < fps <= 120:
            raise InputError("fps must be a number in (0, 120]")
        return Command(kind, value=float(fps))
    if kind == "quality":
        if message.get("quality") not in QUALITIES:
            raise InputError(f"unknown quality {str(message.get('quality'))[:20]!r}")
        return Command(kind, value=message["quality"])
    if kind == "camera":
        index = message.get("index") or 0
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 64:
            raise InputError("camera must be a small index")
        return Command(kind, value=index)
    raise InputError(f"unknown message type {str(kind)[:20]!r}")


def release_memory() -> None:
    """Hands freed memory back to the system after a session (glibc keeps freed arenas otherwise)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the memory is reused by the next session instead
        pass


class LiveSession:
    """A live recording for one browser connection (see the module docstring)."""

    def __init__(
        self,
        make_recorder: Callable[[], Recorder],
        emit_frame: Callable[[dict[str, Any], bytes], None],
        emit_event: Callable[[dict[str, Any]], None],
        *,
        fps: float | None = None,
        camera: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._make_recorder = make_recorder
        self._emit_frame = emit_frame
        self._emit_event = emit_event
        self._fps = fps
        self._camera = camera
        self._clock = clock
        self.inbox: queue.Queue[Command] = queue.Queue()
        self.recorder: Recorder | None = None
        self.state = READY
        self.frames = 0  # frames emitted (steps and episode starts)
        self.saved: list[study_pb2.Episode] = []
        self._held: list[str] = []
        self._tapped: list[str] = []
        self._gamepad: client_pb2.GamepadInput | None = None
        self._next_frame = 0.0
        self._thread = threading.Thread(target=self._run, name="stepmark-live-recording", daemon=True)

    # ----- called from the event loop -------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def put(self, command: Command) -> None:
        self.inbox.put(command)

    def close(self, timeout: float | None = 60.0) -> None:
        """Ends the session (idempotent) and waits for its thread: the episode is saved as ABANDONED."""
        self.inbox.put(Command("close"))
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # ----- the session's thread -------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.recorder = self._make_recorder()
            self._start_episode(paused=None)
        except StepmarkError as exc:
            self._emit_event({"t": "error", "message": str(exc), "fatal": True})
            self._shutdown()
            return
        except Exception as exc:  # noqa: BLE001 - the browser is told; the server keeps running
            self._emit_event({"t": "error", "message": f"{type(exc).__name__}: {exc}", "fatal": True})
            self._shutdown()
            return
        try:
            while self._serve_one():
                pass
        except Exception as exc:  # noqa: BLE001 - a failing step ends this session, never the server
            self._emit_event({"t": "error", "message": f"{type(exc).__name__}: {exc}", "fatal": True})
        finally:
            self._shutdown()

    def _serve_one(self) -> bool:
        """Waits for the next command or frame time and handles it; False once the session is closed."""
        recorder = self.recorder
        assert recorder is not None and recorder.env is not None
        clocked = self.state == RUNNING and not recorder.env.sync
        if clocked:
            timeout = max(0.0, self._next_frame - self._clock())
        else:
            timeout = IDLE_CHECK_SECONDS if self.state == RUNNING else None
        try:
            command = self.inbox.get(timeout=timeout) if timeout != 0.0 else self.inbox.get_nowait()
        except queue.Empty:
            command = None
        if command is not None:
            if command.kind == "close":
                return False
            if command.kind == "stop":  # an episode with steps is kept as CANCELLED, then the session ends
                episode = self.recorder.cancel() if self.recorder is not None else None
                self._emit_event({"t": "stopped", "episode_id": episode.id if episode is not None else ""})
                return False
            try:
                self._handle(command)
            except StepmarkError as exc:
                self._emit_event({"t": "error", "message": str(exc)})
        now = self._clock()
        if self.state == RUNNING and not recorder.env.sync and now >= self._next_frame:
            self._frame(now)
        elif self.state == RUNNING and command is None:
            self._abandon_if_idle(now)
        return True

    def _handle(self, command: Command) -> None:
        recorder = self.recorder
        assert recorder is not None and recorder.env is not None
        kind = command.kind
        if kind == "press":
            if self.state != RUNNING:
                return  # paused or between episodes: no step (the browser does not send them either)
            if recorder.env.sync:
                self._after_step(recorder.act(command.keys, command.gamepad))
            else:  # a tap: acts on the next frame even if released before it
                self._tapped = sorted(set(self._tapped) | set(command.keys))
                self._held, self._gamepad = command.keys, command.gamepad
                recorder.act(command.keys, command.gamepad)
        elif kind == "hold":
            self._held, self._gamepad = command.keys, command.gamepad
            if self.state == RUNNING and not recorder.env.sync:
                recorder.act(command.keys, command.gamepad)
        elif kind == "pause":
            if command.value and self.state == RUNNING:
                self._set_state(PAUSED)
            elif not command.value and self.state == PAUSED:
                self._resume()
        elif kind == "enter":
            if self.state == PAUSED:
                self._resume()
            elif self.state == READY:
                self._start_episode(paused=False)
        elif kind == "end":  # the player ends the episode here (environments such as Robosuite only truncate)
            if self.state in (RUNNING, PAUSED) and recorder.in_episode:
                self._set_state(ENDED, completed=False)
        elif kind == "save":
            self._save(*command.value)
        elif kind == "fps":
            recorder.set_fps(client_pb2.SetFpsRequest(fps=command.value))
            self._fps = recorder.env.fps
            self._next_frame = self._clock()
            self._set_state(self.state)
        elif kind == "quality":
            quality = QUALITIES[command.value]
            if quality is not None:
                self._show(recorder.set_quality(client_pb2.SetQualityRequest(quality=quality)))
        elif kind == "camera":
            recorder.set_camera(client_pb2.SetCameraRequest(index=command.value))
            self._camera = command.value
            if recorder.in_episode:
                self._show(recorder.set_quality(client_pb2.SetQualityRequest(quality=recorder.quality)))

    def _frame(self, now: float) -> None:
        """One async frame with what is held (and what was tapped since the last frame)."""
        recorder = self.recorder
        assert recorder is not None and recorder.env is not None
        keys = sorted(set(self._held) | set(self._tapped))
        self._tapped = []
        period = 1.0 / recorder.env.fps
        self._next_frame += period
        if self._next_frame < now - period:  # fell behind (a slow step): keep the rate, do not burst
            self._next_frame = now + period
        if keys or self._gamepad is not None and (self._gamepad.buttons or self._gamepad.axes):
            recorder.note_input()  # a key held down for minutes is someone playing, not idleness
        elif self._abandon_if_idle(now):
            return
        self._after_step(recorder.step_held(keys, self._gamepad))

    def _abandon_if_idle(self, now: float) -> bool:
        recorder = self.recorder
        assert recorder is not None
        episode = recorder.abandon_if_idle(now)
        if recorder.in_episode:
            return False
        kept = episode.id if episode is not None else ""
        self._emit_event({"t": "abandoned", "episode_id": kept,
                          "steps": episode.num_steps if episode is not None else 0})  # fmt: skip
        self._set_state(READY)
        return True

    def _after_step(self, response: Any) -> None:
        recorder = self.recorder
        assert recorder is not None
        if isinstance(response, client_pb2.ConfirmSaveResponse):
            self._emit(recorder.frame, recorder.episode_index, recorder.episode_steps, reward=None)
            self._set_state(ENDED, completed=bool(response.mark_as_completed))
        else:
            self._show(response)

    def _show(self, response: client_pb2.StepResponse) -> None:
        self._emit(response.image, response.episode_index, response.episode_steps, response.reward)

    def _emit(self, image: bytes, episode: int, step: int, reward: float | None) -> None:
        self.frames += 1
        header = {"n": self.frames, "episode": int(episode), "step": int(step)}
        if reward is not None:
            header["reward"] = float(reward)
        self._emit_frame(header, bytes(image))

    def _start_episode(self, *, paused: bool | None) -> None:
        recorder = self.recorder
        assert recorder is not None
        response = recorder.start()
        assert recorder.env is not None
        if self._fps and not recorder.env.sync:
            recorder.set_fps(client_pb2.SetFpsRequest(fps=self._fps))
        if self._camera and recorder.env.camera != self._camera:
            recorder.set_camera(client_pb2.SetCameraRequest(index=self._camera))
            response = recorder.set_quality(client_pb2.SetQualityRequest(quality=recorder.quality))
        self._held, self._tapped, self._gamepad = [], [], None
        if paused is None:  # the first episode: an async one waits for the player (Esc / Enter)
            paused = not recorder.env.sync
        self._set_state(PAUSED if paused else RUNNING)
        self._next_frame = self._clock() + 1.0 / recorder.env.fps
        self._show(response)

    def _resume(self) -> None:
        recorder = self.recorder
        assert recorder is not None and recorder.env is not None
        recorder.note_input()
        self._next_frame = self._clock() + 1.0 / recorder.env.fps
        self._set_state(RUNNING)

    def _save(self, accept: bool, completed: bool) -> None:
        recorder = self.recorder
        assert recorder is not None
        if self.state == ENDED or (self.state in (RUNNING, PAUSED) and recorder.in_episode):
            # Saving before the environment ends the episode is allowed (the reference client's Save button).
            response = recorder.save(
                client_pb2.SaveEpisodeRequest(accept=accept, mark_as_completed=completed)
            )
            episode = response.episode.episode
            self.saved.append(episode)
            self._emit_event({"t": "saved", "episode_id": episode.id, "status": response.episode.status,
                              "steps": episode.num_steps, "return": episode.total_reward})  # fmt: skip
            self._set_state(READY)

    def _set_state(self, state: str, **extra: Any) -> None:
        self.state = state
        recorder = self.recorder
        env = recorder.env if recorder is not None else None
        event: dict[str, Any] = {"t": "state", "state": state, **extra}
        if env is not None:
            event.update(
                sync=env.sync,
                fps=env.fps,
                keys=dict(env.key_map),
                cameras=list(env.cameras),
                camera=env.camera,
                episode=max(recorder.episode_index, 0),
            )
        self._emit_event(event)

    def _shutdown(self) -> None:
        """Closes the recorder: an episode with steps is registered ABANDONED, its files complete."""
        recorder, self.recorder = self.recorder, None
        try:
            if recorder is not None:
                before = recorder.last_episode
                recorder.close()
                if recorder.last_episode is not None and recorder.last_episode is not before:
                    self._emit_event({"t": "abandoned", "episode_id": recorder.last_episode.id,
                                      "steps": recorder.last_episode.num_steps})  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - reported; recovery registers what the writer closed
            self._emit_event({"t": "error", "message": f"closing the recording: {exc}", "fatal": True})
        finally:
            self.state = CLOSED
            self._emit_event({"t": "state", "state": CLOSED})
            del recorder
            release_memory()

"""The one interface every environment family implements, and the bookkeeping they all share.

The annotator and the recorder only ever talk to `Environment`: they never see gym3, gymnasium, NLE or
robosuite objects. Each family module subclasses `Environment` and fills in a handful of `_`-prefixed
hooks; truncation at `max_episode_steps`, the sync/async rate, camera selection and making `info`
JSON-friendly are done here once.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dm_env import specs

from pipelines.episodes.base import to_jsonable
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2, study_pb2

DEFAULT_FPS = 15.0  # SetFpsRequest.fps default in the reference protocol.
MAX_FPS = 120.0


@dataclass
class Transition:
    """One environment transition: the observation reached, the reward that led to it, and why it ended."""

    observation: dict[str, np.ndarray]
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def last(self) -> bool:
        """True when the episode is over (terminated by the task or truncated by the step limit)."""
        return self.terminated or self.truncated


def image_spec(shape: Sequence[int], name: str = "image") -> specs.Array:
    """The dm_env spec of an RGB frame (uint8, HxWx3)."""
    return specs.Array(shape=tuple(int(s) for s in shape), dtype=np.uint8, name=name)


class Environment(abc.ABC):
    """A running environment made from an `EnvironmentSpec` (see `annotator.envs.registry.create`).

    Protocol: `reset()` once, then `step(action)` until `Transition.last`; then `reset()` again.
    `action_from_input(keys, gamepad)` turns what the user pressed into an action for `step`; in async
    mode the caller steps every `1 / fps` seconds with whatever is held (the no-op when nothing is).
    """

    #: Family name as used by the registry ("procgen", "atari", ...).
    family: str = ""

    def __init__(self, spec: study_pb2.EnvironmentSpec, *, cameras: Sequence[str] = ("main",)) -> None:
        self.spec = spec
        self._sync = bool(spec.sync)
        self._fps = DEFAULT_FPS
        self.max_episode_steps: int | None = spec.max_episode_steps if spec.max_episode_steps > 0 else None
        if not cameras:
            raise ValueError("an environment has at least one camera")
        self.cameras: list[str] = list(cameras)
        self._camera = 0
        self._steps = 0
        self._started = False
        self._over = False
        #: Key (`KeyboardEvent.key`) -> what it does, for the UI's on-screen buttons and help.
        self.key_map: dict[str, str] = {}

    # ----- rate -------------------------------------------------------------------------------------
    @property
    def sync(self) -> bool:
        """True: one transition per user action. False: transitions at `fps`, no-op when idle."""
        return self._sync

    @property
    def fps(self) -> float:
        return self._fps

    def set_fps(self, fps: float) -> None:
        """Sets the async step rate (frames per second); rejects non-positive or absurd rates."""
        f = float(fps)
        if not math.isfinite(f) or f <= 0 or f > MAX_FPS:
            raise StepmarkError(f"fps must be in (0, {MAX_FPS:g}], got {fps!r}")
        self._fps = f

    # ----- cameras ----------------------------------------------------------------------------------
    @property
    def camera(self) -> int:
        """Index of the camera `render()` currently shows."""
        return self._camera

    def set_camera(self, index: int) -> str:
        """Selects the camera `render()` shows; returns its name."""
        if not 0 <= int(index) < len(self.cameras):
            raise StepmarkError(
                f"camera index {index} out of range: {self.family} environment {self.spec.id!r} has "
                f"{len(self.cameras)} camera(s) {self.cameras}"
            )
        self._camera = int(index)
        self._camera_changed()
        return self.cameras[self._camera]

    def _camera_changed(self) -> None:
        """Hook for families whose observation depends on the selected camera."""
        return None

    # ----- episode loop -----------------------------------------------------------------------------
    @property
    def steps(self) -> int:
        """Number of steps taken in the current episode."""
        return self._steps

    def reset(self) -> Transition:
        """Starts a new episode and returns its first observation (reward 0, not last)."""
        self._steps = 0
        observation, info = self._reset()
        self._started, self._over = True, False
        return Transition(observation=observation, info=to_jsonable(info))

    def step(self, action: Any) -> Transition:
        """Applies one action; truncates (not terminates) when `max_episode_steps` is reached."""
        if not self._started:
            raise StepmarkError(f"{self.family} environment {self.spec.id!r}: call reset() before step()")
        if self._over:
            raise StepmarkError(
                f"{self.family} environment {self.spec.id!r}: the episode is over; call reset() to start another"
            )
        observation, reward, terminated, truncated, info = self._step(action)
        self._steps += 1
        if not terminated and self.max_episode_steps is not None and self._steps >= self.max_episode_steps:
            truncated = True
        if terminated:
            truncated = False  # the task ended it; the step limit did not.
        self._over = bool(terminated or truncated)
        return Transition(
            observation=observation,
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            info=to_jsonable(info),
        )

    # ----- to implement per family ------------------------------------------------------------------
    @abc.abstractmethod
    def _reset(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Starts the underlying environment's episode: (observation, info)."""

    @abc.abstractmethod
    def _step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """(observation, reward, terminated, truncated-by-the-environment-itself, info)."""

    @abc.abstractmethod
    def action_from_input(self, keys: Sequence[str], gamepad: client_pb2.GamepadInput | None = None) -> Any:
        """The action for the keys held (`KeyboardEvent.key` names) and the gamepad state."""

    @abc.abstractmethod
    def noop_action(self) -> Any:
        """The action that does nothing (sent in async mode when nothing is pressed)."""

    @abc.abstractmethod
    def sample_action(self, rng: np.random.Generator) -> Any:
        """A uniformly random valid action (the batch recorder's random policy)."""

    @abc.abstractmethod
    def render(self) -> np.ndarray:
        """The current frame of the selected camera, HxWx3 uint8."""

    @abc.abstractmethod
    def observation_spec(self) -> dict[str, specs.Array]:
        """dm_env specs of the observation dict (fixed shapes for the whole life of the environment)."""

    @abc.abstractmethod
    def action_spec(self) -> specs.Array:
        """dm_env spec of the action."""

    def success(self, info: Mapping[str, Any]) -> bool | None:
        """Whether the task was solved, from a step's info; None when the family has no notion of it."""
        return None

    def close(self) -> None:
        """Releases the underlying environment."""
        return None

    def __enter__(self) -> Environment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

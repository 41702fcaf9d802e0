"""Small checks every environment family's tests share."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from annotator.envs.base import Environment, Transition
from protos.rlds_creator import client_pb2


def gamepad(buttons: tuple[int, ...] = (), axes: dict[int, float] | None = None) -> client_pb2.GamepadInput:
    """A GamepadInput as the browser client sends it (only pressed buttons / non-zero axes)."""
    pad = client_pb2.GamepadInput(id="Xbox 360 Controller (STANDARD GAMEPAD)")
    for index in buttons:
        pad.buttons[index].pressed = True
        pad.buttons[index].value = 1.0
    for index, value in (axes or {}).items():
        pad.axes[index] = value
    return pad


def check_transition(env: Environment, t: Transition) -> None:
    """The observation matches the env's own specs, and the info survives JSON."""
    obs_spec = env.observation_spec()
    assert set(t.observation) == set(obs_spec)
    for name, spec in obs_spec.items():
        spec.validate(t.observation[name])
    assert isinstance(t.reward, float)
    json.dumps(t.info)  # must not raise: the recorder stores it


def check_frame(env: Environment, shape: tuple[int, int, int]) -> np.ndarray:
    frame = env.render()
    assert frame.dtype == np.uint8
    assert frame.shape == shape
    assert frame.std() > 0, "a blank frame means nothing was rendered"
    return frame


def run_to_truncation(env: Environment, limit: int, action: Any) -> Transition:
    """Steps `action` until the step limit; checks it truncates exactly there and refuses further steps."""
    env.reset()
    t = None
    for i in range(limit):
        t = env.step(action)
        if t.terminated:
            raise AssertionError(f"terminated at step {i + 1} before the limit {limit}; pick a calmer action")
        assert t.truncated == (i + 1 == limit)
    assert t is not None and t.last and env.steps == limit
    return t

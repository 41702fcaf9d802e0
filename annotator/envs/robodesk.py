"""RoboDesk (Franka Panda at a desk, dm_control physics) as an `Environment`.

Spec fields: `task` (one of RoboDesk's 21 tasks; default open_slide), `reward` (dense, sparse, success),
`action_repeat`, `image_size` (the observation image, also what `render()` shows). RoboDesk's own
500-step episode limit is switched off: `max_episode_steps` is the only limit, counted in agent steps.

Actions are RoboDesk's 5 numbers in [-1, 1]: end-effector x, y, z deltas (1 cm per unit), wrist rotation,
and the gripper opening (an absolute target: -1 closed, +1 open). The gripper holds its opening until
the user toggles it. RoboDesk samples its randomisation from numpy's global RNG, so `seed` seeds that
RNG once, at the first reset.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import io
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from dm_env import specs

from annotator.envs import keymaps
from annotator.envs.base import Environment, image_spec
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2, study_pb2

if not os.environ.get("DISPLAY"):  # no X server: dm_control must render offscreen
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

_Reward = study_pb2.EnvironmentSpec.RoboDesk.Reward
REWARDS: dict[int, str] = {
    _Reward.REWARD_UNSPECIFIED: "dense",  # the proto's declared default
    _Reward.REWARD_DENSE: "dense",
    _Reward.REWARD_SPARSE: "sparse",
    _Reward.REWARD_SUCCESS: "success",
}
DEFAULT_TASK = "open_slide"
MAX_IMAGE_SIZE = 1024
ACTION_DIM = 5
GRIPPER = 4

# Keys: (action index, sign). Arrows move in the camera's image plane (right = +x, up = +y, away).
_KEYS: dict[str, tuple[int, float]] = {
    "ArrowRight": (0, 1.0),
    "ArrowLeft": (0, -1.0),
    "ArrowUp": (1, 1.0),
    "ArrowDown": (1, -1.0),
    ";": (2, 1.0),
    ".": (2, -1.0),
    "o": (3, 1.0),
    "p": (3, -1.0),
}
KEY_MAP: dict[str, str] = {
    "ArrowRight": "move right (+x)",
    "ArrowLeft": "move left (-x)",
    "ArrowUp": "move away (+y)",
    "ArrowDown": "move closer (-y)",
    ";": "move up (+z)",
    ".": "move down (-z)",
    "o": "rotate wrist +",
    "p": "rotate wrist -",
    " ": "toggle gripper (open/close)",
}
GRIPPER_KEY = " "
GRIPPER_BUTTON = keymaps.BUTTON_A


def _import_robodesk() -> Any:
    """Imports RoboDesk, first restoring the Pillow alias it still calls (Image.ANTIALIAS, gone in Pillow 10)."""
    from PIL import Image

    if not hasattr(Image, "ANTIALIAS"):
        Image.ANTIALIAS = Image.LANCZOS  # type: ignore[attr-defined]
    # robodesk imports `gym`, whose import prints a deprecation banner to stderr on every run: keep it out.
    with contextlib.redirect_stderr(io.StringIO()):
        from robodesk import robodesk

    return robodesk


@functools.cache
def valid_ids() -> list[str]:
    """RoboDesk's tasks, read from the keys of its `reward_functions` table in the installed source.

    Parsing the source avoids building the MuJoCo model (seconds) just to list names.
    """
    with contextlib.redirect_stderr(io.StringIO()):  # finding it imports the package, hence gym's banner
        spec = importlib.util.find_spec("robodesk.robodesk")
    if spec is None or spec.origin is None:
        return []
    tree = ast.parse(Path(spec.origin).read_text())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict)
            and any(isinstance(t, ast.Attribute) and t.attr == "reward_functions" for t in node.targets)
        ):
            return [
                k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
            ]
    return []


class RoboDeskEnvironment(Environment):
    family = "robodesk"

    def __init__(self, spec: study_pb2.EnvironmentSpec, *, seed: int | None = None) -> None:
        super().__init__(spec, cameras=("desk",))
        d = spec.robodesk
        self.task = d.task or DEFAULT_TASK
        if self.task not in valid_ids():
            raise StepmarkError(f"unknown RoboDesk task {self.task!r}; valid tasks: {', '.join(valid_ids())}")
        if d.reward not in REWARDS:
            raise StepmarkError(f"RoboDesk {self.task}: unknown reward type {d.reward}")
        if d.action_repeat < 1:
            raise StepmarkError(f"RoboDesk {self.task}: action_repeat must be >= 1, got {d.action_repeat}")
        if not 1 <= d.image_size <= MAX_IMAGE_SIZE:
            raise StepmarkError(
                f"RoboDesk {self.task}: image_size must be in [1, {MAX_IMAGE_SIZE}], got {d.image_size}"
            )
        self.reward_type = REWARDS[d.reward]
        self.image_size = int(d.image_size)
        robodesk = _import_robodesk()
        self._env = robodesk.RoboDesk(
            task=self.task,
            reward=self.reward_type,
            action_repeat=int(d.action_repeat),
            episode_length=0,  # 0 disables RoboDesk's own limit; Environment.step truncates instead
            image_size=self.image_size,
        )
        self._seed = seed
        self._gripper = 0.0
        self._gripper_held = False
        self._observation: dict[str, np.ndarray] = {}
        # gym warns "Box bound precision lowered" for RoboDesk's float64 joint bounds, on every run
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*Box bound precision lowered", category=UserWarning)
            space = self._env.observation_space
        self._obs_spec: dict[str, specs.Array] = {"image": image_spec((self.image_size, self.image_size, 3))}
        for key, box in space.spaces.items():
            if key != "image":
                self._obs_spec[key] = specs.Array(box.shape, np.float64, name=key)
        self.key_map = dict(KEY_MAP)

    def _convert(self, observation: dict[str, Any]) -> dict[str, np.ndarray]:
        out = {"image": np.ascontiguousarray(np.asarray(observation["image"], np.uint8))}
        for key in self._obs_spec:
            if key != "image":
                out[key] = np.array(observation[key], np.float64)  # copies: RoboDesk hands out live views
        return out

    def _success(self) -> bool:
        return bool(self._env._get_task_reward(self.task, "success"))

    def _reset(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        if self._seed is not None:
            np.random.seed(self._seed)
            self._seed = None
        self._observation = self._convert(self._env.reset())
        # Hold the gripper where reset left it: its opening mapped back into the action's [-1, 1].
        low, high = self._env.joint_bounds[7]
        opening = float(self._observation["qpos_robot"][7])
        self._gripper = float(np.clip(2.0 * (opening - low) / (high - low) - 1.0, -1.0, 1.0))
        self._gripper_held = False
        return dict(self._observation), {"success": self._success()}

    def _step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        vector = np.asarray(action, dtype=np.float64).reshape(-1)
        if vector.shape != (ACTION_DIM,) or not np.all(np.isfinite(vector)):
            raise StepmarkError(
                f"RoboDesk action must be {ACTION_DIM} finite numbers, got shape {vector.shape}"
            )
        observation, reward, _, info = self._env.step(np.clip(vector, -1.0, 1.0))
        self._observation = self._convert(observation)
        return dict(self._observation), float(reward), False, False, dict(info, success=self._success())

    def close(self) -> None:
        if getattr(self, "_env", None) is not None:
            # Free the GL contexts now: left to interpreter exit, dm_control's render thread is already gone.
            self._env.physics.free()
            self._env.physics_copy.free()
            self._env = None

    # ----- input ------------------------------------------------------------------------------------
    def action_from_input(
        self, keys: Sequence[str], gamepad: client_pb2.GamepadInput | None = None
    ) -> np.ndarray:
        """Arrows / . ; / o p move at full speed while held; space (gamepad A) toggles the gripper on press."""
        held = keymaps.normalize_keys(keys)
        action = np.zeros(ACTION_DIM)
        for key, (index, sign) in _KEYS.items():
            if key in held:
                action[index] += sign
        if gamepad is not None:
            buttons = keymaps.pressed_buttons(gamepad)
            action[0] += keymaps.axis(gamepad, keymaps.AXIS_LX)
            action[1] -= keymaps.axis(gamepad, keymaps.AXIS_LY)  # stick up (negative) = away
            action[2] -= keymaps.axis(gamepad, keymaps.AXIS_RY)
            action[3] += keymaps.axis(gamepad, keymaps.AXIS_RX)
            for button, index, sign in (
                (keymaps.DPAD_RIGHT, 0, 1.0),
                (keymaps.DPAD_LEFT, 0, -1.0),
                (keymaps.DPAD_UP, 1, 1.0),
                (keymaps.DPAD_DOWN, 1, -1.0),
            ):
                if button in buttons:
                    action[index] += sign
        pressed = GRIPPER_KEY in held or GRIPPER_BUTTON in keymaps.pressed_buttons(gamepad)
        if pressed and not self._gripper_held:
            self._gripper = -1.0 if self._gripper > 0 else 1.0
        self._gripper_held = pressed
        action = np.clip(action, -1.0, 1.0)
        action[GRIPPER] = self._gripper
        return action

    @property
    def env_steps(self) -> int:
        """RoboDesk's own step count this episode (agent steps times action_repeat)."""
        return int(self._env.num_steps)

    @property
    def gripper_open(self) -> bool:
        return self._gripper > 0

    def noop_action(self) -> np.ndarray:
        """No motion; the gripper holds its opening."""
        action = np.zeros(ACTION_DIM)
        action[GRIPPER] = self._gripper
        return action

    def sample_action(self, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, ACTION_DIM)

    # ----- output -----------------------------------------------------------------------------------
    def render(self) -> np.ndarray:
        if not self._observation:
            raise StepmarkError("RoboDesk: nothing to render before reset()")
        return self._observation["image"].copy()

    def observation_spec(self) -> dict[str, specs.Array]:
        return dict(self._obs_spec)

    def action_spec(self) -> specs.BoundedArray:
        return specs.BoundedArray((ACTION_DIM,), np.float64, minimum=-1.0, maximum=1.0, name="action")

    def success(self, info: dict[str, Any]) -> bool | None:
        """RoboDesk's own success criterion for the task, recorded in every step's info."""
        return bool(info.get("success", False))

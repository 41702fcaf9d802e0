"""Robosuite 1.5 manipulation tasks, rendered offscreen by MuJoCo (MUJOCO_GL=osmesa on a headless host).

Spec fields: `id` (task, e.g. Lift, Stack, TwoArmLift), `robots` (default Panda; two Pandas for TwoArm
tasks), `config` (robosuite's env_configuration for two-arm tasks: opposed/parallel, or the 1.4 names
such as single-arm-opposed), `arm` (which arm the user drives: on a bimanual robot the arm itself, on
two robots "right" = robot 0 and "left" = robot 1), `cameras` (default agentview; `set_camera` picks
the one shown), `controller` (OSC_POSE or IK_POSE for the arms), `pos_sensitivity`/`rot_sensitivity`
(scale of one key press, see `schemas/keymaps.md`), `use_camera_obs` (camera images in the observation).

Tasks never end by themselves (robosuite's horizon is disabled): an episode ends by `max_episode_steps`
or by the user. Every step's info carries `success` from the task's own `_check_success()`.
Images are turned right way up (robosuite renders in OpenGL's bottom-up convention).
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from dm_env import specs

from annotator.envs import keymaps
from annotator.envs.base import Environment
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2, study_pb2

if not os.environ.get("DISPLAY"):  # no X server: MuJoCo must render offscreen
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

CONTROLLERS = ("OSC_POSE", "IK_POSE")
DEFAULT_CAMERA = "agentview"
DEFAULT_RENDER_SIZE = 256
CONTROL_FREQ = 20
NO_HORIZON = 10**9

# One key press moves by this fraction of the controller's largest per-step motion, times sensitivity
# (OSC_POSE: 5 cm and 0.5 rad; IK_POSE: its ik_pos_limit / ik_ori_limit), clipped to the whole of it.
POS_STEP = 0.4
ROT_STEP = 0.2

# Robosuite's own keyboard layout (robosuite/devices/keyboard.py), as browser key names:
# (kind, axis, sign); rotation signs already include its raw->controller remapping.
_KEYS: dict[str, tuple[str, int, float]] = {
    "ArrowUp": ("pos", 0, -1.0),
    "ArrowDown": ("pos", 0, 1.0),
    "ArrowLeft": ("pos", 1, -1.0),
    "ArrowRight": ("pos", 1, 1.0),
    ".": ("pos", 2, -1.0),
    ";": ("pos", 2, 1.0),
    "e": ("rot", 0, -1.0),
    "r": ("rot", 0, 1.0),
    "y": ("rot", 1, 1.0),
    "h": ("rot", 1, -1.0),
    "p": ("rot", 2, -1.0),
    "o": ("rot", 2, 1.0),
}
KEY_MAP: dict[str, str] = {
    "ArrowUp": "move -x (away from the default camera)",
    "ArrowDown": "move +x",
    "ArrowLeft": "move -y",
    "ArrowRight": "move +y",
    ".": "move down (-z)",
    ";": "move up (+z)",
    "e": "roll -",
    "r": "roll +",
    "y": "pitch +",
    "h": "pitch -",
    "p": "yaw -",
    "o": "yaw +",
    " ": "toggle gripper (open/close)",
}
GRIPPER_KEY = " "
GRIPPER_BUTTON = keymaps.BUTTON_A


def _errors_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


def _robosuite() -> Any:
    # robosuite logs half a dozen setup warnings (private macro file, optional robot models, IK) and an
    # INFO line per controller load, each twice (its handler and the root's): keep its errors only.
    logger = logging.getLogger("robosuite_logs")
    if _errors_only not in logger.filters:
        logger.addFilter(_errors_only)
    import robosuite

    return robosuite


def valid_ids() -> list[str]:
    """Robosuite's registered tasks."""
    return sorted(_robosuite().ALL_ENVIRONMENTS)


def _is_two_arm(task: str) -> bool:
    from robosuite.environments.base import REGISTERED_ENVS
    from robosuite.environments.manipulation.two_arm_env import TwoArmEnv

    return issubclass(REGISTERED_ENVS[task], TwoArmEnv)


def controller_configs(robots: Sequence[str], controller: str) -> list[dict[str, Any]]:
    """Each robot's default composite controller with its arm parts replaced by `controller`."""
    rs = _robosuite()
    configs = []
    for robot in robots:
        config = rs.load_composite_controller_config(robot=robot)
        for part, part_config in list(config.get("body_parts", {}).items()):
            if part not in ("right", "left"):
                continue
            arm_config = rs.load_part_controller_config(default_controller=controller)
            if controller == "IK_POSE":
                # robosuite 1.5.2's IK controller computes absolute joint targets but its joint-position base
                # reads them as deltas, so the arm drifts away at zero input (robosuite issues #640, #793).
                # "absolute" makes the base take the IK solution as the goal: the arm holds still at rest.
                arm_config["input_type"] = "absolute"
            if "gripper" in part_config:
                arm_config["gripper"] = copy.deepcopy(part_config["gripper"])
            config["body_parts"][part] = arm_config
        configs.append(config)
    return configs


class RobosuiteEnvironment(Environment):
    family = "robosuite"

    def __init__(
        self, spec: study_pb2.EnvironmentSpec, *, seed: int | None = None, render_size: int | None = None
    ) -> None:
        r = spec.robosuite
        cameras = list(r.cameras) or [DEFAULT_CAMERA]
        super().__init__(spec, cameras=cameras)
        rs = _robosuite()
        if r.id not in rs.ALL_ENVIRONMENTS:
            raise StepmarkError(f"unknown Robosuite task {r.id!r}; valid ids: {', '.join(valid_ids())}")
        two_arm = _is_two_arm(r.id)
        self.robots = list(r.robots) or (["Panda", "Panda"] if two_arm else ["Panda"])
        unknown = [name for name in self.robots if name not in rs.ALL_ROBOTS]
        if unknown:
            raise StepmarkError(
                f"Robosuite {r.id}: unknown robot(s) {unknown}; valid: {', '.join(sorted(rs.ALL_ROBOTS))}"
            )
        if r.controller not in CONTROLLERS:
            raise StepmarkError(
                f"Robosuite {r.id}: controller must be one of {CONTROLLERS}, got {r.controller!r}"
            )
        if r.controller == "IK_POSE":
            from robosuite.controllers.parts.arm.ik import SUPPORTED_IK_ROBOTS

            if not set(self.robots) <= SUPPORTED_IK_ROBOTS:
                raise StepmarkError(
                    f"Robosuite {r.id}: IK_POSE supports only {sorted(SUPPORTED_IK_ROBOTS)}, got {self.robots}"
                )
        for name, value in (("pos_sensitivity", r.pos_sensitivity), ("rot_sensitivity", r.rot_sensitivity)):
            if not np.isfinite(value) or value <= 0:
                raise StepmarkError(f"Robosuite {r.id}: {name} must be > 0, got {value}")
        size = int(render_size or DEFAULT_RENDER_SIZE)
        if not 16 <= size <= 2048:
            raise StepmarkError(f"Robosuite render size must be in [16, 2048], got {size}")
        self.render_size = size
        self.controller = r.controller
        kwargs: dict[str, Any] = dict(
            robots=self.robots if len(self.robots) > 1 else self.robots[0],
            controller_configs=controller_configs(self.robots, r.controller),
            has_renderer=False,
            has_offscreen_renderer=True,
            use_camera_obs=bool(r.use_camera_obs),
            camera_names=self.cameras,
            camera_heights=size,
            camera_widths=size,
            horizon=NO_HORIZON,
            ignore_done=True,
            hard_reset=False,  # re-building the MuJoCo model on every reset costs seconds; placements still vary
            control_freq=CONTROL_FREQ,
            seed=seed,
        )
        if r.config:
            kwargs["env_configuration"] = r.config
        try:
            self._env = rs.make(r.id, **kwargs)
        except (ValueError, AssertionError, KeyError, TypeError) as err:
            raise StepmarkError(
                f"Robosuite {r.id}: cannot create the task ({type(err).__name__}: {err})"
            ) from err
        known = set(self._env.sim.model.camera_names)
        missing = [c for c in self.cameras if c not in known]
        if missing:
            self._env.close()
            raise StepmarkError(
                f"Robosuite {r.id}: unknown camera(s) {missing}; this task has {sorted(known)}"
            )
        self._active_robot, self._active_arm = self._active(r.arm)
        self._grippers = {
            (i, arm): -1.0
            for i, robot in enumerate(self._env.robots)
            for arm in robot.arms
            if robot.gripper[arm].dof
        }
        self._gripper_held = False
        self._observation: dict[str, np.ndarray] = self._convert(self._env.observation_spec())
        self._obs_spec = {k: specs.Array(v.shape, v.dtype, name=k) for k, v in self._observation.items()}
        low, high = self._env.action_spec
        self._action_spec = specs.BoundedArray(
            shape=low.shape, dtype=np.float64, minimum=low, maximum=high, name="action"
        )
        self.key_map = dict(KEY_MAP)

    def _active(self, arm: str) -> tuple[int, str]:
        """(robot index, arm name) the user drives, from the spec's `arm`."""
        robots = self._env.robots
        arm = arm or "right"
        if arm not in ("right", "left"):
            raise StepmarkError(
                f"Robosuite {self.spec.robosuite.id}: arm must be 'right' or 'left', got {arm!r}"
            )
        if len(robots) > 1:  # one single-arm robot per side, as robosuite's own device code does
            index = 1 if arm == "left" else 0
            return index, robots[index].arms[0]
        if arm not in robots[0].arms:
            raise StepmarkError(f"Robosuite robot {self.robots[0]} has no {arm} arm (arms: {robots[0].arms})")
        return 0, arm

    @property
    def env(self) -> Any:
        """The underlying robosuite environment."""
        return self._env

    # ----- episode ----------------------------------------------------------------------------------
    def _convert(self, observation: dict[str, Any]) -> dict[str, np.ndarray]:
        """Images right way up as uint8; every other value float64 (robosuite mixes float32/64 between calls)."""
        out = {}
        for key, value in observation.items():
            if key.endswith("_image"):
                out[key] = np.ascontiguousarray(np.asarray(value, np.uint8)[::-1])
            else:
                out[key] = np.asarray(value, np.float64)
        return out

    def _reset(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        self._observation = self._convert(self._env.reset())
        self._grippers = dict.fromkeys(self._grippers, -1.0)
        self._gripper_held = False
        return dict(self._observation), {"success": bool(self._env._check_success())}

    def _step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        vector = np.asarray(action, dtype=np.float64).reshape(-1)
        if vector.shape != self._action_spec.shape or not np.all(np.isfinite(vector)):
            raise StepmarkError(
                f"Robosuite {self.spec.robosuite.id}: action must be {self._action_spec.shape[0]} finite numbers, "
                f"got shape {vector.shape}"
            )
        observation, reward, _, info = self._env.step(vector)
        self._observation = self._convert(observation)
        info = dict(info, success=bool(self._env._check_success()))
        return dict(self._observation), float(reward), False, False, info

    def close(self) -> None:
        if getattr(self, "_env", None) is not None:
            self._env.close()
            self._env = None

    # ----- input ------------------------------------------------------------------------------------
    def _fractions(self) -> tuple[float, float]:
        r = self.spec.robosuite
        return min(1.0, POS_STEP * r.pos_sensitivity), min(1.0, ROT_STEP * r.rot_sensitivity)

    def delta_from_input(
        self, keys: Sequence[str], gamepad: client_pb2.GamepadInput | None = None
    ) -> np.ndarray:
        """The 6-DoF delta (x, y, z, roll, pitch, yaw) in [-1, 1] for the active arm, before controller scaling."""
        held = keymaps.normalize_keys(keys)
        pos, rot = self._fractions()
        delta = np.zeros(6)
        for key, (kind, axis, sign) in _KEYS.items():
            if key in held or key.lower() in held:
                delta[axis if kind == "pos" else 3 + axis] += sign * (pos if kind == "pos" else rot)
        if gamepad is not None:
            ax = keymaps.axis
            buttons = keymaps.pressed_buttons(gamepad)
            stick = np.array(
                [ax(gamepad, keymaps.AXIS_LY), ax(gamepad, keymaps.AXIS_LX), -ax(gamepad, keymaps.AXIS_RY)]
            )
            for button, axis, sign in (
                (keymaps.DPAD_UP, 0, -1.0),
                (keymaps.DPAD_DOWN, 0, 1.0),
                (keymaps.DPAD_LEFT, 1, -1.0),
                (keymaps.DPAD_RIGHT, 1, 1.0),
            ):
                if button in buttons:
                    stick[axis] += sign
            delta[:3] += pos * stick
            value = {int(i): b.value if b.value else float(b.pressed) for i, b in gamepad.buttons.items()}
            delta[3] += rot * (float(keymaps.BUTTON_RB in buttons) - float(keymaps.BUTTON_LB in buttons))
            delta[4] += rot * (value.get(keymaps.BUTTON_RT, 0.0) - value.get(keymaps.BUTTON_LT, 0.0))
            delta[5] += rot * -ax(gamepad, keymaps.AXIS_RX)
        return np.clip(delta, -1.0, 1.0)

    def _controller_scale(self) -> np.ndarray:
        """Input units per unit of delta: OSC takes [-1, 1]; IK takes meters and radians up to its limits."""
        if self.controller == "IK_POSE":
            part = self._env.robots[self._active_robot].part_controllers[self._active_arm]
            return np.array([part.ik_pos_limit] * 3 + [part.ik_ori_limit] * 3, dtype=np.float64)
        return np.ones(6)

    def action_from_input(
        self, keys: Sequence[str], gamepad: client_pb2.GamepadInput | None = None
    ) -> np.ndarray:
        """Full action vector: the active arm's delta, every gripper's (toggled) state, zeros elsewhere.

        The gripper toggles when space / gamepad A goes down (not while held), like robosuite's keyboard.
        """
        held = GRIPPER_KEY in keys or GRIPPER_BUTTON in keymaps.pressed_buttons(gamepad)
        key = (self._active_robot, self._active_arm)
        if held and not self._gripper_held and key in self._grippers:
            self._grippers[key] = -self._grippers[key]
        self._gripper_held = held
        return self._compose(self.delta_from_input(keys, gamepad) * self._controller_scale())

    def _compose(self, arm_delta: np.ndarray) -> np.ndarray:
        parts = []
        for i, robot in enumerate(self._env.robots):
            action: dict[str, np.ndarray] = {}
            for arm in robot.arms:
                action[arm] = arm_delta if (i, arm) == (self._active_robot, self._active_arm) else np.zeros(6)
                if (i, arm) in self._grippers:
                    action[f"{arm}_gripper"] = np.full(robot.gripper[arm].dof, self._grippers[(i, arm)])
            parts.append(robot.create_action_vector(action))
        return np.concatenate(parts)

    @property
    def gripper_closed(self) -> bool:
        """Whether the active arm's gripper is commanded closed."""
        return self._grippers.get((self._active_robot, self._active_arm), -1.0) > 0

    def noop_action(self) -> np.ndarray:
        """No motion; grippers keep their current open/closed command."""
        return self._compose(np.zeros(6))

    def sample_action(self, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(self._action_spec.minimum, self._action_spec.maximum)

    # ----- output -----------------------------------------------------------------------------------
    def render(self) -> np.ndarray:
        name = self.cameras[self.camera]
        image = self._observation.get(f"{name}_image")
        if image is not None:
            return image.copy()
        frame = self._env.sim.render(width=self.render_size, height=self.render_size, camera_name=name)
        return np.ascontiguousarray(np.asarray(frame, np.uint8)[::-1])

    def observation_spec(self) -> dict[str, specs.Array]:
        return dict(self._obs_spec)

    def action_spec(self) -> specs.BoundedArray:
        return self._action_spec

    def success(self, info: dict[str, Any]) -> bool | None:
        """The task's own success check, recorded in every step's info."""
        return bool(info.get("success", False))

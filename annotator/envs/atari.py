"""Atari 2600 games through ale-py (ROMs ship in its wheel) and the gymnasium v5 API.

An id is the game name ("Pong", "MontezumaRevenge"; the snake_case ROM id "montezuma_revenge" and the
full "ALE/Pong-v5" are accepted too). Games run with the v5 defaults (frame skip 4) and the game's
minimal action set; `sticky_actions` sets ALE's repeat_action_probability to 0.25 (the v5 default and
the Machado et al. recommendation) instead of 0. Keys pick actions by their meaning: the largest
combination of UP/DOWN/LEFT/RIGHT/FIRE held that the game offers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from dm_env import specs

from annotator.envs import keymaps
from annotator.envs.base import Environment, image_spec
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2, study_pb2

STICKY_PROBABILITY = 0.25
_PARTS = ("UP", "DOWN", "LEFT", "RIGHT", "FIRE")
_FIRE_BUTTONS = (keymaps.BUTTON_A, keymaps.BUTTON_B, keymaps.BUTTON_RT)
KEY_MAP: dict[str, str] = {
    "ArrowUp": "UP",
    "ArrowDown": "DOWN",
    "ArrowLeft": "LEFT",
    "ArrowRight": "RIGHT",
    " ": "FIRE",
}


@functools.cache
def _gymnasium() -> Any:
    import ale_py
    import gymnasium

    # ALE prints its banner ("A.L.E: Arcade Learning Environment ...", "[Powered by Stella]") at Info level
    # on every interface it creates; warnings and errors still show.
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Warning)
    gymnasium.register_envs(ale_py)
    return gymnasium


def valid_ids() -> list[str]:
    """Game names with a registered `ALE/<name>-v5` environment (one per ROM in the ale-py wheel)."""
    import ale_py.roms
    from ale_py.registration import rom_id_to_name

    registry = _gymnasium().registry
    names = (rom_id_to_name(rom) for rom in ale_py.roms.get_all_rom_ids())
    return sorted(name for name in names if f"ALE/{name}-v5" in registry)


def gym_id(game: str) -> str:
    """`ALE/<Name>-v5` for a game name, ROM id or full gymnasium id."""
    from ale_py.registration import rom_id_to_name

    if game.startswith("ALE/"):
        full = game
    else:
        name = rom_id_to_name(game) if game.islower() or "_" in game else game
        full = f"ALE/{name}-v5"
    if full not in _gymnasium().registry:
        raise StepmarkError(f"unknown Atari game {game!r}; valid ids: {', '.join(valid_ids())}")
    return full


def meaning_parts(meaning: str) -> frozenset[str]:
    """{"UP", "RIGHT", "FIRE"} for "UPRIGHTFIRE"; empty for "NOOP"."""
    parts = re.findall("|".join(_PARTS), meaning)
    if "".join(parts) != meaning and meaning != "NOOP":
        raise ValueError(f"unexpected ALE action meaning {meaning!r}")
    return frozenset(parts)


class AtariEnvironment(Environment):
    family = "atari"

    def __init__(self, spec: study_pb2.EnvironmentSpec, *, seed: int | None = None) -> None:
        super().__init__(spec, cameras=("main",))
        self.gym_id = gym_id(spec.atari.id)
        self.repeat_action_probability = STICKY_PROBABILITY if spec.atari.sticky_actions else 0.0
        self._env = _gymnasium().make(
            self.gym_id,
            repeat_action_probability=self.repeat_action_probability,
            max_episode_steps=None,  # the spec's max_episode_steps is applied by Environment.step
        )
        self._seed = seed
        self.meanings: list[str] = list(self._env.unwrapped.get_action_meanings())
        self._combos = [meaning_parts(m) for m in self.meanings]
        self._noop = self.meanings.index("NOOP") if "NOOP" in self.meanings else 0
        self._frame_shape = tuple(self._env.observation_space.shape)
        self._frame = np.zeros(self._frame_shape, np.uint8)
        offered = set().union(*self._combos)
        self.key_map = {key: meaning for key, meaning in KEY_MAP.items() if meaning in offered}

    @property
    def ale(self) -> Any:
        """The ALE interface (e.g. to read back settings such as repeat_action_probability)."""
        return self._env.unwrapped.ale

    def _reset(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        seed, self._seed = self._seed, None  # seed only the first episode; later ones continue the RNG
        observation, info = self._env.reset(seed=seed)
        self._frame = np.asarray(observation, np.uint8)
        return {"image": self._frame.copy()}, dict(info)

    def _step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        index = int(np.asarray(action).reshape(()))
        if not 0 <= index < len(self.meanings):
            raise StepmarkError(
                f"Atari action {index} out of range [0, {len(self.meanings)}) for {self.gym_id}"
            )
        observation, reward, terminated, truncated, info = self._env.step(index)
        self._frame = np.asarray(observation, np.uint8)
        info = dict(info, action_meaning=self.meanings[index])
        return {"image": self._frame.copy()}, float(reward), bool(terminated), bool(truncated), info

    def action_from_input(self, keys: Sequence[str], gamepad: client_pb2.GamepadInput | None = None) -> int:
        held = keymaps.normalize_keys(keys)
        parts = keymaps.directions(held, gamepad)
        if " " in held or keymaps.pressed_buttons(gamepad) & set(_FIRE_BUTTONS):
            parts.add("FIRE")
        return keymaps.best_combo(parts, self._combos, self._noop)

    def noop_action(self) -> int:
        return self._noop

    def sample_action(self, rng: np.random.Generator) -> int:
        return int(rng.integers(len(self.meanings)))

    def render(self) -> np.ndarray:
        return self._frame.copy()

    def observation_spec(self) -> dict[str, specs.Array]:
        return {"image": image_spec(self._frame_shape)}

    def action_spec(self) -> specs.DiscreteArray:
        return specs.DiscreteArray(num_values=len(self.meanings), dtype=np.int64, name="action")

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

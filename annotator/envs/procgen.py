"""Procgen games (the `procgen2` wheel's `procgen` module, gym3 API) as an `Environment`.

The frame shown and recorded is the 64x64 observation itself (what an agent sees; the browser scales it
up with pixelated rendering). Procgen resets itself when a level ends, so "levels" are counted here:
after `level_repeats` finished levels, or when an episode is cut short (truncation, user restart), the
next `reset()` re-creates the game, which restarts its level sequence from `start_level` with the same
`rand_seed`. Hence with a fixed `rand_seed` and `level_repeats=1` every episode replays the same level.
The observation of a transition that ends a level is the next level's first frame (gym3 has already reset);
its info carries `final_observation_is_next_level: True`.
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Sequence
from typing import Any

import numpy as np
from dm_env import specs

from annotator.envs import keymaps
from annotator.envs.base import Environment, image_spec
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2, study_pb2

_Mode = study_pb2.EnvironmentSpec.Procgen.DistributionMode
DISTRIBUTION_MODES: dict[int, str] = {
    _Mode.DISTRIBUTION_UNSPECIFIED: "easy",  # the proto's declared default is EASY
    _Mode.DISTRIBUTION_EASY: "easy",
    _Mode.DISTRIBUTION_HARD: "hard",
    _Mode.DISTRIBUTION_EXTREME: "extreme",
    _Mode.DISTRIBUTION_MEMORY: "memory",
    _Mode.DISTRIBUTION_EXPLORATION: "exploration",
}

# Games that accept the restricted modes. The C++ core aborts the whole process (fassert in
# procgen/src/game.cpp) on any other game, so this must be checked before creating the environment.
MODE_GAMES: dict[str, frozenset[str]] = {
    "memory": frozenset({"caveflyer", "dodgeball", "heist", "jumper", "maze", "miner"}),
    "extreme": frozenset({"chaser", "dodgeball", "leaper", "starpilot"}),
}

FRAME_SHAPE = (64, 64, 3)
NOOP = 4  # index of the empty combo in BaseProcgenEnv.get_combos()

# Key -> combo part. Arrows move; the six letters are Procgen's own "special action" keys.
_LETTERS = {"d": "D", "a": "A", "w": "W", "s": "S", "q": "Q", "e": "E"}
_BUTTONS = {
    keymaps.BUTTON_A: "D",
    keymaps.BUTTON_B: "A",
    keymaps.BUTTON_X: "W",
    keymaps.BUTTON_Y: "S",
    keymaps.BUTTON_LB: "Q",
    keymaps.BUTTON_RB: "E",
}
KEY_MAP: dict[str, str] = {
    "ArrowLeft": "LEFT",
    "ArrowRight": "RIGHT",
    "ArrowUp": "UP",
    "ArrowDown": "DOWN",
    "d": "D (main action, e.g. fire)",
    "a": "A (second action)",
    "w": "W (special)",
    "s": "S (special)",
    "q": "Q (special)",
    "e": "E (special)",
}


@functools.cache
def _import_procgen() -> None:
    """Imports procgen once, without the deprecation banner its `gym` dependency prints to stderr on import
    (it would open every `stepmark record` run; procgen only registers its ids with gym)."""
    with contextlib.redirect_stderr(io.StringIO()):
        import procgen  # noqa: F401


def env_names() -> list[str]:
    """Every Procgen game, from the installed package."""
    _import_procgen()
    from procgen.env import ENV_NAMES

    return list(ENV_NAMES)


def distribution_mode(spec: study_pb2.EnvironmentSpec.Procgen) -> str:
    """The procgen mode name for the spec, checked against the game (see MODE_GAMES)."""
    _import_procgen()
    from procgen.env import EXPLORATION_LEVEL_SEEDS

    if spec.distribution_mode not in DISTRIBUTION_MODES:
        raise StepmarkError(f"Procgen {spec.id!r}: unknown distribution mode {spec.distribution_mode}")
    mode = DISTRIBUTION_MODES[spec.distribution_mode]
    games = MODE_GAMES.get(mode) or (frozenset(EXPLORATION_LEVEL_SEEDS) if mode == "exploration" else None)
    if games is not None and spec.id not in games:
        raise StepmarkError(
            f"Procgen game {spec.id!r} has no {mode!r} distribution mode; it exists for: {', '.join(sorted(games))}"
        )
    return mode


class ProcgenEnvironment(Environment):
    family = "procgen"

    def __init__(self, spec: study_pb2.EnvironmentSpec, *, seed: int | None = None) -> None:
        super().__init__(spec, cameras=("main",))
        p = spec.procgen
        if p.id not in env_names():
            raise StepmarkError(f"unknown Procgen game {p.id!r}; valid ids: {', '.join(env_names())}")
        if p.num_levels < 0 or p.start_level < 0:
            raise StepmarkError(f"Procgen {p.id!r}: num_levels and start_level must be >= 0")
        if p.level_repeats < 1:
            raise StepmarkError(f"Procgen {p.id!r}: level_repeats must be >= 1, got {p.level_repeats}")
        self._mode = distribution_mode(p)
        self._fixed_seed: int | None = p.rand_seed if p.HasField("rand_seed") else None
        # Without a rand_seed in the spec, `seed` makes the sequence of re-creations reproducible.
        self._seed_rng = np.random.default_rng(seed) if seed is not None else np.random.default_rng()
        self._env: Any = None
        self._levels_done = 0
        self._fresh = False  # True when the game sits at the first frame of a level (after auto-reset)
        self._frame = np.zeros(FRAME_SHAPE, np.uint8)
        self._combos = [frozenset(c) for c in _combos()]
        self.key_map = dict(KEY_MAP)

    # ----- lifecycle --------------------------------------------------------------------------------
    def _make(self) -> None:
        _import_procgen()
        from procgen import ProcgenGym3Env

        self.close()
        p = self.spec.procgen
        rand_seed = (
            self._fixed_seed if self._fixed_seed is not None else int(self._seed_rng.integers(2**31 - 1))
        )
        kwargs: dict[str, Any] = dict(
            num=1,
            env_name=p.id,
            distribution_mode=self._mode,
            use_sequential_levels=bool(p.use_sequential_levels),
            rand_seed=rand_seed,
            num_threads=0,
        )
        if self._mode != "exploration":  # exploration fixes its own level; procgen refuses both
            kwargs.update(num_levels=int(p.num_levels), start_level=int(p.start_level))
        self._env = ProcgenGym3Env(**kwargs)
        self._levels_done = 0
        self.rand_seed = rand_seed

    def _observe(self) -> tuple[float, bool, dict[str, Any]]:
        reward, ob, first = self._env.observe()
        self._frame = np.asarray(ob["rgb"][0], dtype=np.uint8)
        return float(reward[0]), bool(first[0]), dict(self._env.get_info()[0])

    def _reset(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        if self._env is None or not self._fresh or self._levels_done >= self.spec.procgen.level_repeats:
            self._make()
        _, _, info = self._observe()
        self._fresh = False
        info.update(level_complete=False, levels_played=self._levels_done, rand_seed=self.rand_seed)
        return {"image": self._frame.copy()}, info

    def _step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        index = int(np.asarray(action).reshape(()))
        if not 0 <= index < len(self._combos):
            raise StepmarkError(f"Procgen action {index} out of range [0, {len(self._combos)})")
        self._env.act(np.array([index], dtype=np.int32))
        reward, first, info = self._observe()
        # `first` means the level just ended and the game already moved on to the next one.
        if first:
            self._levels_done += 1
            self._fresh = True
        info.update(
            level_complete=bool(first and info.get("prev_level_complete")),
            levels_played=self._levels_done,
        )
        if first:
            # gym3 resets inside the step that ends a level: the observation returned with it is already the
            # next level's first frame, and the true terminal frame is never exposed. Say so where consumers
            # look (schemas/episode_storage.md, "Procgen's last observation").
            info["final_observation_is_next_level"] = True
        return {"image": self._frame.copy()}, reward, first, False, info

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    # ----- input ------------------------------------------------------------------------------------
    def action_from_input(self, keys: Sequence[str], gamepad: client_pb2.GamepadInput | None = None) -> int:
        held = keymaps.normalize_keys(keys)
        parts = keymaps.directions(held, gamepad)
        parts |= {name for key, name in _LETTERS.items() if key in held}
        buttons = keymaps.pressed_buttons(gamepad)
        parts |= {name for index, name in _BUTTONS.items() if index in buttons}
        return keymaps.best_combo(parts, self._combos, NOOP)

    def noop_action(self) -> int:
        return NOOP

    def sample_action(self, rng: np.random.Generator) -> int:
        return int(rng.integers(len(self._combos)))

    def combo(self, action: int) -> tuple[str, ...]:
        """The buttons an action index stands for (e.g. ("RIGHT", "UP"))."""
        return tuple(sorted(self._combos[action]))

    # ----- output -----------------------------------------------------------------------------------
    def render(self) -> np.ndarray:
        return self._frame.copy()

    def observation_spec(self) -> dict[str, specs.Array]:
        return {"image": image_spec(FRAME_SHAPE)}

    def action_spec(self) -> specs.DiscreteArray:
        return specs.DiscreteArray(num_values=len(self._combos), dtype=np.int64, name="action")

    def success(self, info: dict[str, Any]) -> bool | None:
        """True on the transition that completed a level (procgen's prev_level_complete)."""
        return bool(info.get("level_complete", False))


def _combos() -> list[tuple[str, ...]]:
    """Procgen's 15 actions, read from the package so the indices match the game."""
    _import_procgen()
    from procgen.env import BaseProcgenEnv

    return BaseProcgenEnv.get_combos(None)  # type: ignore[arg-type]


def valid_ids() -> list[str]:
    """Procgen game names for the study editor."""
    return env_names()

"""Procgen: every EnvironmentSpec.Procgen field reaches the real game."""

from __future__ import annotations

import numpy as np
import pytest

from annotator.envs import keymaps, registry
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2
from tests.annotator.envs.helpers import check_frame, check_transition, gamepad, run_to_truncation

Mode = study_pb2.EnvironmentSpec.Procgen.DistributionMode


def spec(game: str = "coinrun", **procgen: object) -> study_pb2.EnvironmentSpec:
    s = study_pb2.EnvironmentSpec(id=f"pg-{game}", name=game, sync=True)
    s.procgen.id = game
    for key, value in procgen.items():
        setattr(s.procgen, key, value)
    return s


def level_seed(t) -> int:
    return t.info["level_seed"]


def play_level(env, rng: np.random.Generator, limit: int = 5000):
    """Random actions until the level ends (coinrun times out at 1000 steps, so this always ends)."""
    for _ in range(limit):
        t = env.step(env.sample_action(rng))
        if t.last:
            return t
    raise AssertionError("level did not end")


def test_reset_step_render_and_specs():
    env = registry.create(spec(rand_seed=7))
    assert registry.family(env.spec) == "procgen"
    t = env.reset()
    check_transition(env, t)
    assert t.observation["image"].shape == (64, 64, 3)
    for keys in (["ArrowRight"], ["ArrowRight", "ArrowUp"], [" "], []):
        t = env.step(env.action_from_input(keys))
        check_transition(env, t)
    check_frame(env, (64, 64, 3))
    np.testing.assert_array_equal(env.render(), t.observation["image"])
    assert env.action_spec().num_values == 15
    assert env.cameras == ["main"] and env.set_camera(0) == "main"
    with pytest.raises(StepmarkError, match="camera index 1"):
        env.set_camera(1)
    env.close()


def test_keys_and_gamepad_pick_procgen_combos():
    env = registry.create(spec(rand_seed=1))
    assert env.combo(env.action_from_input(["ArrowRight", "ArrowUp"])) == ("RIGHT", "UP")
    assert env.combo(env.action_from_input(["ArrowLeft"])) == ("LEFT",)
    assert env.combo(env.action_from_input(["D"])) == ("D",)  # shift held: same key
    assert env.action_from_input([]) == env.noop_action() == 4
    # Opposite arrows cancel.
    assert env.action_from_input(["ArrowLeft", "ArrowRight"]) == env.noop_action()
    assert env.combo(env.action_from_input([], gamepad((keymaps.DPAD_DOWN, keymaps.DPAD_LEFT)))) == (
        "DOWN",
        "LEFT",
    )
    assert env.combo(env.action_from_input([], gamepad(axes={0: 0.9, 1: -0.8}))) == ("RIGHT", "UP")
    assert env.action_from_input([], gamepad(axes={0: 0.1})) == env.noop_action()  # dead zone
    assert env.combo(env.action_from_input([], gamepad((keymaps.BUTTON_A,)))) == ("D",)
    assert env.combo(env.action_from_input([], gamepad((keymaps.BUTTON_RB,)))) == ("E",)
    assert set(env.key_map) >= {"ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "d"}
    env.close()


def test_rand_seed_gives_the_same_frames_and_other_seeds_do_not():
    def frames(seed: int) -> tuple[int, list[np.ndarray]]:
        env = registry.create(spec(rand_seed=seed))
        t = env.reset()
        out = [t.observation["image"]]
        for _ in range(20):
            out.append(env.step(env.action_from_input(["ArrowRight"])).observation["image"])
        env.close()
        return level_seed(t), out

    seed_a, frames_a = frames(123)
    seed_b, frames_b = frames(123)
    seed_c, frames_c = frames(124)
    assert seed_a == seed_b and seed_a != seed_c
    for a, b in zip(frames_a, frames_b, strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, c) for a, c in zip(frames_a, frames_c, strict=True))


def test_start_level_and_num_levels():
    env = registry.create(spec(num_levels=1, start_level=42, rand_seed=3))
    assert level_seed(env.reset()) == 42
    env.close()


def test_distribution_mode_reaches_the_game():
    easy = registry.create(spec("maze", distribution_mode=Mode.DISTRIBUTION_EASY, rand_seed=5))
    hard = registry.create(spec("maze", distribution_mode=Mode.DISTRIBUTION_HARD, rand_seed=5))
    a, b = easy.reset(), hard.reset()
    assert easy._env.options["distribution_mode"] == 0 and hard._env.options["distribution_mode"] == 1
    assert not np.array_equal(a.observation["image"], b.observation["image"])
    easy.close(), hard.close()
    memory = registry.create(spec("maze", distribution_mode=Mode.DISTRIBUTION_MEMORY, rand_seed=5))
    memory.reset()
    assert memory._env.options["distribution_mode"] == 10
    memory.close()


def test_unsupported_mode_is_a_clear_error_not_an_abort():
    # procgen's C++ core would abort the process for these; we refuse them first.
    with pytest.raises(StepmarkError, match="no 'memory' distribution mode"):
        registry.create(spec("coinrun", distribution_mode=Mode.DISTRIBUTION_MEMORY))
    with pytest.raises(StepmarkError, match="no 'exploration' distribution mode"):
        registry.create(spec("bigfish", distribution_mode=Mode.DISTRIBUTION_EXPLORATION))
    with pytest.raises(StepmarkError, match="unknown Procgen game 'pacman'"):
        registry.create(spec("pacman"))


def test_exploration_mode_fixes_the_level():
    env = registry.create(spec("maze", distribution_mode=Mode.DISTRIBUTION_EXPLORATION, start_level=9))
    from procgen.env import EXPLORATION_LEVEL_SEEDS

    assert level_seed(env.reset()) == EXPLORATION_LEVEL_SEEDS["maze"]
    env.close()


def test_use_sequential_levels_reaches_the_game():
    env = registry.create(spec(use_sequential_levels=True, rand_seed=2))
    env.reset()
    assert env._env.options["use_sequential_levels"] is True
    env.close()


@pytest.mark.parametrize("repeats", [1, 2])
def test_level_repeats_restarts_the_level_sequence(repeats: int):
    rng = np.random.default_rng(0)
    env = registry.create(spec(rand_seed=11, level_repeats=repeats))
    seeds = []
    for _ in range(3):
        seeds.append(level_seed(env.reset()))
        end = play_level(env, rng)
        assert end.terminated and not end.truncated
        # gym3 already reset: the terminal observation is the next level's first frame, and info says so
        assert end.info["final_observation_is_next_level"] is True
    env.close()
    if repeats == 1:  # re-created after every level: the same first level each time
        assert seeds[0] == seeds[1] == seeds[2]
    else:  # two levels in a row, then back to the start of the sequence
        assert seeds[0] != seeds[1] and seeds[2] == seeds[0]


def test_max_episode_steps_truncates_and_success_follows_level_completion():
    s = spec(rand_seed=4)
    s.max_episode_steps = 5
    env = registry.create(s)
    t = run_to_truncation(env, 5, env.noop_action())
    assert t.truncated and not t.terminated
    assert env.success(t.info) is False
    assert "final_observation_is_next_level" not in t.info  # a truncated level was not reset
    with pytest.raises(StepmarkError, match="episode is over"):
        env.step(env.noop_action())
    assert env.reset().reward == 0.0 and env.steps == 0
    env.close()


def test_fps_and_sync():
    s = spec(rand_seed=1)
    s.sync = False
    env = registry.create(s)
    assert env.sync is False and env.fps == 15.0
    env.set_fps(30)
    assert env.fps == 30.0
    for bad in (0, -1, float("nan")):
        with pytest.raises(StepmarkError, match="fps"):
            env.set_fps(bad)
    env.close()

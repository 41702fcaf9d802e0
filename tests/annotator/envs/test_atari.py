"""Atari through ale-py: ids, sticky actions, keys/gamepad by action meaning, truncation."""

from __future__ import annotations

import numpy as np
import pytest

from annotator.envs import keymaps, registry
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2
from tests.annotator.envs.helpers import check_frame, check_transition, gamepad, run_to_truncation


def spec(game: str, sticky: bool = False, max_steps: int = 0) -> study_pb2.EnvironmentSpec:
    s = study_pb2.EnvironmentSpec(id=f"atari-{game}", sync=True, max_episode_steps=max_steps)
    s.atari.id = game
    s.atari.sticky_actions = sticky
    return s


@pytest.mark.parametrize("sticky", [False, True])
def test_sticky_actions_reach_ale(sticky: bool):
    env = registry.create(spec("Pong", sticky=sticky))
    assert env.ale.getFloat("repeat_action_probability") == pytest.approx(0.25 if sticky else 0.0)
    env.close()


def test_pong_reset_step_render_and_truncate():
    env = registry.create(spec("Pong", max_steps=6), seed=3)
    assert env.gym_id == "ALE/Pong-v5" and registry.family(env.spec) == "atari"
    t = env.reset()
    check_transition(env, t)
    assert t.observation["image"].shape == (210, 160, 3)
    fire_right = env.action_from_input(["ArrowRight", " "])
    assert env.meanings[fire_right] == "RIGHTFIRE"
    assert env.meanings[env.action_from_input(["ArrowUp"])] == "NOOP"  # Pong has no UP
    t = env.step(fire_right)
    check_transition(env, t)
    assert t.info["action_meaning"] == "RIGHTFIRE"
    check_frame(env, (210, 160, 3))
    assert set(env.key_map) == {"ArrowLeft", "ArrowRight", " "}
    run_to_truncation(env, 6, env.noop_action())
    env.close()


def test_montezuma_full_action_set_from_keys_and_gamepad():
    env = registry.create(spec("MontezumaRevenge"))
    env.reset()
    assert env.meanings[env.action_from_input(["ArrowUp", "ArrowLeft", " "])] == "UPLEFTFIRE"
    assert (
        env.meanings[env.action_from_input([], gamepad((keymaps.DPAD_DOWN, keymaps.BUTTON_A)))] == "DOWNFIRE"
    )
    assert env.meanings[env.action_from_input([], gamepad(axes={0: 1.0}))] == "RIGHT"
    assert env.meanings[env.action_from_input([])] == "NOOP"
    for keys in (["ArrowLeft"], [" "], []):
        check_transition(env, env.step(env.action_from_input(keys)))
    assert set(env.key_map) == {"ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", " "}
    env.close()


def test_same_seed_same_frames():
    def run(seed: int) -> list[np.ndarray]:
        env = registry.create(spec("Breakout", sticky=True), seed=seed)
        frames = [env.reset().observation["image"]]
        rng = np.random.default_rng(0)
        frames += [env.step(env.sample_action(rng)).observation["image"] for _ in range(40)]
        env.close()
        return frames

    for a, b in zip(run(5), run(5), strict=True):
        np.testing.assert_array_equal(a, b)


def test_ids_in_other_spellings_and_unknown_ids():
    env = registry.create(spec("montezuma_revenge"))
    assert env.gym_id == "ALE/MontezumaRevenge-v5"
    env.close()
    with pytest.raises(StepmarkError, match="unknown Atari game 'Pacman3000'"):
        registry.create(spec("Pacman3000"))

"""NetHack through NLE: keys pass through as ASCII, the tty becomes a frame, seeds reproduce games."""

from __future__ import annotations

import numpy as np
import pytest

from annotator.envs import keymaps, registry
from annotator.envs.nethack import ENTER, render_tty
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2
from tests.annotator.envs.helpers import check_frame, check_transition, gamepad, run_to_truncation

#: What NetHack says before its greeting on some dates (allmain.c: moon phase, Friday the 13th).
DATE_MESSAGES = ("You are lucky!  Full moon tonight.", "Be careful!  New moon tonight.", "Watch out!  Bad things")


def spec(task: str = "NetHackScore-v0", max_steps: int = 0) -> study_pb2.EnvironmentSpec:
    s = study_pb2.EnvironmentSpec(id="nh", sync=True, max_episode_steps=max_steps)
    s.net_hack.id = task
    return s


@pytest.fixture
def score():
    env = registry.create(spec(), seed=7)
    yield env
    env.close()


def test_reset_step_and_render_the_terminal(score):
    t = score.reset()
    check_transition(score, t)
    assert "screen_descriptions" not in t.observation and t.observation["tty_chars"].shape == (24, 80)
    frame = check_frame(score, score.render().shape)
    h, w = frame.shape[0] // 24, frame.shape[1] // 80
    assert frame.shape == (24 * h, 80 * w, 3) and h > 8 and w > 5
    # The welcome message is drawn on the top row; the empty middle of row 1 (col 70+) stays black.
    assert frame[:h].max() > 100
    # NetHack greets with "Hello ...", or first with the moon phase or Friday the 13th on such dates (the
    # machine's clock: "Be careful! New moon tonight.").
    top = bytes(t.observation["tty_chars"][0]).decode()
    assert top.startswith(("Hello", *DATE_MESSAGES)), top
    row, col = (int(v) for v in t.observation["tty_cursor"])
    assert frame[row * h : (row + 1) * h, col * w : (col + 1) * w].mean() > 100  # inverted cursor cell
    before = frame.copy()
    t = score.step(score.action_from_input(["s"]))  # search: one turn passes, T: counter changes
    check_transition(score, t)
    assert t.info["key_code"] == ord("s")
    assert not np.array_equal(before, score.render())


def test_keys_and_gamepad_become_nethack_key_codes(score):
    score.reset()
    assert score.codes[score.action_from_input(["ArrowLeft"])] == ord("h")
    assert score.codes[score.action_from_input(["ArrowUp", "ArrowRight"])] == ord("u")
    assert score.codes[score.action_from_input(["Shift", "ArrowDown"])] == ord("J")
    assert score.codes[score.action_from_input(["Control", "d"])] == 4  # ^D: kick
    assert score.codes[score.action_from_input(["Enter"])] == ENTER
    assert score.codes[score.action_from_input([">"])] == ord(">")
    # "i" (inventory) is not in NetHackScore's action set: it does nothing rather than something else.
    assert score.action_from_input(["i"]) == score.noop_action()
    assert score.codes[score.action_from_input([], gamepad((keymaps.DPAD_LEFT,)))] == ord("h")
    assert score.codes[score.action_from_input([], gamepad((keymaps.DPAD_UP, keymaps.BUTTON_RT)))] == ord("K")
    assert score.codes[score.action_from_input([], gamepad(axes={0: 0.9, 1: 0.9}))] == ord("n")
    assert score.codes[score.action_from_input([], gamepad((keymaps.BUTTON_X,)))] == ord("s")
    assert score.key_map["ArrowLeft"] == "CompassDirection.W" and score.key_map["Control+d"] == "Command.KICK"


def test_full_keyboard_task_accepts_more_keys():
    env = registry.create(spec("NetHackChallenge-v0"), seed=1)
    assert "doesn't allow seed" in env.reset().info["seed_ignored"]  # the task forbids seeding
    inventory = env.action_from_input(["i"])
    assert env.codes[inventory] == ord("i") and "i" in env.key_map
    t = env.step(inventory)
    assert not t.last
    env.close()


def test_same_seed_same_game():
    def play(seed: int) -> list[np.ndarray]:
        env = registry.create(spec(), seed=seed)
        screens = [env.reset().observation["tty_chars"]]
        rng = np.random.default_rng(0)
        for _ in range(15):
            t = env.step(env.sample_action(rng))
            screens.append(t.observation["tty_chars"])
            if t.last:
                break
        env.close()
        return screens

    a, b, c = play(3), play(3), play(4)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, y) for x, y in zip(a, c, strict=False))


def test_max_episode_steps_truncates_and_success_is_false_for_score(score):
    env = registry.create(spec(max_steps=4), seed=2)
    t = run_to_truncation(env, 4, env.action_from_input(["s"]))
    assert env.success(t.info) is False
    env.close()


def test_unknown_task_and_render_before_reset():
    with pytest.raises(StepmarkError, match="unknown NetHack task 'NetHackFoo-v0'"):
        registry.create(spec("NetHackFoo-v0"))
    env = registry.create(spec())
    with pytest.raises(StepmarkError, match="before reset"):
        env.render()
    env.close()


def test_render_tty_colours_cells():
    chars = np.full((2, 3), ord(" "), np.uint8)
    chars[1, 2] = ord("@")
    colors = np.zeros((2, 3), np.int8)
    colors[1, 2] = 1  # red
    image = render_tty(chars, colors)
    h, w = image.shape[0] // 2, image.shape[1] // 3
    cell = image[h:, 2 * w :].reshape(-1, 3)
    assert image[:h].max() == 0  # spaces draw nothing
    lit = cell[cell.sum(axis=1) > 0]
    assert len(lit) and (lit[:, 0] > lit[:, 1]).all() and (lit[:, 1] == lit[:, 2]).all()


def test_success_follows_the_tasks_own_status():
    stairs = registry.create(spec("NetHackStaircase-v0"))
    assert stairs.success({"end_status": 2, "is_ascended": False}) is True
    assert stairs.success({"end_status": 1, "is_ascended": False}) is False  # died
    stairs.close()
    score = registry.create(spec())
    assert score.success({"end_status": 2, "is_ascended": False}) is False  # Score has no such status
    assert score.success({"end_status": 1, "is_ascended": True}) is True
    score.close()

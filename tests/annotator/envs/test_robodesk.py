"""RoboDesk: task, reward, action_repeat and image_size reach the real environment."""

from __future__ import annotations

import numpy as np
import pytest

from annotator.envs import keymaps, registry
from annotator.envs.robodesk import RoboDeskEnvironment, valid_ids
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2
from tests.annotator.envs.helpers import check_frame, check_transition, gamepad, run_to_truncation

Reward = study_pb2.EnvironmentSpec.RoboDesk.Reward


def spec(task: str = "open_slide", max_steps: int = 0, **fields: object) -> study_pb2.EnvironmentSpec:
    s = study_pb2.EnvironmentSpec(id="desk", sync=True, max_episode_steps=max_steps)
    s.robodesk.task = task
    for key, value in fields.items():
        setattr(s.robodesk, key, value)
    return s


@pytest.fixture(scope="module")
def sparse():
    env = registry.create(
        spec(max_steps=3, reward=Reward.REWARD_SPARSE, action_repeat=2, image_size=32), seed=0
    )
    yield env
    env.close()


def test_image_size_keys_action_repeat_and_truncation(sparse: RoboDeskEnvironment):
    assert registry.family(sparse.spec) == "robodesk"
    t = sparse.reset()
    check_transition(sparse, t)
    assert t.observation["image"].shape == (32, 32, 3)
    start = t.observation["end_effector"].copy()
    right = sparse.action_from_input(["ArrowRight"])
    assert right[:4].tolist() == [1.0, 0.0, 0.0, 0.0]
    t = sparse.step(right)
    check_transition(sparse, t)
    assert sparse.env_steps == 2  # action_repeat=2: two RoboDesk steps per agent step
    moved = t.observation["end_effector"] - start
    assert moved[0] > 0.001 and moved[0] > abs(moved[1])  # to the right, not sideways
    assert t.reward == 0.0 and t.info["success"] is False  # sparse: nothing until the slide is open
    assert sparse.success(t.info) is False
    check_frame(sparse, (32, 32, 3))
    run_to_truncation(sparse, 3, sparse.noop_action())


def test_gripper_toggle_and_gamepad(sparse: RoboDeskEnvironment):
    sparse.reset()
    held = sparse.noop_action()[4]
    assert -1.0 <= held < 0  # reset leaves the fingers nearly closed: the no-op holds them there
    assert sparse.action_from_input([" "])[4] == 1.0 and sparse.gripper_open
    assert sparse.action_from_input([" "])[4] == 1.0  # held, not pressed again
    sparse.action_from_input([])
    assert sparse.action_from_input([" "])[4] == -1.0
    a = sparse.action_from_input([], gamepad((keymaps.DPAD_UP,), axes={keymaps.AXIS_RY: -1.0}))
    assert a[:4].tolist() == [0.0, 1.0, 1.0, 0.0]
    assert sparse.action_from_input([";", "o"])[2:4].tolist() == [1.0, 1.0]
    sparse.action_spec().validate(sparse.sample_action(np.random.default_rng(1)))


def test_dense_reward_other_size_and_seed():
    env = registry.create(spec(reward=Reward.REWARD_DENSE, image_size=48), seed=0)
    try:
        t = env.reset()
        assert t.observation["image"].shape == (48, 48, 3)
        assert env.observation_spec()["image"].shape == (48, 48, 3)
        step = env.step(env.noop_action())
        assert 0.0 < step.reward < 1.0  # dense shaping is never exactly 0 with the arm near the desk
        assert env.env_steps == 1
    finally:
        env.close()
    again = registry.create(spec(reward=Reward.REWARD_DENSE, image_size=48), seed=0)
    try:
        np.testing.assert_array_equal(again.reset().observation["qpos_robot"], t.observation["qpos_robot"])
    finally:
        again.close()


def test_tasks_and_bad_specs(sparse: RoboDeskEnvironment):
    tasks = valid_ids()
    assert tasks == sparse._env.all_tasks  # the source table matches what a live RoboDesk reports
    assert {"open_slide", "lift_ball", "flat_block_in_bin"} <= set(tasks)
    with pytest.raises(StepmarkError, match="unknown RoboDesk task 'juggle'"):
        registry.create(spec("juggle"))
    with pytest.raises(StepmarkError, match="action_repeat must be >= 1"):
        registry.create(spec(action_repeat=0))
    with pytest.raises(StepmarkError, match="image_size must be in"):
        registry.create(spec(image_size=0))

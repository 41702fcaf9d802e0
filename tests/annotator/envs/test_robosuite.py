"""Robosuite rendered offscreen: keys and gamepad drive the arm, each spec field reaches robosuite."""

from __future__ import annotations

import numpy as np
import pytest

from annotator.envs import keymaps, registry
from annotator.envs.robosuite import RobosuiteEnvironment
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2
from tests.annotator.envs.helpers import check_frame, check_transition, gamepad

SIZE = 64


def spec(task: str = "Lift", max_steps: int = 0, **fields: object) -> study_pb2.EnvironmentSpec:
    s = study_pb2.EnvironmentSpec(id=f"rs-{task}", sync=True, max_episode_steps=max_steps)
    s.robosuite.id = task
    for key, value in fields.items():
        if isinstance(value, list):
            getattr(s.robosuite, key).extend(value)
        else:
            setattr(s.robosuite, key, value)
    return s


@pytest.fixture(scope="module")
def lift():
    s = spec(max_steps=6, cameras=["agentview", "frontview"], use_camera_obs=True)
    env = registry.create(s, seed=1, render_size=SIZE)
    yield env
    env.close()


def test_reset_step_render_cameras_and_truncation(lift: RobosuiteEnvironment):
    assert registry.family(lift.spec) == "robosuite"
    t = lift.reset()
    check_transition(lift, t)
    assert t.observation["agentview_image"].shape == (SIZE, SIZE, 3)
    assert t.observation["frontview_image"].shape == (SIZE, SIZE, 3)
    assert t.info == {"success": False}
    assert lift.env.robots[0].part_controllers["right"].name == "OSC_POSE"
    start = t.observation["robot0_eef_pos"].copy()
    back = lift.action_from_input(["ArrowUp"])  # robosuite's keyboard: up = -x
    assert back.shape == (7,) and back[0] == pytest.approx(-0.6) and back[6] == -1.0  # 0.4 * 1.5; open
    for i in range(6):
        t = lift.step(back)
        check_transition(lift, t)
        assert t.truncated == (i == 5) and not t.terminated
    assert t.observation["robot0_eef_pos"][0] < start[0] - 0.01
    assert lift.success(t.info) is False
    with pytest.raises(StepmarkError, match="episode is over"):
        lift.step(back)
    assert lift.set_camera(0) == "agentview"
    agent = check_frame(lift, (SIZE, SIZE, 3))
    np.testing.assert_array_equal(agent, t.observation["agentview_image"])
    assert lift.set_camera(1) == "frontview"
    front = check_frame(lift, (SIZE, SIZE, 3))
    assert np.abs(agent.astype(int) - front.astype(int)).mean() > 10
    lift.set_camera(0)


def test_gripper_toggles_on_press_and_gamepad_axes(lift: RobosuiteEnvironment):
    lift.reset()
    assert not lift.gripper_closed
    assert lift.action_from_input([" "])[6] == 1.0 and lift.gripper_closed
    assert lift.action_from_input([" "])[6] == 1.0  # still held: no second toggle
    assert lift.action_from_input([])[6] == 1.0 and lift.noop_action()[6] == 1.0  # stays closed
    assert lift.action_from_input([" "])[6] == -1.0  # pressed again: open
    lift.action_from_input([])
    a = lift.action_from_input(
        [], gamepad((keymaps.BUTTON_A,), axes={keymaps.AXIS_LY: 1.0, keymaps.AXIS_RY: -1.0})
    )
    assert a[6] == 1.0
    np.testing.assert_allclose(a[:3], [0.6, 0.0, 0.6])  # stick down = +x, right stick up = +z
    r = lift.action_from_input(["r", "p", "."])
    np.testing.assert_allclose(r[:6], [0, 0, -0.6, 0.3, 0, -0.3])
    assert lift.action_from_input(["ArrowLeft", "ArrowRight"])[:6].tolist() == [0.0] * 6
    assert " " in lift.key_map and "ArrowUp" in lift.key_map
    lift.action_spec().validate(lift.sample_action(np.random.default_rng(0)))


def test_ik_controller_and_sensitivity():
    env = registry.create(
        spec(controller="IK_POSE", pos_sensitivity=0.5, rot_sensitivity=3.0), render_size=SIZE
    )
    try:
        part = env.env.robots[0].part_controllers["right"]
        assert part.name == "IK_POSE"
        t0 = env.reset()
        assert "agentview_image" not in t0.observation  # use_camera_obs off
        np.testing.assert_allclose(env.delta_from_input(["ArrowDown", "o"])[[0, 5]], [0.2, 0.6])
        a = env.action_from_input(["ArrowDown"])
        assert a[0] == pytest.approx(0.2 * part.ik_pos_limit)  # IK takes meters
        rest = env.step(
            env.noop_action()
        )  # IK holds the pose at rest (robosuite 1.5.2 drifts without our fix)
        np.testing.assert_allclose(
            rest.observation["robot0_eef_pos"], t0.observation["robot0_eef_pos"], atol=1e-3
        )
        for _ in range(4):
            t = env.step(a)
        moved = t.observation["robot0_eef_pos"] - rest.observation["robot0_eef_pos"]
        assert moved[0] > 0.002 and abs(moved[1]) < moved[0] / 2 and abs(moved[2]) < moved[0] / 2
        check_frame(env, (SIZE, SIZE, 3))  # rendered on demand without camera observations
    finally:
        env.close()


def test_two_arm_task_config_and_arm_choice():
    env = registry.create(spec("TwoArmLift", config="parallel", arm="left"), render_size=SIZE)
    try:
        assert env.env.env_configuration == "parallel" and env.robots == ["Panda", "Panda"]
        env.reset()
        a = env.action_from_input(["ArrowRight"])
        assert a.shape == (14,)
        assert np.count_nonzero(a[:6]) == 0 and a[7 + 1] == pytest.approx(0.6)  # robot 1 drives
        check_transition(env, env.step(a))
    finally:
        env.close()


def test_bad_specs_are_refused_before_building():
    with pytest.raises(StepmarkError, match="unknown Robosuite task 'Juggle'"):
        registry.create(spec("Juggle"))
    with pytest.raises(StepmarkError, match="controller must be one of"):
        registry.create(spec(controller="JOINT_TORQUE"))
    with pytest.raises(StepmarkError, match="IK_POSE supports only"):
        registry.create(spec(controller="IK_POSE", robots=["UR5e"]))
    with pytest.raises(StepmarkError, match="unknown robot"):
        registry.create(spec(robots=["R2D2"]))
    with pytest.raises(StepmarkError, match="pos_sensitivity must be > 0"):
        registry.create(spec(pos_sensitivity=0.0))

"""Registry: valid ids read from the installed packages, family names, and clear errors."""

from __future__ import annotations

import pytest

from annotator.envs import registry
from pipelines.episodes.base import to_jsonable
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2


def test_valid_ids_come_from_the_packages():
    ids = registry.valid_ids()
    assert set(ids) == {"procgen", "atari", "nethack", "robosuite", "robodesk", "dmlab"}
    assert len(ids["procgen"]) == 16 and {"coinrun", "starpilot", "maze"} <= set(ids["procgen"])
    assert {"Pong", "MontezumaRevenge", "Breakout"} <= set(ids["atari"]) and len(ids["atari"]) > 100
    assert {"NetHackScore-v0", "NetHackChallenge-v0", "NetHackStaircase-v0"} <= set(ids["nethack"])
    assert {"Lift", "Stack", "TwoArmLift", "Door"} <= set(ids["robosuite"])
    assert {"open_slide", "lift_ball"} <= set(ids["robodesk"])
    assert ids["dmlab"] == []  # nothing to read without the package
    assert registry.valid_ids() is ids  # cached for the study editor


@pytest.mark.parametrize(
    ("field", "family"),
    [
        ("procgen", "procgen"),
        ("atari", "atari"),
        ("net_hack", "nethack"),
        ("robosuite", "robosuite"),
        ("robodesk", "robodesk"),
        ("dmlab", "dmlab"),
    ],
)
def test_family_names(field: str, family: str):
    spec = study_pb2.EnvironmentSpec(id="e")
    getattr(spec, field).SetInParent()
    assert registry.family(spec) == family


def test_missing_id_and_negative_step_limit():
    spec = study_pb2.EnvironmentSpec(id="e")
    spec.atari.SetInParent()
    with pytest.raises(StepmarkError, match="the atari settings need an id"):
        registry.create(spec)
    spec.atari.id = "Pong"
    spec.max_episode_steps = -1
    with pytest.raises(StepmarkError, match="max_episode_steps must be >= 0"):
        registry.create(spec)


def test_to_jsonable_handles_numpy_and_enums():
    import enum
    import json

    import numpy as np

    class Status(enum.IntEnum):
        RUNNING = 0

    class Colour(enum.Enum):
        RED = "r"

    value = {
        "a": np.float32(1.5),
        "b": np.int64(3),
        "c": np.array([1, 2]),
        "d": (np.bool_(True), Status.RUNNING, Colour.RED),
        "e": float("nan"),
        "f": b"ok",
    }
    out = to_jsonable(value)
    assert out == {"a": 1.5, "b": 3, "c": [1, 2], "d": [True, 0, "RED"], "e": "nan", "f": {"base64": "b2s="}}
    assert type(out["d"][1]) is int
    json.dumps(out)


def test_check_builds_and_closes_or_notes_what_cannot_run():
    maze = study_pb2.EnvironmentSpec(id="m", procgen=study_pb2.EnvironmentSpec.Procgen(id="maze"))
    assert registry.check(maze) is None
    pong = study_pb2.EnvironmentSpec(
        id="p", atari=study_pb2.EnvironmentSpec.Atari(id="Pong", sticky_actions=True)
    )
    assert registry.check(pong) is None
    lab = study_pb2.EnvironmentSpec(id="l", dmlab=study_pb2.EnvironmentSpec.DMLab(id="seekavoid_arena_01"))
    assert registry.check(lab).startswith("kept but cannot be recorded here: DMLab")
    assert registry.check(study_pb2.EnvironmentSpec(id="ui")).startswith("no environment type")
    with pytest.raises(StepmarkError, match="unknown Procgen game 'mazee'"):
        registry.check(
            study_pb2.EnvironmentSpec(id="m", procgen=study_pb2.EnvironmentSpec.Procgen(id="mazee"))
        )
    no_memory_mode = study_pb2.EnvironmentSpec.Procgen(
        id="coinrun", distribution_mode=study_pb2.EnvironmentSpec.Procgen.DISTRIBUTION_MEMORY
    )
    with pytest.raises(StepmarkError, match="has no 'memory' distribution mode"):
        registry.check(study_pb2.EnvironmentSpec(id="c", procgen=no_memory_mode))

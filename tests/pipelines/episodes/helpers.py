"""Shared by the episode storage, recorder and `record` CLI tests: real stores, studies and environments."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from pipelines.store import open_store
from protos.rlds_creator import study_pb2

CREATOR = "creator@example.com"
USER = "annotator@example.com"


def procgen_spec(
    env_id: str = "maze", game: str = "maze", *, sync: bool = True, max_steps: int = 200, rand_seed: int = 7
) -> study_pb2.EnvironmentSpec:
    """Procgen with one fixed level: maze/jumper episodes then end within tens of random steps."""
    spec = study_pb2.EnvironmentSpec(id=env_id, name=env_id, sync=sync, max_episode_steps=max_steps)
    spec.procgen.id = game
    spec.procgen.num_levels = 1
    spec.procgen.rand_seed = rand_seed
    return spec


def family_spec(
    family: str, *, max_steps: int, env_id: str | None = None, atari: str = "Breakout"
) -> study_pb2.EnvironmentSpec:
    """One environment of each family the recorder runs here (`env_id` defaults to the family's name)."""
    spec = study_pb2.EnvironmentSpec(id=env_id or family, name=family, sync=True, max_episode_steps=max_steps)
    if family == "procgen":
        spec.procgen.id = "coinrun"
    elif family == "atari":
        spec.atari.id = atari
    elif family == "nethack":
        spec.net_hack.id = "NetHackScore-v0"  # dict observation of many dtypes: the codec's slow paths
    elif family == "robosuite":
        spec.robosuite.id = "Lift"
        spec.robosuite.cameras.extend(["agentview", "frontview"])
        spec.robosuite.use_camera_obs = True
    elif family == "robodesk":
        spec.robodesk.task = "open_slide"
        spec.robodesk.image_size = 32
    else:
        raise ValueError(f"no test environment for family {family!r}")
    return spec


def new_store(data_dir: Path):  # noqa: ANN201 - Repository
    return open_store(None, data_dir)


def make_study(repo, *env_specs: study_pb2.EnvironmentSpec) -> study_pb2.StudySpec:  # noqa: ANN001
    spec = study_pb2.StudySpec(name="recording test", environment_specs=list(env_specs or [procgen_spec()]))
    return repo.create_study(spec, CREATOR)


def assert_same_step(a, b) -> None:  # noqa: ANN001 - two pipelines.episodes.base.Step
    """Two readers' step of the same record pair: equal in every field (a Procgen image observation)."""
    np.testing.assert_array_equal(a.observation["image"], b.observation["image"])
    assert (a.action is None and b.action is None) or int(a.action) == int(b.action)
    assert (a.reward, a.discount, a.keys, a.info, a.image) == (b.reward, b.discount, b.keys, b.info, b.image)
    assert (a.is_first, a.is_last, a.is_terminal) == (b.is_first, b.is_last, b.is_terminal)


def jpeg_size(data: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(data)) as im:
        assert im.format == "JPEG"
        return im.size


def same_figures(a, b) -> bool:  # noqa: ANN001 - EpisodeStats
    """Episode.total_reward is a float32 in the proto: compare the return at float32 precision."""
    import math

    return (
        a is not None
        and b is not None
        and (a.l, a.s) == (b.l, b.s)
        and math.isclose(a.r, b.r, rel_tol=1e-6, abs_tol=1e-6)
    )

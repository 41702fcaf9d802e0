"""Continuous float64 actions (RoboDesk; Robosuite records the same dtype) keep their dtype and values on every
export path: envlogger, Parquet, Minari and TFDS all give the actions the recorder stored, as float64.

The episodes are recorded by `stepmark record` in a child process, so MuJoCo never enters this process (TFDS and
MuJoCo's OSMesa renderer crash when loaded together; the TFDS test runs in the TensorFlow process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipelines import export
from pipelines.episodes import open_episode
from pipelines.store import open_store
from tests.pipelines.export.readback import read_envlogger

pytestmark = pytest.mark.slow
USER = "alice@example.com"
SPEC = {
    "name": "RoboDesk float64",
    "description": "continuous float64 actions",
    "environment_specs": [
        {"id": "desk", "name": "RoboDesk", "sync": True, "max_episode_steps": 4,
         "robodesk": {"task": "open_slide", "image_size": 32}},
    ],
}  # fmt: skip


def _stepmark(*args: str) -> str:
    env = {**os.environ, "MUJOCO_GL": "osmesa", "PYOPENGL_PLATFORM": "osmesa"}
    done = subprocess.run([sys.executable, "-m", "stepmark", *args], capture_output=True, text=True, env=env,
                          check=False, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def desk(tmp_path_factory) -> tuple[Path, str, list[np.ndarray]]:
    """(data dir, study id, the recorded actions of each episode as the store's reader gives them)."""
    root = tmp_path_factory.mktemp("float64")
    spec = root / "robodesk.json"
    spec.write_text(json.dumps(SPEC))
    data = root / "data"
    study_id = _stepmark("study", "create", "--data", str(data), "--user", USER, str(spec)).split()[-1]
    _stepmark("record", "--data", str(data), "--user", USER, "--study", study_id, "--env", "desk",
              "--episodes", "2", "--policy", "random", "--seed", "1", "--no-progress")  # fmt: skip
    repo = open_store(None, data)
    episodes = sorted(repo.list_episodes(study_id=study_id), key=lambda e: e.id)
    recorded = []
    for episode in episodes:
        with open_episode(episode, data) as reader:
            recorded.append(np.stack([np.asarray(reader.step(i).action) for i in range(episode.num_steps)]))
    repo.close()
    assert all(a.dtype == np.float64 and a.shape[1] > 1 for a in recorded)
    return data, study_id, recorded


def _export(desk, out: Path, fmt: str) -> Path:
    data, study_id, _ = desk
    summary = export.export_episodes(export.ExportRequest(data_dir=str(data), out=str(out), format=fmt,
                                                          study_id=study_id))  # fmt: skip
    assert summary.episodes == 2 and not summary.dead_letters
    return out


def _by_length_then_values(actions: list[np.ndarray]) -> list[np.ndarray]:
    return sorted(actions, key=lambda a: (len(a), a.tobytes()))


def test_envlogger_parquet_and_minari_keep_float64_actions(desk, tmp_path: Path) -> None:
    import minari
    import pyarrow.parquet as pq

    recorded = _by_length_then_values(desk[2])

    episodes = read_envlogger(_export(desk, tmp_path / "env", "envlogger"))
    # envlogger record k > 0 holds the action that led to it (schemas/dataset_spec.md, the step contract)
    env_actions = [np.stack([np.asarray(r["action"]) for r in e["records"][1:]]) for e in episodes]
    assert all(a.dtype == np.float64 for a in env_actions)
    for got, want in zip(_by_length_then_values(env_actions), recorded, strict=True):
        np.testing.assert_array_equal(got, want)

    table = pq.read_table(_export(desk, tmp_path / "pq", "parquet") / "data")
    assert str(table.schema.field("action").type.value_type) == "double"
    frame = table.to_pandas()
    parquet_actions = []
    for _, rows in frame.groupby("episode_id"):
        rows = rows.sort_values("step_index")
        parquet_actions.append(np.stack(list(rows[~rows.is_last].action)).astype(np.float64))
    for got, want in zip(_by_length_then_values(parquet_actions), recorded, strict=True):
        np.testing.assert_array_equal(got, want)

    dataset = minari.MinariDataset(str(_export(desk, tmp_path / "desk-v0", "minari") / "data"))
    assert dataset.action_space.dtype == np.float64
    minari_actions = [e.actions for e in dataset.iterate_episodes()]
    assert all(a.dtype == np.float64 for a in minari_actions)
    for got, want in zip(_by_length_then_values(minari_actions), recorded, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.tfds
def test_tfds_keeps_float64_actions(desk, tmp_path: Path) -> None:
    from tests.pipelines.export.readback import read_tfds

    episodes = read_tfds(_export(desk, tmp_path / "tfds", "tfds"))
    actions = [np.stack([s["action"] for s in e["steps"] if not s["is_last"]]) for e in episodes]
    assert all(a.dtype == np.float64 for a in actions)
    for got, want in zip(_by_length_then_values(actions), _by_length_then_values(desk[2]), strict=True):
        np.testing.assert_array_equal(got, want)

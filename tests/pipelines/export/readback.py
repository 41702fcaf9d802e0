"""Reading exported datasets back with the consumers' own tools, and turning them into JSON instances that
`schemas/dataset_spec.schema.json` validates (arrays become {dtype, shape} descriptors, bytes their length)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tests.conftest import REPO_ROOT

SCHEMA_PATH = REPO_ROOT / "schemas" / "dataset_spec.schema.json"


def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def describe(value: Any, text: bool = False) -> Any:
    """A JSON stand-in for a value: scalars as themselves, arrays as {dtype, shape}, bytes as {bytes: n}.

    `text`: bytes that decode as UTF-8 become strings (TFDS hands Text features back as bytes)."""
    if isinstance(value, dict):
        return {str(k): describe(v, text) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [describe(v, text) for v in value]
    if isinstance(value, bytes):
        if text:
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                pass
        return {"bytes": len(value)}
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return describe(value.item(), text)
        if value.dtype == object and value.ndim == 1 and text:
            return [describe(v, text) for v in value]
        return {"dtype": str(value.dtype), "shape": list(value.shape)}
    if isinstance(value, np.generic):
        return describe(value.item(), text)
    return value


def read_envlogger(path: Path) -> list[dict[str, Any]]:
    """Each episode as {"metadata": episode metadata, "records": [{step_type, reward, discount, action,
    observation, custom_data}]}, read with envlogger.Reader."""
    import envlogger

    episodes = []
    with envlogger.Reader(str(path)) as reader:
        for meta, steps in zip(reader.episode_metadata(), reader.episodes, strict=True):
            records = [
                {
                    "step_type": int(s.timestep.step_type),
                    "reward": s.timestep.reward,
                    "discount": s.timestep.discount,
                    "observation": s.timestep.observation,
                    "action": s.action,
                    "custom_data": s.custom_data,
                }
                for s in steps
            ]
            episodes.append({"metadata": meta, "records": records})
    return episodes


def envlogger_instance(path: Path) -> dict[str, Any]:
    import envlogger

    with envlogger.Reader(str(path)) as reader:
        dataset_metadata = reader.metadata()
    return {
        "format": "envlogger",
        "dataset_metadata": describe({k: v for k, v in dataset_metadata.items() if k != "environment_specs"}),
        "episodes": [
            {"metadata": describe(e["metadata"]), "records": [describe(r) for r in e["records"]]}
            for e in read_envlogger(path)
        ],
    }


def read_tfds(path: Path) -> list[dict[str, Any]]:
    """Each episode as numpy values, loaded with tfds.builder_from_directory(path), every split, in episode order."""
    import tensorflow_datasets as tfds

    builder = tfds.builder_from_directory(str(path))
    out = []
    for split, info in sorted(builder.info.splits.items()):
        if not info.num_examples:  # listed (every --split name is), but TFDS refuses to read an empty split
            continue
        for episode in tfds.as_numpy(builder.as_dataset(split=split)):
            episode = dict(episode)
            episode["steps"] = list(episode["steps"])
            out.append(episode)
    return sorted(out, key=lambda e: int(e["episode_index"]))


def tfds_metadata(path: Path) -> dict[str, Any]:
    import tensorflow_datasets as tfds

    return dict(tfds.builder_from_directory(str(path)).info.metadata or {})


def tfds_instance(path: Path) -> dict[str, Any]:
    return {
        "format": "tfds",
        "dataset_metadata": describe(tfds_metadata(path)),
        "episodes": [
            {
                "metadata": describe({k: v for k, v in e.items() if k != "steps"}, text=True),
                "steps": [describe(s, text=True) for s in e["steps"]],
            }
            for e in read_tfds(path)
        ],
    }

"""Exported episodes as a TFDS/RLDS dataset folder that `tfds.builder_from_directory(path)` loads.

Imports TensorFlow Datasets at module level: import this module only on the TFDS path (`require_tfds()` gives
a clear error when the `[tfds]` extra is missing). The work splits like TFDS's own Beam datasets:
- per episode (any worker): `EpisodeSerializer` encodes one `ExportEpisode` with the dataset's
  `FeaturesDict` into one serialized `tf.train.Example` (steps as a `tfds.features.Dataset`, RLDS layout of
  `tfds.rlds.rlds_base`);
- TFDS's `BeamWriter` groups the serialized episodes into shards (written under temporary names, renamed
  when complete) and records the shard lengths;
- last step (`write_dataset_info`): `dataset_info.json` + `features.json` via `tfds.folder_dataset`.
Field names, types and shapes: `schemas/dataset_spec.md`.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from pipelines.errors import StepmarkError

try:
    import tensorflow_datasets as tfds
    from tensorflow_datasets.core import example_serializer, file_adapters, naming
    from tensorflow_datasets.core import splits as split_lib
    from tensorflow_datasets.core import writer as writer_lib
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    tfds = None
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None

from pipelines.exporters.transform import (
    KIND_UI,
    UI_OBJECT_FIELDS,
    ExportEpisode,
    ExportStep,
    TransformOptions,
    info_json,
)

DATASET_NAME = "stepmark"
SPLIT = "train"
FILE_SUFFIX = "tfrecord"


def require_tfds() -> None:
    """Raises a one-line error when TensorFlow Datasets is not installed."""
    if _IMPORT_ERROR is not None:
        raise StepmarkError(
            f"--format tfds needs TensorFlow Datasets ({_IMPORT_ERROR}); install the extra: pip install -e '.[tfds]'"
        )


# --- features ------------------------------------------------------------------------------------------


def _feature_of(value: Any, where: str) -> Any:
    """The TFDS feature for one observation/action value, shaped and typed exactly like the data."""
    if isinstance(value, dict):
        return tfds.features.FeaturesDict({str(k): _feature_of(v, f"{where}/{k}") for k, v in value.items()})
    if isinstance(value, bytes):
        return tfds.features.Tensor(shape=(), dtype=np.object_)
    if isinstance(value, str):
        return tfds.features.Text()
    if isinstance(value, list | tuple):
        raise StepmarkError(
            f"{where}: lists/tuples in observations or actions have no fixed TFDS feature; export --format envlogger"
        )
    arr = np.asarray(value)
    if arr.dtype.kind in "OUS":
        return tfds.features.Tensor(shape=arr.shape, dtype=np.object_)
    dtype = (
        np.float32 if arr.dtype == np.float64 else arr.dtype
    )  # TF consumers expect float32 (cast on encode)
    # Arrays as raw bytes: the default stores every element as an int64 in the proto (8x the size, slow).
    encoding = tfds.features.Encoding.BYTES if arr.ndim else tfds.features.Encoding.NONE
    return tfds.features.Tensor(shape=arr.shape, dtype=dtype, encoding=encoding)


def _ui_observation_features() -> Any:
    text, i32, flag = tfds.features.Text(), np.int32, np.bool_
    columns: dict[str, Any] = {
        "id": text,
        "index": i32,
        "parent_index": i32,
        "type": i32,
        "android_class": text,
        "text": text,
        "content_desc": text,
        "resource_id": text,
        "bbox": tfds.features.Tensor(shape=(4,), dtype=np.int32),
        "grid_location": i32,
        "depth": i32,
        "is_leaf": flag,
        "is_actionable": flag,
        "clickable": flag,
        "visible": flag,
        "enabled": flag,
        "scrollable": flag,
        "checked": flag,
    }
    assert tuple(columns) == UI_OBJECT_FIELDS
    return tfds.features.FeaturesDict(
        {
            "screenshot": tfds.features.Tensor(shape=(), dtype=np.object_),
            "screen_width": np.int32,
            "screen_height": np.int32,
            "objects": tfds.features.Sequence(columns),
            "proto": tfds.features.Tensor(shape=(), dtype=np.object_),
        }
    )


def _ui_action_features(strip: bool) -> Any:
    text = tfds.features.Text()
    fields: dict[str, Any] = {
        "type": np.int32,
        "type_name": text,
        "x": np.int32,
        "y": np.int32,
        "end_x": np.int32,
        "end_y": np.int32,
        "target_index": np.int32,
        "target_id": text,
        "text": text,
        "duration_ms": np.int64,
    }
    if not strip:
        fields["raw_json"] = text
    return tfds.features.FeaturesDict(fields)


def build_features(sample: ExportEpisode, options: TransformOptions) -> Any:
    """The dataset's `FeaturesDict`, from one transformed episode of the dataset (all share its spec)."""
    require_tfds()
    strip = options.strip_internal_metadata
    if sample.meta.kind == KIND_UI:
        observation = _ui_observation_features()
        action = _ui_action_features(strip)
    else:
        first = sample.steps[0]
        observation = _feature_of(first.observation, "observation")
        act = next((s.action for s in sample.steps if s.action is not None), None)
        if act is None:
            raise StepmarkError(
                f"episode {sample.meta.study_id}/{sample.meta.session_id}/{sample.meta.episode_id}: "
                "no step with an action to derive the dataset's action feature from"
            )
        action = _feature_of(act, "action")
    info: dict[str, Any] = {
        "episode": tfds.features.FeaturesDict(
            {"r": np.float32, "l": np.int32, "s": np.bool_, "mask": np.bool_}
        )
    }
    if not strip:
        info["json"] = tfds.features.Text()
    step: dict[str, Any] = {
        "observation": observation,
        "action": action,
        "reward": tfds.features.Scalar(dtype=np.float32),
        "discount": tfds.features.Scalar(dtype=np.float32),
        "is_first": np.bool_,
        "is_last": np.bool_,
        "is_terminal": np.bool_,
        "info": tfds.features.FeaturesDict(info),
    }
    for label in options.step_tag_labels:
        step[f"tag:{label}"] = np.bool_
    if not strip:
        step["image"] = tfds.features.Tensor(shape=(), dtype=np.object_)
        step["keys"] = tfds.features.Sequence(tfds.features.Text())
    text = tfds.features.Text()
    episode: dict[str, Any] = {
        "steps": tfds.features.Dataset(step),
        "episode_index": np.int64,
        "episode_id": text,
        "study_id": text,
        "session_id": text,
        "environment_id": text,
        "agent_id": text,
        "kind": text,
        "state": text,
        "episode_return": np.float32,
        "episode_length": np.int32,
        "episode_success": np.bool_,
        "num_steps": np.int32,
        "total_reward": np.float32,
        "truncated_by_tag": text,
    }
    if not strip:
        episode["tags"] = tfds.features.Sequence(text)
        episode["notes"] = text
    if sample.meta.kind == KIND_UI:
        episode.update({"app_package": text, "goal": text, "source": text})
    return tfds.features.FeaturesDict(episode)


def features_to_json(features: Any) -> str:
    return json.dumps(features.to_json())


def features_from_json(text: str) -> Any:
    require_tfds()
    return tfds.features.FeatureConnector.from_json(json.loads(text))


def _zeros(feature: Any) -> Any:
    """A placeholder value of a feature (the action of the final-observation step, which has none)."""
    if isinstance(feature, tfds.features.FeaturesDict):
        return {k: _zeros(f) for k, f in feature.items()}
    if isinstance(feature, tfds.features.Text):
        return ""
    dtype = feature.np_dtype
    if dtype == np.object_:
        return b""
    return np.zeros(feature.shape, dtype=dtype)


def _cast_like(value: Any, feature: Any) -> Any:
    """float64 data into float32 features (the only cast `_feature_of` introduces)."""
    if isinstance(feature, tfds.features.FeaturesDict) and isinstance(value, dict):
        return {k: _cast_like(value[k], f) for k, f in feature.items()}
    if isinstance(feature, tfds.features.Tensor) and feature.np_dtype == np.float32:
        return np.asarray(value, dtype=np.float32)
    return value


def _step_example(step: ExportStep, step_features: Any, strip: bool) -> dict[str, Any]:
    action_feature = step_features["action"]
    action = step.action if step.action is not None else _zeros(action_feature)
    info: dict[str, Any] = {"episode": dict(step.episode)}
    if not strip:
        info["json"] = info_json(step.info)
    ex: dict[str, Any] = {
        "observation": _cast_like(step.observation, step_features["observation"]),
        "action": _cast_like(action, action_feature),
        "reward": np.float32(step.reward),
        "discount": np.float32(step.discount),
        "is_first": bool(step.is_first),
        "is_last": bool(step.is_last),
        "is_terminal": bool(step.is_terminal),
        "info": info,
        **{k: bool(v) for k, v in step.tags.items()},
    }
    if not strip:
        ex["image"] = bytes(step.image) if step.image is not None else b""
        ex["keys"] = list(step.keys or [])
    return ex


def episode_example(episode: ExportEpisode, features: Any) -> dict[str, Any]:
    step_features = features["steps"].feature
    strip = "keys" not in step_features  # the features were built with or without internal metadata
    meta = episode.meta.to_dict()
    ex = {k: meta[k] for k in features.keys() if k != "steps"}
    ex["steps"] = [_step_example(s, step_features, strip) for s in episode.steps]
    return ex


class EpisodeSerializer:
    """Per-worker: one `ExportEpisode` -> one serialized `tf.train.Example` with the dataset's features."""

    def __init__(self, features_json: str) -> None:
        self.features = features_from_json(features_json)
        self._serializer = example_serializer.ExampleSerializer(self.features.get_serialized_info())

    def serialize(self, episode: ExportEpisode) -> bytes:
        encoded = self.features.encode_example(episode_example(episode, self.features))
        return self._serializer.serialize_example(encoded)


if tfds is not None:

    class PreSerialized(example_serializer.Serializer):
        """The episodes reach TFDS's BeamWriter already serialized (by `EpisodeSerializer` on the workers)."""

        def serialize_example(self, example: Any) -> Any:
            return example


def filename_template(staging_dir: str) -> Any:
    return naming.ShardedFileTemplate(
        data_dir=staging_dir, dataset_name=DATASET_NAME, split=SPLIT, filetype_suffix=FILE_SUFFIX
    )


def beam_writer(staging_dir: str) -> Any:
    """TFDS's BeamWriter over (episode index, serialized example) pairs, in export order (no shuffling)."""
    require_tfds()
    return writer_lib.BeamWriter(
        serializer=PreSerialized(example_specs=None),
        filename_template=filename_template(staging_dir),
        hash_salt=SPLIT,
        disable_shuffling=True,
        example_writer=writer_lib.ExampleWriter(file_adapters.FileFormat.TFRECORD),
    )


def write_dataset_info(
    staging_dir: str, features_json: str, writer: Any, description: str
) -> tuple[int, int]:
    """The last step: `dataset_info.json` and `features.json` for the shards; returns (episodes, bytes)."""
    shard_lengths, total_size = writer.finalize()
    template = filename_template(staging_dir)
    split = split_lib.SplitInfo(
        name=SPLIT, shard_lengths=list(shard_lengths), num_bytes=int(total_size), filename_template=template
    )
    tfds.folder_dataset.write_metadata(
        data_dir=staging_dir,
        features=features_from_json(features_json),
        split_infos=[split],
        filename_template=template,
        version="1.0.0",
        check_data=False,
        description=description,
    )
    return sum(shard_lengths), int(total_size)

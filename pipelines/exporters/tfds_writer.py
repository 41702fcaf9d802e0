"""Exported episodes as a TFDS/RLDS dataset folder that `tfds.builder_from_directory(path)` loads.

Imports TensorFlow Datasets (not TensorFlow: see `quiet_tensorflow`) at module level: import this module only
on the TFDS path (`require_tfds()` gives a clear error when the `[tfds]` extra is missing; `quiet_tensorflow()`
runs first so a normal export prints no TensorFlow log lines). The work splits so that memory is bounded by one episode, not by the dataset:
- per episode (any worker): `EpisodeSerializer` encodes one `ExportEpisode` with the dataset's
  `FeaturesDict` into one serialized `tf.train.Example` (steps as a `tfds.features.Dataset`, RLDS layout of
  `tfds.rlds.rlds_base`; deterministic serialization, so equal exports are equal bytes) and writes it as a
  one-record TFRecord file in the work folder;
- last step (`finish_dataset`): each split's files are renamed to TFDS shard names in episode order, then
  `dataset_info.json` + `features.json` are written via `tfds.folder_dataset`.
Field names, types and shapes: `schemas/dataset_spec.md`.
"""


from __future__ import annotations

import json
import logging
import os
import warnings
from typing import Any

import numpy as np

from pipelines import protowire
from pipelines.errors import StepmarkError
from pipelines.exporters.transform import (
    KIND_UI,
    TARGET_CANDIDATES,
    UI_OBJECT_FIELDS,
    UI_WINDOW_FIELDS,
    ExportEpisode,
    ExportStep,
    TransformOptions,
    frame_leaf,
    info_json,
)
from pipelines.exporters.ui_objects import PADDED_TEXT_FIELDS
from pipelines.step_text import STEP_TEXT_FIELDS


class _DropAbslWarnings(logging.Filter):
    """TFDS logs deprecation warnings of its own internals through absl (`TensorInfo.dtype is deprecated`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


def quiet_tensorflow() -> None:
    """No TensorFlow log lines on a normal export: C++ start-up logs, absl/Python logs, deprecation warnings.

    The export itself never imports TensorFlow: TFDS encodes features with numpy and serializes examples with
    its own `tf_example_pb2`, so only TFDS is imported (~0.3 s instead of ~3.5 s with TensorFlow, a fixed cost
    of every export and every worker). Should TFDS import TensorFlow lazily for some feature, the settings
    here keep it quiet. Errors still surface."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="tensorflow.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="tensorflow_datasets.*")
    logging.getLogger("absl").addFilter(_DropAbslWarnings())
    logging.getLogger("tensorflow").setLevel(logging.ERROR)


quiet_tensorflow()

try:
    import tensorflow_datasets as tfds
    from tensorflow_datasets.core import example_serializer, naming
    from tensorflow_datasets.core import splits as split_lib
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    tfds = None
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None
    from pipelines.exporters import tfds_columns  # noqa: E402 - TFDS is imported (quietly) above

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
    # dtypes as recorded (float64 stays float64). Arrays as raw bytes: the default stores every element as an
    # int64 in the proto (8x the size, slow).
    # float64 scalars too: tf.train.Example's FloatList is 32-bit, so the default would round them.
    exact = arr.ndim or arr.dtype == np.float64
    encoding = tfds.features.Encoding.BYTES if exact else tfds.features.Encoding.NONE
    return tfds.features.Tensor(shape=arr.shape, dtype=arr.dtype, encoding=encoding)


def _float64() -> Any:
    """A float64 scalar stored exactly (as 8 bytes: tf.train.Example's FloatList would round it to 32 bits)."""
    return tfds.features.Tensor(shape=(), dtype=np.float64, encoding=tfds.features.Encoding.BYTES)


def _padded_objects_features(n: int) -> Any:
    flag, i32 = np.bool_, np.int32
    vector = {"object_index": i32, "type": i32, "grid_location": i32, "depth": i32, "pre_order": i32, "post_order": i32, "window": i32,
              "window_layer": i32}  # fmt: skip
    fields: dict[str, Any] = {
        "num_objects": np.int32,
        "mask": tfds.features.Tensor(shape=(n,), dtype=flag),
        "bbox": tfds.features.Tensor(shape=(n, 4), dtype=np.float32, encoding=tfds.features.Encoding.BYTES),
        **{k: tfds.features.Tensor(shape=(n,), dtype=t, encoding=tfds.features.Encoding.BYTES) for k, t in vector.items()},
        **{
            k: tfds.features.Tensor(shape=(n,), dtype=flag)
            for k in ("is_leaf", "is_actionable", "clickable", "human_drawn", "box_corrected", "window_focused")
        },
        **{k: tfds.features.Tensor(shape=(n,), dtype=np.object_) for k in PADDED_TEXT_FIELDS},
    }
    return tfds.features.FeaturesDict(fields)


def _ui_observation_features(padded: int = 0) -> Any:
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
        "labels": text,
        "human_drawn": flag,
        "box_corrected": flag,
        "window": i32,
    }
    assert tuple(columns) == UI_OBJECT_FIELDS
    windows = {"id": i32, "type": text, "title": text, "layer": i32, "focused": flag, "active": flag,
               "first_object": i32, "num_objects": i32}  # fmt: skip
    assert tuple(windows) == UI_WINDOW_FIELDS
    fields: dict[str, Any] = {
        "screenshot": tfds.features.Tensor(shape=(), dtype=np.object_),
        "has_screenshot": np.bool_,
        "screen_width": np.int32,
        "screen_height": np.int32,
        "proto": tfds.features.Tensor(shape=(), dtype=np.object_),
        "step_text": tfds.features.FeaturesDict({name: tfds.features.Text() for name in STEP_TEXT_FIELDS}),
    }
    if padded:
        fields["objects_padded"] = _padded_objects_features(padded)
    else:
        fields["objects"] = tfds.features.Sequence(columns)
        fields["windows"] = tfds.features.Sequence(windows)
    return tfds.features.FeaturesDict(fields)


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
        "target_source": text,
        "converter_target_index": np.int32,
        "text": text,
        "duration_ms": np.int64,
        "instruction": text,
        "direction": text,
        "target_rule": text,
        "target_candidates": tfds.features.Tensor(
            shape=(TARGET_CANDIDATES,), dtype=np.int32, encoding=tfds.features.Encoding.BYTES
        ),
    }
    if not strip:
        fields["raw_json"] = text
    return tfds.features.FeaturesDict(fields)


def _with_frame_feature(observation: Any, leaf: tuple[str, ...]) -> Any:
    """The observation's features with the frame leaf as encoded bytes (`--jpeg-frames`): not TFDS's `Image`,
    whose decoder (TensorFlow's INTEGER_FAST DCT) gives other pixels than Minari's and `frames.decode_frame`."""
    if not leaf:
        return tfds.features.Tensor(shape=(), dtype=np.object_)
    items = dict(observation.items())
    items[leaf[0]] = _with_frame_feature(items[leaf[0]], leaf[1:])
    return tfds.features.FeaturesDict(items)


def jpeg_leaf_of(features: Any, episode: ExportEpisode) -> tuple[str, ...] | None:
    """Where `build_features` put the recorded JPEG frames (`--jpeg-frames`): the episode's frame leaf when the
    feature there holds bytes rather than the array; None when the observation is stored as recorded."""
    leaf = frame_leaf(episode) if episode.meta.kind != KIND_UI else None
    if leaf is None:
        return None
    feature = features["steps"].feature["observation"]
    for key in leaf:
        if not isinstance(feature, tfds.features.FeaturesDict) or key not in feature.keys():
            return None
        feature = feature[key]
    # The frames' feature is a scalar (one encoded frame); the array's has the frame's shape. (`shape` is stored;
    # `np_dtype` is computed on each access, ~1 ms.)
    return leaf if isinstance(feature, tfds.features.Tensor) and tuple(feature.shape) == () else None


def build_features(sample: ExportEpisode, options: TransformOptions, *, jpeg_frames: bool = False) -> Any:
    """The dataset's `FeaturesDict`, from one transformed episode of the dataset (all share its spec).

    The observation as recorded (default): every leaf a `Tensor` of its recorded dtype and shape, exact.
    `jpeg_frames` (lossy opt-in): the observation leaf that the recorded JPEG frames depict (`frame_leaf`) holds
    the recorded JPEG bytes as they are, and the step's separate `image` field is left out (stored once).
    """
    require_tfds()
    strip = options.strip_internal_metadata
    leaf = None
    if sample.meta.kind == KIND_UI:
        observation = _ui_observation_features(options.ui_objects_padded)
        action = _ui_action_features(strip)
    else:
        first = sample.steps[0]
        observation = _feature_of(first.observation, "observation")
        leaf = frame_leaf(sample) if jpeg_frames else None
        if leaf is not None:
            observation = _with_frame_feature(observation, leaf)
        act = next((s.action for s in sample.steps if s.action is not None), None)
        if act is None:
            raise StepmarkError(
                f"episode {sample.meta.study_id}/{sample.meta.session_id}/{sample.meta.episode_id}: "
                "no step with an action to derive the dataset's action feature from"
            )
        action = _feature_of(act, "action")
    info: dict[str, Any] = {
        "episode": tfds.features.FeaturesDict(
            {"r": _float64(), "l": np.int64, "s": np.bool_, "mask": np.bool_}
        )
    }
    if not strip:
        info["json"] = tfds.features.Text()
    step: dict[str, Any] = {
        "observation": observation,
        "action": action,
        "reward": _float64(),
        "discount": _float64(),
        "is_first": np.bool_,
        "is_last": np.bool_,
        "is_terminal": np.bool_,
        "info": tfds.features.FeaturesDict(info),
    }
    for label in options.step_tag_labels:
        step[f"tag:{label}"] = np.bool_
    for name, value in sample.steps[0].fields.items():  # study fields (exporters/study_fields.py)
        if isinstance(value, str):
            step[name] = tfds.features.Text()
        elif isinstance(value, list):  # multi_choice: one flag per option
            step[name] = tfds.features.Tensor(shape=(len(value),), dtype=np.bool_)
        else:
            step[name] = _float64() if isinstance(value, float) else np.bool_
    if not strip:
        if leaf is None and sample.meta.kind != KIND_UI:  # UI: the screenshot is the observation's
            step["image"] = tfds.features.Tensor(shape=(), dtype=np.object_)
        step["keys"] = tfds.features.Sequence(tfds.features.Text())
    text = tfds.features.Text()
    episode: dict[str, Any] = {
        "steps": tfds.features.Dataset(step),
        "episode_index": np.int64,
        "selection_index": np.int64,
        "episode_id": text,
        "study_id": text,
        "session_id": text,
        "environment_id": text,
        "agent_id": text,
        "kind": text,
        "state": text,
        "episode_return": _float64(),
        "episode_length": np.int64,
        "episode_success": np.bool_,
        "num_steps": np.int64,
        "total_reward": _float64(),
        "truncated_by_tag": text,
    }
    if sample.meta.split:
        episode["split"] = text
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


def _with_frame(observation: Any, leaf: tuple[str, ...], jpeg: bytes | None) -> Any:
    """The observation with its frame leaf replaced by the recorded JPEG bytes (a step without a recorded
    frame: its array as PNG, exact; `frames.decode_frame` reads both)."""
    if not leaf:
        if jpeg is None:
            from pipelines.exporters.frames import encode_png

            return encode_png(observation)
        return jpeg
    out = dict(observation)
    out[leaf[0]] = _with_frame(out[leaf[0]], leaf[1:], jpeg)
    return out


def _tfds_text(observation: Any) -> Any:
    """Padded UI text columns are numpy str arrays (envlogger's codec needs them so); TFDS's text Tensors
    take object arrays."""
    if isinstance(observation, dict) and "objects_padded" in observation:
        padded = dict(observation["objects_padded"])
        for key in PADDED_TEXT_FIELDS:
            padded[key] = np.asarray(padded[key], dtype=object)
        return {**observation, "objects_padded": padded}
    return observation


def _step_example(
    step: ExportStep, step_features: Any, strip: bool, leaf: tuple[str, ...] | None = None
) -> dict[str, Any]:
    action_feature = step_features["action"]
    action = step.action if step.action is not None else _zeros(action_feature)
    info: dict[str, Any] = {"episode": dict(step.episode)}
    if not strip:
        info["json"] = info_json(step.info)
    ex: dict[str, Any] = {
        "observation": _tfds_text(step.observation) if leaf is None else _with_frame(step.observation, leaf, step.image),
        "action": action,
        "reward": np.float64(step.reward),
        "discount": np.float64(step.discount),
        "is_first": bool(step.is_first),
        "is_last": bool(step.is_last),
        "is_terminal": bool(step.is_terminal),
        "info": info,
        **{k: bool(v) for k, v in step.tags.items()},
        **{k: np.asarray(v, np.bool_) if isinstance(v, list) else v for k, v in step.fields.items()},
    }
    if not strip:
        if leaf is None and "image" in step_features.keys():
            ex["image"] = bytes(step.image) if step.image is not None else b""
        ex["keys"] = list(step.keys or [])
    return ex


def episode_example(episode: ExportEpisode, features: Any) -> dict[str, Any]:
    step_features = features["steps"].feature
    strip = "keys" not in step_features  # the features were built with or without internal metadata
    meta = episode.meta.to_dict()
    ex = {k: meta[k] for k in features.keys() if k != "steps"}
    leaf = jpeg_leaf_of(features, episode)
    ex["steps"] = [_step_example(s, step_features, strip, leaf) for s in episode.steps]
    return ex


def _numpy_dtypes_only(serialized_info: Any) -> None:
    """Keeps TFDS's serializer from importing TensorFlow (~3 s, a fixed cost of every export and worker).

    For nested sequences (`keys`, a Sequence of Text inside the steps) TFDS's `_add_ragged_fields` reads
    `TensorInfo.dtype`, which converts the numpy dtype into a TensorFlow one on first use, only to build
    another `TensorInfo` from it, which converts it back to numpy. Setting the cached conversion to the
    numpy dtype itself gives the same `TensorInfo` (and the same bytes) without TensorFlow. Pinned to TFDS
    4.9's `TensorInfo`: without its `_tf_dtype` cache nothing is changed (TensorFlow is then imported)."""
    stack = [serialized_info]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif getattr(node, "sequence_rank", 0) >= 2 and getattr(node, "_tf_dtype", False) is None:
            node._tf_dtype = node.np_dtype  # noqa: SLF001


class EpisodeSerializer:
    """Per-worker: one `ExportEpisode` -> one serialized `tf.train.Example` with the dataset's features.

    Serialized deterministically: the default proto serialization orders the feature map as it likes, so
    two exports of the same selection would differ byte for byte."""

    def __init__(self, features_json: str) -> None:
        self.features = features_from_json(features_json)
        info = self.features.get_serialized_info()
        _numpy_dtypes_only(info)
        self._serializer = example_serializer.ExampleSerializer(info)
        # Everything but the steps, encoded as TFDS does; the steps go column by column (`encode_steps`).
        self._episode_features = tfds.features.FeaturesDict({k: f for k, f in self.features.items() if k != "steps"})

    def serialize(self, episode: ExportEpisode) -> bytes:
        return tfds_columns.tf_example(self._serializer, self.encode(episode)).SerializeToString(deterministic=True)

    def encode(self, episode: ExportEpisode) -> dict[str, Any]:
        """`features.encode_example` of the episode, with the steps encoded column by column (`encode_steps`)."""
        example = episode_example(episode, self.features)
        steps = example.pop("steps")
        encoded = self._episode_features.encode_example(example)
        encoded["steps"] = tfds_columns.encode_steps(self.features["steps"], steps)
        return encoded


def work_file(work_dir: str, index: int) -> str:
    """Where a worker puts episode `index`'s one-record TFRecord until the last step names the shards."""
    return f"{work_dir.rstrip('/')}/{index:08d}.tfrecord"  # a local folder or a bucket's prefix


def write_episode(serializer: EpisodeSerializer, episode: ExportEpisode, work_dir: str) -> int:
    """Serializes one episode into its own TFRecord file (idempotent on retries); returns its size."""
    from pipelines import tfrecord

    data = tfrecord.encode(serializer.serialize(episode))
    path = work_file(work_dir, episode.meta.episode_index)
    tmp = f"{path}.part-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return len(data)


_INDEX_KEY = b"episode_index"


def _index_entry(position: int) -> bytes:
    """The `tf.train.Features` map entry `episode_index` -> int64_list [position], as the serializer writes it."""
    varint = protowire.varint
    values = b"\x0a" + varint(len(varint(position))) + varint(position)  # Int64List: packed `value`
    feature = b"\x1a" + varint(len(values)) + values  # Feature.int64_list
    entry = b"\x0a" + varint(len(_INDEX_KEY)) + _INDEX_KEY + b"\x12" + varint(len(feature)) + feature
    return b"\x0a" + varint(len(entry)) + entry  # Features.feature: one map entry


def renumbered_example(example: bytes, position: int) -> bytes:
    """A serialized `tf.train.Example` of an episode with its `episode_index` feature set to `position`, the rest
    byte for byte (only the map entry and the enclosing lengths change: the steps are not parsed). The
    serializer writes the Example deterministically: one `features` field, one entry per feature."""
    try:
        outer = list(protowire.fields(example))
        if not outer or outer[0][:2] != (1, 2):
            raise StepmarkError("not a serialized tf.train.Example of an episode (no features field first)")
        if len(outer) > 1:
            raise StepmarkError("not a serialized tf.train.Example of an episode (fields after its features)")
        _, _, start, end = outer[0]
        entries: list[bytes] = []
        pos, found = start, False
        for number, wire, body, after in protowire.fields(example, start, end):
            if (number, wire) != (1, 2):
                raise StepmarkError(f"unexpected field in the episode's tf.train.Features at byte {pos}")
            key = next(protowire.fields(example, body, after), None)  # the map entry's key comes first
            if key is not None and key[:2] == (1, 2) and example[key[2] : key[3]] == _INDEX_KEY:
                entries.append(_index_entry(position))
                found = True
            else:
                entries.append(example[pos:after])
            pos = after
    except ValueError as exc:  # not protobuf wire format (truncated)
        raise StepmarkError(f"not a serialized tf.train.Example of an episode ({exc})") from exc
    if not found:
        raise StepmarkError("the episode's tf.train.Example has no episode_index feature")
    features = b"".join(entries)
    return b"\x0a" + protowire.varint(len(features)) + features


def _move_renumbered(src: str, dest: str, position: int) -> None:
    """Episode file `src` (one TFRecord) as shard `dest`, its `episode_index` = `position` (one episode read)."""
    from pipelines import storage, tfrecord

    with storage.open_read(src) as f:
        records = [data for _, data in tfrecord.iter_records(f, name=src)]
    if len(records) != 1:
        raise StepmarkError(f"{src}: {len(records)} records, expected one episode")
    storage.write_bytes(dest, tfrecord.encode(renumbered_example(records[0], position)))
    storage.delete([src])


def filename_template(staging_dir: str, split: str) -> Any:
    return naming.ShardedFileTemplate(
        data_dir=staging_dir, dataset_name=DATASET_NAME, split=split, filetype_suffix=FILE_SUFFIX
    )


def finish_dataset(
    staging_dir: str,
    work_dir: str,
    features_json: str,
    splits: dict[str, list[tuple[int, int]]],
    description: str,
    metadata: dict[str, Any],
) -> tuple[int, int]:
    """The last step: each split's episode files (`(selection index, position)`, in episode order) become its
    shards (an episode whose position differs gets it as its `episode_index`: `renumbered_example`), then
    `dataset_info.json`, `features.json` and `metadata.json` (spaces, specs, splits); returns (episodes, bytes).

    The shards are moved where they are (a rename; in a bucket a server-side copy); the metadata files are
    written by TFDS into a local folder and uploaded when `staging_dir` is in a bucket (TensorFlow's file
    layer has no s3://). Every split in `splits` is listed, an empty one with one empty shard file and 0
    examples (TFDS itself refuses to read a split without examples: "corresponds to no data")."""
    from pipelines import storage

    require_tfds()
    infos = []
    placeholders: list[str] = []
    total_episodes = total_bytes = 0
    with storage.local_folder(staging_dir, prefix="stepmark-tfds-metadata-") as local_dir:
        for split, indices in splits.items():
            template = filename_template(local_dir, split)
            if not indices:  # a split named in --split that no episode hashed into: listed, with 0 examples
                empty = template.sharded_filepath(shard_index=0, num_shards=1)
                open(os.fspath(empty), "wb").close()  # uploaded with the metadata when in a bucket
                infos.append(split_lib.SplitInfo(name=split, shard_lengths=[0], num_bytes=0, filename_template=template))
                continue
            sizes = []
            for shard, (index, position) in enumerate(indices):
                dest = os.fspath(template.sharded_filepath(shard_index=shard, num_shards=len(indices)))
                if local_dir == staging_dir:
                    if index == position:
                        os.replace(work_file(work_dir, index), dest)
                    else:
                        _move_renumbered(work_file(work_dir, index), dest, position)
                    sizes.append(os.path.getsize(dest))
                else:
                    remote = storage.join(staging_dir, os.path.basename(dest))
                    if index == position:
                        storage.rename([work_file(work_dir, index)], [remote])
                    else:
                        _move_renumbered(work_file(work_dir, index), remote, position)
                    sizes.append(storage.match(remote)[0].size_in_bytes)
                    placeholders.append(dest)
                    open(dest, "wb").close()  # TFDS lists the shards' names before writing the metadata
            infos.append(
                split_lib.SplitInfo(
                    name=split, shard_lengths=[1] * len(indices), num_bytes=sum(sizes), filename_template=template
                )
            )
            total_episodes += len(indices)
            total_bytes += sum(sizes)
        tfds.folder_dataset.write_metadata(
            data_dir=local_dir,
            features=features_from_json(features_json),
            split_infos=infos,
            filename_template=filename_template(local_dir, SPLIT),
            version="1.0.0",
            check_data=False,
            description=description,
            metadata=tfds.core.MetadataDict(metadata),
        )
        for placeholder in placeholders:  # not uploaded over the moved shards
            os.unlink(placeholder)
    return total_episodes, total_bytes

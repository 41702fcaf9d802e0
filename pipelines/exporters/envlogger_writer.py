"""Exported episodes as one envlogger (Riegeli) dataset that `envlogger.Reader` opens unchanged.

Scales with workers: each episode is written on its own as one Riegeli shard (`steps`, `step_offsets`,
`episode_metadata`, `episode_index`) in a folder named by its position in the export (`<staging>/<index:08d>/`).
envlogger's dataset reader takes every sub-folder holding a `step_offsets.riegeli`, sorted by name, as a shard,
so the shards form one dataset once the last step adds the dataset-level `metadata.riegeli` (environment
specs + export settings). Shards are written by `riegeli_shard` from the serialized records, straight to any
Beam filesystem; where HighwayHash cannot be loaded from envlogger's extension, by envlogger's own writer in
a local temporary folder, then copied (the same records; compressed bytes differ).

Records follow dm_env/envlogger: record t holds timestep t (observation t, the reward/discount of the
transition into it), the action that led to it (None on the first), and step t's metadata as custom data
(the step contract of `schemas/dataset_spec.md`). Empty lists are written so that they read back as lists.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import dm_env
import numpy as np
from apache_beam.io.filesystems import FileSystems
from dm_env import specs as dm_specs
from envlogger import step_data
from envlogger.backends import backend_writer, riegeli_backend_writer
from envlogger.backends.python import riegeli_dataset_writer
from envlogger.converters import spec_codec
from envlogger.proto import storage_pb2

from pipelines.errors import StepmarkError
from pipelines.exporters import riegeli_records, riegeli_shard
from pipelines.exporters.envlogger_data import encode, serialize
from pipelines.exporters.riegeli_shard import SHARD_FILES, ShardOptions
from pipelines.exporters.transform import ExportEpisode, ExportStep, info_json

log = logging.getLogger(__name__)

METADATA_FILE = "metadata.riegeli"
# Riegeli writer options: zstd level 3 without `transpose` (which costs ~20-30 us a step on Procgen records for
# ~3% fewer bytes; the frames' JPEG copies in the custom data do not compress anyway), 1 MiB chunks.
SHARD_OPTIONS = ShardOptions(compression_level=3, chunk_size=1 << 20)
# Custom-data keys of an exported record.
CUSTOM_EPISODE = "episode"
CUSTOM_IMAGE = "image"
CUSTOM_KEYS = "keys"
CUSTOM_INFO = "info"  # {"episode": {r, l, s, mask}, "json": JSON text of the transition's info}
INFO_JSON = "json"


@dataclass(frozen=True)
class ShardResult:
    """What writing one episode produced (for the summary and the merge step)."""

    index: int
    path: str
    num_steps: int
    num_bytes: int
    signature: str


def shard_name(index: int) -> str:
    return f"{index:08d}"


def step_metadata(step: ExportStep, ui: bool = False) -> dict[str, Any]:
    """The per-step fields besides observation/action/reward/discount/flags, named and nested exactly as in
    the TFDS export: `info` = {"episode", "json"}, `tag:<label>`, and (not stripped) `image` and `keys`.

    In envlogger they are the custom data of the record holding the step's observation, so TFDS's own
    `envlogger_reader` (which takes step i's metadata from record i) yields the TFDS export's steps.
    """
    info: dict[str, Any] = {CUSTOM_EPISODE: dict(step.episode)}
    data: dict[str, Any] = {}
    if step.info is not None:  # not stripped: the internal metadata the recorder stored
        info[INFO_JSON] = info_json(step.info)
        if not ui:  # UI: no `image` (the screenshot is the observation's), as in every format
            data[CUSTOM_IMAGE] = bytes(step.image) if step.image is not None else b""  # on every step
        data[CUSTOM_KEYS] = list(step.keys or [])
    data[CUSTOM_INFO] = info
    data.update({k: bool(v) for k, v in step.tags.items()})
    # study fields: multi-choice flags as a bool array, the rest as they are (exporters/study_fields.py)
    data.update({k: np.asarray(v, np.bool_) if isinstance(v, list) else v for k, v in step.fields.items()})
    return data


def episode_records(episode: ExportEpisode) -> list[step_data.StepData]:
    """RLDS steps -> envlogger records: record t holds observation t, the action that led to it with that
    transition's reward and discount (dm_env), and step t's metadata. The LAST record's discount is the
    finishing transition's: 0 on termination, 1 on a truncation (what dm_env and TFDS's reader expect)."""
    steps = episode.steps
    records: list[step_data.StepData] = []
    n = len(steps)
    ui = episode.meta.kind == "ui"
    for t, step in enumerate(steps):
        if t == 0:
            records.append(step_data.StepData(dm_env.restart(step.observation), None, step_metadata(step, ui)))
            continue
        prev = steps[t - 1]
        step_type = dm_env.StepType.LAST if t == n - 1 else dm_env.StepType.MID
        ts = dm_env.TimeStep(step_type, float(prev.reward), float(prev.discount), step.observation)
        records.append(step_data.StepData(ts, prev.action, step_metadata(step, ui)))
    return records


class _WireData:
    """Serialized `Data` bytes handed to envlogger's Riegeli writer as they are.

    The writer's argument is converted by pybind11_protobuf, which (for a message that is not a wrapped C++
    proto) checks `DESCRIPTOR.full_name` and calls `SerializeToString()`: a message parsed from our bytes would
    only be serialized back to the same bytes (~10-25 us a step for a 14 KB Procgen record). Files are
    byte-identical to writing `encode(value)` (tests/pipelines/export/test_export_envlogger.py)."""

    DESCRIPTOR = storage_pb2.Data.DESCRIPTOR
    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def SerializeToString(self) -> bytes:  # noqa: N802 - the protobuf method name the writer calls
        return self.data


class _Writer(riegeli_backend_writer.RiegeliBackendWriter):
    """envlogger's Riegeli writer with `serialize` above for the dataset metadata, steps and episode metadata
    (never flushed before `close()`: one episode per writer)."""

    def __init__(self, data_directory: str, metadata: dict[str, Any], writer_options: str) -> None:
        backend_writer.BackendWriter.__init__(self, metadata=metadata)
        self._data_directory = data_directory
        self._flush_scheduler = None
        self._data_writer = riegeli_dataset_writer.RiegeliDatasetWriter()
        try:
            self._data_writer.init(
                data_dir=data_directory,
                metadata=encode(metadata),
                max_episodes_per_shard=10000,
                writer_options=writer_options,
            )
        except RuntimeError as exc:
            raise StepmarkError(f"{data_directory}: envlogger could not open a writer there ({exc})") from exc

    def _record_step(self, data: step_data.StepData, is_new_episode: bool) -> None:
        if not self._data_writer.add_step(_WireData(serialize(tuple(data))), is_new_episode):
            raise StepmarkError("envlogger could not write a step")

    def set_episode_metadata(self, data: Any) -> None:
        self._data_writer.set_episode_metadata(_WireData(serialize(data)))


def structure_signature(value: Any) -> str:
    """Shapes and dtypes of a nested observation/action, for checking that episodes can share a dataset."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{structure_signature(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(structure_signature(v) for v in value) + "]"
    if value is None:
        return "None"
    if isinstance(value, bytes | str):
        return type(value).__name__
    arr = np.asarray(value)
    return f"{arr.dtype}{list(arr.shape)}"


def episode_signature(episode: ExportEpisode) -> str:
    """The shape signature of an episode: observation and action of its first step (UI: kind only)."""
    if episode.meta.kind == "ui":
        return "ui"
    first = episode.steps[0]
    action = next((s.action for s in episode.steps if s.action is not None), None)
    return f"obs={structure_signature(first.observation)} action={structure_signature(action)}"


def signature_fits(signature: str, expected: str) -> bool:
    """Whether an episode of `signature` can join a dataset of `expected`.

    An episode cut at its first step (an end-of-episode tag on step 0) holds one observation and no action
    (`action=None`): it fits any dataset with the same observations.
    """
    if signature == expected:
        return True
    obs, _, action = signature.rpartition(" action=")
    expected_obs, _, _ = expected.rpartition(" action=")
    return action == "None" and bool(obs) and obs == expected_obs


def _spec_of(value: Any, name: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _spec_of(v, k) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_spec_of(v, name) for v in value)
    if isinstance(value, list):
        return [_spec_of(v, name) for v in value]
    arr = np.asarray(value)
    return dm_specs.Array(arr.shape, arr.dtype, name)


def specs_from_episode(episode: ExportEpisode) -> dict[str, Any]:
    """dm_env specs derived from an exported episode's data (used when the source has none recorded)."""
    first = episode.steps[0]
    action = next((s.action for s in episode.steps if s.action is not None), None)
    return {
        "observation_spec": _spec_of(first.observation, "observation"),
        "action_spec": _spec_of(action, "action") if action is not None else dm_specs.Array((), np.int64),
        "reward_spec": dm_specs.Array((), np.float64, "reward"),
        "discount_spec": dm_specs.BoundedArray((), np.float64, 0.0, 1.0, "discount"),
    }


def encode_specs(specs: dict[str, Any]) -> dict[str, Any]:
    """Specs in envlogger's metadata encoding (`metadata["environment_specs"]`)."""
    return {name: spec_codec.encode(spec) for name, spec in specs.items()}


def _new_writer(folder: str, metadata: dict[str, Any], writer_options: str) -> _Writer:
    os.makedirs(folder, exist_ok=True)
    writer = _Writer(data_directory=folder, metadata=metadata, writer_options=writer_options)
    if not os.path.exists(os.path.join(folder, METADATA_FILE)):  # envlogger logs init errors and goes on
        writer.close()
        raise StepmarkError(f"{folder}: envlogger could not open a writer there")
    return writer


def _copy_out(local: str, dest: str) -> int:
    """Copies a local file to any Beam filesystem path; returns its size."""
    size = 0
    with open(local, "rb") as src, FileSystems.create(dest) as out:
        while chunk := src.read(1 << 20):
            out.write(chunk)
            size += len(chunk)
    return size


def _records_bytes(records: list[step_data.StepData]) -> Iterator[bytes]:
    for record in records:
        yield serialize(tuple(record))


_fallback_logged: list[str] = []


def write_episode_shard(
    episode: ExportEpisode, staging_dir: str, options: ShardOptions = SHARD_OPTIONS
) -> ShardResult:
    """Writes one episode as a Riegeli shard at `<staging_dir>/<index:08d>/` (idempotent on retries)."""
    records = episode_records(episode)
    dest = FileSystems.join(staging_dir, shard_name(episode.meta.episode_index))
    metadata = episode.meta.to_dict()
    unavailable = riegeli_records.writer_available()
    if unavailable is None:
        size = riegeli_shard.write_shard(dest, _records_bytes(records), serialize(metadata), options)
    else:
        if not _fallback_logged:
            _fallback_logged.append(unavailable)
            log.warning("envlogger export: shards written by envlogger's own Riegeli writer (%s)", unavailable)
        size = _write_shard_with_envlogger(records, metadata, dest, options)
    return ShardResult(
        index=episode.meta.episode_index,
        path=dest,
        num_steps=len(records),
        num_bytes=size,
        signature=episode_signature(episode),
    )


def _write_shard_with_envlogger(
    records: list[step_data.StepData], metadata: dict[str, Any], dest: str, options: ShardOptions
) -> int:
    """The fallback: envlogger's writer in a local temporary folder, then each file copied to `dest`."""
    local = tempfile.mkdtemp(prefix="stepmark-envlogger-shard-")
    try:
        writer = _new_writer(local, {}, options.envlogger_options())
        try:
            for t, record in enumerate(records):
                writer.record_step(record, is_new_episode=t == 0)
            writer.set_episode_metadata(metadata)
        finally:
            writer.close()
        subdirs = [d for d in os.listdir(local) if os.path.isdir(os.path.join(local, d))]
        if len(subdirs) != 1:
            raise StepmarkError(f"envlogger wrote {len(subdirs)} shard folders for one episode, expected 1")
        shard_local = os.path.join(local, subdirs[0])
        for name in SHARD_FILES:  # envlogger only logs a file it could not finish (e.g. no space left)
            path = os.path.join(shard_local, name)
            if not os.path.isfile(path) or os.path.getsize(path) == 0:
                raise StepmarkError(f"{path}: envlogger left this shard file empty (no space left where it wrote?)")
        return sum(_copy_out(os.path.join(shard_local, name), FileSystems.join(dest, name)) for name in SHARD_FILES)
    finally:
        shutil.rmtree(local, ignore_errors=True)


def move_shard(staging_dir: str, index: int, position: int, metadata: dict[str, Any]) -> None:
    """The last step's renumbering: the shard written at `index` (the episode's selection index) becomes the
    shard at `position` (its position in the dataset, once skipped episodes and dead letters are left out),
    with `episode_index` = `position` in its metadata (`metadata`: what the worker wrote). Positions only
    move down and are renumbered in order, so the destination is free (a failed write's leftover is removed)."""
    from pipelines import storage

    unavailable = riegeli_records.writer_available()
    if unavailable is not None:
        raise StepmarkError(f"{staging_dir}: cannot renumber episode shards: {unavailable}")
    src = storage.join(staging_dir, shard_name(index))
    dest = storage.join(staging_dir, shard_name(position))
    record = serialize({**metadata, "episode_index": position})
    for name, data in riegeli_shard.metadata_files(record, SHARD_OPTIONS).items():
        storage.write_bytes(storage.join(src, name), data)
    if storage.is_remote(staging_dir):
        stale = [m.path for m in storage.files_below(dest)]
        storage.delete(stale)
        storage.rename([storage.join(src, n) for n in SHARD_FILES], [storage.join(dest, n) for n in SHARD_FILES])
        return
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.rename(src, dest)


def write_dataset_metadata(staging_dir: str, specs: dict[str, Any] | None, extra: dict[str, Any]) -> int:
    """The last step: the dataset-level `metadata.riegeli` that turns the shards into one dataset (written by
    envlogger's writer: a transposed chunk, once an export)."""
    metadata: dict[str, Any] = dict(extra)
    if specs:
        metadata["environment_specs"] = encode_specs(specs)
    local = tempfile.mkdtemp(prefix="stepmark-envlogger-metadata-")
    try:
        _new_writer(local, metadata, SHARD_OPTIONS.envlogger_options()).close()
        return _copy_out(os.path.join(local, METADATA_FILE), FileSystems.join(staging_dir, METADATA_FILE))
    finally:
        shutil.rmtree(local, ignore_errors=True)

"""Exported episodes as one envlogger (Riegeli) dataset that `envlogger.Reader` opens unchanged.

Scales with workers: each episode is written on its own, by envlogger's `RiegeliBackendWriter`, as one
Riegeli shard (`steps`, `step_offsets`, `episode_metadata`, `episode_index`) in a folder named by its
position in the export (`<staging>/<index:08d>/`). envlogger's dataset reader takes every sub-folder holding
a `step_offsets.riegeli`, sorted by name, as a shard, so the shards form one dataset once the last step adds
the dataset-level `metadata.riegeli` (environment specs + export settings). Shards are written locally and
copied with Beam's `FileSystems`, so the output may live on any Beam filesystem.

Records follow dm_env/envlogger: record t holds timestep t (observation t, the reward/discount of the
transition into it), the action that led to it (None on the first), and step t's metadata as custom data
(the step contract of `schemas/dataset_spec.md`). Empty lists are written so that they read back as lists.
"""

from __future__ import annotations

import os
import shutil
import tempfile
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

from pipelines.episodes import fast_codec
from pipelines.errors import StepmarkError
from pipelines.exporters.transform import ExportEpisode, ExportStep, info_json

METADATA_FILE = "metadata.riegeli"
SHARD_FILES = ("steps.riegeli", "step_offsets.riegeli", "episode_metadata.riegeli", "episode_index.riegeli")
WRITER_OPTIONS = "transpose,zstd:3,chunk_size:1M"
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


def step_metadata(step: ExportStep) -> dict[str, Any]:
    """The per-step fields besides observation/action/reward/discount/flags, named and nested exactly as in
    the TFDS export: `info` = {"episode", "json"}, `tag:<label>`, and (not stripped) `image` and `keys`.

    In envlogger they are the custom data of the record holding the step's observation, so TFDS's own
    `envlogger_reader` (which takes step i's metadata from record i) yields the TFDS export's steps.
    """
    info: dict[str, Any] = {CUSTOM_EPISODE: dict(step.episode)}
    data: dict[str, Any] = {}
    if step.info is not None:  # not stripped: the internal metadata the recorder stored
        info[INFO_JSON] = info_json(step.info)
        data[CUSTOM_IMAGE] = bytes(step.image) if step.image is not None else b""  # on every step, as in TFDS
        data[CUSTOM_KEYS] = list(step.keys or [])
    data[CUSTOM_INFO] = info
    data.update({k: bool(v) for k, v in step.tags.items()})
    return data


def episode_records(episode: ExportEpisode) -> list[step_data.StepData]:
    """RLDS steps -> envlogger records: record t holds observation t, the action that led to it with that
    transition's reward and discount (dm_env), and step t's metadata. The LAST record's discount is the
    finishing transition's: 0 on termination, 1 on a truncation (what dm_env and TFDS's reader expect)."""
    steps = episode.steps
    records: list[step_data.StepData] = []
    n = len(steps)
    for t, step in enumerate(steps):
        if t == 0:
            records.append(step_data.StepData(dm_env.restart(step.observation), None, step_metadata(step)))
            continue
        prev = steps[t - 1]
        step_type = dm_env.StepType.LAST if t == n - 1 else dm_env.StepType.MID
        ts = dm_env.TimeStep(step_type, float(prev.reward), float(prev.discount), step.observation)
        records.append(step_data.StepData(ts, prev.action, step_metadata(step)))
    return records


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _item(data: bytes) -> bytes:
    """One `values` entry (field 1, length-delimited) of an Array, Tuple or kvs Tuple."""
    return b"\x0a" + _varint(len(data)) + data


def serialize(value: Any) -> bytes:
    """The wire bytes of envlogger's `Data` for `value`, as `codec.encode` would build it, except:
    - dicts are written as key/value pairs (`Dict.kvs`) in sorted key order: the codec uses a proto map,
      whose serialized order varies from run to run, so equal exports would differ byte for byte;
    - empty lists, tuples and dicts are written as empty messages, which read back as [] / () / {} (the
      codec writes nothing for them, which reads back as None).
    Leaves go through the episode writers' `fast_codec.serialize` (the codec's encoding, without copies);
    `codec.decode` reads the result unchanged. Iterative: an explicit stack of open containers."""
    if not isinstance(value, list | tuple | dict):
        return fast_codec.serialize(value)
    # Frames: (tag, items iterator, parts). Data fields: array=2 (0x12), tuple=3 (0x1a), dict=4 (0x22).
    root: list[bytes] = []
    stack: list[tuple[bytes, Any, list[bytes]]] = []

    def open_container(v: Any) -> None:
        if isinstance(v, dict):
            items = iter([("kv", k, v[k]) for k in sorted(v, key=str)])
            stack.append((b"\x22", items, []))
        else:
            stack.append((b"\x12" if isinstance(v, list) else b"\x1a", iter([("v", None, x) for x in v]), []))

    open_container(value)
    pending_key: list[bytes | None] = []
    while stack:
        tag, items, parts = stack[-1]
        nxt = next(items, None)
        if nxt is None:
            stack.pop()
            body = b"".join(parts)
            if tag == b"\x22" and body:  # Dict{kvs=2}: one message whose `values` are the pairs
                body = b"\x12" + _varint(len(body)) + body
            data = tag + _varint(len(body)) + body
            if not stack:
                root.append(data)
                break
            parent_tag, _, parent_parts = stack[-1]
            key = pending_key.pop()
            parent_parts.append(_kv(key, data) if key is not None else _item(data))
            continue
        kind, k, v = nxt
        key = fast_codec.serialize(k) if kind == "kv" else None
        if isinstance(v, list | tuple | dict):
            pending_key.append(key)
            open_container(v)
            continue
        leaf = fast_codec.serialize(v)
        parts.append(_kv(key, leaf) if key is not None else _item(leaf))
    return root[0]


def _kv(key: bytes, value: bytes) -> bytes:
    """One entry of `Dict.kvs.values`: a Data holding a Tuple (field 3) of the key's and the value's Data."""
    pair = _item(key) + _item(value)
    return _item(b"\x1a" + _varint(len(pair)) + pair)


def encode(value: Any) -> storage_pb2.Data:
    """`serialize` as a message (what envlogger's Riegeli writer takes)."""
    return storage_pb2.Data.FromString(serialize(value))


class _Writer(riegeli_backend_writer.RiegeliBackendWriter):
    """envlogger's Riegeli writer with `encode` above for the dataset metadata, steps and episode metadata
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
        if not self._data_writer.add_step(encode(tuple(data)), is_new_episode):
            raise StepmarkError("envlogger could not write a step")

    def set_episode_metadata(self, data: Any) -> None:
        self._data_writer.set_episode_metadata(encode(data))


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


def _new_writer(folder: str, metadata: dict[str, Any]) -> _Writer:
    os.makedirs(folder, exist_ok=True)
    writer = _Writer(data_directory=folder, metadata=metadata, writer_options=WRITER_OPTIONS)
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


def _local_scratch(staging_dir: str) -> str | None:
    """Where envlogger writes before the copy: inside the export's temporary folder when that is local, so a
    killed worker's leftovers go with the folder (the next export removes it), else the system's temp."""
    return staging_dir if os.path.isdir(staging_dir) else None


def write_episode_shard(episode: ExportEpisode, staging_dir: str) -> ShardResult:
    """Writes one episode as a Riegeli shard at `<staging_dir>/<index:08d>/` (idempotent on retries)."""
    records = episode_records(episode)
    local = tempfile.mkdtemp(prefix=".scratch-", dir=_local_scratch(staging_dir))
    try:
        writer = _new_writer(local, {})
        try:
            for t, record in enumerate(records):
                writer.record_step(record, is_new_episode=t == 0)
            writer.set_episode_metadata(episode.meta.to_dict())
        finally:
            writer.close()
        subdirs = [d for d in os.listdir(local) if os.path.isdir(os.path.join(local, d))]
        if len(subdirs) != 1:
            raise StepmarkError(f"envlogger wrote {len(subdirs)} shard folders for one episode, expected 1")
        shard_local = os.path.join(local, subdirs[0])
        dest = FileSystems.join(staging_dir, shard_name(episode.meta.episode_index))
        size = 0
        for name in SHARD_FILES:
            size += _copy_out(os.path.join(shard_local, name), FileSystems.join(dest, name))
    finally:
        shutil.rmtree(local, ignore_errors=True)
    return ShardResult(
        index=episode.meta.episode_index,
        path=dest,
        num_steps=len(records),
        num_bytes=size,
        signature=episode_signature(episode),
    )


def write_dataset_metadata(staging_dir: str, specs: dict[str, Any] | None, extra: dict[str, Any]) -> int:
    """The last step: the dataset-level `metadata.riegeli` that turns the shards into one dataset."""
    metadata: dict[str, Any] = dict(extra)
    if specs:
        metadata["environment_specs"] = encode_specs(specs)
    local = tempfile.mkdtemp(prefix=".scratch-meta-", dir=_local_scratch(staging_dir))
    try:
        _new_writer(local, metadata).close()
        return _copy_out(os.path.join(local, METADATA_FILE), FileSystems.join(staging_dir, METADATA_FILE))
    finally:
        shutil.rmtree(local, ignore_errors=True)

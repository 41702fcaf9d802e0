"""One envlogger shard from serialized records: the four files envlogger's `RiegeliShardWriter` writes for
an episode (envlogger/backends/cc/riegeli_shard_writer.cc), written with `riegeli_records` straight to any
Beam filesystem.

For one episode written and closed, envlogger writes:
- `steps.riegeli`: one record per step, flushed once at the end;
- `step_offsets.riegeli`: one record, the int64 array of the steps' record positions;
- `episode_metadata.riegeli`: the episode metadata record (none when no metadata was set);
- `episode_index.riegeli`: one record, the int64 array [[first step, metadata position or -1]].
Each file goes under a temporary name and is renamed once all four are complete (`step_offsets.riegeli`,
what envlogger's reader looks for to take a folder for a shard, last), so a shard is whole or absent.
"""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.localfilesystem import LocalFileSystem
from envlogger.proto import storage_pb2

from pipelines.episodes import fast_codec
from pipelines.exporters.riegeli_records import DEFAULT_CHUNK_SIZE, RecordsWriter

STEPS_FILE = "steps.riegeli"
STEP_OFFSETS_FILE = "step_offsets.riegeli"
EPISODE_METADATA_FILE = "episode_metadata.riegeli"
EPISODE_INDEX_FILE = "episode_index.riegeli"
SHARD_FILES = (STEPS_FILE, STEP_OFFSETS_FILE, EPISODE_METADATA_FILE, EPISODE_INDEX_FILE)
# Renamed into place in this order: the file that makes a folder a shard comes last.
_RENAME_ORDER = (STEPS_FILE, EPISODE_METADATA_FILE, EPISODE_INDEX_FILE, STEP_OFFSETS_FILE)


@dataclass(frozen=True)
class ShardOptions:
    """Riegeli writer options of a shard: zstd at `compression_level` (None: uncompressed), records per chunk
    up to `chunk_size` bytes (Riegeli's rule)."""

    compression_level: int | None = 3
    chunk_size: int = DEFAULT_CHUNK_SIZE

    def envlogger_options(self) -> str:
        """The same options as envlogger's writer takes them (Riegeli's options text)."""
        compression = "uncompressed" if self.compression_level is None else f"zstd:{self.compression_level}"
        return f"{compression},chunk_size:{self.chunk_size}"


def int64_array(values: list[int] | list[list[int]]) -> bytes:
    """The `Datum` of an int64 array, what envlogger's C++ `Encode(xt::xarray<int64_t>)` writes for step
    offsets and the episode index (a bare Datum, not a `Data` holding one)."""
    data = storage_pb2.Data.FromString(fast_codec.serialize(np.asarray(values, dtype=np.int64)))
    return data.datum.SerializeToString()


def write_shard(folder: str, steps: Iterable[bytes], episode_metadata: bytes | None, options: ShardOptions) -> int:
    """Writes one episode's shard into `folder` (any Beam filesystem path); returns the bytes written.

    `steps` are the records' serialized `Data`, consumed as they come; `episode_metadata` likewise."""
    token = uuid.uuid4().hex[:12]
    local = isinstance(FileSystems.get_filesystem(folder), LocalFileSystem)
    files = _LocalFiles(folder) if local else _BeamFiles
    # In a bucket an object appears whole or not at all, and the export's folder is unpublished until its
    # summary is written (schemas/storage.md): the final names at once (a rename there is a copy and a delete).
    temporary = {name: files.join(folder, f".{name}.{token}.tmp" if local else name) for name in SHARD_FILES}
    written: list[str] = []

    def create(name: str) -> BinaryIO:
        path = temporary[name]
        written.append(path)
        return files.create(path)

    size = 0
    try:
        offsets: list[int] = []
        with create(STEPS_FILE) as f:
            writer = RecordsWriter(f, options.compression_level, options.chunk_size)
            offsets = [writer.write(record) for record in steps]
            size += writer.close()
        if not offsets:
            raise ValueError(f"{folder}: an episode shard needs at least one step")
        metadata_position = -1
        with create(EPISODE_METADATA_FILE) as f:
            writer = RecordsWriter(f, options.compression_level, options.chunk_size)
            if episode_metadata is not None:
                metadata_position = writer.write(episode_metadata)
            size += writer.close()
        for name, record in (
            (STEP_OFFSETS_FILE, int64_array(offsets)),
            (EPISODE_INDEX_FILE, int64_array([[0, metadata_position]])),
        ):
            with create(name) as f:
                writer = RecordsWriter(f, options.compression_level, options.chunk_size)
                writer.write(record)
                size += writer.close()
        if local:
            files.rename([temporary[name] for name in _RENAME_ORDER], [files.join(folder, name) for name in _RENAME_ORDER])
    except BaseException:
        try:
            files.delete([path for path in written if files.exists(path)])
        except Exception:  # noqa: BLE001 - the first error is the one to report; leftovers go with the staging
            pass
        raise
    return size


class _BeamFiles:
    """A shard's file operations on any Beam filesystem."""

    join = staticmethod(FileSystems.join)
    exists = staticmethod(FileSystems.exists)

    @staticmethod
    def create(path: str):  # noqa: ANN205 - a context manager giving the stream
        from pipelines import storage

        return storage.create(path)  # one PUT for a small object in a bucket (Beam's: a multipart upload)

    @staticmethod
    def rename(sources: list[str], destinations: list[str]) -> None:
        FileSystems.rename(sources, destinations)

    @staticmethod
    def delete(paths: list[str]) -> None:
        if paths:
            FileSystems.delete(paths)


class _LocalFiles:
    """The same on a local folder with plain `os` calls: the folder made once, not before each file, and no
    filesystem lookup per call (Beam's way cost ~0.5 ms a shard, more than a 10-step UI episode's records)."""

    join = staticmethod(os.path.join)
    exists = staticmethod(os.path.exists)

    def __init__(self, folder: str) -> None:
        os.makedirs(folder, exist_ok=True)

    @staticmethod
    def create(path: str) -> BinaryIO:
        return open(path, "wb")  # noqa: SIM115 - closed by the caller's `with`

    @staticmethod
    def rename(sources: list[str], destinations: list[str]) -> None:
        for source, destination in zip(sources, destinations, strict=True):
            os.replace(source, destination)

    @staticmethod
    def delete(paths: list[str]) -> None:
        for path in paths:
            os.remove(path)


def metadata_files(episode_metadata: bytes, options: ShardOptions) -> dict[str, bytes]:
    """A shard's `episode_metadata.riegeli` and `episode_index.riegeli` for this metadata record, as `write_shard`
    writes them (the steps start at record 0): what the last step rewrites when it renumbers an episode."""
    out: dict[str, bytes] = {}
    buffer = io.BytesIO()
    writer = RecordsWriter(buffer, options.compression_level, options.chunk_size)
    position = writer.write(episode_metadata)
    writer.close()
    out[EPISODE_METADATA_FILE] = buffer.getvalue()
    buffer = io.BytesIO()
    writer = RecordsWriter(buffer, options.compression_level, options.chunk_size)
    writer.write(int64_array([[0, position]]))
    writer.close()
    out[EPISODE_INDEX_FILE] = buffer.getvalue()
    return out

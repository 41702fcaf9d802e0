"""The export's work files: each selected episode with what its worker needs to export it (its index in its
dataset, its split, the serialized Episode, its grounding annotations and study field values), one TFRecord file
per dataset in the export's staging folder, and the chunks (file, byte offset, count) the pipeline reads.

Why a file: a study may hold a million episodes. The driver writes each batch as it reads it from the store and
keeps none; the pipeline's elements are chunk references of a few bytes, so neither the driver nor the runner
(FnApiRunner keeps a stage's elements in memory) holds the episodes; and workers on other machines read them
from storage (`pipelines.storage`, so `s3://` and `gs://` staging folders work), never from the driver's memory
or the store (which may be a SQLite file they cannot see).

Chunks: the first episodes of a dataset go one per chunk (a small export spreads over workers as before), then
chunks grow with the dataset to `MAX_CHUNK` episodes, so a million episodes make ~16,000 chunk references.

Trust: each record is a pickle (the grounding annotations are dataclasses holding datetimes), and unpickling
runs code, so a work file is only ever read by the export that wrote it, from its own staging folder, in the
same run: the driver (`iter_items`) and its pipeline's workers (`read_chunk`), with the paths and the key the
writer handed them. A work file from anywhere else is never read: each record is sealed with an HMAC-SHA256
under a random key the writer makes and keeps in memory, and a record whose seal does not match is refused
before it is unpickled (`ForeignWorkFile`), so a path pointed elsewhere, a file left by another export or one
replaced in a shared bucket in the meantime is not loaded. The key travels in the chunk references, inside the
pipeline: the export never writes it to storage itself, but a runner that uploads the pipeline (Dataflow's
`--staging_location`, and any runner that stages it) stores it there with the pipeline, so that location must
be as private as the export's output (whoever can read it could seal a work file of their own). The format is
private: nothing else reads or writes it, and a work file does not outlive its export (the staging folder's
`_work` is removed before publishing, and on failure).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import pickle
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from pipelines import storage, tfrecord
from pipelines.errors import StepmarkError

#: Episodes in one chunk at most, and how many chunks of a dataset come before chunks reach that size.
MAX_CHUNK = 64
SPREAD = 256
_SEAL = hashlib.sha256().digest_size


class ForeignWorkFile(StepmarkError):
    """A work file (or a record of one) that this export did not write: never unpickled."""


def _seal(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest() + data


def _unseal(key: bytes, record: bytes, name: str) -> bytes:
    """The record's data if it carries this export's seal; else ForeignWorkFile (nothing is unpickled)."""
    seal, data = record[:_SEAL], record[_SEAL:]
    if not key or len(seal) < _SEAL or not hmac.compare_digest(seal, hmac.new(key, data, hashlib.sha256).digest()):
        raise ForeignWorkFile(f"{name}: not a work file of this export (its records lack this export's seal): not read")
    return data


@dataclass(frozen=True)
class WorkItem:
    """One episode of a dataset as its worker gets it."""

    index: int  # position in its dataset (decides its file, shard and id)
    split: str
    episode: bytes  # a serialized study_pb2.Episode
    grounding: tuple = ()  # its grounding annotations (pipelines.store.grounding.Annotation), UI episodes only
    field_values: dict[str, Any] | None = (
        None  # its study field values (exporters/study_fields.Resolved entry)
    )

    def encode(self) -> bytes:
        # pickle: the annotations are dataclasses holding datetimes; written and read by the same export only
        data = (self.index, self.split, self.episode, self.grounding, self.field_values)
        return pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def decode(cls, data: bytes) -> WorkItem:
        """Only for data whose seal `_unseal` checked: the export's own work file."""
        return cls(*pickle.loads(data))  # noqa: S301 - sealed by this export (module docstring)


@dataclass(frozen=True)
class Chunk:
    """`count` consecutive episodes of one dataset's work file, `size` bytes from byte `offset`: one pipeline
    element, read as one byte range."""

    dataset: str
    path: str
    offset: int
    count: int
    size: int
    key: bytes = field(default=b"", repr=False)  # the writer's seal key (module docstring); empty: refused


@dataclass
class _Open:
    path: str
    out: BinaryIO
    size: int = 0  # bytes written
    items: int = 0
    chunk_start: int = 0  # byte offset of the open chunk
    chunk_items: int = 0
    chunk_size: int = 1


class WorkWriter:
    """Writes each dataset's work file as the selection streams (`add`), and lists the chunks covering them
    (`chunks`, complete once closed).

    A failure while writing (in the block, or in `add`) aborts every work file before the error leaves the
    block: nothing is uploaded into a bucket (an S3 writer's close uploads what it holds, and garbage
    collection closes it, possibly after the export removed its staging folder; a GCS writer cancels its
    upload), and a partial file on a local disk is deleted (`storage.create`). The export removes its staging
    folder after that."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        # Seals every record. The export never writes it; a runner's staged pipeline holds it (module docstring).
        self.key = secrets.token_bytes(32)
        self.chunks: list[Chunk] = []
        self._files: dict[str, _Open] = {}
        self._stack = contextlib.ExitStack()

    def path(self, dataset: str) -> str:
        return storage.join(self.folder, f"{dataset}.tfrecord")

    def add(self, dataset: str, item: WorkItem) -> None:
        f = self._files.get(dataset)
        if f is None:
            path = self.path(dataset)
            f = self._files[dataset] = _Open(path, self._stack.enter_context(storage.create(path)))
        record = tfrecord.encode(_seal(self.key, item.encode()))
        f.out.write(record)
        f.size += len(record)
        f.items += 1
        f.chunk_items += 1
        if f.chunk_items == f.chunk_size:
            self._end_chunk(dataset, f)

    def _end_chunk(self, dataset: str, f: _Open) -> None:
        self.chunks.append(Chunk(dataset, f.path, f.chunk_start, f.chunk_items, f.size - f.chunk_start, self.key))
        f.chunk_start, f.chunk_items = f.size, 0
        f.chunk_size = max(1, min(MAX_CHUNK, f.items // SPREAD))

    def close(self) -> None:
        for dataset, f in self._files.items():
            if f.chunk_items:
                self._end_chunk(dataset, f)
        self._stack.close()

    def __enter__(self) -> WorkWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.abort(exc[1])  # type: ignore[arg-type]

    def abort(self, error: BaseException | None = None) -> None:
        """Ends every work file without publishing it: the error is handed to each file's `storage.create`
        block, which drops (bucket) or deletes (elsewhere) what was written."""
        error = error if error is not None else RuntimeError("the export's work files were abandoned")
        self._files.clear()
        self._stack.__exit__(type(error), error, error.__traceback__)


def read_chunk(chunk: Chunk) -> Iterator[WorkItem]:
    """The chunk's episodes, one at a time, from one ranged read of its bytes (in a bucket a buffered reader
    would fetch 16 MiB, or the rest of the file, for each chunk of a few kilobytes)."""
    name = f"{chunk.path} (bytes {chunk.offset}-{chunk.offset + chunk.size})"
    data = storage.read_range(chunk.path, chunk.offset, chunk.size)
    if len(data) < chunk.size:
        raise tfrecord.TFRecordError(f"{name}: {len(data)} of {chunk.size} bytes (the work file is truncated)")
    yield from _items(io.BytesIO(data), chunk.count, name, chunk.key)


def iter_items(path: str, key: bytes) -> Iterator[WorkItem]:
    """Every episode of a dataset's work file, in order, one at a time; `key` is its writer's (`WorkWriter.key`):
    a file another writer made is refused."""
    with storage.open_read(path) as f:
        yield from _items(f, None, path, key)


def _items(f: BinaryIO, count: int | None, name: str, key: bytes) -> Iterator[WorkItem]:
    n = 0
    for _, data in tfrecord.iter_stream(f, name=name):
        if isinstance(data, Exception):
            raise data
        yield WorkItem.decode(_unseal(key, data, name))
        n += 1
        if n == count:
            return
    if count is not None and n < count:
        raise tfrecord.TFRecordError(f"{name}: {n} of {count} episodes (the work file is truncated)")

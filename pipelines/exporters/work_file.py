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
"""

from __future__ import annotations

import contextlib
import io
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from pipelines import storage, tfrecord

#: Episodes in one chunk at most, and how many chunks of a dataset come before chunks reach that size.
MAX_CHUNK = 64
SPREAD = 256


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
        return cls(*pickle.loads(data))  # noqa: S301 - the export's own work file


@dataclass(frozen=True)
class Chunk:
    """`count` consecutive episodes of one dataset's work file, `size` bytes from byte `offset`: one pipeline
    element, read as one byte range."""

    dataset: str
    path: str
    offset: int
    count: int
    size: int


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
    collection closes it, possibly after the export removed its staging folder), and what another filesystem
    had written is deleted (`storage.create`). The export removes its staging folder after that."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
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
        record = tfrecord.encode(item.encode())
        f.out.write(record)
        f.size += len(record)
        f.items += 1
        f.chunk_items += 1
        if f.chunk_items == f.chunk_size:
            self._end_chunk(dataset, f)

    def _end_chunk(self, dataset: str, f: _Open) -> None:
        self.chunks.append(Chunk(dataset, f.path, f.chunk_start, f.chunk_items, f.size - f.chunk_start))
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
    yield from _items(io.BytesIO(data), chunk.count, name)


def iter_items(path: str) -> Iterator[WorkItem]:
    """Every episode of a dataset's work file, in order, one at a time."""
    with storage.open_read(path) as f:
        yield from _items(f, None, path)


def _items(f: BinaryIO, count: int | None, name: str) -> Iterator[WorkItem]:
    n = 0
    for _, data in tfrecord.iter_stream(f, name=name):
        if isinstance(data, Exception):
            raise data
        yield WorkItem.decode(data)
        n += 1
        if n == count:
            return
    if count is not None and n < count:
        raise tfrecord.TFRecordError(f"{name}: {n} of {count} episodes (the work file is truncated)")

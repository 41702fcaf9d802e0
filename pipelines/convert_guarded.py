"""One discovered episode converted within its limits: every file read bounded (`files.read_limited` with the
run's ReadPolicy), the episode's bytes bounded (its files: MAX_RUN_BYTES, or MAX_EPISODE_BYTES when it must be
one record; each record written: MAX_EPISODE_BYTES) and its time bounded (`--episode-timeout`, in a forked
worker process: `pipelines.deadline`). Whatever goes wrong is a dead letter naming the file; nothing escapes to
stop the job. Given a scratch folder, a long episode is written as record parts (`ui_episode.PART_BYTES` each,
schemas/ui_episode.md "Episodes in parts"), so its memory is bounded by a part, not by the run.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field
from typing import BinaryIO

from pipelines import storage, tfrecord
from pipelines.deadline import ChildFailed, DeadlineExceeded, DeadlineWorker
from pipelines.traces import DeadLetter, EpisodeSource, files, read_episode
from pipelines.traces.files import ReadPolicy
from pipelines.traces.model import RecordEpisode
from pipelines.ui_episode import EpisodeResult, convert_episode, convert_record_episode
from protos.stepmark import ui_episode_pb2

#: Largest episode (sum of its files, and its serialized UiEpisode) converted: reason `too_large`. Protobuf
#: refuses messages of 2 GiB, and the record is built, serialized and written whole in one worker.
MAX_EPISODE_BYTES = 256 * 2**20
#: Largest sum of an episode's files converted when it may be written in parts (a scratch folder is given):
#: memory no longer grows with it; this bounds the time and scratch space one episode takes.
MAX_RUN_BYTES = 4 * 2**30
#: Fields of a UiEpisode that hold steps; every other field is the episode's header, repeated in each part.
STEP_FIELDS = ("episode", "actions", "step_info")
#: Default wall-time budget of one episode, in seconds (`--episode-timeout`).
EPISODE_TIMEOUT = 300.0
#: Memory (address space) a conversion worker may add to what it shares with the pipeline: far above what an
#: episode of MAX_EPISODE_BYTES needs; a conversion that needs more fails alone (MemoryError) instead of the
#: machine running out of memory.
WORKER_MEMORY = 4 * 2**30


@dataclass
class Converted:
    """What converting one episode produced, in a form that crosses a process boundary cheaply."""

    record: bytes | None  # serialized UiEpisode
    dead_letters: list[DeadLetter] = field(default_factory=list)
    steps: int = 0
    objects: int = 0
    mismatches: int = 0
    #: The converted episode's layout (`UiEpisode.source`): an AndroidControl JSON file is discovered as a
    #: single screen and told apart when read.
    layout: str = ""
    #: An episode in parts: for each part before `record` (then the last part), the scratch file holding its
    #: steps and the serialized header fields completing it (protobuf merges concatenated messages).
    parts: list[tuple[str, bytes]] = field(default_factory=list)

    def write_to(self, out: BinaryIO) -> int:
        """Frame and write the episode's records to `out` (its parts in order, then `record`), one part in
        memory at a time, deleting each scratch file once written; the bytes written."""
        size = 0
        for path, header in self.parts:
            data = storage.read_all(path, MAX_EPISODE_BYTES) + header
            framed = tfrecord.encode(data)
            del data
            out.write(framed)
            size += len(framed)
            del framed
            storage.delete([path])
        if self.record is not None:
            framed = tfrecord.encode(self.record)
            out.write(framed)
            size += len(framed)
        return size


def _dead(source: EpisodeSource | RecordEpisode, reason: str, message: str) -> Converted:
    return Converted(None, [DeadLetter(source.source_path, None, reason, message, source.episode_id)])


def episode_bytes(source: EpisodeSource | RecordEpisode, policy: ReadPolicy) -> int:
    """Sum of the sizes of the episode's files that can be read (refused ones are dead-lettered later, each
    naming its file), from the file system's metadata: nothing is opened. A TFRecord episode: its records."""
    if isinstance(source, RecordEpisode):
        return sum(len(data) for _, _, data in source.records)
    total = 0
    for path in source.files:
        if storage.is_remote(path):  # no extra round trip per file: each read is capped by its limit instead
            continue
        try:
            total += files.check_file(path, files.limit_for(path), policy)
        except Exception:
            continue
    return total


def _parts(result: EpisodeResult, spilled: list[str]) -> tuple[bytes, list[tuple[str, bytes]]]:
    """(the last part's record, [(scratch file, header bytes)] of the parts before it) of an episode that was
    spilled: every part carries the episode's header fields and its RecordPart."""
    last = result.episode
    assert last is not None
    count = len(spilled) + 1
    header = ui_episode_pb2.UiEpisode()
    header.CopyFrom(last)
    for name in STEP_FIELDS:
        header.ClearField(name)
    eid = last.episode_id
    parts = []
    for index, (path, first) in enumerate(zip(spilled, result.spilled, strict=True)):
        header.part.CopyFrom(ui_episode_pb2.RecordPart(episode_id=eid, index=index, count=count, first_step=first))
        parts.append((path, header.SerializeToString(deterministic=True)))
    first = result.num_steps - len(last.episode.time_steps)
    last.part.CopyFrom(ui_episode_pb2.RecordPart(episode_id=eid, index=count - 1, count=count, first_step=first))
    return last.SerializeToString(deterministic=True), parts


def _forget(spilled: list[str]) -> None:
    """Delete the scratch parts of an episode that is not written."""
    if spilled:
        storage.delete(spilled)


def convert_source(
    source: EpisodeSource | RecordEpisode,
    policy: ReadPolicy,
    drop_invisible: bool = False,
    fetched: dict[str, bytes] | None = None,
    scratch: str | None = None,
) -> Converted:
    """Read, convert and serialize one episode in this process (no time limit). A TFRecord episode
    (AndroidControl, AITW) brings its bytes with it; a file episode is read through the bounded reader, or
    comes from `fetched` (its files in a bucket, read by the same reader ahead of time: `files.Prefetch`).
    With a `scratch` folder (local), a long episode's parts go to files there (`Converted.parts`)."""
    fetched = fetched or {}
    limit = MAX_RUN_BYTES if scratch else MAX_EPISODE_BYTES
    spilled: list[str] = []

    def spill(data: bytes) -> None:
        assert scratch is not None
        path = files.join(scratch, f"part-{uuid.uuid4().hex}.bin")
        storage.write_bytes(path, data)
        spilled.append(path)
    sizes: dict[str, int] = {}  # each file once, however often it is read (a layout file, then its step)

    def read(path: str) -> bytes:
        found = fetched.get(path)
        data = found if found is not None else files.read_limited(path, files.limit_for(path), policy)
        sizes[path] = len(data)  # files in a bucket are not sized before reading (`episode_bytes`)
        if sum(sizes.values()) > limit:
            raise files.FileRefused(
                "too_large", f"{files.display(path)}: the episode's files hold more than {limit} bytes"
            )
        return data

    where = files.display(source.source_path)
    split = spill if scratch else None
    try:
        size = episode_bytes(source, policy)
        if size > limit:
            return _dead(
                source,
                "too_large",
                f"{where}: the episode's files hold {size} bytes; an episode may have at most {limit}",
            )
        if isinstance(source, RecordEpisode):
            result = convert_record_episode(source, drop_invisible=drop_invisible, spill=split)
        else:
            result = convert_episode(read_episode(source, read), read, drop_invisible=drop_invisible, spill=split)
        if result.episode is None:
            return Converted(None, result.dead_letters)
        if spilled:
            record, parts = _parts(result, spilled)
        else:
            record, parts = result.episode.SerializeToString(deterministic=True), []
    except MemoryError:
        _forget(spilled)
        return _dead(source, "too_large", f"{where}: converting the episode ran out of memory")
    except Exception as exc:  # a reader bug or an unreadable layout file: dead-letter the episode
        _forget(spilled)
        return _dead(source, "internal_error", f"{where}: {type(exc).__name__}: {exc}")
    if len(record) > MAX_EPISODE_BYTES:
        _forget(spilled)
        return Converted(
            None,
            [
                *result.dead_letters,
                DeadLetter(
                    source.source_path,
                    None,
                    "too_large",
                    f"{where}: the converted episode has {len(record)} bytes; at most {MAX_EPISODE_BYTES}",
                    source.episode_id,
                ),
            ],
        )
    return Converted(
        record, result.dead_letters, result.num_steps, result.num_objects, result.mismatches,
        result.episode.source, parts,
    )  # fmt: skip


def _convert_fetched(
    arg: tuple[EpisodeSource | RecordEpisode, dict[str, bytes]],
    policy: ReadPolicy,
    drop_invisible: bool,
    scratch: str | None = None,
) -> Converted:
    source, fetched = arg
    return convert_source(source, policy, drop_invisible, fetched, scratch)


class GuardedConverter:
    """Converts episodes one after another in a forked worker process (`DeadlineWorker`), each given `timeout`
    seconds: past it the episode is a `timeout` dead letter and the next one gets a fresh worker; a worker that
    dies (out of memory, a crash in C code) makes an `internal_error` one. Use as a context manager. With a
    local `scratch` folder, long episodes come back in parts (`Converted.parts`, files in that folder)."""

    def __init__(
        self,
        policy: ReadPolicy,
        drop_invisible: bool = False,
        timeout: float = EPISODE_TIMEOUT,
        memory_bytes: int = WORKER_MEMORY,
        scratch: str | None = None,
    ) -> None:
        self.timeout, self.memory_bytes = timeout, memory_bytes
        convert = functools.partial(
            _convert_fetched, policy=policy, drop_invisible=drop_invisible, scratch=scratch
        )
        self.worker = DeadlineWorker(convert, memory_bytes)

    def __enter__(self) -> GuardedConverter:
        self.worker.start()  # before ConvertShard's prefetch threads start
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.close()

    def __call__(
        self, source: EpisodeSource | RecordEpisode, fetched: dict[str, bytes] | None = None
    ) -> Converted:
        where = files.display(source.source_path)
        try:
            return self.worker.call((source, fetched or {}), self.timeout)
        except DeadlineExceeded:
            return _dead(
                source,
                "timeout",
                f"{where}: not converted within {self.timeout:g} s (--episode-timeout): stopped",
            )
        except ChildFailed as exc:
            if str(exc).startswith("MemoryError"):
                return _dead(
                    source, "too_large", f"{where}: needed more than {self.memory_bytes} bytes of memory"
                )
            return _dead(source, "internal_error", f"{where}: {exc}")

"""One discovered episode converted within its limits: every file read bounded (`files.read_limited` with the
run's ReadPolicy), the episode's bytes bounded (MAX_EPISODE_BYTES, before and after conversion) and its time
bounded (`--episode-timeout`, in a forked worker process: `pipelines.deadline`). Whatever goes wrong is a dead letter
naming the file; nothing escapes to stop the job.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from pipelines import storage
from pipelines.deadline import ChildFailed, DeadlineExceeded, DeadlineWorker
from pipelines.traces import DeadLetter, EpisodeSource, files, read_episode
from pipelines.traces.files import ReadPolicy
from pipelines.traces.model import RecordEpisode
from pipelines.ui_episode import convert_episode, convert_record_episode

#: Largest episode (sum of its files, and its serialized UiEpisode) converted: reason `too_large`. Protobuf
#: refuses messages of 2 GiB, and the record is built, serialized and written whole in one worker.
MAX_EPISODE_BYTES = 256 * 2**20
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


def convert_source(
    source: EpisodeSource | RecordEpisode,
    policy: ReadPolicy,
    drop_invisible: bool = False,
    fetched: dict[str, bytes] | None = None,
) -> Converted:
    """Read, convert and serialize one episode in this process (no time limit). A TFRecord episode
    (AndroidControl, AITW) brings its bytes with it; a file episode is read through the bounded reader, or
    comes from `fetched` (its files in a bucket, read by the same reader ahead of time: `files.Prefetch`)."""
    fetched = fetched or {}
    sizes: dict[str, int] = {}  # each file once, however often it is read (a layout file, then its step)

    def read(path: str) -> bytes:
        found = fetched.get(path)
        data = found if found is not None else files.read_limited(path, files.limit_for(path), policy)
        sizes[path] = len(data)  # files in a bucket are not sized before reading (`episode_bytes`)
        if sum(sizes.values()) > MAX_EPISODE_BYTES:
            raise files.FileRefused(
                "too_large", f"{files.display(path)}: the episode's files hold more than {MAX_EPISODE_BYTES} bytes"
            )
        return data

    where = files.display(source.source_path)
    try:
        size = episode_bytes(source, policy)
        if size > MAX_EPISODE_BYTES:
            return _dead(
                source,
                "too_large",
                f"{where}: the episode's files hold {size} bytes; an episode may have at most {MAX_EPISODE_BYTES}",
            )
        if isinstance(source, RecordEpisode):
            result = convert_record_episode(source, drop_invisible=drop_invisible)
        else:
            result = convert_episode(read_episode(source, read), read, drop_invisible=drop_invisible)
    except MemoryError:
        return _dead(source, "too_large", f"{where}: converting the episode ran out of memory")
    except Exception as exc:  # a reader bug or an unreadable layout file: dead-letter the episode
        return _dead(source, "internal_error", f"{where}: {type(exc).__name__}: {exc}")
    if result.episode is None:
        return Converted(None, result.dead_letters)
    record = result.episode.SerializeToString(deterministic=True)
    if len(record) > MAX_EPISODE_BYTES:
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
    steps = len(result.episode.episode.time_steps)
    return Converted(
        record, result.dead_letters, steps, result.num_objects, result.mismatches, result.episode.source
    )


def _convert_fetched(
    arg: tuple[EpisodeSource | RecordEpisode, dict[str, bytes]], policy: ReadPolicy, drop_invisible: bool
) -> Converted:
    source, fetched = arg
    return convert_source(source, policy, drop_invisible, fetched)


class GuardedConverter:
    """Converts episodes one after another in a forked worker process (`DeadlineWorker`), each given `timeout`
    seconds: past it the episode is a `timeout` dead letter and the next one gets a fresh worker; a worker that
    dies (out of memory, a crash in C code) makes an `internal_error` one. Use as a context manager."""

    def __init__(
        self,
        policy: ReadPolicy,
        drop_invisible: bool = False,
        timeout: float = EPISODE_TIMEOUT,
        memory_bytes: int = WORKER_MEMORY,
    ) -> None:
        self.timeout, self.memory_bytes = timeout, memory_bytes
        convert = functools.partial(_convert_fetched, policy=policy, drop_invisible=drop_invisible)
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

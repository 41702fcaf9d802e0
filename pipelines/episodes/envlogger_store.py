"""Episode data as envlogger 1.2 Riegeli files (the default format): one episode per tag directory.

Written with envlogger's own `RiegeliBackendWriter` (dataset metadata carries the environment specs, as
`EnvLogger` writes them, so `envlogger.Reader` and TFDS's envlogger reader open the files unchanged).
Opened with `envlogger.Reader` (the files' own index, metadata and specs), whose step index gives random
access: `step(i)` decodes records i and i+1 only, so showing step k of a long episode does not decode every
frame. Each record's bytes come from envlogger's Riegeli reader and are decoded by `fast_decode` (envlogger's
codec's values, ~2x faster; dicts in sorted key order).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path, PurePosixPath
from typing import Any

import dm_env
import envlogger
from envlogger import step_data
from envlogger.backends import riegeli_backend_reader, riegeli_backend_writer
from envlogger.backends.python import riegeli_dataset_reader, riegeli_dataset_writer
from envlogger.converters import spec_codec
from envlogger.proto import storage_pb2

from pipelines.episodes import fast_codec, fast_decode
from pipelines.episodes.base import EnvSpecs, EpisodeMetadata, EpisodeWriter, RecordEpisodeReader
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2

FORMAT = "envlogger"
# Riegeli writer options. envlogger's default `transpose,brotli:6,chunk_size:1M` costs ~3x more per step to
# write; zstd:1 is ~10% larger on disk for image observations (bench/bench_record.py prints both).
WRITER_OPTIONS = "zstd:1,chunk_size:1M"


_STEP_TYPES = {int(t): t for t in dm_env.StepType}
#: Seconds between flushes of an episode being written: a flush ends the Riegeli chunk and writes the step
#: offsets (an fsync each), so a recorder killed without closing its files loses at most this much of the
#: episode: `salvage` reads the steps flushed before the kill.
FLUSH_SECONDS = 1.0


class FlushClock:
    """True once every FLUSH_SECONDS (polled after each step; a clock read costs ~50 ns)."""

    def __init__(self, seconds: float = FLUSH_SECONDS) -> None:
        self.seconds = seconds
        self._last = time.monotonic()

    def __call__(self, _data: Any = None) -> bool:
        now = time.monotonic()
        if now - self._last < self.seconds:
            return False
        self._last = now
        return True


class _QuietEmptyShard(logging.Filter):
    """envlogger's reader logs (with a traceback and a "You likely forgot to call close()" banner) and then
    ignores a shard killed before its first flush; ours says so itself, naming the folder (only that record
    is dropped: every other absl message passes)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Ignoring error due to empty step offset file")


_ABSL_LOGGER = logging.getLogger("absl")
_ABSL_LOGGER.addFilter(_QuietEmptyShard())


def envlogger_storage(relative: object) -> study_pb2.Episode.Storage:
    """The store's record of an envlogger episode: its tag directory (relative to the data directory); one
    episode per tag directory, so always index 0."""
    storage = study_pb2.Episode.Storage()
    storage.environment_logger.tag_directory = str(relative)
    storage.environment_logger.index = 0
    return storage


class _RiegeliWriter(riegeli_backend_writer.RiegeliBackendWriter):
    """envlogger's Riegeli backend with our encoder: the same records, serialized straight to wire bytes
    (`fast_codec.serialize`) and parsed once, ~1.5x cheaper than building the message field by field."""

    def _record_step(self, data: envlogger.StepData, is_new_episode: bool) -> None:
        record = storage_pb2.Data.FromString(fast_codec.serialize(data))
        if not self._data_writer.add_step(record, is_new_episode):
            raise RuntimeError(f"{self._data_directory}: envlogger failed to write a step")
        if self._flush_scheduler is not None and self._flush_scheduler(data):
            self._data_writer.flush()


class EnvloggerEpisodeWriter(EpisodeWriter):
    def __init__(
        self,
        folder: Path,
        relative: PurePosixPath,
        specs: EnvSpecs,
        dataset_metadata: dict[str, Any] | None = None,
        writer_options: str = WRITER_OPTIONS,
    ) -> None:
        super().__init__(folder, relative, specs)
        self.folder.mkdir(parents=True, exist_ok=True)
        metadata = dict(dataset_metadata or {})
        metadata["environment_specs"] = spec_codec.encode_environment_specs(specs)
        try:
            self._backend = _RiegeliWriter(
                data_directory=str(self.folder),
                metadata=metadata,
                writer_options=writer_options,
                flush_scheduler=FlushClock(),
            )
        except (RuntimeError, TypeError) as exc:
            raise StepmarkError(f"{self.folder}: cannot open an envlogger writer: {exc}") from exc

    def _record(self, data: envlogger.StepData) -> None:
        self._backend.record_step(data, is_new_episode=self.num_records == 0)

    def close(self, metadata: EpisodeMetadata) -> study_pb2.Episode.Storage:
        if not self.closed:
            if self.num_records:
                self._backend.set_episode_metadata(metadata.to_dict())
            self._backend.close()
            self.closed = True
        return envlogger_storage(self.relative)

    def abort(self) -> None:
        if not self.closed:
            self._backend.close()
            self.closed = True


class EnvloggerEpisodeReader(RecordEpisodeReader):
    """One episode (`index`) of the envlogger dataset in `tag_directory`."""

    def __init__(self, tag_directory: str | Path, index: int = 0) -> None:
        super().__init__()
        self.path = Path(tag_directory)
        if not self.path.is_dir():
            raise StepmarkError(f"{self.path}: envlogger tag directory not found")
        try:
            # The backend first: envlogger.Reader's __del__ fails on a Reader whose constructor raised.
            backend = riegeli_backend_reader.RiegeliBackendReader(str(self.path))
            self._reader = envlogger.Reader(backend=backend)
        except RuntimeError as exc:
            raise StepmarkError(f"{self.path}: not a readable envlogger dataset: {exc}") from exc
        count = len(self._reader.episodes)
        if count == 0:
            self._reader.close()
            raise StepmarkError(f"{self.path}: no episode index (its writer never closed the files)")
        if not 0 <= index < count:
            self._reader.close()
            raise StepmarkError(f"{self.path}: episode index {index} out of range ({count} episodes)")
        self.index = index
        self._steps = self._reader.episodes[index]
        # envlogger 1.2's Riegeli reader (pybind): the record bytes by dataset step offset.
        self._records = backend._reader  # noqa: SLF001
        self._start = backend._get_nth_episode_info(index).start  # noqa: SLF001
        if len(self._steps) == 0:  # envlogger logs and ignores an empty or cut step index
            self._reader.close()
            raise StepmarkError(f"{self.path}: episode {index} has no readable steps (damaged step index)")
        episode_meta = self._reader.episode_metadata()[index]
        self._metadata = dict(episode_meta) if isinstance(episode_meta, dict) else {}
        self._metadata.setdefault("format", FORMAT)

    def _num_records(self) -> int:
        return len(self._steps)

    def _load_record(self, k: int) -> envlogger.StepData:
        """Record k as envlogger's reader gives it (`RiegeliBackendReader._get_nth_step`)."""
        try:
            # Offsets are the dataset's: never read another episode's record.
            if not 0 <= k < len(self._steps):
                raise IndexError(f"out of range for an episode of {len(self._steps)} records")
            data = fast_decode.decode(self._records.serialized_step(self._start + k))
            ts = data[0]
            step_type = _STEP_TYPES.get(ts[0])  # FIRST is 0, falsy: compared with None
            if step_type is None:
                step_type = dm_env.StepType(ts[0])
            timestep = dm_env.TimeStep(step_type, ts[1], ts[2], ts[3])
            return step_data.StepData(timestep, data[1], data[2])
        except Exception as exc:  # riegeli/proto decoding of a damaged file raises several types
            raise StepmarkError(
                f"{self.path}: record {k} cannot be read (damaged or truncated file): {exc}"
            ) from exc

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self._metadata)

    @property
    def dataset_metadata(self) -> dict[str, Any]:
        return dict(self._reader.metadata() or {})

    @property
    def specs(self) -> dict[str, Any]:
        r = self._reader
        return {
            "observation_spec": r.observation_spec(),
            "action_spec": r.action_spec(),
            "reward_spec": r.reward_spec(),
            "discount_spec": r.discount_spec(),
        }

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def salvage(folder: str | Path, out: str | Path, writer_options: str = WRITER_OPTIONS) -> int:
    """Copies the complete steps of an envlogger dataset whose writer never closed it (killed) into a new,
    closed dataset in `out`; returns how many records it copied.

    An unclosed shard has no episode index (written on close) and step offsets up to its last flush, so
    `envlogger.Reader` sees no episode; the dataset reader still gives every step up to that flush by its
    offset (`serialized_step`), each record whole (Riegeli reads complete chunks only). Steps written after
    the last flush are not in the offsets and cannot be read. Raises StepmarkError when no step can.
    """
    src = Path(folder)
    reader = riegeli_dataset_reader.RiegeliDatasetReader()
    try:
        reader.init(str(src))
    except RuntimeError as exc:  # NOT_FOUND: Empty steps (killed before its first flush), damaged files
        raise StepmarkError(f"{src}: no readable envlogger step ({exc})") from exc
    writer = None
    copied = 0
    try:
        for i in range(reader.num_steps):  # one record in memory at a time: an episode can hold gigabytes
            try:
                record = reader.serialized_step(i)
            except (RuntimeError, ValueError, IndexError):
                break  # a damaged chunk: the steps before it are kept
            if writer is None:
                Path(out).mkdir(parents=True, exist_ok=True)
                writer = riegeli_dataset_writer.RiegeliDatasetWriter()
                writer.init(data_dir=str(out), metadata=reader.metadata(), max_episodes_per_shard=10000,
                            writer_options=writer_options)  # fmt: skip
            if not writer.add_step(storage_pb2.Data.FromString(record), i == 0):
                raise StepmarkError(f"{out}: envlogger failed to write a salvaged step")
            copied += 1
    except (RuntimeError, TypeError) as exc:
        raise StepmarkError(f"{out}: cannot write the salvaged envlogger dataset: {exc}") from exc
    finally:
        reader.close()
        if writer is not None:
            writer.close()
    if not copied:
        raise StepmarkError(f"{src}: no readable envlogger step")
    return copied

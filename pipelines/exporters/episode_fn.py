"""The per-episode step of an export (runs on the Beam workers): read and transform one episode, write it in
the dataset's format, and record what happened (a result, a dead letter or a skip). The outcomes of a chunk of
the work file go into one file once the chunk is done (`_record_chunk`), which the driver (`pipelines/export.py`)
counts for progress and reads at the end: one file per chunk, not per episode (a million episodes make ~16,000
chunks; a file each would be a million objects, PUTs and GETs in a bucket)."""

from __future__ import annotations

import collections
import contextlib
import errno
import gc
import json
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines import storage
from pipelines.episodes import open_episode
from pipelines.episodes.ui import UiEpisodeReader
from pipelines.errors import StepmarkError
from pipelines.exporters import envlogger_writer, study_fields
from pipelines.exporters.request import DeadLetter
from pipelines.exporters.splits import SplitSpec
from pipelines.exporters.transform import (
    ExportEpisode,
    InconsistentEpisode,
    MissingStatistic,
    NoTransition,
    TransformOptions,
    episode_name,
    transform_episode,
)
from pipelines.exporters.ui_objects import PaddingOverflow
from pipelines.exporters.work_file import Chunk, WorkItem, read_chunk
from protos.rlds_creator import study_pb2

NAMESPACE = "stepmark.export"


@dataclass(frozen=True)
class DatasetJob:
    """What every worker needs to export the episodes of one dataset (picklable, small)."""

    name: str
    format: str
    data_dir: str
    staging_dir: str  # this dataset's folder inside the export's temporary folder
    progress_dir: str
    options: TransformOptions
    expected_signature: str
    splits: SplitSpec | None = None
    features_json: str = ""  # TFDS only
    work_dir: str = ""  # TFDS only: per-episode files until the last step names the shards
    parquet_schema: bytes = b""  # Parquet only: the one Arrow schema of every file
    minari_layout: str = ""  # Minari only: spaces and frame leaf (exporters/minari_writer.Layout, JSON)
    minari_id: str = ""  # Minari only: the dataset id (metadata.json)
    # UI episodes: the grounding annotations applied on top of the converted record (exporters/grounding.py):
    # the mode and whose annotations `mine` means (each episode's annotations travel with it: work_file.py).
    annotations: str = "none"
    annotations_user: str = ""
    # Study fields (issue 26; exporters/study_fields.py): the definitions (each episode's values travel with it).
    field_defs: tuple = ()


# A full, over-quota or read-only destination: the export's problem, not one episode's.
_DESTINATION_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def _destination_error(exc: BaseException) -> OSError | None:
    """The OSError in `exc`'s chain that says the destination cannot take more data, if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _DESTINATION_ERRNOS:
            return current
        current = current.__cause__ or current.__context__
    return None


class ExportEpisodeFn(storage.FileSystemsDoFn, beam.DoFn):
    """A chunk of a dataset's work file (`work_file.Chunk`: each episode's index, split, serialized Episode,
    grounding annotations and field values) -> (outcome, dataset, payload) per episode: a written shard or
    serialized example, or a dead letter with its reason; the chunk's outcomes also go into one file once it is
    done (`_record_chunk`), which is what the driver reads. A full or read-only destination fails the export.

    Outcomes are tagged tuples on the one main output rather than `pvalue.TaggedOutput`s, and every dataset of
    an export goes through this one step: Beam 2.77's DaskRunner puts every tagged output of a ParDo into one
    collection and computes only the last branch of a pipeline (`run_pipeline` optimizes `bags[-1]`), so
    anything else would silently lose outputs there. Single-branch pipelines run everywhere.

    Measured and not adopted: writing episode N on a background thread while N+1 is read (the writers'
    compression and file writes release the GIL). With another job on the machine's second core it made the
    envlogger export 10-40% slower per step (GIL hand-offs), and it gains only with a core to spare.
    """

    RESULT = "result"
    DEAD_LETTER = "dead_letter"
    SKIPPED = "skipped"

    def __init__(self, jobs: dict[str, DatasetJob]) -> None:
        self.jobs = jobs
        self.episodes = Metrics.counter(NAMESPACE, "episodes")
        self.steps = Metrics.counter(NAMESPACE, "steps")
        # The episode files the workers write (the summary's `episode_bytes`); `bytes` there counts every file.
        self.bytes = Metrics.counter(NAMESPACE, "episode_bytes")
        self.dead = Metrics.counter(NAMESPACE, "dead_letters")
        self._serializers: dict[str, Any] = {}

    def setup(self) -> None:
        for name, job in self.jobs.items():
            if job.format == "tfds":
                from pipelines.exporters import tfds_writer  # TensorFlow only on the TFDS path

                self._serializers[name] = tfds_writer.EpisodeSerializer(job.features_json)
            elif job.format == "parquet":
                from pipelines.exporters import parquet_writer

                self._serializers[name] = parquet_writer.schema_from_bytes(job.parquet_schema)
            elif job.format == "minari":
                from pipelines.exporters import minari_writer

                self._serializers[name] = minari_writer.EpisodeWriter(job.minari_layout)

    def process(self, element: Chunk) -> Iterator[tuple[str, str, Any]]:
        dataset = element.dataset
        job = self.jobs[dataset]
        outcomes: list[tuple[int, tuple[str, str, str]]] = []  # at most MAX_CHUNK small payloads
        for item in read_chunk(element):
            index, split = item.index, item.split
            episode = study_pb2.Episode.FromString(item.episode)
            with _no_cycle_collection():
                prepared = self._prepare(dataset, item, episode, job)
                if isinstance(prepared, ExportEpisode):
                    outcome = self._written(dataset, index, split, episode, prepared, job)
                else:
                    outcome = prepared
            outcomes.append((index, outcome))
            yield outcome
        _record_chunk(job.progress_dir, element, outcomes)

    def _dead(
        self, dataset: str, episode: study_pb2.Episode, reason: str, exc: BaseException
    ) -> tuple[str, str, str]:
        self.dead.inc()
        Metrics.counter(NAMESPACE, f"dead_letters.{reason}").inc()
        letter = DeadLetter(
            episode=episode_name(episode), reason=reason, error=f"{type(exc).__name__}: {exc}"
        )
        return self.DEAD_LETTER, dataset, json.dumps(asdict(letter))

    def _prepare(
        self, dataset: str, item: WorkItem, episode: study_pb2.Episode, job: DatasetJob
    ) -> ExportEpisode | tuple[str, str, str]:
        """The episode read and transformed, ready to write; or its outcome when it cannot be written."""
        try:
            exported = read_and_transform(item, episode, job)
        except NoTransition as exc:  # not an error: nothing to train on; listed in the summary's `skipped`
            Metrics.counter(NAMESPACE, "skipped.no_transition").inc()
            skipped = {"episode": episode_name(episode), "reason": f"no_transition: {exc}"}
            return self.SKIPPED, dataset, json.dumps(skipped)
        except MissingStatistic as exc:
            return self._dead(dataset, episode, "missing_statistic", exc)
        except InconsistentEpisode as exc:
            return self._dead(dataset, episode, "inconsistent", exc)
        except PaddingOverflow as exc:  # --ui-objects padded:N would cut a target or an annotated object
            return self._dead(dataset, episode, "padding_overflow", exc)
        except Exception as exc:  # noqa: BLE001 - any unreadable episode becomes a dead letter
            return self._dead(dataset, episode, "unreadable", exc)
        signature = envlogger_writer.episode_signature(exported)
        if not envlogger_writer.signature_fits(signature, job.expected_signature):
            mismatch = StepmarkError(f"{signature} differs from the dataset's {job.expected_signature}")
            return self._dead(dataset, episode, "spec_mismatch", mismatch)
        return exported

    def _write(self, dataset: str, job: DatasetJob, exported: ExportEpisode) -> int:
        """Writes one episode in its dataset's format; returns the bytes written. Formats whose libraries
        write only local files write the episode into a local folder that is uploaded when the destination is
        in a bucket (`storage.local_folder`: one episode's files on local disk at a time)."""
        if job.format == "tfds":
            from pipelines.exporters import tfds_writer

            with storage.local_folder(job.work_dir) as work_dir:
                return tfds_writer.write_episode(self._serializers[dataset], exported, work_dir)
        if job.format == "parquet":
            from pipelines.exporters import parquet_writer

            with storage.local_folder(job.staging_dir) as staging_dir:
                return parquet_writer.write_episode(exported, self._serializers[dataset], staging_dir)
        if job.format == "minari":
            from pipelines.exporters import minari_writer

            with storage.local_folder(job.work_dir) as work_dir:
                return minari_writer.write_episode(self._serializers[dataset], exported, work_dir)
        return envlogger_writer.write_episode_shard(exported, job.staging_dir).num_bytes

    def _written(
        self,
        dataset: str,
        index: int,
        split: str,
        episode: study_pb2.Episode,
        exported: ExportEpisode,
        job: DatasetJob,
    ) -> tuple[str, str, str]:
        """Writes the episode; its result, or a `write_failed` dead letter."""
        try:
            size = self._write(dataset, job, exported)
        except Exception as exc:  # noqa: BLE001
            # Writers' errors (envlogger's, TensorFlow's) often carry no file name: say where it was writing.
            where = job.work_dir if job.format in ("tfds", "minari") and job.work_dir else job.staging_dir
            disk = _destination_error(exc)
            if disk is not None:  # no later episode can be written either: the export fails, naming the place
                raise OSError(disk.errno, disk.strerror or str(disk), where) from exc
            return self._dead(dataset, episode, "write_failed", OSError(f"{exc} (writing into {where})"))
        self.episodes.inc()
        self.steps.inc(exported.num_steps)
        self.bytes.inc(size)
        result = {
            "index": index,
            "split": split,
            "episode": episode_name(episode),
            "steps": exported.num_steps,
            "bytes": size,
        }
        if job.format == "envlogger":  # what the last step rewrites when it renumbers the shard (export.py)
            result["metadata"] = exported.meta.to_dict()
        return self.RESULT, dataset, json.dumps(result)


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector off while one episode is read, transformed and written.

    An episode allocates a few dicts, tuples and arrays per step, almost none in cycles (reference counting
    frees them); the collector still ran every 700 allocations and walked the live ones: ~5-7 us a step
    (10% of an envlogger export). Off for one episode at a time, it runs again between episodes."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def open_for_export(episode: study_pb2.Episode, job: DatasetJob, annotations: tuple = ()):
    """The episode's reader; a UI episode's record with its grounding `annotations` applied under the dataset's
    mode (always: even `none` marks each target's source), so the sample and every worker read the same thing."""
    reader = open_episode(episode, job.data_dir)
    if isinstance(reader, UiEpisodeReader):
        from pipelines.exporters import grounding

        record = grounding.apply_annotations(
            reader.record,
            list(annotations),
            job.annotations,
            job.annotations_user or None,
        )
        reader = UiEpisodeReader(record, source=reader.source)
    return reader


def read_and_transform(item: WorkItem, episode: study_pb2.Episode, job: DatasetJob) -> ExportEpisode:
    """One episode of the work file, read and transformed (the dataset's sample is made the same way)."""
    reader = open_for_export(episode, job, item.grounding)
    try:
        steps = list(reader)
        metadata = reader.metadata
    finally:
        reader.close()
    exported = transform_episode(item.index, episode, steps, job.options, metadata, split=item.split)
    return study_fields.apply(exported, job.field_defs, item.field_values)


#: Below the progress folder: one file per chunk done, named `<dataset>@<offset>-<episodes>`, holding the outcome of
#: each of its episodes (a JSON line each). The driver lists them for progress while the pipeline runs, and reads
#: them at the end: one entry per chunk, not per episode.
DONE_DIR = "chunks"


def chunk_outcomes_path(progress_dir: str, chunk: Chunk) -> str:
    return storage.join(progress_dir, DONE_DIR, f"{chunk.dataset}@{chunk.offset}-{chunk.count}")


def _record_chunk(progress_dir: str, chunk: Chunk, outcomes: Sequence[tuple[int, tuple[str, str, str]]]) -> None:
    """The outcomes of a chunk's episodes (results, dead letters, skips, each with its index), written once the
    chunk is done, through Beam's file systems so it works on any runner with shared storage. Its name follows
    from the chunk, so a retried bundle rewrites the same file and the last attempt is the one that counts; a
    failed attempt writes none (a chunk without its file is work a runner dropped: the export fails)."""
    lines = []
    for index, (kind, name, payload) in outcomes:
        lines.append(json.dumps({"outcome": kind, "dataset": name, **json.loads(payload), "index": index}) + "\n")
    storage.write_bytes(chunk_outcomes_path(progress_dir, chunk), "".join(lines).encode("utf-8"))


def read_chunk_outcomes(progress_dir: str, chunk: Chunk) -> list[dict[str, Any]] | None:
    """The outcomes `_record_chunk` wrote for a chunk, in index order; None when there is none (work a runner
    dropped)."""
    path = chunk_outcomes_path(progress_dir, chunk)
    try:
        with storage.open_read(path) as f:
            data = f.read().decode("utf-8")
    except Exception:  # noqa: BLE001 - a missing file's error differs by filesystem: whether it exists decides
        if storage.exists(path):
            raise
        return None
    return _parsed_outcomes(path, data)


def _parsed_outcomes(path: str, data: str) -> list[dict[str, Any]]:
    """An outcome file's records in index order. A line that is not a whole record (a worker killed mid-write
    on a disk that shows partial files) fails the export naming the file and the line, not as a bare
    JSONDecodeError."""
    outcomes = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line:
            continue
        try:
            outcome = json.loads(line)
            int(outcome["index"])
        except (ValueError, KeyError, TypeError) as exc:
            raise StepmarkError(
                f"{path}: line {number} is not a whole outcome record ({exc}): the file was cut short or changed"
                " after its chunk was done; run the export again"
            ) from exc
        outcomes.append(outcome)
    return sorted(outcomes, key=lambda o: int(o["index"]))


def iter_chunk_outcomes(
    progress_dir: str, chunks: Sequence[Chunk], ahead: int = 16
) -> Iterator[tuple[Chunk, list[dict[str, Any]] | None]]:
    """Each chunk with its outcomes (`read_chunk_outcomes`), in the chunks' order, up to `ahead` files read at once
    (in a bucket each is a round trip) and no more held."""
    pending: collections.deque[tuple[Chunk, Future]] = collections.deque()
    with ThreadPoolExecutor(max_workers=max(1, min(ahead, len(chunks)))) as pool:
        for chunk in chunks:
            pending.append((chunk, pool.submit(read_chunk_outcomes, progress_dir, chunk)))
            if len(pending) >= ahead:
                done, future = pending.popleft()
                yield done, future.result()
        while pending:
            done, future = pending.popleft()
            yield done, future.result()


def count_done(progress_dir: str) -> int:
    """Episodes of the chunks done so far (`_record_chunk`)."""
    try:
        found = storage.match(storage.join(progress_dir, DONE_DIR, "*"))
    except Exception:  # noqa: BLE001 - none yet: the first marker makes the folder
        return 0
    return sum(int(storage.split(m.path)[1].rpartition("-")[2]) for m in found)


class ExportDatasets(beam.PTransform):
    """All datasets of one export: chunks of the work files -> one written file per episode and one outcome
    file per chunk (results, dead letters, skips) that the last step reads. Single-branch, so it runs the
    same on every runner (Dask included), and no step holds more than one episode."""

    def __init__(self, jobs: dict[str, DatasetJob]) -> None:
        super().__init__()
        self.jobs = jobs

    def expand(self, episodes):
        return episodes | "Spread" >> beam.Reshuffle() | "Export" >> beam.ParDo(ExportEpisodeFn(self.jobs))

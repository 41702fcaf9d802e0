"""`stepmark convert-ui INPUT OUTPUT`: Android UI traces of any supported layout -> sharded TFRecord of
serialized `UiEpisode`s, plus `dead_letters.jsonl` and `summary.json`. Beam wiring only: layouts live in
`pipelines.traces`, parsing in `pipelines.hierarchy`, assembly in `pipelines.ui_episode`.

Shape of the pipeline:

    INPUT -> DiscoverEpisodes (file names only) -> key by shard -> GroupByKey (spreads the small episode
    descriptors over workers, like Reshuffle) -> ConvertShard (reads one episode at a time, converts it,
    serializes it at once and appends it to the shard's temporary file; failures are TaggedOutput dead letters)
    -> WriteDeadLetters -> CommitOutput (renames temporary files to their final names; summary.json last).

Episode bytes never travel between transforms, so memory stays flat however many episodes there are, and the
shard count is exact without grouping the records themselves. (Discovery holds the *names* of INPUT's files in
one worker; `--shards` is also the number of conversion tasks that can run in parallel, on Dask too: see
ConvertUiTraces.) Every transform works on the DaskRunner of
Beam 2.77 too, which hands every tagged output to every consumer (hence the `OnlyType` filters), drops
outputs emitted from `finish_bundle` (none are) and computes only the last transform (CommitOutput depends on
everything).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

from pipelines import storage
from pipelines.beam_options import check_runner, pipeline_options, runner_name, spread_over_dask
from pipelines.convert_guarded import EPISODE_TIMEOUT, GuardedConverter
from pipelines.convert_records import ReadRecordInputs, distinct_ids
from pipelines.errors import StepmarkError
from pipelines.traces import DeadLetter, EpisodeSource, IgnoredFile, discover, files
from pipelines.traces.discover import RECORD_FILE
from pipelines.traces.files import ReadPolicy
from pipelines.traces.model import DiscoveryReport, RecordEpisode
from pipelines.transforms import OnlyType
from pipelines.ui_records import DEAD_LETTERS, SHARD_GLOB, SUMMARY, TMP_PREFIX, read_summary

NAMESPACE = "stepmark"
DEAD = "dead_letters"
REPORT = "report"
SHARD_NAME = "episodes-{shard:05d}-of-{count:05d}.tfrecord"
PROGRESS_SECONDS = 5.0
#: Most shards a conversion writes (`--shards`): each is a file and a conversion task.
MAX_SHARDS = 10_000
#: Empty elements per shard in ConvertUiTraces' "ShardSlots" (partitions for GroupByShard on Dask).
SLOTS_PER_SHARD = 4


# ----------------------------------------------------------------------------------------------------------
# Values passed between transforms (small; the episodes themselves go straight to the shard files).


@dataclass(frozen=True)
class ShardWritten:
    """One shard's temporary file and what went into it."""

    shard: int
    temp_path: str
    episodes: int
    steps: int
    objects: int
    mismatched_steps: int
    layouts: tuple[tuple[str, int], ...]
    size_bytes: int


@dataclass(frozen=True)
class DeadLettersWritten:
    temp_path: str
    count: int
    reasons: tuple[tuple[str, int], ...]
    key: int = 0  # which part of the dead letters (they are written in `num_shards` parts, then joined)


@dataclass
class Summary:
    """summary.json: counts of what one conversion produced and where."""

    input: str
    output: str
    runner: str
    drop_invisible: bool
    discovered_episodes: int = 0
    episodes: int = 0
    steps: int = 0
    objects: int = 0
    episodes_by_layout: dict[str, int] = field(default_factory=dict)
    screenshot_mismatch_steps: int = 0
    dead_letters: int = 0
    dead_letters_by_reason: dict[str, int] = field(default_factory=dict)
    ignored_files: int = 0
    ignored_examples: list[str] = field(default_factory=list)
    duplicate_records_collapsed: int = 0
    shards: list[dict] = field(default_factory=list)
    finished: str = ""


# ----------------------------------------------------------------------------------------------------------
# Transforms


class DiscoverEpisodes(storage.FileSystemsDoFn, beam.DoFn):
    """INPUT folder -> EpisodeSource per episode; orphan screenshots as dead letters; one DiscoveryReport.
    Files under `exclude` (the output folder, when it lies inside INPUT) are not looked at."""

    def __init__(self, exclude: tuple[str, ...] = ()) -> None:
        self.exclude = exclude

    def process(self, root: str | bytes) -> Iterator:
        if isinstance(root, bytes):  # see ConvertUiTraces.expand
            root = root.decode("utf-8", "surrogateescape")
        found = ignored = 0
        examples: list[str] = []
        for item in discover(root, self.exclude):
            if isinstance(item, EpisodeSource):
                found += item.layout != RECORD_FILE  # a TFRecord file's episodes are counted as it is read
                yield item
            elif isinstance(item, DeadLetter):
                Metrics.counter(NAMESPACE, f"dead_letter_{item.reason}").inc()
                yield pvalue.TaggedOutput(DEAD, item)
            elif isinstance(item, IgnoredFile):
                ignored += 1
                if len(examples) < 10:
                    examples.append(item.path)
        Metrics.counter(NAMESPACE, "episodes_discovered").inc(found)
        yield pvalue.TaggedOutput(REPORT, DiscoveryReport(found, ignored, tuple(examples)))


def shard_of(source: EpisodeSource | RecordEpisode, num_shards: int) -> int:
    """Stable shard for an episode (same input, same shards, on any runner)."""
    return zlib.crc32(source.episode_id.encode("utf-8")) % num_shards


class _Progress:
    """Progress lines on stderr from the workers: at most one every PROGRESS_SECONDS per shard."""

    def __init__(self, shard: int, total: int) -> None:
        self.shard, self.total = shard, total
        self.start = self.last = time.monotonic()
        self.episodes = self.steps = 0

    def add(self, steps: int) -> None:
        self.episodes += 1
        self.steps += steps
        now = time.monotonic()
        if now - self.last >= PROGRESS_SECONDS or self.episodes == self.total:
            self.last = now
            rate = self.episodes / max(now - self.start, 1e-9)
            print(
                f"stepmark convert-ui: shard {self.shard}: {self.episodes}/{self.total} episodes, "
                f"{self.steps} steps ({rate:.1f} episodes/s)",
                file=sys.stderr,
                flush=True,
            )


class ConvertShard(storage.FileSystemsDoFn, beam.DoFn):
    """(shard, [EpisodeSource]) -> one temporary TFRecord file of serialized UiEpisodes + dead letters.

    Each episode's bytes are read inside this DoFn, converted, serialized at once and appended, so only one
    episode is in memory at a time (of a long one, one record part: schemas/ui_episode.md "Episodes in parts"). A failure anywhere in one episode is a dead letter, never a crash; so is
    an episode that takes longer than `timeout` seconds (`convert_guarded`).
    """

    def __init__(self, temp_dir: str, drop_invisible: bool = False, progress: bool = True,
                 policy: ReadPolicy = files.ANYWHERE, timeout: float = EPISODE_TIMEOUT) -> None:  # fmt: skip
        self.temp_dir = temp_dir
        self.drop_invisible = drop_invisible
        self.progress = progress
        self.policy, self.timeout = policy, timeout
        self.episodes = Metrics.counter(NAMESPACE, "episodes")
        self.steps = Metrics.counter(NAMESPACE, "steps")
        self.objects = Metrics.counter(NAMESPACE, "objects")
        self.mismatches = Metrics.counter(NAMESPACE, "screenshot_mismatch_steps")

    def _read(self, path: str) -> bytes:
        return files.read_limited(path, files.limit_for(path), self.policy)

    def process(self, element: tuple[int, Iterable[EpisodeSource | RecordEpisode]]) -> Iterator:
        shard, sources = element
        ordered = distinct_ids(sources)
        path = files.join(self.temp_dir, f"shard-{shard:05d}-{uuid.uuid4().hex}.tfrecord")
        episodes = steps = objects = mismatched = size = 0
        layouts: Counter[str] = Counter()
        progress = _Progress(shard, len(ordered)) if self.progress else None
        with (
            storage.create(path) as out,
            # A long episode's record parts wait here until written (`convert_guarded`, ui_episode.PART_BYTES).
            tempfile.TemporaryDirectory(prefix="stepmark-parts-", ignore_cleanup_errors=True) as scratch,
            GuardedConverter(self.policy, self.drop_invisible, self.timeout, scratch=scratch) as convert,
            # Episodes in a bucket: the next ones' files are fetched while this one converts (`files.Prefetch`).
            files.Prefetch([getattr(s, "files", ()) for s in ordered], self._read) as prefetch,
        ):
            for i, source in enumerate(ordered):
                result = convert(source, prefetch.take(i))
                for dead in result.dead_letters:
                    Metrics.counter(NAMESPACE, f"dead_letter_{dead.reason}").inc()
                    yield pvalue.TaggedOutput(DEAD, dead)
                n = 0
                if result.record is not None:
                    size += result.write_to(out)  # its parts (a long episode) one after another, in order
                    n = result.steps
                    episodes, steps, objects = episodes + 1, steps + n, objects + result.objects
                    mismatched += result.mismatches
                    layouts[result.layout or source.layout] += 1
                    self.episodes.inc()
                    self.steps.inc(n)
                    self.objects.inc(result.objects)
                    self.mismatches.inc(result.mismatches)
                    Metrics.counter(NAMESPACE, f"episodes_{result.layout or source.layout}").inc()
                if progress is not None:
                    progress.add(n)
        yield ShardWritten(
            shard, path, episodes, steps, objects, mismatched, tuple(sorted(layouts.items())), size
        )


class WriteDeadLetters(storage.FileSystemsDoFn, beam.DoFn):
    """(key, [DeadLetter]) -> one temporary JSONL file."""

    def __init__(self, temp_dir: str) -> None:
        self.temp_dir = temp_dir

    def process(self, element: tuple[int, Iterable[DeadLetter]]) -> Iterator[DeadLettersWritten]:
        path = files.join(self.temp_dir, f"dead-letters-{uuid.uuid4().hex}.jsonl")
        reasons: Counter[str] = Counter()
        with storage.create(path) as out:
            for dead in element[1]:
                out.write(dead.to_json().encode("utf-8") + b"\n")
                reasons[dead.reason] += 1
        yield DeadLettersWritten(path, sum(reasons.values()), tuple(sorted(reasons.items())), element[0])




class CommitOutput(storage.FileSystemsDoFn, beam.DoFn):
    """Everything written -> final names. Shards first, then dead_letters.jsonl, then summary.json (its
    presence means the conversion is complete), each by renaming a finished temporary file."""

    def __init__(self, output: str, temp_dir: str, num_shards: int, summary: Summary) -> None:
        self.output, self.temp_dir, self.num_shards, self.summary = output, temp_dir, num_shards, summary

    def process(self, element: tuple[int, Iterable]) -> Iterator[Summary]:
        summary = Summary(**asdict(self.summary))
        shards: dict[int, ShardWritten] = {}
        dead_parts: dict[int, DeadLettersWritten] = {}
        for item in element[1]:
            if isinstance(item, ShardWritten):
                shards.setdefault(item.shard, item)
            elif isinstance(item, DeadLettersWritten):
                dead_parts.setdefault(item.key, item)  # one file per part, as for shards
            elif isinstance(item, DiscoveryReport):
                summary.discovered_episodes += item.episodes
                summary.ignored_files += item.ignored_files
                summary.ignored_examples.extend(item.ignored_examples)
                summary.duplicate_records_collapsed += item.collapsed_records
        layouts: Counter[str] = Counter()
        sources, targets = [], []
        for shard in range(self.num_shards):
            final = files.join(self.output, SHARD_NAME.format(shard=shard, count=self.num_shards))
            written = shards.get(shard)
            if written is None:  # no episode hashed to this shard: an empty shard keeps the set complete
                written = ShardWritten(
                    shard, files.join(self.temp_dir, f"empty-{shard:05d}.tfrecord"), 0, 0, 0, 0, (), 0
                )
                storage.write_bytes(written.temp_path, b"")
            sources.append(written.temp_path)
            targets.append(final)
            summary.episodes += written.episodes
            summary.steps += written.steps
            summary.objects += written.objects
            summary.screenshot_mismatch_steps += written.mismatched_steps
            layouts.update(dict(written.layouts))
            summary.shards.append(
                {"path": files.split(final)[1], "episodes": written.episodes, "bytes": written.size_bytes}
            )
        summary.episodes_by_layout = dict(sorted(layouts.items()))
        storage.rename(sources, targets)

        dead_final = files.join(self.output, DEAD_LETTERS)
        reasons: Counter[str] = Counter()
        dead_files = [dead_parts[key] for key in sorted(dead_parts)]
        if len(dead_files) == 1:
            storage.rename([dead_files[0].temp_path], [dead_final])
        else:  # none (write an empty file) or several parts: concatenate them in part order
            merged = files.join(self.temp_dir, "dead-letters-merged.jsonl")
            with storage.create(merged) as out:
                for d in dead_files:
                    with storage.open_read(d.temp_path) as part:
                        storage.copy_stream(part, out)  # streamed: a part may be large
            storage.rename([merged], [dead_final])
        for d in dead_files:
            reasons.update(dict(d.reasons))
        summary.dead_letters = sum(reasons.values())
        summary.dead_letters_by_reason = dict(sorted(reasons.items()))

        summary.finished = datetime.now(UTC).isoformat(timespec="seconds")
        temp_summary = files.join(self.temp_dir, SUMMARY)
        storage.write_bytes(temp_summary, (json.dumps(asdict(summary), indent=2, sort_keys=True) + "\n").encode("utf-8"))
        storage.rename([temp_summary], [files.join(self.output, SUMMARY)])  # last: the output is complete
        storage.delete_tree(self.temp_dir)
        yield summary


class ConvertUiTraces(beam.PTransform):
    """PBegin -> {"shards": ShardWritten, "dead_letters": DeadLetter, "reports": DiscoveryReport}.

    "ShardSlots" is an empty PCollection (a Create of SLOTS_PER_SHARD * `num_shards` numbers, all filtered
    out) flattened into the episodes before GroupByShard, for Beam's DaskRunner only: there a ParDo keeps its
    input's dask partitions, a Flatten adds them up and a GroupByKey hashes its keys onto as many partitions
    as its input has. INPUT's Create is one element, so one partition, and GroupByShard had 3 (1 + the 2 of
    the TFRecord branch): never more than 3 conversion tasks (4 shards: one task two shards long), and 2
    workers converted no faster than 1. The slots' Create is cut into several partitions (`run` adds
    `--dask_npartitions` through `spread_over_dask`: 4 per worker thread, at most one per slot), which
    GroupByShard's shuffle gets too, so the shards land in separate tasks (as far as Dask's hash of the keys
    lets them: more partitions than shards, fewer collisions) that the workers run side by side. Discovery
    and the TFRecord branch stay one partition: nothing before the shuffle gets more tasks. Other runners see
    a few numbers dropped at once, and the shards' contents never depend on partitions (`shard_of`,
    `distinct_ids`).
    """

    def __init__(self, input_path: str, temp_dir: str, num_shards: int, drop_invisible: bool = False,
                 progress: bool = True, exclude: tuple[str, ...] = (), follow_links: bool = False,
                 timeout: float = EPISODE_TIMEOUT) -> None:  # fmt: skip
        super().__init__()
        self.input_path, self.temp_dir, self.num_shards = input_path, temp_dir, num_shards
        self.drop_invisible, self.progress, self.exclude = drop_invisible, progress, exclude
        self.policy = ReadPolicy(files.input_roots(input_path), follow_links)
        self.timeout = timeout

    def expand(self, pbegin):
        num_shards = self.num_shards
        found = (
            pbegin
            # As bytes: Beam's str coder refuses the surrogate escapes of a local path that is not UTF-8.
            | "Input" >> beam.Create([self.input_path.encode("utf-8", "surrogateescape")])
            | "Discover"
            >> beam.ParDo(DiscoverEpisodes(self.exclude)).with_outputs(DEAD, REPORT, main="sources")
        )
        sources = found.sources | "OnlySources" >> OnlyType(EpisodeSource)
        records = (
            sources
            | "OnlyRecordFiles" >> beam.Filter(lambda s: s.layout == RECORD_FILE)
            | "ReadRecordInputs" >> ReadRecordInputs(NAMESPACE, self.policy, self.temp_dir)
        )
        slots = (
            pbegin
            | "ShardSlots" >> beam.Create(range(SLOTS_PER_SHARD * num_shards))
            | "NoSlotIsAnEpisode" >> beam.Filter(lambda _: False)
        )
        converted = (
            (
                sources | "OnlyFileEpisodes" >> beam.Filter(lambda s: s.layout != RECORD_FILE),
                records["episodes"],
                slots,
            )
            | "AllEpisodes" >> beam.Flatten()
            | "KeyByShard" >> beam.Map(lambda s: (shard_of(s, num_shards), s))
            | "GroupByShard" >> beam.GroupByKey()
            | "ConvertShard"
            >> beam.ParDo(
                ConvertShard(self.temp_dir, self.drop_invisible, self.progress, self.policy, self.timeout)
            ).with_outputs(DEAD, main="shards")
        )
        dead = (
            found.dead_letters | "OnlyDiscoveryDead" >> OnlyType(DeadLetter),
            converted.dead_letters | "OnlyConvertDead" >> OnlyType(DeadLetter),
            records["dead_letters"],
        ) | "AllDeadLetters" >> beam.Flatten()
        return {
            "shards": converted.shards | "OnlyShards" >> OnlyType(ShardWritten),
            "dead_letters": dead,
            "reports": (found.report | "OnlyReports" >> OnlyType(DiscoveryReport), records["reports"])
            | "AllReports" >> beam.Flatten(),
        }


class WriteOutput(beam.PTransform):
    """Dead letters to a file, then commit shards, dead letters and summary under their final names."""

    def __init__(self, output: str, temp_dir: str, num_shards: int, summary: Summary) -> None:
        super().__init__()
        self.output, self.temp_dir, self.num_shards, self.summary = output, temp_dir, num_shards, summary

    def expand(self, results):
        dead_file = (
            results["dead_letters"]
            # In num_shards parts, so no single worker holds every dead letter of a badly damaged input.
            | "KeyDeadLetters"
            >> beam.Map(
                lambda d, n=self.num_shards: (
                    zlib.crc32(d.episode_id.encode("utf-8", "surrogatepass")) % n,
                    d,
                )
            )
            | "GroupDeadLetters" >> beam.GroupByKey()
            | "WriteDeadLetters" >> beam.ParDo(WriteDeadLetters(self.temp_dir))
        )
        return (
            (results["shards"], dead_file, results["reports"])
            | "AllWritten" >> beam.Flatten()
            | "KeyAll" >> beam.Map(lambda x: (0, x))
            | "GroupAll" >> beam.GroupByKey()
            | "Commit" >> beam.ParDo(CommitOutput(self.output, self.temp_dir, self.num_shards, self.summary))
        )


# ----------------------------------------------------------------------------------------------------------
# Driver


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="stepmark convert-ui",
        description="Convert Android UI traces (Rico traces, step folders, single screens, DroidBot runs, "
        "AndroidControl / Android in the Wild TFRecords) "
        "into sharded TFRecord files of stepmark.UiEpisode.",
    )
    add_arguments(parser)
    return parser.parse_known_args(list(argv) if argv is not None else None)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", metavar="INPUT", help="folder (or file) of traces; any Beam filesystem path")
    parser.add_argument("output", metavar="OUTPUT", help="output folder; any Beam filesystem path")
    parser.add_argument("--shards", type=int, default=4, help="number of TFRecord shards (default: 4)")
    parser.add_argument("--drop-invisible", action="store_true", help="drop invisible objects")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier conversion in OUTPUT")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument(
        "--follow-links",
        action="store_true",
        help="read files that symlinks under INPUT lead to outside INPUT (refused as outside_input otherwise)",
    )
    parser.add_argument(
        "--episode-timeout",
        type=float,
        default=EPISODE_TIMEOUT,
        metavar="SECONDS",
        help=f"time budget of one episode; past it the episode is a `timeout` dead letter (default: {EPISODE_TIMEOUT:g})",
    )


OWN_FLAGS = ("--shards", "--drop-invisible", "--overwrite", "--quiet", "--follow-links", "--episode-timeout")


def check_misspelled(beam_args: Sequence[str]) -> None:
    """Refuse our own flags spelled Beam's way (`--drop_invisible`): unknown flags go to Beam, which would
    silently keep them for the runner, and the conversion would run without the option the user asked for."""

    def key(flag: str) -> str:
        return flag.lstrip("-").replace("_", "").replace("-", "").lower()

    for arg in beam_args:
        name = arg.split("=", 1)[0]
        if not name.startswith("--"):
            continue
        spelled = key(name)
        for own in OWN_FLAGS:
            if spelled == key(own) or (len(spelled) >= 4 and key(own).startswith(spelled)):
                raise StepmarkError(
                    f"unknown flag {name}: stepmark's flag is {own} (give it before any Beam flag; "
                    "Beam would keep an unknown flag for the runner and ignore it here)"
                )


def _matches(pattern: str) -> list[str]:
    try:
        return [m.path for m in storage.match(pattern)]
    except Exception:  # noqa: BLE001 - nothing there to refuse or remove
        return []


def prepare_output(output: str, overwrite: bool, quiet: bool = False) -> None:
    """Refuse to mix two conversions in one folder; with overwrite, remove the earlier one's files.

    What a killed conversion left (its temporary folder, whose owner process is gone, and final names without
    summary.json: killed while committing) is not a conversion: it is removed without --overwrite. A temporary
    folder of a run that may still be going (alive, or on another host) is refused as before."""
    previous = _matches(files.join(output, SHARD_GLOB)) + _matches(files.join(output, DEAD_LETTERS))
    summary = _matches(files.join(output, SUMMARY))
    complete = bool(summary)
    temps = sorted({files.split(p)[0] for p in _matches(files.join(output, TMP_PREFIX + "*", "*"))})
    live = [t for t in temps if (owner := storage.read_owner(t)) is None or owner.alive()]
    dead = [t for t in temps if t not in live]
    if (complete or live) and not overwrite:
        found = len(previous) + complete
        raise StepmarkError(
            f"{output} already holds a conversion ({found} output files"
            + (f", {len(live)} run(s) in progress or of another host" if live else "")
            + "); pass --overwrite to replace it or choose another folder"
        )
    if (dead or (previous and not complete)) and not quiet:
        print(
            f"stepmark convert-ui: {output}: removing what a killed conversion left "
            f"({len(dead)} temporary folder(s), {0 if complete else len(previous)} unfinished file(s))",
            file=sys.stderr,
            flush=True,
        )
    storage.delete(previous + summary)
    for folder in dead + (live if overwrite else []):
        storage.delete_tree(folder)
    storage.mkdirs(output, "output folder")


def check_input(input_path: str) -> None:
    root = files.strip_slash(input_path)
    storage.check_location(root)
    if not (storage.exists(root) or _matches(files.join(root, "**"))):
        raise StepmarkError(f"{input_path}: no such file or folder")


def counters(result) -> dict[str, int]:
    """The stepmark Metrics counters of a finished pipeline ({} when the runner does not report them)."""
    try:
        found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    except Exception:  # DaskRunner: "collecting metrics will come later"
        return {}
    totals: Counter[str] = Counter()
    for c in found:
        totals[c.key.metric.name] += c.committed if c.committed is not None else c.attempted
    return dict(sorted(totals.items()))


def format_report(summary: dict, metric_counts: dict[str, int]) -> str:
    layouts = ", ".join(f"{k} {v}" for k, v in summary["episodes_by_layout"].items()) or "none"
    reasons = ", ".join(f"{k} {v}" for k, v in summary["dead_letters_by_reason"].items()) or "none"
    lines = [
        f"converted {summary['episodes']} of {summary['discovered_episodes']} episodes "
        f"({summary['steps']} steps, {summary['objects']} objects) from {files.display(summary['input'])}",
        f"  by layout: {layouts}",
        f"  dead letters: {summary['dead_letters']} ({reasons})",
        f"  screenshot/hierarchy mismatches: {summary['screenshot_mismatch_steps']} steps; "
        f"ignored files: {summary['ignored_files']}",
        f"  wrote {len(summary['shards'])} shard(s), {DEAD_LETTERS} and {SUMMARY} to {files.display(summary['output'])}",
    ]
    if metric_counts:
        lines.append("  counters: " + ", ".join(f"{k}={v}" for k, v in metric_counts.items()))
    return "\n".join(lines)


class _Heartbeat:
    """A driver-side 'still running' line for runners that run the pipeline in another process."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.stop = seconds, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.start = time.monotonic()

    def _run(self) -> None:
        while not self.stop.wait(self.seconds):
            print(
                f"stepmark convert-ui: running ({time.monotonic() - self.start:.0f} s)",
                file=sys.stderr,
                flush=True,
            )

    def __enter__(self) -> _Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()


def output_inside_input(input_path: str, output: str) -> tuple[str, ...]:
    """OUTPUT as a path under INPUT's spelling when it lies inside INPUT (so discovery can skip it), else ()."""
    if not storage.is_remote(input_path) and not storage.is_remote(output):
        rel = os.path.relpath(os.path.abspath(output), os.path.abspath(input_path))  # local paths only
        if rel != "." and not rel.startswith(".."):
            return (files.join(input_path, rel),)
        return ()
    return (output,) if output.startswith(input_path.rstrip("/") + "/") else ()


def shard_count(requested: int, input_path: str, exclude: tuple[str, ...], quiet: bool = False) -> int:
    """`--shards`, but never more than INPUT has episodes (counted from file names, as discovery does): a
    shard per episode is already the most parallel conversion, and empty shards are only files."""
    episodes = sum(isinstance(item, EpisodeSource) for item in discover(input_path, exclude))
    count = min(requested, max(1, episodes))
    if count < requested and not quiet:
        print(
            f"stepmark convert-ui: {episodes} episode(s) found: writing {count} shard(s), not {requested}",
            file=sys.stderr,
            flush=True,
        )
    return count


def run(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse arguments, build and run the pipeline, print the summary. Returns 0."""
    args, beam_args = parse_args(argv)
    check_misspelled(beam_args)
    if not 1 <= args.shards <= MAX_SHARDS:
        raise StepmarkError(f"--shards must be between 1 and {MAX_SHARDS} (got {args.shards})")
    if not 0 < args.episode_timeout < float("inf"):
        raise StepmarkError(
            f"--episode-timeout must be a positive number of seconds (got {args.episode_timeout})"
        )
    input_path, output = files.strip_slash(args.input), files.strip_slash(args.output)
    storage.configure(beam_args)  # the driver's checks below and every DoFn use the same filesystem flags
    check_runner(pipeline_options(beam_args))
    check_input(input_path)
    storage.check_location(output, write=True)
    exclude = output_inside_input(input_path, output)
    num_shards = shard_count(args.shards, input_path, exclude, quiet=args.quiet)
    # On Dask: ConvertUiTraces' shard slots in several partitions, for its GroupByShard (see its docstring).
    options = pipeline_options(spread_over_dask(beam_args, SLOTS_PER_SHARD * num_shards))
    prepare_output(output, args.overwrite, args.quiet)
    temp_dir = files.join(output, f"{TMP_PREFIX}{uuid.uuid4().hex}")
    storage.mkdirs(temp_dir, "output folder")
    storage.write_owner(temp_dir)  # a killed run's folder is then known as such by the next run
    summary = Summary(
        input=input_path, output=output, runner=runner_name(options), drop_invisible=args.drop_invisible
    )
    if not args.quiet:
        print(
            f"stepmark convert-ui: {input_path} -> {output} on {summary.runner}", file=sys.stderr, flush=True
        )

    pipeline = beam.Pipeline(options=options)
    results = pipeline | "ConvertUiTraces" >> ConvertUiTraces(
        input_path,
        temp_dir,
        num_shards,
        args.drop_invisible,
        progress=not args.quiet,
        exclude=exclude,
        follow_links=args.follow_links,
        timeout=args.episode_timeout,
    )
    results | "WriteOutput" >> WriteOutput(output, temp_dir, num_shards, summary)
    with _Heartbeat(30.0 if not args.quiet else 1e9):
        try:
            result = pipeline.run()
            result.wait_until_finish()
        except BaseException:  # a full disk, an interrupt: leave no half-written conversion behind
            with contextlib.suppress(Exception):
                storage.delete_tree(temp_dir)
            raise
    # The DaskRunner opens its own distributed.Client and never closes it; close it so it does not keep
    # reconnecting to a cluster the caller may shut down next.
    client_close = getattr(getattr(result, "client", None), "close", None)
    if callable(client_close):
        client_close()
    print(format_report(read_summary(output), counters(result)))
    return 0


if __name__ == "__main__":
    sys.exit(run())

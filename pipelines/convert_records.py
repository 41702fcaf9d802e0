"""Beam wiring for TFRecord inputs of convert-ui (AndroidControl, Android in the Wild), used by
`pipelines.convert`:

    tfrecord_file sources -> ReadRecordFiles (frames, classifies; bad records are dead letters)
        AndroidControl records (one record = one episode) and AITW step records
        -> key by episode_id -> GroupByKey -> GroupRecords (the duplicate rule) -> RecordEpisode

The RecordEpisodes then join the file-based episode sources in convert's shard grouping. The GroupByKey serves
both formats: AITW's 5.7 million step records are spread over files in no particular order, and an
AndroidControl episode id may turn up in two files (a shard given twice, two releases merged); grouping on the
runner scales across workers and sees every record of an id at once. Record bytes go to a spill file in the
conversion's temporary folder as they are read, and only references travel (`traces.records.Spill`), so the
runner keeps references, not every record of the input; they are read back where the episode is converted. The duplicate rule (`traces.records.group_records`, schemas/layouts.md "Duplicate
records"): byte-identical repeats are read once and counted (`duplicate_records_collapsed`); differing
records claiming one episode id are all `duplicate_episode` dead letters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from pipelines import storage
from pipelines.traces.files import ANYWHERE, ReadPolicy
from pipelines.traces.model import DeadLetter, DiscoveryReport, EpisodeSource, RecordEpisode
from pipelines.traces.records import AitwStep, Spill, group_records, read_file_records, spilled
from pipelines.transforms import OnlyType

DEAD = "dead_letters"
AITW = "aitw_steps"
COLLAPSED = "collapsed_records"


class ReadRecordFiles(storage.FileSystemsDoFn, beam.DoFn):
    """A tfrecord_file source -> RecordEpisodes (main), AitwSteps and DeadLetters (tagged). Files are opened
    under INPUT's read policy, like every other trace file (`traces.records.open_stream`)."""

    def __init__(self, namespace: str, policy: ReadPolicy = ANYWHERE, spill_dir: str | None = None) -> None:
        self.namespace = namespace
        self.policy = policy
        self.spill_dir = spill_dir

    def process(self, source: EpisodeSource) -> Iterator:
        # With a spill folder (convert-ui: its temporary folder) the records' bytes go to a spill file and only
        # references travel on: the runner then keeps references, not every record of the input at once.
        spill = Spill(self.spill_dir) if self.spill_dir else None
        try:
            for item in read_file_records(source.source_path, self.policy):
                if isinstance(item, DeadLetter):
                    Metrics.counter(self.namespace, f"dead_letter_{item.reason}").inc()
                    yield pvalue.TaggedOutput(DEAD, item)
                    continue
                if spill is not None:
                    item = spilled(item, spill)
                if isinstance(item, AitwStep):
                    Metrics.counter(self.namespace, "aitw_step_records").inc()
                    yield pvalue.TaggedOutput(AITW, item)
                else:
                    Metrics.counter(self.namespace, "android_control_records").inc()
                    yield item
        finally:
            if spill is not None:
                spill.close()


class GroupRecords(storage.FileSystemsDoFn, beam.DoFn):
    """(episode id, [RecordEpisode | AitwStep]) -> one RecordEpisode (main) or `duplicate_episode` dead
    letters (tagged), by `group_records`; the number of copies read once as a `DiscoveryReport` (tagged, for
    summary.json)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def process(self, element: tuple[str, Iterable[RecordEpisode | AitwStep]]) -> Iterator:
        grouped = group_records(*element)
        if grouped.collapsed:
            Metrics.counter(self.namespace, "duplicate_records_collapsed").inc(grouped.collapsed)
            yield pvalue.TaggedOutput(COLLAPSED, DiscoveryReport(0, 0, (), grouped.collapsed))
        for dead in grouped.dead_letters:
            Metrics.counter(self.namespace, f"dead_letter_{dead.reason}").inc()
            yield pvalue.TaggedOutput(DEAD, dead)
        if grouped.episode is not None:
            yield grouped.episode


def distinct_ids(sources: Iterable[EpisodeSource | RecordEpisode]) -> list[EpisodeSource | RecordEpisode]:
    """One shard's episodes, sorted by id, every id once. Record ids are unique among records (the grouping)
    and file layouts' among file layouts (discovery); a record episode whose id a file layout's episode also
    has (an AndroidControl id `101` beside a folder `101/`; both hash to the same shard) gets discovery's
    `~2`, `~3`, ... suffix and a note saying so (schemas/layouts.md, "Duplicate records")."""
    ordered = sorted(sources, key=lambda s: (s.episode_id, isinstance(s, RecordEpisode), s.source_path))
    used = {s.episode_id for s in ordered}
    seen: set[str] = set()
    out: list[EpisodeSource | RecordEpisode] = []
    for source in ordered:
        if source.episode_id in seen and isinstance(source, RecordEpisode):
            n = 2
            while f"{source.episode_id}~{n}" in used:
                n += 1
            new_id = f"{source.episode_id}~{n}"
            used.add(new_id)
            note = f"episode id {source.episode_id} is also a file layout's episode: converted as {new_id}"
            source = dataclasses.replace(source, episode_id=new_id, notes=(*source.notes, note))
        seen.add(source.episode_id)
        out.append(source)
    return sorted(out, key=lambda s: s.episode_id)


def _key(item: RecordEpisode | AitwStep) -> tuple[str, RecordEpisode | AitwStep]:
    return item.episode_id, item


class ReadRecordInputs(beam.PTransform):
    """PCollection[EpisodeSource of tfrecord files] -> {"episodes": RecordEpisode, "dead_letters": DeadLetter,
    "reports": DiscoveryReport} (one report: the number of distinct episode ids found in the records)."""

    def __init__(self, namespace: str, policy: ReadPolicy = ANYWHERE, spill_dir: str | None = None) -> None:
        super().__init__()
        self.namespace = namespace
        self.policy = policy
        self.spill_dir = spill_dir

    def expand(self, record_files):
        read = record_files | "ReadRecordFiles" >> beam.ParDo(ReadRecordFiles(self.namespace, self.policy, self.spill_dir)).with_outputs(
            DEAD, AITW, main="episodes"
        )
        grouped = (
            (
                read.episodes | "OnlyRecordEpisodes" >> OnlyType(RecordEpisode),
                read[AITW] | "OnlyAitwSteps" >> OnlyType(AitwStep),
            )
            | "AllRecords" >> beam.Flatten()
            | "KeyByEpisode" >> beam.Map(_key)
            | "GroupByEpisode" >> beam.GroupByKey()
            | "GroupRecords"
            >> beam.ParDo(GroupRecords(self.namespace)).with_outputs(DEAD, COLLAPSED, main="episodes")
        )
        episodes = grouped.episodes | "OnlyGroupedEpisodes" >> OnlyType(RecordEpisode)
        duplicates = grouped[DEAD] | "OnlyDuplicateDead" >> OnlyType(DeadLetter)
        # Episodes found = distinct ids, converted or not (a duplicate_episode id is one found episode).
        found = (
            (
                episodes | "EpisodeIds" >> beam.Map(lambda e: e.episode_id),
                duplicates | "DuplicateIds" >> beam.Map(lambda d: d.episode_id),
            )
            | "AllIds" >> beam.Flatten()
            | "DistinctIds" >> beam.Distinct()
            # Without defaults: no count (so no report) when there are no record episodes, which CommitOutput
            # sums as 0 all the same. Count.Globally's default is injected through a side input, and Beam's
            # DaskRunner computes a side input's whole upstream again inside the task that reads it: with it,
            # INPUT could be discovered (and its TFRecord files read) a second time on Dask.
            | "CountIds" >> beam.CombineGlobally(beam.combiners.CountCombineFn()).without_defaults()
            | "RecordReport" >> beam.Map(lambda n: DiscoveryReport(n, 0, ())).with_output_types(DiscoveryReport)
        )
        dead = (
            read[DEAD] | "OnlyRecordDead" >> OnlyType(DeadLetter),
            duplicates,
        ) | "AllRecordDead" >> beam.Flatten()
        reports = (
            found,
            grouped[COLLAPSED] | "OnlyCollapsedReports" >> OnlyType(DiscoveryReport),
        ) | "AllRecordReports" >> beam.Flatten()
        return {"episodes": episodes, "dead_letters": dead, "reports": reports}

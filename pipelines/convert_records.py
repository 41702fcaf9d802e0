"""Beam wiring for TFRecord inputs of convert-ui (AndroidControl, Android in the Wild), used by
`pipelines.convert`:

    tfrecord_file sources -> ReadRecordFiles (frames, classifies; bad records are dead letters)
        AndroidControl records -> RecordEpisode (one record = one episode)
        AITW step records -> key by episode_id -> GroupByKey -> RecordEpisode (all steps of the episode)

The RecordEpisodes then join the file-based episode sources in convert's shard grouping. AITW needs the
GroupByKey: its 5.7 million step records are spread over files in no particular order, and grouping them on
the runner scales across workers. Step bytes travel with the records (nothing is re-read).
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from pipelines.traces.model import DeadLetter, EpisodeSource, RecordEpisode
from pipelines.traces.records import AitwStep, group_aitw, read_file_records

DEAD = "dead_letters"
AITW = "aitw_steps"
REPORT = "report"


class ReadRecordFiles(beam.DoFn):
    """A tfrecord_file source -> RecordEpisodes (main), AitwSteps and DeadLetters (tagged)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def process(self, source: EpisodeSource) -> Iterator:
        from pipelines.convert import DiscoveryReport

        episodes = 0
        for item in read_file_records(source.source_path):
            if isinstance(item, RecordEpisode):
                episodes += 1
            if isinstance(item, DeadLetter):
                Metrics.counter(self.namespace, f"dead_letter_{item.reason}").inc()
                yield pvalue.TaggedOutput(DEAD, item)
            elif isinstance(item, AitwStep):
                Metrics.counter(self.namespace, "aitw_step_records").inc()
                yield pvalue.TaggedOutput(AITW, item)
            else:
                yield item
        yield pvalue.TaggedOutput(REPORT, DiscoveryReport(episodes, 0, ()))


class ReadRecordInputs(beam.PTransform):
    """PCollection[EpisodeSource of tfrecord files] -> {"episodes": RecordEpisode, "dead_letters": DeadLetter,
    "reports": DiscoveryReport} (episodes found in the records: AndroidControl per file, AITW one total)."""

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace

    def expand(self, record_files):
        from pipelines.convert import DiscoveryReport, OnlyType  # convert imports this module

        read = record_files | "ReadRecordFiles" >> beam.ParDo(ReadRecordFiles(self.namespace)).with_outputs(
            DEAD, AITW, REPORT, main="episodes"
        )
        aitw = (
            read[AITW]
            | "OnlyAitwSteps" >> OnlyType(AitwStep)
            | "KeyByEpisode" >> beam.Map(lambda s: (s.episode_id, s))
            | "GroupAitwSteps" >> beam.GroupByKey()
            | "AitwEpisodes" >> beam.MapTuple(group_aitw).with_output_types(RecordEpisode)
        )
        episodes = (
            read.episodes | "OnlyRecordEpisodes" >> OnlyType(RecordEpisode),
            aitw,
        ) | "AllRecordEpisodes" >> beam.Flatten()
        aitw_found = (
            aitw
            | "CountAitwEpisodes" >> beam.combiners.Count.Globally()
            | "AitwReport" >> beam.Map(lambda n: DiscoveryReport(n, 0, ())).with_output_types(DiscoveryReport)
        )
        reports = (
            read[REPORT] | "OnlyRecordReports" >> OnlyType(DiscoveryReport),
            aitw_found,
        ) | "AllRecordReports" >> beam.Flatten()
        return {
            "episodes": episodes,
            "dead_letters": read[DEAD] | "OnlyRecordDead" >> OnlyType(DeadLetter),
            "reports": reports,
        }

"""TFRecord inputs of `tf.train.Example`s (AndroidControl episodes, Android in the Wild steps): open a file
(GZIP-compressed or not, told by its first bytes through Beam's compression support), frame its records and
say what each one is. A record that cannot be framed, decoded or recognised is a `bad_record` dead letter
naming the file and byte offset; a truncated file ends its reading with one.

`read_file_records` yields, in file order: `RecordEpisode`s (AndroidControl: one record, one episode),
`AitwStep`s (to be grouped by episode id) and `DeadLetter`s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines import tfrecord
from pipelines.traces import aitw, android_control
from pipelines.traces.examples import ExampleError, parse_example, record_kind, scalar_int
from pipelines.traces.files import display
from pipelines.traces.model import DeadLetter, RawEpisode, RecordEpisode

GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class AitwStep:
    """One AITW step record on its way to the GroupByKey on episode id."""

    episode_id: str
    path: str
    offset: int
    data: bytes


def open_stream(path: str):
    """The file's decompressed byte stream: GZIP when it starts with the gzip magic, whatever its name."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        head = f.read(2)
    compression = CompressionTypes.GZIP if head == GZIP_MAGIC else CompressionTypes.UNCOMPRESSED
    return FileSystems.open(path, compression_type=compression)


def classify(path: str, offset: int, data: bytes) -> RecordEpisode | AitwStep | DeadLetter:
    """What one record is; a DeadLetter (`bad_record`) when it is none of the supported Examples."""
    where = display(f"{path}@{offset}")
    try:
        example = parse_example(data)
        kind = record_kind(example)
        if kind == "android_control":
            episode_id = str(scalar_int(example, "episode_id"))
            return RecordEpisode(android_control.LAYOUT, episode_id, path, ((path, offset, data),))
        if kind == "aitw":
            episode_id, _ = aitw.step_ids(data)
            return AitwStep(episode_id, path, offset, data)
        keys = ", ".join(sorted(example.features.feature)[:8]) or "none"
        raise ExampleError(f"neither an AndroidControl episode nor an AITW step (features: {keys})")
    except ExampleError as exc:
        return DeadLetter(path, None, "bad_record", f"{where}: {exc}", where)


def read_file_records(path: str) -> Iterator[RecordEpisode | AitwStep | DeadLetter]:
    """Every record of one TFRecord file, classified; never raises for bad content."""
    name = display(path)
    try:
        with open_stream(path) as f:
            for offset, data in tfrecord.iter_stream(f, name=name):
                if isinstance(data, tfrecord.TFRecordError):
                    yield DeadLetter(path, None, "bad_record", str(data), f"{name}@{offset}")
                else:
                    yield classify(path, offset, data)
    except tfrecord.TFRecordError as exc:
        yield DeadLetter(path, None, "bad_record", f"{exc}; the rest of the file is not read", name)
    except Exception as exc:  # unreadable file, corrupt gzip stream (zlib.error), ...
        yield DeadLetter(path, None, "bad_record", f"{name}: {type(exc).__name__}: {exc}", name)


def group_aitw(episode_id: str, steps: Iterable[AitwStep]) -> RecordEpisode:
    """The grouped steps of one AITW episode (order does not matter: `aitw.read` sorts)."""
    records = tuple(sorted((s.path, s.offset, s.data) for s in steps))
    return RecordEpisode(aitw.LAYOUT, episode_id, records[0][0] if records else "", records)


READERS: dict[str, Callable[[RecordEpisode], tuple[RawEpisode, dict[str, bytes]]]] = {
    android_control.LAYOUT: android_control.read,
    aitw.LAYOUT: aitw.read,
}


def read_record_episode(item: RecordEpisode) -> tuple[RawEpisode, dict[str, bytes]]:
    return READERS[item.layout](item)

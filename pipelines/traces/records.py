"""TFRecord inputs of `tf.train.Example`s (AndroidControl episodes, Android in the Wild steps): open a file
(GZIP-compressed or not, told by its first bytes through Beam's compression support), frame its records and
say what each one is. A record that cannot be framed, decoded or recognised is a `bad_record` dead letter
naming the file and byte offset; a truncated file ends its reading with one.

`read_file_records` yields, in file order: `RecordEpisode`s (AndroidControl: one record, one episode),
`AitwStep`s and `DeadLetter`s; the pipeline then groups both kinds by episode id and `group_records` applies
the duplicate rule.
"""

from __future__ import annotations

import dataclasses
import errno
import gzip
import hashlib
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines import tfrecord
from pipelines.traces import aitw, android_control, files
from pipelines.traces.examples import ExampleError, parse_example, record_kind, scalar_int
from pipelines.traces.files import ANYWHERE, ReadPolicy, display
from pipelines.traces.model import DeadLetter, RawEpisode, RecordEpisode

GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class AitwStep:
    """One AITW step record on its way to the GroupByKey on episode id."""

    episode_id: str
    path: str
    offset: int
    data: bytes
    #: A step whose bytes were refused when read (its raw screenshot): no data travels, only its dead letter,
    #: which the episode carries so the step is not also reported missing.
    refused: DeadLetter | None = None


class Spilled:
    """A record's bytes written to a spill file of the conversion's temporary folder: what travels between
    transforms instead of the bytes, so the runner keeps references, not records (12 records of 200 MB in a
    2.5 MB gzip took 11.3 GB on FnApiRunner when their bytes travelled). Equal when the bytes are (length and
    SHA-256), which is all the duplicate rule compares; `len()` is the bytes' length."""

    __slots__ = ("path", "offset", "length", "digest")

    def __init__(self, path: str, offset: int, length: int, digest: bytes) -> None:
        self.path, self.offset, self.length, self.digest = path, offset, length, digest

    def __len__(self) -> int:
        return self.length

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Spilled) and (self.length, self.digest) == (other.length, other.digest)

    def __hash__(self) -> int:
        return hash((self.length, self.digest))

    def __reduce__(self):
        return Spilled, (self.path, self.offset, self.length, self.digest)

    def load(self) -> bytes:
        with FileSystems.open(self.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            f.seek(self.offset)
            data = f.read(self.length)
        if len(data) != self.length or hashlib.sha256(data).digest() != self.digest:
            raise OSError(errno.EIO, "spilled record bytes changed or are missing", files.display(self.path))
        return data


class Spill:
    """One spill file, written front to back (`FileSystems.create`, so any Beam filesystem); `add` returns
    the reference that replaces the bytes."""

    def __init__(self, folder: str) -> None:
        self.path = files.join(folder, f"records-{uuid.uuid4().hex}.spill")
        self._out = self._io(FileSystems.create, self.path)
        self._offset = 0

    def add(self, data: bytes) -> Spilled:
        ref = Spilled(self.path, self._offset, len(data), hashlib.sha256(data).digest())
        self._io(self._out.write, data)
        self._offset += len(data)
        return ref

    def close(self) -> None:
        self._io(self._out.close)

    def _io(self, fn, *args):
        """`fn(*args)`, an OSError without a file name (a full disk) re-raised naming the spill file."""
        try:
            return fn(*args)
        except OSError as exc:
            if exc.errno is None or exc.filename:
                raise
            raise OSError(exc.errno, exc.strerror or str(exc), files.display(self.path)) from exc


def spilled(item: RecordEpisode | AitwStep, spill: Spill) -> RecordEpisode | AitwStep:
    """`item` with its record bytes in `spill` (refused AITW steps carry none)."""
    if isinstance(item, AitwStep):
        return item if item.refused is not None else dataclasses.replace(item, data=spill.add(item.data))
    records = tuple((path, offset, spill.add(data)) for path, offset, data in item.records)
    return dataclasses.replace(item, records=records)


def loaded(item: RecordEpisode) -> RecordEpisode:
    """`item` with spilled record bytes read back (where the episode is converted)."""
    if not any(isinstance(data, Spilled) for _, _, data in item.records):
        return item
    records = tuple((p, o, d.load() if isinstance(d, Spilled) else d) for p, o, d in item.records)
    return dataclasses.replace(item, records=records)


def open_stream(path: str, policy: ReadPolicy = ANYWHERE) -> BinaryIO:
    """The file's decompressed byte stream: GZIP when it starts with the gzip magic, whatever its name. Local
    files pass the checks every other trace file passes first (`files.open_guarded`: regular, inside INPUT
    unless --follow-links); remote ones are opened through Beam's FileSystems."""
    if not files.is_local(path):
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            head = f.read(2)
        compression = CompressionTypes.GZIP if head == GZIP_MAGIC else CompressionTypes.UNCOMPRESSED
        return FileSystems.open(path, compression_type=compression)
    raw = files.open_guarded(path, policy=policy)
    try:
        head = raw.read(2)
        raw.seek(0)
    except BaseException:
        raw.close()
        raise
    if head != GZIP_MAGIC:
        return raw
    return _ClosingGzip(raw)


class _ClosingGzip(gzip.GzipFile):
    """A GzipFile that closes the file it reads (GzipFile leaves a `fileobj` it was given open)."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def refusal(path: str, exc: BaseException) -> DeadLetter | None:
    """The dead letter of a file that could not be opened: the reason of a FileRefused (`not_regular`,
    `outside_input`, `too_large`) or `unreadable` (missing, a symlink loop, no permission); None otherwise."""
    name = display(path)
    if isinstance(exc, files.FileRefused):
        return DeadLetter(path, None, exc.reason, str(exc), name)
    if isinstance(exc, OSError):
        why = "a symlink loop" if exc.errno == errno.ELOOP else (exc.strerror or type(exc).__name__)
        return DeadLetter(path, None, "unreadable", f"{name}: {why}: not read", name)
    return None


def classify(path: str, offset: int, data: bytes) -> RecordEpisode | AitwStep | DeadLetter:
    """What one record is; a DeadLetter (`bad_record`) when it is none of the supported Examples, or an AITW
    step whose raw screenshot cannot be kept (`too_large` beyond the pixel cap, `bad_screenshot` when its bytes
    do not match its dimensions), told from the numbers before its bytes go anywhere."""
    where = display(f"{path}@{offset}")
    try:
        example = parse_example(data)
        kind = record_kind(example)
        if kind == "android_control":
            episode_id = str(scalar_int(example, "episode_id"))
            return RecordEpisode(android_control.LAYOUT, episode_id, path, ((path, offset, data),))
        if kind == "aitw":
            episode_id, step_id = aitw.step_ids(data)
            refused = aitw.refused_screenshot(example)
            if refused is not None:  # not kept: its bytes would travel to the grouping for nothing
                message = f"episode {display(episode_id)} step {step_id} ({where}): {refused}"
                letter = DeadLetter(path, step_id, refused.reason, message, episode_id)
                return AitwStep(episode_id, path, offset, b"", refused=letter)
            return AitwStep(episode_id, path, offset, data)
        keys = ", ".join(sorted(example.features.feature)[:8]) or "none"
        raise ExampleError(f"neither an AndroidControl episode nor an AITW step (features: {keys})")
    except ExampleError as exc:
        return DeadLetter(path, None, "bad_record", f"{where}: {exc}", where)


def read_file_records(path: str, policy: ReadPolicy = ANYWHERE) -> Iterator[RecordEpisode | AitwStep | DeadLetter]:
    """Every record of one TFRecord file, classified; never raises for bad content. A file refused before
    opening is one dead letter with the refusal's reason (`policy`: INPUT's roots and --follow-links)."""
    name = display(path)
    try:
        stream = open_stream(path, policy)
    except Exception as exc:  # noqa: BLE001 - every failure to open is a dead letter of the file
        refused = refusal(path, exc)
        yield refused or DeadLetter(path, None, "unreadable", f"{name}: {type(exc).__name__}: {exc}", name)
        return
    try:
        with stream as f:
            for offset, data in tfrecord.iter_stream(f, name=name):
                if isinstance(data, tfrecord.TFRecordError):
                    yield DeadLetter(path, None, "bad_record", str(data), f"{name}@{offset}")
                else:
                    yield classify(path, offset, data)
    except tfrecord.TFRecordError as exc:
        yield DeadLetter(path, None, "bad_record", f"{exc}; the rest of the file is not read", name)
    except Exception as exc:  # unreadable file, corrupt gzip stream (zlib.error, BadGzipFile), ...
        yield DeadLetter(path, None, "bad_record", f"{name}: {type(exc).__name__}: {exc}", name)


#: Record positions named in one duplicate note or dead letter (the rest are counted).
SHOWN_POSITIONS = 10


@dataclass(frozen=True)
class Grouped:
    """What `group_records` made of the records sharing one episode id."""

    episode: RecordEpisode | None
    dead_letters: tuple[DeadLetter, ...]
    collapsed: int  # records that repeated another one byte for byte and were read once


def _positions(records: list[tuple[str, str, int, bytes]]) -> str:
    shown = ", ".join(display(f"{path}@{offset}") for _, path, offset, _ in records[:SHOWN_POSITIONS])
    more = len(records) - SHOWN_POSITIONS
    return shown + (f" and {more} more" if more > 0 else "")


def group_records(episode_id: str, items: Iterable[RecordEpisode | AitwStep]) -> Grouped:
    """The one rule for records that share an episode id (schemas/layouts.md, "Duplicate records"):

    * a record that repeats another byte for byte (a file given twice, a shard copied) is read once; the
      episode keeps a note naming the copies, and `collapsed` counts them;
    * AITW step records of one id form the episode (repeated *step ids* are `aitw.read`'s concern);
    * records that differ but claim one episode id as a whole episode (two AndroidControl records, or
      AndroidControl and AITW records) leave no way to tell which is right: none is converted, each is a
      `duplicate_episode` dead letter naming the id and every claiming record.

    Order of `items` does not matter (positions are sorted by file and offset), so every runner agrees."""
    recs: list[tuple[str, str, int, bytes]] = []
    refused: list[DeadLetter] = []
    for item in items:
        if isinstance(item, AitwStep) and item.refused is not None:
            refused.append(item.refused)
        elif isinstance(item, AitwStep):
            recs.append((aitw.LAYOUT, item.path, item.offset, item.data))
        else:
            recs.extend((item.layout, path, offset, data) for path, offset, data in item.records)
    recs.sort(key=lambda r: (r[1], r[2], r[0]))
    # Only records of one layout and length can be copies: compared byte for byte within those (no hashing
    # of every AITW screenshot; a differing record of the same length usually differs early).
    same_size: dict[tuple[str, int], list[bytes]] = {}
    unique: list[tuple[str, str, int, bytes]] = []
    repeats: list[tuple[str, str, int, bytes]] = []
    for rec in recs:
        kept = same_size.setdefault((rec[0], len(rec[3])), [])
        if any(rec[3] == data for data in kept):
            repeats.append(rec)
        else:
            kept.append(rec[3])
            unique.append(rec)
    refused.sort(key=lambda d: (d.source_path, d.step or 0))
    if not unique:  # every step of the episode was refused when read
        return Grouped(None, tuple(refused), len(repeats))
    eid = display(episode_id)
    layouts = sorted({r[0] for r in unique})
    if len(layouts) > 1 or (layouts == [android_control.LAYOUT] and len(unique) > 1):
        message = (
            f"episode id {eid} is claimed by {len(unique)} differing records ({', '.join(layouts)}): "
            f"{_positions(unique)}; none is converted"
        )
        dead = tuple(DeadLetter(path, None, "duplicate_episode", message, episode_id) for _, path, _, _ in unique)
        return Grouped(None, dead, len(repeats))
    notes: tuple[str, ...] = ()
    if repeats:
        notes = (
            f"{len(repeats)} record(s) repeat another record of this episode byte for byte and were read once: "
            f"{_positions(repeats)}",
        )
    records = tuple((path, offset, data) for _, path, offset, data in unique)
    episode = RecordEpisode(layouts[0], episode_id, records[0][0], records, tuple(refused), notes=notes)
    return Grouped(episode, (), len(repeats))


READERS: dict[str, Callable[[RecordEpisode], tuple[RawEpisode, dict[str, bytes]]]] = {
    android_control.LAYOUT: android_control.read,
    aitw.LAYOUT: aitw.read,
}


def read_record_episode(item: RecordEpisode) -> tuple[RawEpisode, dict[str, bytes]]:
    episode, blobs = READERS[item.layout](loaded(item))
    episode.warnings.extend(item.notes)
    return episode, blobs

"""Reading what `stepmark convert-ui` wrote: TFRecord shards of serialized `UiEpisode`s, `dead_letters.jsonl`
and `summary.json`. Random access by byte offset (the importer stores shard + offset; the annotator replays from
it), iteration, and lookup by episode id. Paths may be local or any Beam filesystem.

A long episode is written as consecutive record parts (`UiEpisode.part`, schemas/ui_episode.md "Episodes in
parts"): every reader here sees one episode, its parts merged; an episode whose parts do not all follow one
another in order in one shard is refused (StepmarkError naming the shard and byte), never read shorter.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from pipelines import protowire, storage, tfrecord
from pipelines.errors import StepmarkError
from pipelines.traces import DeadLetter, files
from protos.stepmark import ui_episode_pb2

SHARD_GLOB = "episodes-*-of-*.tfrecord"
DEAD_LETTERS = "dead_letters.jsonl"
SUMMARY = "summary.json"
#: The temporary folder a conversion writes into, inside OUTPUT, until it commits (summary.json last).
TMP_PREFIX = ".stepmark-tmp-"


@dataclass(frozen=True)
class RecordRef:
    """Where one converted episode is: its shard file and the byte offset of its record."""

    episode_id: str
    shard: str
    offset: int
    num_steps: int
    app_package: str
    source: str
    goal: str = ""  # the episode's task, when the source has one (the Episodes table's title)


#: UiEpisode's `part` field (protos/stepmark/ui_episode.proto).
PART_FIELD = 10


def record_part(data: bytes, *, where: str = "record") -> ui_episode_pb2.RecordPart | None:
    """The RecordPart of a serialized UiEpisode, read off the wire (nothing else is decoded); None for a
    whole episode."""
    part = None
    try:
        for number, wire, start, end in protowire.fields(data, 0, len(data)):
            if number == PART_FIELD and wire == 2:
                part = part or ui_episode_pb2.RecordPart()
                part.MergeFromString(data[start:end])  # protobuf: repeated occurrences merge
    except Exception as exc:  # ValueError, protobuf DecodeError
        raise StepmarkError(f"{where}: not a serialized UiEpisode ({exc})") from exc
    return part


class PartsCheck:
    """Follows the records of an output in order and checks that each episode in parts comes whole: parts
    0..count-1 of one episode id, one after another in one shard, each starting at the step the ones before it
    end. `add` says whether a record ends an episode; `close` refuses an episode left open."""

    def __init__(self) -> None:
        self.open: ui_episode_pb2.RecordPart | None = None
        self.where = ""
        self.steps = 0

    def add(self, part: ui_episode_pb2.RecordPart | None, steps: int, where: str) -> bool:
        if self.open is not None:
            want = self.open
            if part is None or (part.episode_id, part.index, part.count) != (want.episode_id, want.index + 1,
                                                                             want.count):  # fmt: skip
                found = "a whole episode" if part is None else f"part {part.index} of episode {part.episode_id!r}"
                raise StepmarkError(
                    f"{where}: episode {want.episode_id!r} (from {self.where}) has {want.count} parts but part "
                    f"{want.index + 1} is missing: {found} follows part {want.index}"
                )
        elif part is not None and part.index != 0:
            raise StepmarkError(
                f"{where}: part {part.index} of {part.count} of episode {part.episode_id!r} without the parts "
                f"before it (missing)"
            )
        if part is None:
            return True
        if part.count < 2 or part.index >= part.count:
            raise StepmarkError(f"{where}: part {part.index} of {part.count}: not a valid record part")
        if part.index == 0:
            self.where, self.steps = where, 0
        if part.first_step != self.steps:
            raise StepmarkError(
                f"{where}: part {part.index} of episode {part.episode_id!r} starts at step {part.first_step}, "
                f"but the parts before it end at step {self.steps}"
            )
        self.steps += steps
        self.open = None if part.index == part.count - 1 else part
        return self.open is None

    def close(self, where: str) -> None:
        if self.open is not None:
            raise StepmarkError(
                f"{where}: ends inside episode {self.open.episode_id!r} (from {self.where}): part "
                f"{self.open.index + 1} of {self.open.count} is missing"
            )


def merge_part(merged: ui_episode_pb2.UiEpisode | None, part: ui_episode_pb2.UiEpisode) -> ui_episode_pb2.UiEpisode:
    """The episode so far with the next part's steps appended (the first part gives the episode's fields)."""
    if merged is None:
        part.ClearField("part")
        return part
    if part.episode_id != merged.episode_id:
        raise StepmarkError(f"part of episode {part.episode_id!r} inside episode {merged.episode_id!r}")
    merged.episode.time_steps.extend(part.episode.time_steps)
    merged.actions.extend(part.actions)
    merged.step_info.extend(part.step_info)
    return merged


def episode_steps(data: bytes, start: int, end: int) -> int:
    """Time steps of the serialized llm4mobile Episode at `data[start:end]`, counted off the wire
    (Episode.time_steps = 4), nothing parsed."""
    return sum(n == 4 and w == 2 for n, w, _, _ in protowire.fields(data, start, end))


def _steps_in(data: bytes) -> int:
    """Time steps of a serialized UiEpisode (its episode = 2), counted off the wire."""
    return sum(
        episode_steps(data, start, end)
        for number, wire, start, end in protowire.fields(data, 0, len(data))
        if number == 2 and wire == 2
    )


def _open(path: str):
    try:
        return storage.open_read(path)
    except StepmarkError:
        raise
    except Exception as exc:
        raise StepmarkError(f"{path}: cannot open ({exc})") from exc


def is_output_folder(path: str) -> bool:
    path = files.strip_slash(path)
    return bool(storage.match(files.join(path, SHARD_GLOB))) or storage.exists(files.join(path, SUMMARY))


def shard_paths(path: str) -> list[str]:
    """The shards of an output folder (sorted), or `[path]` for one shard file.

    A folder without summary.json is refused: its conversion is unfinished (or failed) and may miss shards.
    """
    path = files.strip_slash(path)
    storage.check_location(path)
    shards = sorted(m.path for m in storage.match(files.join(path, SHARD_GLOB)))
    # summary.json is written last (schemas/storage.md): without it the conversion is unfinished or failed.
    if shards or storage.exists(files.join(path, SUMMARY)):
        if not storage.exists(files.join(path, SUMMARY)):
            raise StepmarkError(f"{path}: no {SUMMARY}; the conversion is unfinished or failed")
        return shards
    below = storage.files_below(path) if storage.is_remote(path) else storage.match(files.join(path, "*"))
    if any(TMP_PREFIX in m.path for m in below):
        raise StepmarkError(f"{path}: holds only an unfinished conversion (no {SUMMARY}): not a convert-ui output yet")
    if not storage.exists(path) and not below:
        raise StepmarkError(f"{path}: no such file or folder")
    if below:
        raise StepmarkError(f"{path}: not a convert-ui output folder (no {SHARD_GLOB}, no {SUMMARY})")
    return [path]


def parse_episode(data: bytes, *, where: str = "record") -> ui_episode_pb2.UiEpisode:
    episode = ui_episode_pb2.UiEpisode()
    try:
        episode.ParseFromString(data)
    except Exception as exc:  # protobuf DecodeError
        raise StepmarkError(f"{where}: not a serialized UiEpisode ({exc})") from exc
    return episode


def iter_records(path: str) -> Iterator[tuple[str, int, bytes]]:
    """(shard, offset, serialized UiEpisode) for every record under `path`, shard by shard; a record may be
    one part of an episode (`iter_parts` checks and groups them)."""
    for shard in shard_paths(path):
        with _open(shard) as f:
            for offset, data in tfrecord.iter_records(f, name=shard):
                yield shard, offset, data


def iter_parts(path: str) -> Iterator[tuple[str, int, bytes, bool]]:
    """(shard, offset of the episode's first record, record, whether it ends the episode) for every record
    under `path`, the parts of each episode checked (`PartsCheck`): StepmarkError for a missing part."""
    check = PartsCheck()
    last_shard = ""
    start = 0
    for shard, offset, data in iter_records(path):
        where = f"{shard} at byte {offset}"
        if shard != last_shard and last_shard:
            check.close(last_shard)
        last_shard = shard
        part = record_part(data, where=where)
        if part is None or part.index == 0:
            start = offset
        ends = check.add(part, _steps_in(data) if part is not None else 0, where)
        yield shard, start, data, ends
    if last_shard:
        check.close(last_shard)


def iter_episodes(path: str) -> Iterator[ui_episode_pb2.UiEpisode]:
    """Every UiEpisode in an output folder or shard, one at a time (an episode in parts merged)."""
    merged = None
    for shard, offset, data, ends in iter_parts(path):
        merged = merge_part(merged, parse_episode(data, where=f"{shard} at byte {offset}"))
        if ends:
            yield merged
            merged = None


def index_records(path: str) -> list[RecordRef]:
    """A RecordRef per episode (reads each record once); an episode in parts is at its first part."""
    refs = []
    steps = 0
    for shard, offset, data, ends in iter_parts(path):
        e = parse_episode(data, where=f"{shard} at byte {offset}")
        steps += len(e.episode.time_steps)
        if ends:
            refs.append(RecordRef(e.episode_id, shard, offset, steps, e.app_package, e.source, e.goal))
            steps = 0
    return refs


def read_episode(shard: str, offset: int) -> ui_episode_pb2.UiEpisode:
    """The episode whose record starts at `offset` in `shard` (no record before it is read; an episode in
    parts: its first part, then the parts after it)."""
    check = PartsCheck()
    merged = None
    with _open(shard) as f:
        at = offset
        while True:
            where = f"{shard} at byte {at}"
            try:
                data, after = tfrecord.read_at(f, at, name=shard)
            except tfrecord.TFRecordError:
                if merged is None:
                    raise
                check.close(shard)  # the shard ends inside the episode: its missing part is named
                raise
            part = record_part(data, where=where)
            ends = check.add(part, _steps_in(data) if part is not None else 0, where)
            merged = merge_part(merged, parse_episode(data, where=where))
            if ends:
                return merged
            at = after


def find_episode(path: str, episode_id: str) -> ui_episode_pb2.UiEpisode:
    """The episode with this id; StepmarkError naming a few known ids when there is none."""
    seen = []
    for episode in iter_episodes(path):
        if episode.episode_id == episode_id:
            return episode
        if len(seen) < 5:
            seen.append(episode.episode_id)
    hint = f" (e.g. {', '.join(seen)})" if seen else ""
    raise StepmarkError(f"{path}: no episode {episode_id!r}{hint}")


def read_summary(folder: str) -> dict:
    """summary.json of an output folder."""
    path = files.join(files.strip_slash(folder), SUMMARY)
    try:
        return json.loads(files.read_bytes(path))
    except Exception as exc:
        raise StepmarkError(f"{path}: cannot read ({exc})") from exc


def read_dead_letters(folder: str) -> Iterator[DeadLetter]:
    """The dead letters of an output folder, in file order."""
    path = files.join(files.strip_slash(folder), DEAD_LETTERS)
    with _open(path) as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                try:
                    yield DeadLetter.from_json(line.decode("utf-8"))
                except (ValueError, KeyError) as exc:
                    raise StepmarkError(f"{path} line {lineno}: not a dead letter ({exc})") from exc

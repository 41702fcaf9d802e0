"""Reading what `stepmark convert-ui` wrote: TFRecord shards of serialized `UiEpisode`s, `dead_letters.jsonl`
and `summary.json`. Random access by byte offset (the importer stores shard + offset; the annotator replays from
it), iteration, and lookup by episode id. Paths may be local or any Beam filesystem.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from pipelines import storage, tfrecord
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
    """(shard, offset, serialized UiEpisode) for every record under `path`, shard by shard."""
    for shard in shard_paths(path):
        with _open(shard) as f:
            for offset, data in tfrecord.iter_records(f, name=shard):
                yield shard, offset, data


def iter_episodes(path: str) -> Iterator[ui_episode_pb2.UiEpisode]:
    """Every UiEpisode in an output folder or shard, one at a time."""
    for shard, offset, data in iter_records(path):
        yield parse_episode(data, where=f"{shard} at byte {offset}")


def index_records(path: str) -> list[RecordRef]:
    """A RecordRef per episode (reads each record once)."""
    refs = []
    for shard, offset, data in iter_records(path):
        e = parse_episode(data, where=f"{shard} at byte {offset}")
        refs.append(
            RecordRef(e.episode_id, shard, offset, len(e.episode.time_steps), e.app_package, e.source)
        )
    return refs


def read_episode(shard: str, offset: int) -> ui_episode_pb2.UiEpisode:
    """The episode whose record starts at `offset` in `shard` (no other record is read)."""
    with _open(shard) as f:
        data, _ = tfrecord.read_at(f, offset, name=shard)
    return parse_episode(data, where=f"{shard} at byte {offset}")


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

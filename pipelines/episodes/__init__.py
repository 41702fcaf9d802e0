"""Episode step data behind one interface: envlogger (Riegeli, default), Pickle, and UI episode records.

`open_episode(episode, data_dir)` picks the reader from how the episode was stored; `create_writer` makes
the writer for a new environment episode. Layout and on-disk details: `schemas/episode_storage.md`.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from google.protobuf import json_format

from pipelines.episodes.base import EnvSpecs, EpisodeMetadata, EpisodeReader, EpisodeWriter, Step
from pipelines.episodes.envlogger_store import EnvloggerEpisodeReader, EnvloggerEpisodeWriter
from pipelines.episodes.layout import resolve
from pipelines.episodes.pickle_store import PickleEpisodeReader, PickleEpisodeWriter
from pipelines.episodes.stats import EpisodeStats, episode_info
from pipelines.episodes.ui import open_ui_episode
from pipelines.episodes.writer_process import BackgroundEnvloggerWriter, WriterProcess
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2

STORAGE_KINDS = ("envlogger", "pickle")

__all__ = [
    "STORAGE_KINDS",
    "EnvSpecs",
    "EpisodeMetadata",
    "EpisodeReader",
    "EpisodeStats",
    "EpisodeWriter",
    "Step",
    "WriterProcess",
    "create_writer",
    "episode_info",
    "open_episode",
]


def open_episode(episode: study_pb2.Episode, data_dir: str | Path) -> EpisodeReader:
    """The reader for a stored episode: envlogger or pickle by `episode.storage`, UI by its metadata."""
    kind = episode.storage.WhichOneof("type") if episode.HasField("storage") else None
    if kind == "environment_logger":
        el = episode.storage.environment_logger
        return EnvloggerEpisodeReader(resolve(data_dir, el.tag_directory), el.index)
    if kind == "pickle":
        return PickleEpisodeReader(resolve(data_dir, episode.storage.pickle.path))
    metadata: dict[str, Any] = (
        json_format.MessageToDict(episode.metadata) if episode.HasField("metadata") else {}
    )
    if metadata.get("kind") == "ui" and isinstance(metadata.get("ui_record"), dict):
        return open_ui_episode(metadata["ui_record"], data_dir)
    raise StepmarkError(
        f"episode {episode.study_id}/{episode.session_id}/{episode.id}: no step data "
        "(neither an envlogger/pickle storage nor a UI record)"
    )


def create_writer(
    kind: str,
    folder: Path,
    relative: PurePosixPath,
    specs: EnvSpecs,
    dataset_metadata: dict[str, Any] | None = None,
    *,
    process: WriterProcess | None = None,
) -> EpisodeWriter:
    """A writer for one new episode in `folder` (`relative` = its final folder under the data dir).

    With a `process` (envlogger only), the Riegeli writing happens in that child process
    (`writer_process.py`): same files, overlapped with the caller's work.
    """
    if kind == "envlogger":
        if process is not None:
            return BackgroundEnvloggerWriter(process, folder, relative, specs, dataset_metadata)
        return EnvloggerEpisodeWriter(folder, relative, specs, dataset_metadata)
    if kind == "pickle":
        return PickleEpisodeWriter(folder, relative, specs)
    raise StepmarkError(f"unknown episode storage {kind!r} (choose from {', '.join(STORAGE_KINDS)})")

"""Pieces the layout readers share: JSON loading with clear errors, the optional episode.json manifest."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pipelines.traces import validation
from pipelines.traces.model import DeadLetter, RawEpisode

Reader = Callable[[str], bytes]


class LayoutFileError(Exception):
    """A layout file (gestures.json, episode.json, an event) that cannot be read or does not match its schema."""


def load_json(read: Reader, path: str) -> Any:
    try:
        data = read(path)
    except Exception as exc:
        raise LayoutFileError(f"{path}: cannot read ({exc})") from exc
    try:
        return json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LayoutFileError(f"{path}: not valid JSON ({exc})") from exc


def apply_manifest(episode: RawEpisode, read: Reader, path: str) -> None:
    """Fill app package, goal and metadata from episode.json; a bad manifest is a dead letter, not fatal."""
    try:
        manifest = load_json(read, path)
        problem = validation.describe(validation.MANIFEST, manifest)
        if problem:
            raise LayoutFileError(f"{path}: {problem}")
    except LayoutFileError as exc:
        episode.dead_letters.append(
            DeadLetter(path, None, "bad_manifest", str(exc), episode.source.episode_id)
        )
        episode.warnings.append("episode.json ignored (see dead letters)")
        return
    episode.app_package = manifest.get("app_package", "")
    episode.goal = manifest.get("goal", "")
    episode.metadata.update(manifest.get("metadata", {}))

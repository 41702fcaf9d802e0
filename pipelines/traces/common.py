"""Pieces the layout readers share: JSON loading with clear errors, the optional episode.json manifest."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pipelines.hierarchy.encoding import bom_encoding
from pipelines.hierarchy.jsonio import replace_lone_surrogates
from pipelines.traces import validation
from pipelines.traces.model import DeadLetter, RawEpisode

Reader = Callable[[str], bytes]


class LayoutFileError(Exception):
    """A layout file (gestures.json, episode.json, an event) that cannot be read or does not match its schema.
    `reason`: why it could not be read at all (`not_regular`, `outside_input`, `too_large`, `unreadable`), for
    the dead letter's reason field; None when it was read but is wrong (the layout's own reason applies)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


def read_failure_reason(exc: BaseException) -> str:
    """The dead-letter reason of a file that could not be read: the bounded reader's refusal (`not_regular`,
    `outside_input`, `too_large`) or `unreadable` (missing, a symlink loop, no permission, ...)."""
    reason = getattr(exc, "reason", None)
    return reason if isinstance(reason, str) and reason else "unreadable"


def decode_text(data: bytes) -> str:
    """Text of a small layout file: UTF-8, or UTF-8/16/32 with a byte order mark (Windows editors and
    PowerShell redirects write those). Raises UnicodeDecodeError for anything else."""
    return data.decode(bom_encoding(data) or "utf-8")


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:30]} is out of range")
    return value


def parse_json(text: str) -> Any:
    """Strict JSON (RFC 8259): NaN/Infinity and numbers that overflow a float are refused, and nesting too deep
    for the decoder is an error, not a RecursionError. Lone surrogate escapes become U+FFFD (the hierarchy
    parsers' rule). Raises ValueError."""
    if "\\ud" in text or "\\uD" in text:  # lone surrogate escapes: no proto string can hold them
        text = replace_lone_surrogates(text.encode("utf-8"))[0].decode("utf-8")
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def load_json(read: Reader, path: str) -> Any:
    try:
        data = read(path)
    except Exception as exc:
        raise LayoutFileError(f"{path}: cannot read ({exc})", read_failure_reason(exc)) from exc
    try:
        return parse_json(decode_text(data))
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
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
            DeadLetter(path, None, exc.reason or "bad_manifest", str(exc), episode.source.episode_id)
        )
        episode.warnings.append("episode.json ignored (see dead letters)")
        return
    episode.app_package = manifest.get("app_package", "")
    episode.goal = manifest.get("goal", "")
    episode.metadata.update(manifest.get("metadata", {}))

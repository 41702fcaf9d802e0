"""Pieces the layout readers share: JSON loading with clear errors, the optional episode.json manifest."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pipelines.hierarchy.encoding import bom_encoding
from pipelines.hierarchy.jsonio import replace_lone_surrogates
from pipelines.traces import examples, validation
from pipelines.traces.model import DeadLetter, RawEpisode

Reader = Callable[[str], bytes]

#: Positions a numbered trace (LlamaTouch `N.xml`, DroidRun `ui_states/N.json`) may span from its first screen
#: number: a screen numbered further on is a `bad_step` dead letter. Bounds the source steps counted and the
#: `dropped_steps` listed (0.xml beside 99999999999.xml is not a trace of 10^11 screens).
MAX_SCREEN_SPAN = examples.MAX_STEPS


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


def screen_number(stem: str) -> int | None:
    """The screen number a numbered trace file's stem gives ("12" -> 12), None for any other stem ("²", "1a")."""
    if not stem.isdecimal():
        return None
    try:
        return int(stem)
    except ValueError:  # more digits than int() converts
        return None


def number_screens(screens: dict[int, list[str]], episode: RawEpisode) -> tuple[int, int]:
    """(first, span) of a numbered trace whose files `screens` holds by screen number: its first number, and the
    positions 0..span-1 (number - first) its screens cover, gaps included, so that action i stays screen i's.
    Numbers MAX_SCREEN_SPAN or more after the first are removed from `screens`, each of their files a `bad_step`
    dead letter. Sets `episode.num_source_steps` to the span."""
    if not screens:
        return 0, 0
    first = min(screens)
    for number in sorted(n for n in screens if n - first >= MAX_SCREEN_SPAN):
        for path in screens.pop(number):
            why = (f"{path}: screen {number} is {number - first} screens after the trace's first ({first}); "
                   f"at most {MAX_SCREEN_SPAN} are read")  # fmt: skip
            episode.dead_letters.append(DeadLetter(path, None, "bad_step", why, episode.source.episode_id))
    span = max(screens) - first + 1
    episode.num_source_steps = span
    return first, span


def gap_warnings(position: int, first: int, span: int, stepped: set[int], missing: str) -> list[str]:
    """Warnings for the step at `position` of a numbered trace when a neighbouring screen has no step (`stepped`:
    the positions that have one): its action, if any, is a dead letter, not this step's. `missing` says what
    the neighbour lacks, with {n} for its number ("{n}.xml or {n}.vh")."""
    out = []
    if position > 0 and position - 1 not in stepped:
        n = first + position - 1
        out.append(f"gap before this step: screen {n} has no {missing.format(n=n)} (its action is not this step's)")
    if position + 1 < span and position + 1 not in stepped:
        n = first + position + 1
        out.append(f"gap after this step: screen {n} has no {missing.format(n=n)} (the next step is a later screen)")
    return out


def runs(items: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """(position, where) pairs in order, split into runs of consecutive positions: the actions of screens that
    have no file at all become one dead letter per run, not one per action (a gap of 10^5 screens would be
    10^5 letters from a small macro.json)."""
    out: list[list[tuple[int, int]]] = []
    for item in items:
        if out and out[-1][-1][0] + 1 == item[0]:
            out[-1].append(item)
        else:
            out.append([item])
    return out

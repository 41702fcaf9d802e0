"""Pieces the layout readers share: JSON loading with clear errors, the optional episode.json manifest."""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from pipelines.hierarchy.encoding import bom_encoding
from pipelines.hierarchy.jsonio import replace_lone_surrogates
from pipelines.traces import examples, validation
from pipelines.traces.model import DeadLetter, RawAction, RawEpisode

Reader = Callable[[str], bytes]
T = TypeVar("T")

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


def ordered_steps(
    entries: list, key: str, episode: RawEpisode, path: str, not_object: Callable[[int, int], str]
) -> Iterator[tuple[int, int, dict]]:
    """(position, file index, entry) of a layout's JSON list of steps (`path`: the file that holds it), in the
    order of each entry's integer `key` ("step_id", "step"); an entry without one is placed by its file index,
    and ties keep file order. An entry that is not a JSON object is a `bad_step` dead letter at its position,
    `not_object(position, index)` saying why."""

    def place(i: int) -> tuple[int, int]:
        entry = entries[i]
        number = entry.get(key) if isinstance(entry, dict) else None
        return (number if type(number) is int else i), i

    eid = episode.source.episode_id
    for position, i in enumerate(sorted(range(len(entries)), key=place)):
        entry = entries[i]
        if not isinstance(entry, dict):
            episode.dead_letters.append(DeadLetter(path, position, "bad_step", not_object(position, i), eid))
            continue
        yield position, i, entry


def usable_action(
    parse: Callable[[dict, list[str]], RawAction],
    entry: dict,
    warnings: list[str],
    episode: RawEpisode,
    path: str,
    position: int,
    where: str,
) -> RawAction | None:
    """The action `parse(entry, warnings)` makes of a step, or None when it raises ValueError: then a
    `bad_action` dead letter "`where`: action not usable (...)" of `path` at `position`, and the step is kept
    without its action."""
    try:
        return parse(entry, warnings)
    except ValueError as exc:
        why = f"{where}: action not usable ({exc})"
        episode.dead_letters.append(DeadLetter(path, position, "bad_action", why, episode.source.episode_id))
        return None


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


def actions_on_steps(
    items: Iterable[tuple[int, T]],
    first: int,
    stepped: Container[int],
    shots: Mapping[int, str],
    episode: RawEpisode,
    path: str,
    screenshot_only: Callable[[int, int, str], str],
    no_file: Callable[[int, int], str],
) -> Iterator[tuple[int, T]]:
    """The (position, item) of a numbered trace's actions (`path`: the file that lists them) whose screen has a
    step; an action whose screen has none is a `bad_action` dead letter of `path`, said by the layout's own
    words: `screenshot_only(position, number, shot)` at once when its screen left only a screenshot, and
    `no_file(first_position, last_position)` once per run of consecutive screens with no file at all, when the
    items are all read (a gap of 10^5 screens is one letter, not 10^5 from a small actions file). Read it to
    the end: the runs' letters come last, after the caller's own letters about the items."""
    eid = episode.source.episode_id
    lost: list[int] = []  # positions of actions on screens with no file at all, in order
    for position, item in items:
        if position in stepped:
            yield position, item
            continue
        number = first + position
        if number in shots:
            why = screenshot_only(position, number, shots[number])
            episode.dead_letters.append(DeadLetter(path, position, "bad_action", why, eid))
        else:
            lost.append(position)
    start = 0
    for i, position in enumerate(lost):
        if i + 1 == len(lost) or lost[i + 1] != position + 1:  # the last of a run of consecutive positions
            why = no_file(lost[start], position)
            episode.dead_letters.append(DeadLetter(path, lost[start], "bad_action", why, eid))
            start = i + 1

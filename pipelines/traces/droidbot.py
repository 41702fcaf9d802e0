"""DroidBot output folders: `states/state_<tag>.json` + `states/screen_<tag>.png`, `events/event_<tag>.json`.

An episode is the run's events sorted by tag. Each event is one step: the observation is the event's
`start_state` (matched to a state file whose `state_str` equals it; a state file's tag is when it was saved,
not the event's), the action is the event itself. DroidBot may save one screen several times (same
`state_str`, later tags): the event gets the newest one saved at or before its own tag, else (its state was
saved only after it, the clocks of a run differ by seconds) the first one saved after it. An event whose start state was never saved
is a dead letter (`missing_state`) and the episode continues; a state file that is not JSON cannot be matched
and is reported too. Screenshots are JPEG data despite the .png name; the converter trusts the bytes.
"""

from __future__ import annotations

import bisect
import json
from typing import Any

from pipelines.traces import files, validation
from pipelines.traces.common import (
    LayoutFileError,
    Reader,
    decode_text,
    load_json,
    parse_json,
    read_failure_reason,
)
from pipelines.traces.discover import DROIDBOT_UTG, IMAGE_EXTS, natural_key
from pipelines.traces.model import DeadLetter, EpisodeSource, RawAction, RawEpisode, RawStep

KEYS = {"BACK": "back", "HOME": "home", "ENTER": "enter"}


def _bounds(view: Any) -> tuple[int, int, int, int] | None:
    if not isinstance(view, dict):
        return None
    b = view.get("bounds")
    try:
        (x1, y1), (x2, y2) = b
        return int(x1), int(y1), int(x2), int(y2)
    except (TypeError, ValueError, OverflowError):
        return None


def _centre(b: tuple[int, int, int, int] | None) -> tuple[float | None, float | None]:
    if b is None:
        return None, None
    return (b[0] + b[2]) / 2, (b[1] + b[3]) / 2


def _xy(x: Any, y: Any, view: Any) -> tuple[float | None, float | None]:
    """DroidBot's UIEvent.get_xy: explicit coordinates when both are truthy, else the view's centre."""
    if x and y:
        return float(x), float(y)
    return _centre(_bounds(view))


def event_action(event: dict, raw: str) -> RawAction:
    """A DroidBot event (the `event` object of an event file) as a RawAction in hierarchy coordinates."""
    kind = event.get("event_type")
    view = event.get("view")
    target = {
        "target_bounds": _bounds(view),
        "target_class": (view or {}).get("class") or "",
        "target_resource_id": (view or {}).get("resource_id") or "",
    }
    if kind in ("touch", "long_touch", "set_text"):
        x, y = _xy(event.get("x"), event.get("y"), view)
        mapped = {"touch": "tap", "long_touch": "long_press", "set_text": "type"}[kind]
        duration = int(event.get("duration") or (2000 if kind == "long_touch" else 0))
        return RawAction(
            mapped,
            x=x,
            y=y,
            space="hierarchy",
            text=event.get("text") or "",
            duration_ms=duration,
            raw_json=raw,
            **target,
        )
    if kind == "swipe":
        x, y = _xy(event.get("start_x"), event.get("start_y"), event.get("start_view"))
        ex, ey = _xy(event.get("end_x"), event.get("end_y"), event.get("end_view"))
        start = event.get("start_view")
        return RawAction(
            "swipe",
            x=x,
            y=y,
            end_x=ex,
            end_y=ey,
            space="hierarchy",
            duration_ms=int(event.get("duration") or 1000),
            raw_json=raw,
            target_bounds=_bounds(start),
            target_class=(start or {}).get("class") or "",
            target_resource_id=(start or {}).get("resource_id") or "",
        )
    if kind == "scroll":
        x, y = _xy(event.get("x"), event.get("y"), view)
        return RawAction(
            "swipe",
            x=x,
            y=y,
            space="hierarchy",
            direction=str(event.get("direction") or "DOWN").upper(),
            duration_ms=500,
            raw_json=raw,
            **target,
        )
    if kind == "key":
        name = str(event.get("name") or "")
        return RawAction(KEYS.get(name.upper(), "other"), text=name, space="hierarchy", raw_json=raw)
    return RawAction("other", space="hierarchy", raw_json=raw)


def utg_app_package(text: str) -> str:
    """`app_package` of DroidBot's utg.js (`var utg = {...};`, the app it tested); "" when it names none.
    Raises ValueError when the file is not that."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start or text[:start].replace("var utg", "").strip(" \t\r\n="):
        raise ValueError("not `var utg = {...}`")
    utg = parse_json(text[start : end + 1])
    package = utg.get("app_package") if isinstance(utg, dict) else None
    return package.strip() if isinstance(package, str) else ""


def _app_package(episode: RawEpisode, read_file: Reader, path: str) -> None:
    """The app under test from utg.js; a utg.js that cannot be read or parsed is a `bad_manifest` dead letter
    (only the app package is lost)."""
    eid = episode.source.episode_id
    try:
        data = read_file(path)
    except Exception as exc:
        why = f"{path}: cannot read ({exc})"
        episode.dead_letters.append(DeadLetter(path, None, read_failure_reason(exc), why, eid))
        return
    try:
        episode.app_package = utg_app_package(decode_text(data))
    except ValueError as exc:  # UnicodeDecodeError is one
        episode.dead_letters.append(DeadLetter(path, None, "bad_manifest", f"{path}: {exc}", eid))


def saved_for(saved: list[tuple[tuple, str, str]], event_tag: str) -> tuple[str, str]:
    """The (tag, path) of the state file an event at `event_tag` starts in, among the files saving its state
    (`saved`: (natural_key(tag), tag, path) in tag order): the newest saved at or before the event, else the
    first saved after it."""
    at = bisect.bisect_right(saved, (natural_key(event_tag), "\uffff"))
    _, tag, path = saved[at - 1] if at else saved[0]
    return tag, path


def read(source: EpisodeSource, read_file: Reader) -> RawEpisode:
    states: dict[str, str] = {}  # tag -> state json path
    screens: dict[str, str] = {}  # tag -> screenshot path
    events: list[tuple[str, str]] = []  # (tag, path)
    duplicates: list[str] = []
    for path in source.files:
        parts = files.relative(source.source_path, path).split("/")
        if len(parts) != 2:
            continue
        stem, ext = files.stem_and_ext(parts[1])
        if parts[0] == "states" and stem.startswith("state_") and ext == ".json":
            states[stem[len("state_") :]] = path
        elif parts[0] == "states" and stem.startswith("screen_") and ext in IMAGE_EXTS:
            tag = stem[len("screen_") :]
            if tag in screens:
                duplicates.append(f"also found {parts[1]} for state {tag}; not used")
            else:
                screens[tag] = path
        elif parts[0] == "events" and stem.startswith("event_") and ext == ".json":
            events.append((stem[len("event_") :], path))
    events.sort(key=lambda e: natural_key(e[0]))
    eid = source.episode_id
    episode = RawEpisode(source=source, steps=[], num_source_steps=len(events), warnings=duplicates)
    utg = [p for p in source.files if files.relative(source.source_path, p) == DROIDBOT_UTG]
    if utg:
        _app_package(episode, read_file, utg[0])

    by_state_str: dict[str, list[tuple[tuple, str, str]]] = {}  # state_str -> [(key, tag, path)], tag order
    for tag, path in sorted(states.items(), key=lambda kv: natural_key(kv[0])):
        try:
            state = load_json(read_file, path)
            state_str = state["state_str"] if isinstance(state, dict) else None
            if not isinstance(state_str, str) or not state_str:
                raise LayoutFileError(f"{path}: no 'state_str' string")
        except LayoutFileError as exc:
            msg = f"{exc}; events starting in this state will be reported as missing_state"
            episode.dead_letters.append(DeadLetter(path, None, exc.reason or "malformed", msg, eid))
            continue
        by_state_str.setdefault(state_str, []).append((natural_key(tag), tag, path))

    for index, (tag, path) in enumerate(events):
        try:
            record = load_json(read_file, path)
            problem = validation.describe(validation.DROIDBOT_EVENT, record)
            if problem:
                raise LayoutFileError(f"{path}: {problem}")
        except LayoutFileError as exc:
            episode.dead_letters.append(DeadLetter(path, index, exc.reason or "bad_event", str(exc), eid))
            continue
        start = record["start_state"]
        if start not in by_state_str:
            msg = (
                f"{path}: event {tag} starts in state {start}, which DroidBot never saved "
                f"(no states/state_*.json has that state_str)"
            )
            episode.dead_letters.append(DeadLetter(path, index, "missing_state", msg, eid))
            continue
        state_tag, state_path = saved_for(by_state_str[start], tag)
        warnings = (
            [] if state_tag in screens else [f"no states/screen_{state_tag}.png: step has no screenshot"]
        )
        raw = json.dumps(record["event"], sort_keys=True)
        episode.steps.append(
            RawStep(
                index=index,
                name=tag,
                hierarchy_path=state_path,
                screenshot_path=screens.get(state_tag),
                action=event_action(record["event"], raw),
                warnings=tuple(warnings),
            )
        )
    for tag, path in sorted(screens.items()):
        if tag not in states:
            msg = f"{path}: screenshot has no states/state_{tag}.json beside it"
            episode.dead_letters.append(DeadLetter(path, None, "orphan_screenshot", msg, eid))
    episode.metadata["droidbot_states"] = str(len(states))
    return episode

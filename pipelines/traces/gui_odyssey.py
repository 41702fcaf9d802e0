"""GUI-Odyssey: `annotations/<episode_id>.json` (one episode each) beside `screenshots/` (the PNGs, flat or in
`data_*/` sub-folders as downloaded). Mapping in schemas/layouts.md.

Screenshot-only: no hierarchy and no detector boxes, so every step is a `NO_HIERARCHY` step whose screen is
its screenshot. Coordinates in `info` are 0..1000 on both axes (fractions of the screen: `device_info` `w`/`h`
times x/1000 gives device pixels), read as normalised points. The release writes a tap or long press as two
equal points (`[[x, y], [x, y]]`; its own converter reads `info[0]`). `low_level_instruction` is the step's
instruction, `description` and `intention` its screen description and action thought (pipelines/step_text.py);
`ps` is debug text on action steps ("[(882, 837)]", a scroll's trajectory) and the annotator's reason on
COMPLETE/INCOMPLETE (`Action.text`); it stays in `raw_json` either way. `task_info.instruction` is the goal.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pipelines.traces import examples, files
from pipelines.traces.common import LayoutFileError, Reader, load_json, ordered_steps, usable_action
from pipelines.traces.model import NO_HIERARCHY, DeadLetter, EpisodeSource, RawAction, RawEpisode, RawStep

LAYOUT = "gui_odyssey"
ANNOTATIONS, SCREENSHOTS = "annotations", "screenshots"
#: GUI-Odyssey coordinates run 0..SCALE on both axes.
SCALE = 1000.0
#: `action` -> RawAction kind. TEXT and INCOMPLETE are the names the release's own converter reads
#: (data/format_converter.py) beside the documented TYPE and IMPOSSIBLE.
KINDS = {
    "CLICK": "tap",
    "LONG_PRESS": "long_press",
    "SCROLL": "swipe",
    "TYPE": "type",
    "TEXT": "type",
    "COMPLETE": "task_complete",
    "IMPOSSIBLE": "task_impossible",
    "INCOMPLETE": "task_impossible",
    "HOME": "home",
    "BACK": "back",
}
#: A CLICK whose `info` names a key instead of a point.
KEYS = {"KEY_HOME": "home", "KEY_BACK": "back", "KEY_APPSELECT": "other"}
#: Episode fields kept in `UiEpisode.metadata` (JSON text).
METADATA_FIELDS = ("device_info", "task_info", "step_length")
#: Step field -> `StepText` field (pipelines/step_text.py); `low_level_instruction` is `Action.instruction`.
TEXT_FIELDS = {"description": "screen_description", "intention": "action_thought"}
#: Step fields kept in `raw_json`: the action as recorded and what the release says about it.
RAW_FIELDS = ("action", "info", "ps", "sam2_bbox")


def _point(value: Any) -> tuple[float, float] | None:
    """(x, y) as fractions of the screen from [x, y] in 0..1000; None when not such a pair."""
    if not (isinstance(value, list) and len(value) == 2 and all(type(v) in (int, float) for v in value)):
        return None
    x, y = value
    if not (math.isfinite(x) and math.isfinite(y) and 0 <= x <= SCALE and 0 <= y <= SCALE):
        return None
    return x / SCALE, y / SCALE


def _press_point(info: Any, warnings: list[str]) -> tuple[float, float] | None:
    """The point of a tap or long press: `info` is `[[x, y], [x, y]]` as released (two equal points), `[[x, y]]`
    as documented, or a bare `[x, y]`. Two different points: the first (as the release's converter reads it),
    with a warning naming both."""
    if isinstance(info, list) and len(info) in (1, 2) and all(isinstance(p, list) for p in info):
        first = _point(info[0])
        if len(info) == 2:
            second = _point(info[1])
            if second is None:
                return None
            if first is not None and second != first:
                warnings.append(
                    f"press info has two points {info[0]} and {info[1]}: the first is the press point"
                )
        return first
    return _point(info)


def action_of(step: dict, warnings: list[str]) -> RawAction:
    """The step's RawAction; raises ValueError when `action` or its `info` is unusable."""
    name = step.get("action")
    info = step.get("info")
    low = step.get("low_level_instruction")
    instruction = low if isinstance(low, str) else ""
    raw = json.dumps({k: step[k] for k in RAW_FIELDS if k in step}, ensure_ascii=False)
    if not isinstance(name, str) or name.upper() not in KINDS:
        raise ValueError(f"action {str(name)[:30]!r} is not one of {', '.join(KINDS)}")
    kind = KINDS[name.upper()]
    if kind in ("tap", "long_press") and isinstance(info, str) and info in KEYS:
        key = KEYS[info]
        return RawAction(key, text=info if key == "other" else "", raw_json=raw, instruction=instruction)
    if kind in ("tap", "long_press"):
        point = _press_point(info, warnings)
        if point is None:
            raise ValueError(f"{name} info {str(info)[:40]!r} is not [[x, y], [x, y]] or [[x, y]] in 0..1000")
        return RawAction(
            kind, x=point[0], y=point[1], space="normalized", raw_json=raw, instruction=instruction
        )
    if kind == "swipe":
        points = info if isinstance(info, list) and len(info) == 2 else []
        start, end = (_point(p) for p in points) if points else (None, None)
        if start is None or end is None:
            raise ValueError(f"SCROLL info {str(info)[:40]!r} is not [[x1, y1], [x2, y2]] in 0..1000")
        return RawAction("swipe", x=start[0], y=start[1], end_x=end[0], end_y=end[1], space="normalized",
                         raw_json=raw, instruction=instruction)  # fmt: skip
    if kind == "type":
        if not isinstance(info, str):
            warnings.append("TYPE without a text in info")
        return RawAction(
            "type", text=info if isinstance(info, str) else "", raw_json=raw, instruction=instruction
        )
    note = step.get("ps") if kind in ("task_complete", "task_impossible") else None
    return RawAction(kind, text=note if isinstance(note, str) else "", raw_json=raw, instruction=instruction)


def episode_sources(rels: list[str], by_rel: dict[str, str]) -> list[EpisodeSource]:
    """One source per `annotations/<id>.json` under a GUI-Odyssey folder; its files: the annotation and the
    screenshots named `<id>_*` anywhere under `screenshots/` (names only, nothing opened)."""
    shots: dict[str, list[str]] = {}
    for rel in rels:
        if rel.startswith(SCREENSHOTS + "/"):
            stem = files.stem_and_ext(rel.rsplit("/", 1)[-1])[0]
            shots.setdefault(stem.rsplit("_", 1)[0], []).append(rel)
    out = []
    for rel in rels:
        parts = rel.split("/")
        if len(parts) == 2 and parts[0] == ANNOTATIONS and parts[1].lower().endswith(".json"):
            stem = files.stem_and_ext(parts[1])[0]
            group = [rel, *sorted(shots.get(stem, []))]
            out.append(EpisodeSource(LAYOUT, stem, by_rel[rel], tuple(by_rel[r] for r in group)))
    return out


def size_check(device: tuple[int, int] | None) -> tuple[int, int, str] | None:
    """`RawStep.expected_size` for a step of a device of that size: the converter warns when the screenshot is
    not the `device_info` size (points are placed as fractions of the screenshot either way). The reader reads
    no screenshot: the converter reads each one once, when it converts its step, so an episode's screenshots
    are never all in memory at once."""
    if device is None:
        return None
    w, h = device
    return w, h, (
        f"screenshot is {{width}}x{{height}} but device_info says {w}x{h}: points (0..1000) placed as fractions "
        "of the screenshot"
    )


def read(source: EpisodeSource, read_file: Reader) -> RawEpisode:
    """The episode of one annotation file: steps in `step` order."""
    eid = source.episode_id
    path = source.source_path
    episode = RawEpisode(source=source, steps=[])
    try:
        doc = load_json(read_file, path)
        if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
            raise LayoutFileError(f"{path}: a GUI-Odyssey annotation is a JSON object with a 'steps' list")
        if len(doc["steps"]) > examples.MAX_STEPS:
            raise LayoutFileError(f"{path}: {len(doc['steps'])} steps; at most {examples.MAX_STEPS} are read")
    except LayoutFileError as exc:
        episode.dead_letters.append(DeadLetter(path, None, exc.reason or "bad_episode_file", str(exc), eid))
        return episode
    task = doc.get("task_info") if isinstance(doc.get("task_info"), dict) else {}
    goal = task.get("instruction") or task.get("task")
    episode.goal = goal if isinstance(goal, str) else ""
    for key in METADATA_FIELDS:
        if key in doc:
            episode.metadata[key] = json.dumps(doc[key], ensure_ascii=False)
    if isinstance(doc.get("episode_id"), str | int):
        episode.metadata["episode_id"] = str(doc["episode_id"])
    by_name = {files.split(p)[1]: p for p in source.files[1:]}
    info = doc.get("device_info") if isinstance(doc.get("device_info"), dict) else {}
    device = (info.get("w"), info.get("h")) if all(type(info.get(k)) is int for k in ("w", "h")) else None
    entries = doc["steps"]
    episode.num_source_steps = len(entries)
    for position, i, entry in ordered_steps(
        entries, "step", episode, path, lambda _, i: f"{path}: steps[{i}] is not an object"
    ):
        name = files.split(str(entry.get("screenshot", "")).replace("\\", "/"))[1]
        shot = by_name.get(name) if name else None
        if shot is None:
            message = (
                f"{path}: steps[{i}] names screenshot {name[:80] or '(none)'!r}, not found under {SCREENSHOTS}/"
            )
            episode.dead_letters.append(DeadLetter(path, position, "missing_screenshot", message, eid))
            continue
        warnings: list[str] = []
        action = usable_action(action_of, entry, warnings, episode, path, position, f"{path}: steps[{i}]")
        text = tuple(
            (name, entry[key]) for key, name in TEXT_FIELDS.items() if isinstance(entry.get(key), str)
        )
        episode.steps.append(
            RawStep(
                position,
                files.stem_and_ext(name)[0],
                "",
                shot,
                action,
                tuple(warnings),
                NO_HIERARCHY,
                expected_size=size_check(device),
                text=text,
            )
        )
    return episode

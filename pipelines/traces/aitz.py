"""Android-in-the-Zoo (AitZ): one folder per episode, `<folder>/<folder>.json` (a list of step objects) beside
the step screenshots `<folder>_<step>.png`. Mapping in schemas/layouts.md.

Screenshot-first: there is no view hierarchy. Each step's OCR/icon boxes (`ui_positions` as `[y, x, h, w]`
screenshot pixels, `ui_text`, `ui_types`) become the same annotation document AITW steps become, so the one
detector parser (`pipelines.hierarchy.aitw`, format `aitw_annotations`) turns them into objects; the document
travels in `RawEpisode.blobs`. Actions use AITW's codes and normalised (y, x) points (`aitw.results_action`).
The chain-of-action-thought texts (`coat_*`) land in `StepInfo.text`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

from pipelines.traces import aitw, files
from pipelines.traces.common import (
    LayoutFileError,
    Reader,
    load_json,
    ordered_steps,
    parse_json,
    usable_action,
)
from pipelines.traces.discover import IMAGE_EXTS, natural_key
from pipelines.traces.model import DeadLetter, EpisodeSource, RawAction, RawEpisode, RawStep

LAYOUT = "aitz"
#: AitZ field -> `StepText` field (pipelines/step_text.py).
COAT_FIELDS = {
    "coat_screen_desc": "screen_description",
    "coat_action_think": "action_thought",
    "coat_action_desc": "action_description",
    "coat_action_result": "action_result",
}
#: Most steps believed in one episode file (AitZ episodes are tens of steps).
MAX_STEPS = aitw.MAX_STEPS


def _json_value(value: Any, what: str) -> Any:
    """AitZ keeps lists as strings holding JSON ("[[54, 17, 8, 12], ...]"); plain lists are accepted too."""
    if isinstance(value, str):
        try:
            return parse_json(value)
        except ValueError as exc:
            raise ValueError(f"{what} is not JSON ({exc})") from None
    return value


def _numbers(value: Any, what: str, n: int) -> list[float]:
    value = _json_value(value, what)
    if not isinstance(value, list) or len(value) != n or not all(type(v) in (int, float) for v in value):
        raise ValueError(f"{what} is not a list of {n} numbers")
    return [float(v) for v in value]


def annotations_doc(step: dict, warnings: list[str]) -> bytes:
    """The step's detector boxes as the `aitw_annotations` document, in screenshot pixels."""
    positions = _json_value(step.get("ui_positions", "[]"), "ui_positions")
    texts = _json_value(step.get("ui_text", "[]"), "ui_text")
    types = _json_value(step.get("ui_types", "[]"), "ui_types")
    if not all(isinstance(v, list) for v in (positions, texts, types)):
        raise ValueError("ui_positions, ui_text and ui_types must be lists")
    if len(positions) > aitw.MAX_ANNOTATIONS:
        raise ValueError(f"{len(positions)} ui_positions; at most {aitw.MAX_ANNOTATIONS} are read")
    if not len(positions) == len(texts) == len(types):
        warnings.append(
            f"detector fields disagree ({len(positions)} ui_positions, {len(texts)} ui_text, {len(types)} "
            f"ui_types): missing texts/types left empty"
        )
    annotations = []
    for i, box in enumerate(positions):
        ok = (
            isinstance(box, list)
            and len(box) == 4
            and all(type(v) in (int, float) and math.isfinite(v) for v in box)
        )
        y, x, h, w = box if ok else (None, None, None, None)
        text = texts[i] if i < len(texts) and isinstance(texts[i], str) else ""
        ui_type = types[i] if i < len(types) and isinstance(types[i], str) else ""
        annotations.append({"y": y, "x": x, "h": h, "w": w, "text": text, "ui_type": ui_type})
    doc = {"units": "pixels", "annotations": annotations}
    return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def _step_action(step: dict, warnings: list[str]) -> RawAction:
    """The step's action from its `result_*` fields (AITW's codes); raises ValueError when they are unusable."""
    code = step.get("result_action_type")
    if type(code) is not int:
        raise ValueError(f"result_action_type {str(code)[:20]!r} is not an integer")
    touch = _numbers(step.get("result_touch_yx", "[-1.0, -1.0]"), "result_touch_yx", 2)
    lift = _numbers(step.get("result_lift_yx", "[-1.0, -1.0]"), "result_lift_yx", 2)
    typed = step.get("result_action_text", "")
    typed = typed if isinstance(typed, str) else ""
    raw = json.dumps(
        {
            k: step.get(k)
            for k in ("result_action_type", "result_touch_yx", "result_lift_yx", "result_action_text")
        },
        ensure_ascii=False,
    )
    return aitw.results_action(code, touch, lift, typed, raw, warnings)


def _load_steps(read_file: Reader, path: str) -> list:
    """The episode file's step list; raises LayoutFileError (`common.load_json`'s, or the wrong shape)."""
    doc = load_json(read_file, path)
    if not isinstance(doc, list):
        raise LayoutFileError(f"{path}: an AitZ episode file is a JSON list of steps, not {type(doc).__name__}")
    if len(doc) > MAX_STEPS:
        raise LayoutFileError(f"{path}: {len(doc)} steps; at most {MAX_STEPS} are read")
    return doc


def read(source: EpisodeSource, read_file: Reader) -> RawEpisode:
    """The episode of one AitZ folder: steps in `step_id` order (file order when absent)."""
    eid = source.episode_id
    folder_name = files.split(source.source_path)[1]
    by_name = {files.split(p)[1]: p for p in source.files}
    path = by_name.get(f"{folder_name}.json", source.source_path)
    episode = RawEpisode(source=source, steps=[])
    try:
        entries = _load_steps(read_file, path)
    except LayoutFileError as exc:
        episode.dead_letters.append(DeadLetter(path, None, exc.reason or "bad_episode_file", str(exc), eid))
        return episode
    episode.num_source_steps = len(entries)
    # Each step repeats AITW's `episode_length`: a claim of more steps than the file holds means steps are lost.
    claimed = sorted(
        {e["episode_length"] for e in entries if isinstance(e, dict) and type(e.get("episode_length")) is int}
    )
    if any(n > len(entries) for n in claimed):
        says = " or ".join(map(str, claimed[:3]))
        episode.warnings.append(f"episode_length says {says} steps but {path} holds {len(entries)}")
    ids = [e.get("step_id") if isinstance(e, dict) and type(e.get("step_id")) is int else None for e in entries]
    # Steps are keyed by position in that order (blobs, names): a step_id given twice, or a missing one whose
    # file index is another step's step_id, must not make two steps share one key (and so one set of boxes).
    counts = Counter(n for n in ids if n is not None)
    shared = sorted(n for n, c in counts.items() if c > 1)
    missing = [i for i, e in enumerate(entries) if isinstance(e, dict) and ids[i] is None]
    if shared:
        shown = ", ".join(f"{n} ({counts[n]} steps)" for n in shared[:10])
        episode.warnings.append(f"step_id given to several steps: {shown}; each kept, in file order")
    if missing:
        episode.warnings.append(f"{len(missing)} step(s) without an integer step_id, placed by file position")
    used_images: set[str] = set()
    for position, i, entry in ordered_steps(
        entries, "step_id", episode, path, lambda position, _: f"{path}: step {position} is not a JSON object"
    ):
        warnings: list[str] = []
        if ids[i] is None:
            also = " (also another step's step_id)" if i in counts else ""
            warnings.append(f"no integer step_id: placed by its file position {i}{also}")
        elif counts[ids[i]] > 1:
            warnings.append(f"step_id {ids[i]} is given to {counts[ids[i]]} steps: placed in file order")
        if not episode.goal and isinstance(entry.get("instruction"), str):
            episode.goal = entry["instruction"]
        step_id = entry.get("step_id") if type(entry.get("step_id")) is int else i
        image_name = files.split(str(entry.get("image_path", "")).replace("\\", "/"))[1]
        shot = by_name.get(image_name) if image_name else None
        if shot is None:
            shot = next((by_name[f"{folder_name}_{step_id}{ext}"] for ext in IMAGE_EXTS
                         if f"{folder_name}_{step_id}{ext}" in by_name), None)  # fmt: skip
        if shot is None:
            message = (
                f"{path}: step {step_id} names screenshot {image_name or '(none)'!r}, not in {folder_name}/"
            )
            episode.dead_letters.append(DeadLetter(path, position, "missing_screenshot", message, eid))
            continue
        used_images.add(files.split(shot)[1])
        tree_path = f"{path}#step_{position}/ui_positions"
        try:
            episode.blobs[tree_path] = annotations_doc(entry, warnings)
        except ValueError as exc:
            episode.dead_letters.append(
                DeadLetter(path, position, "bad_step", f"{path}: step {step_id}: {exc}", eid)
            )
            continue
        where = f"{path}: step {step_id}"
        action = usable_action(_step_action, entry, warnings, episode, path, position, where)
        text = tuple(
            (name, entry[key]) for key, name in COAT_FIELDS.items() if isinstance(entry.get(key), str)
        )
        episode.steps.append(
            RawStep(
                position,
                f"step_{position}",
                tree_path,
                shot,
                action,
                tuple(warnings),
                "aitw_annotations",
                text=text,
            )
        )
        if isinstance(entry.get("episode_id"), str | int) and "episode_id" not in episode.metadata:
            episode.metadata["episode_id"] = str(entry["episode_id"])
    unused = sorted(
        (n for n in by_name if n != f"{folder_name}.json" and n not in used_images), key=natural_key
    )
    if unused:
        episode.warnings.append(f"screenshots no step names: {', '.join(unused[:10])}")
    return episode

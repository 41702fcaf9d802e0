"""AndroidControl repackaged as JSON (as agent frameworks ship it): one `.json` file per episode holding the
release's features by name: `goal`, `screenshots` (base64 PNG), `actions` (objects or JSON strings, one fewer
than screenshots), `step_instructions`, optionally `accessibility_trees` (base64 serialized
`AndroidAccessibilityForest`), `screenshot_widths`/`screenshot_heights`, `episode_id`. Mapping in
schemas/layouts.md.

Discovery sees a `.json` single screen; `looks_like` tells such a file from a Rico/DroidBot screen by its bytes
when it is read (`pipelines.traces.read_episode`). Without trees the steps are screenshot-only. Actions are
AndroidControl's (`android_control.action_from_json`): one mapping for the TFRecord and the JSON forms.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import replace

from pipelines.hierarchy import MAX_BYTES, HierarchyError, image_info
from pipelines.hierarchy.screenshot import MAX_SCREENSHOT_BYTES
from pipelines.traces import examples
from pipelines.traces.android_control import action_from_json
from pipelines.traces.common import decode_text, parse_json
from pipelines.traces.model import NO_HIERARCHY, DeadLetter, EpisodeSource, RawEpisode, RawStep

LAYOUT = "android_control_json"
#: Keys that make a JSON object an AndroidControl episode (checked on the bytes first, then on the object).
REQUIRED = ("screenshots", "actions")


def looks_like(data: bytes) -> bool:
    """Cheap test on the bytes (no parse): the required keys appear as JSON strings. They may be values of an
    ordinary screen (a Rico node whose text is "actions"): `read_bytes` checks them as top-level keys."""
    return all(f'"{key}"'.encode() in data for key in REQUIRED)


def is_episode(doc: object) -> bool:
    """The parsed file is an AndroidControl JSON episode: an object with every REQUIRED key at its top level."""
    return isinstance(doc, dict) and all(key in doc for key in REQUIRED)


def _list(doc: dict, key: str) -> list:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise ValueError(f"'{key}' is not a list")
    if len(value) > examples.MAX_STEPS:
        raise ValueError(f"'{key}' has {len(value)} entries; at most {examples.MAX_STEPS} are read")
    return value


def _b64(value: object, what: str) -> bytes:
    if not isinstance(value, str) or not value:
        raise HierarchyError(
            "missing_screenshot" if "screenshot" in what else "malformed", f"{what} is not a base64 string"
        )
    limit = MAX_SCREENSHOT_BYTES if "screenshot" in what else MAX_BYTES
    if len(value) // 4 * 3 > limit:  # checked before decoding: the bytes are never allocated
        raise HierarchyError("too_large", f"{what} holds about {len(value) // 4 * 3} bytes; at most {limit} are read")
    try:
        return base64.b64decode(
            value.split(",", 1)[-1] if value.startswith("data:") else value, validate=True
        )
    except (binascii.Error, ValueError) as exc:
        raise HierarchyError(
            "bad_screenshot" if "screenshot" in what else "malformed", f"{what} is not base64 ({exc})"
        ) from None


def read_bytes(source: EpisodeSource, data: bytes) -> RawEpisode | None:
    """The episode of one AndroidControl JSON file (its bytes already read); None when the file is JSON but not
    such an episode (`is_episode`): an ordinary `.json` screen whose values hold the key names, for the
    single-screen reader. Bytes that are not JSON are a `bad_episode_file`."""
    path, eid = source.source_path, source.episode_id
    try:
        doc = parse_json(decode_text(data))
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        episode = RawEpisode(source=replace(source, layout=LAYOUT), steps=[])
        message = f"{path}: not an AndroidControl JSON episode ({exc})"
        episode.dead_letters.append(DeadLetter(path, None, "bad_episode_file", message, eid))
        return episode
    if not is_episode(doc):
        return None
    source = replace(source, layout=LAYOUT)
    episode = RawEpisode(source=source, steps=[])
    try:
        shots, actions = _list(doc, "screenshots"), _list(doc, "actions")
        trees, instructions = _list(doc, "accessibility_trees"), _list(doc, "step_instructions")
        widths, heights = _list(doc, "screenshot_widths"), _list(doc, "screenshot_heights")
    except ValueError as exc:
        message = f"{path}: not an AndroidControl JSON episode ({exc})"
        episode.dead_letters.append(DeadLetter(path, None, "bad_episode_file", message, eid))
        return episode
    episode.num_source_steps = len(shots)
    goal = doc.get("goal")
    episode.goal = goal if isinstance(goal, str) else ""
    if isinstance(doc.get("episode_id"), str | int):
        episode.metadata["episode_id"] = str(doc["episode_id"])
    if trees and len(trees) != len(shots):
        episode.warnings.append(
            f"{len(trees)} accessibility_trees for {len(shots)} screenshots: steps without one are screenshot-only"
        )
    if len(actions) > len(shots):
        message = f"{path}: {len(actions)} actions for {len(shots)} screenshots; the extra ones are not used"
        episode.dead_letters.append(DeadLetter(path, None, "bad_action", message, eid))
    for i, shot_value in enumerate(shots):
        warnings: list[str] = []
        shot_path = f"{path}#screenshots[{i}]"
        try:
            shot = _b64(shot_value, f"screenshots[{i}]")
            info = image_info(shot)
        except HierarchyError as exc:
            episode.dead_letters.append(DeadLetter(path, i, exc.reason, f"{shot_path}: {exc}", eid))
            continue
        episode.blobs[shot_path] = shot
        if i < len(widths) and i < len(heights) and (widths[i], heights[i]) != (info.width, info.height):
            warnings.append(
                f"screenshot is {info.width}x{info.height} but the file says {widths[i]}x{heights[i]}"
            )
        tree_path, fmt = "", NO_HIERARCHY
        if i < len(trees):
            tree_path = f"{path}#accessibility_trees[{i}]"
            try:
                episode.blobs[tree_path] = _b64(trees[i], f"accessibility_trees[{i}]")
                fmt = "a11y_forest"
            except HierarchyError as exc:
                episode.dead_letters.append(DeadLetter(path, i, exc.reason, f"{tree_path}: {exc}", eid))
                continue
        action = None
        if i < len(actions):
            line = actions[i] if isinstance(actions[i], str) else json.dumps(actions[i], ensure_ascii=False)
            instruction = (
                instructions[i] if i < len(instructions) and isinstance(instructions[i], str) else ""
            )
            try:
                action, action_warnings = action_from_json(line, instruction)
                warnings += action_warnings
            except ValueError as exc:
                message = f"{path}: actions[{i}] is not usable ({exc})"
                episode.dead_letters.append(DeadLetter(path, i, "bad_action", message, eid))
        episode.steps.append(RawStep(i, f"step_{i}", tree_path, shot_path, action, tuple(warnings), fmt))
    return episode

"""AndroidControl episodes: one `tf.train.Example` per episode (GZIP TFRecord files of the release) ->
`RawEpisode` + the step bytes it refers to. Mapping in schemas/layouts.md.

Features: `episode_id` (int), `goal`, `screenshots` (PNG per observation), `accessibility_trees` (serialized
`AndroidAccessibilityForest` per observation), `screenshot_widths`/`screenshot_heights`, `actions` (JSON, one
fewer than observations), `step_instructions` (one per action). Steps refer to their bytes by pseudo paths
(`<file>@<offset>/accessibility_trees[3]`), which `blobs` maps to the bytes, so the one step converter
(`ui_episode.convert_episode`) serves files and records alike.
"""

from __future__ import annotations

from pipelines.hierarchy import HierarchyError, image_info
from pipelines.traces.common import parse_json
from pipelines.traces.examples import (
    byte_values,
    check_counts,
    first_text,
    int_values,
    parse_example,
    scalar_int,
    text,
)
from pipelines.traces.files import display
from pipelines.traces.model import DeadLetter, EpisodeSource, RawAction, RawEpisode, RawStep, RecordEpisode

LAYOUT = "android_control"
#: AndroidControl action_type -> RawAction kind.
KINDS = {
    "click": "tap",
    "long_press": "long_press",
    "scroll": "swipe",
    "input_text": "type",
    "open_app": "open_app",
    "navigate_back": "back",
    "navigate_home": "home",
    "wait": "wait",
}
DIRECTIONS = ("up", "down", "left", "right")


def _number(value: object) -> float | None:
    return float(value) if type(value) in (int, float) else None


def action_from_json(line: str, instruction: str) -> tuple[RawAction, list[str]]:
    """A RawAction from one AndroidControl action JSON; raises ValueError when it is not a JSON object with
    an `action_type` string. Unknown types become `other` (raw JSON kept) with a warning."""
    record = parse_json(line)
    if not isinstance(record, dict) or not isinstance(record.get("action_type"), str):
        raise ValueError("not a JSON object with an action_type string")
    warnings: list[str] = []
    action_type = record["action_type"]
    kind = KINDS.get(action_type, "other")
    if kind == "other":
        warnings.append(f"unknown AndroidControl action_type {action_type[:40]!r}: kept as OTHER")
    x, y = _number(record.get("x")), _number(record.get("y"))
    direction = ""
    if kind == "swipe":
        direction = str(record.get("direction", "")).lower()
        if direction not in DIRECTIONS:
            warnings.append(f"scroll without a usable direction ({direction[:20]!r}): no points")
            direction = ""
        # AndroidControl scrolls the screen (no point): the swipe is computed on the whole screen.
        x = y = None
    value = record.get("text") if kind == "type" else record.get("app_name") if kind == "open_app" else ""
    action = RawAction(
        kind=kind,
        x=x if kind in ("tap", "long_press") else None,
        y=y if kind in ("tap", "long_press") else None,
        space="hierarchy" if kind == "swipe" else "screenshot",
        text=value if isinstance(value, str) else "",
        direction=direction.upper(),
        raw_json=line,
        instruction=instruction,
    )
    return action, warnings


def read(item: RecordEpisode) -> tuple[RawEpisode, dict[str, bytes]]:
    """The episode of one AndroidControl record and its step bytes. Raises ExampleError when the record is
    not an AndroidControl Example (the caller dead-letters it as `bad_record`)."""
    ((path, offset, data),) = item.records
    example = parse_example(data)
    warnings: list[str] = []
    scalar_int(example, "episode_id")  # required, and an int
    # 5 million empty observations are 10 MB of record and 5 million dead letters: counted first.
    check_counts(example, ("accessibility_trees", "screenshots", "screenshot_widths", "screenshot_heights",
                           "actions", "step_instructions"))  # fmt: skip
    trees = byte_values(example, "accessibility_trees", required=True)
    shots = byte_values(example, "screenshots")
    widths, heights = int_values(example, "screenshot_widths"), int_values(example, "screenshot_heights")
    actions = byte_values(example, "actions")
    instructions = byte_values(example, "step_instructions")
    where = f"{path}@{offset}"
    source = EpisodeSource(LAYOUT, item.episode_id, path, (path,))
    episode = RawEpisode(source=source, steps=[], num_source_steps=len(trees))
    episode.goal = first_text(example, "goal", warnings)
    episode.metadata["record"] = display(where)
    eid = item.episode_id
    if len(actions) != max(len(trees) - 1, 0):
        warnings.append(f"{len(actions)} actions for {len(trees)} observations (expected one fewer)")
    if instructions and len(instructions) != len(actions):
        warnings.append(f"{len(instructions)} step instructions for {len(actions)} actions")
    if len(actions) > len(trees):
        episode.dead_letters.append(
            DeadLetter(
                path,
                None,
                "bad_action",
                f"{where}: {len(actions) - len(trees)} action(s) after the last observation ignored",
                eid,
            )  # fmt: skip
        )
    blobs: dict[str, bytes] = {}
    for i, tree in enumerate(trees):
        step_warnings: list[str] = []
        shot = shots[i] if i < len(shots) else b""
        if not shot:
            episode.dead_letters.append(
                DeadLetter(path, i, "missing_screenshot", f"{where}: observation {i} has no screenshot", eid)
            )
            continue
        tree_path, shot_path = f"{where}/accessibility_trees[{i}]", f"{where}/screenshots[{i}]"
        blobs[tree_path], blobs[shot_path] = tree, shot
        if i < len(widths) and i < len(heights):
            try:
                info = image_info(shot)
            except HierarchyError:
                pass  # the step converter dead-letters it as bad_screenshot
            else:
                if (info.width, info.height) != (widths[i], heights[i]):
                    step_warnings.append(
                        f"screenshot is {info.width}x{info.height} but the record says {widths[i]}x{heights[i]}"
                    )
        action = None
        if i < len(actions):
            instruction = (
                text(instructions[i], f"step_instructions[{i}]", step_warnings)
                if i < len(instructions)
                else ""
            )
            line = text(actions[i], f"actions[{i}]", step_warnings)
            try:
                action, action_warnings = action_from_json(line, instruction)
                step_warnings += action_warnings
            except ValueError as exc:
                episode.dead_letters.append(
                    DeadLetter(path, i, "bad_action", f"{where}: actions[{i}] is not usable ({exc})", eid)
                )
        episode.steps.append(
            RawStep(i, f"step_{i}", tree_path, shot_path, action, tuple(step_warnings), "a11y_forest")
        )
    episode.warnings.extend(warnings)
    return episode, blobs

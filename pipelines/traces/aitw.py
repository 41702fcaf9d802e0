"""Android in the Wild (AITW): one `tf.train.Example` per step, grouped into episodes by `episode_id` in the
pipeline -> `RawEpisode` + the step bytes it refers to. Mapping in schemas/layouts.md.

Steps are ordered by `step_id`. Records repeated byte for byte were already read once by the grouping
(`records.group_records`); a step id that still has several (differing) records keeps none of them: each is a
`duplicate_step` dead letter naming the others (which one is right cannot be told). Ids of
0..episode_length-1 with no record are `missing_step` dead letters. Each step's annotations become a small JSON document (`pipelines.hierarchy.aitw`), its raw RGB
pixels a PNG. Dual-point gestures are taps when touch and lift are within 0.04 of the screen (AITW's own
`action_matching` rule), swipes otherwise.
"""

from __future__ import annotations

import io
import itertools
import json
import math

from PIL import Image

from pipelines.hierarchy import HierarchyError
from pipelines.hierarchy.screenshot import MAX_SCREENSHOT_PIXELS, sniff_format
from pipelines.traces import examples
from pipelines.traces.examples import (
    ExampleError,
    any_text,
    byte_values,
    first_text,
    float_values,
    int_values,
    parse_example,
    scalar_int,
    text,
)
from pipelines.traces.files import display
from pipelines.traces.model import DeadLetter, EpisodeSource, RawAction, RawEpisode, RawStep, RecordEpisode

LAYOUT = "aitw"
#: AITW's threshold (action_matching._SWIPE_DISTANCE_THRESHOLD): a dual-point gesture whose touch and lift
#: points are at most this far apart (normalised screen units, Euclidean) is a tap.
TAP_DISTANCE = 0.04
#: AITW action_type values (android_in_the_wild/action_type.py) -> RawAction kind.
ACTION_TYPES = {3: "type", 4: "dual_point", 5: "back", 6: "home", 7: "enter", 10: "task_complete",
                11: "task_impossible"}  # fmt: skip
#: Largest raw screenshot accepted (pixels): the pixel cap of every screenshot (AITW screens are at most a few
#: million), checked with the byte count against the declared dimensions before anything is decoded.
MAX_PIXELS = MAX_SCREENSHOT_PIXELS
#: Largest step id and `episode_length` believed (AITW episodes are tens of steps): a record's claim is checked
#: before anything is allocated from it (a length of 10**12 must not become a list of missing steps).
MAX_STEPS = examples.MAX_STEPS
#: Most annotations of one step (positions hold 4 floats each), counted before they are built.
MAX_ANNOTATIONS = 100_000


def step_ids(data: bytes) -> tuple[str, int]:
    """(episode_id, step_id) of one AITW step record; raises ExampleError."""
    example = parse_example(data)
    values = byte_values(example, "episode_id")
    episode_id = values[0].decode("utf-8", "replace") if values else ""
    if not episode_id:
        ints = int_values(example, "episode_id")
        episode_id = str(ints[0]) if ints else ""
    if not episode_id:
        raise ExampleError("feature 'episode_id' is missing or empty")
    return episode_id, checked_step_id(example)


def checked_step_id(example) -> int:
    """The record's step id, refused (ExampleError) outside 0..MAX_STEPS-1."""
    step_id = scalar_int(example, "step_id")
    if not 0 <= step_id < MAX_STEPS:
        raise ExampleError(f"step_id {step_id} is out of range (0..{MAX_STEPS - 1})")
    return step_id


def check_raw_screenshot(data_length: int, width: int, height: int, channels: int) -> None:
    """Raw pixels must be exactly height x width x channels bytes within the pixel cap; raises HierarchyError
    (`too_large`, `bad_screenshot`) from the numbers alone, before any decoding or allocation."""
    if channels not in (1, 3, 4) or width <= 0 or height <= 0:
        raise HierarchyError("bad_screenshot", f"raw screenshot of {width}x{height}x{channels}: not usable")
    if width * height > MAX_PIXELS:
        raise HierarchyError(
            "too_large", f"raw screenshot of {width}x{height} pixels; at most {MAX_PIXELS} pixels are accepted"
        )
    if data_length != width * height * channels:
        raise HierarchyError(
            "bad_screenshot",
            f"raw screenshot holds {data_length} bytes, {width}x{height}x{channels} needs {width * height * channels}",
        )


def _image_numbers(example) -> tuple[list[bytes], int, int, int]:
    width = (int_values(example, "image/width") or [0])[0]
    height = (int_values(example, "image/height") or [0])[0]
    channels = (int_values(example, "image/channels") or [3])[0]
    return byte_values(example, "image/encoded"), width, height, channels


def refused_screenshot(example) -> HierarchyError | None:
    """Why the step's raw screenshot cannot be kept (checked when the record is read, so a 200 MB image
    claiming more pixels than the cap, or fewer bytes than its dimensions, never travels on); None when it
    can, or when it is encoded / missing (the step converter judges those)."""
    encoded, width, height, channels = _image_numbers(example)
    if not encoded or not encoded[0] or sniff_format(encoded[0]):
        return None
    try:
        check_raw_screenshot(len(encoded[0]), width, height, channels)
    except HierarchyError as exc:
        return exc
    return None


def screenshot_png(data: bytes, width: int, height: int, channels: int) -> bytes:
    """The step's screenshot as image bytes: encoded images are kept; AITW's raw uint8 pixels (height x width
    x channels, what its loader passes to `tf.io.decode_raw`) are stored as PNG. Raises HierarchyError."""
    if sniff_format(data):
        return data
    check_raw_screenshot(len(data), width, height, channels)
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
    out = io.BytesIO()
    Image.frombytes(mode, (width, height), data).save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _point(values: list[float]) -> tuple[float, float] | None:
    """(x, y) from AITW's (y, x); None unless both are finite numbers in [0, 1]."""
    if len(values) != 2 or not all(math.isfinite(v) and 0 <= v <= 1 for v in values):
        return None
    return values[1], values[0]


def action_of(example, warnings: list[str]) -> RawAction | None:
    """The step's action from its results/* features."""
    types = int_values(example, "results/action_type")
    if not types:
        return None
    touch, lift = float_values(example, "results/yx_touch"), float_values(example, "results/yx_lift")
    typed = first_text(example, "results/type_action", warnings)
    raw = json.dumps(
        {"action_type": types[0], "yx_touch": touch, "yx_lift": lift, "type_action": typed},
        ensure_ascii=False,
    )
    return results_action(types[0], touch, lift, typed, raw, warnings)


def results_action(
    action_type: int, touch: list[float], lift: list[float], typed: str, raw: str, warnings: list[str]
) -> RawAction:
    """An AITW action from its result fields (action_type code, normalised (y, x) touch and lift points, typed
    text): the one mapping of AITW's codes, shared by AITW records and Android-in-the-Zoo's JSON steps."""
    kind = ACTION_TYPES.get(action_type, "other")
    if kind == "other":
        warnings.append(f"AITW action_type {action_type} is not a known action: kept as OTHER")
    if kind == "type":
        return RawAction("type", text=typed, raw_json=raw)
    if kind != "dual_point":
        return RawAction(kind, raw_json=raw)
    start, end = _point(touch), _point(lift)
    if start is None or end is None:
        warnings.append("dual-point gesture without usable touch/lift points")
        return RawAction("tap", space="normalized", raw_json=raw)
    if math.dist(start, end) <= TAP_DISTANCE:
        return RawAction("tap", x=start[0], y=start[1], space="normalized", raw_json=raw)
    return RawAction("swipe", x=start[0], y=start[1], end_x=end[0], end_y=end[1], space="normalized",
                     raw_json=raw)  # fmt: skip


def annotations_json(example, width: int, height: int, warnings: list[str]) -> bytes:
    """The step's annotations as the JSON document `pipelines.hierarchy.aitw` parses."""
    examples.check_counts(example, ("image/ui_annotations_text", "image/ui_annotations_ui_types"), MAX_ANNOTATIONS)
    examples.check_counts(example, ("image/ui_annotations_positions",), 4 * MAX_ANNOTATIONS)
    positions = float_values(example, "image/ui_annotations_positions")
    texts = byte_values(example, "image/ui_annotations_text")
    types = byte_values(example, "image/ui_annotations_ui_types")
    n = len(positions) // 4
    if len(positions) % 4 or len(texts) not in (0, n) or len(types) not in (0, n):
        warnings.append(
            f"annotation features disagree ({len(positions)} positions, {len(texts)} texts, {len(types)} "
            f"types): {n} annotation(s) kept"
        )
    annotations = []
    for i in range(n):
        y, x, h, w = positions[4 * i : 4 * i + 4]
        annotations.append(
            {
                "y": y, "x": x, "h": h, "w": w,
                "text": text(texts[i], f"annotation {i} text", warnings) if i < len(texts) else "",
                "ui_type": types[i].decode("ascii", "replace") if i < len(types) else "",
            }
        )  # fmt: skip
    doc = {"width": width, "height": height, "annotations": annotations}
    return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def _finite(example, key: str) -> None:
    if any(not math.isfinite(v) for v in float_values(example, key)):
        raise ExampleError(f"feature {key!r} holds a value that is not a finite number")


def read_step(example, step_id: int, where: str) -> tuple[RawStep, dict[str, bytes], str]:
    """One step's RawStep, its bytes and its current activity. Raises ExampleError / HierarchyError
    (`missing_screenshot`, `bad_screenshot`)."""
    warnings: list[str] = []
    encoded, width, height, channels = _image_numbers(example)
    if not encoded or not encoded[0]:
        raise HierarchyError("missing_screenshot", "the step has no image/encoded bytes")
    shot = screenshot_png(encoded[0], width, height, channels)
    tree_path, shot_path = f"{where}/ui_annotations", f"{where}/image"
    blobs = {tree_path: annotations_json(example, width, height, warnings), shot_path: shot}
    activity = first_text(example, "current_activity", warnings)
    action = action_of(example, warnings)
    step = RawStep(
        step_id, f"step_{step_id}", tree_path, shot_path, action, tuple(warnings), "aitw_annotations"
    )
    return step, blobs, activity


def read(item: RecordEpisode) -> tuple[RawEpisode, dict[str, bytes]]:
    """The episode of one group of AITW step records (any order) and its step bytes."""
    eid = item.episode_id
    parsed = []
    dead = list(item.dead_letters)
    for path, offset, data in sorted(item.records, key=lambda r: (r[0], r[1])):
        try:
            example = parse_example(data)
            step_id = checked_step_id(example)
            _finite(example, "image/ui_annotations_positions")
        except ExampleError as exc:
            dead.append(DeadLetter(path, None, "bad_record", f"{path}@{offset}: {exc}", eid))
            continue
        parsed.append((step_id, path, offset, example))
    parsed.sort(key=lambda p: p[0])
    source_path = parsed[0][1] if parsed else item.source_path
    source = EpisodeSource(LAYOUT, eid, source_path, tuple(sorted({p[1] for p in parsed})))
    claimed = {n for p in parsed for n in int_values(p[3], "episode_length")[:1]}
    lengths = {n for n in claimed if 0 <= n <= MAX_STEPS}
    length = max(lengths) if lengths else len(parsed)
    episode = RawEpisode(source=source, steps=[], num_source_steps=length)
    if claimed - lengths:
        shown = ", ".join(str(n) for n in sorted(claimed - lengths)[:3])
        episode.warnings.append(f"episode_length {shown} is out of range (0..{MAX_STEPS}): not believed")
    if len(lengths) > 1:
        episode.warnings.append(f"steps disagree on episode_length ({sorted(lengths)}): {length} used")
    where_of: dict[int, list[str]] = {}
    for step_id, path, offset, _ in parsed:
        where_of.setdefault(step_id, []).append(display(f"{path}@{offset}"))
    seen = set(where_of) | {d.step for d in item.dead_letters if d.step is not None}  # refused when read
    activities: list[str] = []
    blobs: dict[str, bytes] = {}
    for step_id, path, offset, example in parsed:
        where = f"{path}@{offset}"
        if len(where_of[step_id]) > 1:  # byte-identical copies were already read once (records.group_records)
            others = where_of[step_id]
            dead.append(DeadLetter(path, step_id, "duplicate_step", f"episode {display(eid)}: step {step_id} has "
                                   f"{len(others)} differing records ({', '.join(others[:10])}); none is kept", eid))  # fmt: skip
            continue
        try:
            raw_step, step_blobs, activity = read_step(example, step_id, where)
        except (ExampleError, HierarchyError) as exc:
            reason = exc.reason if isinstance(exc, HierarchyError) else "bad_record"
            message = f"episode {display(eid)} step {step_id} ({where}): {exc}"
            dead.append(DeadLetter(path, step_id, reason, message, eid))
            continue
        if not episode.goal:
            warnings: list[str] = []
            episode.goal = first_text(example, "goal_info", warnings)
            for key in ("device_type", "android_api_level"):
                value = any_text(example, key, warnings)
                if value:
                    episode.metadata[key] = value
            episode.warnings.extend(warnings)
        episode.steps.append(raw_step)
        blobs.update(step_blobs)
        activities.append(activity)
    if any(activities):
        episode.metadata["current_activity"] = json.dumps(activities, ensure_ascii=False)
    missing = length - sum(1 for i in seen if 0 <= i < length)
    if missing > 0:
        first = [i for i in itertools.islice(itertools.count(), len(seen) + 21) if i < length and i not in seen]
        shown = ", ".join(map(str, first[:20])) + (" ..." if missing > 20 else "")
        dead.append(DeadLetter(source_path, None, "missing_step", f"episode {display(eid)}: no record for "
                               f"step(s) {shown} of {length}", eid))  # fmt: skip
        episode.warnings.append(f"episode_length says {length} steps but the records hold {length - missing}: "
                                f"no record for step(s) {shown}")  # fmt: skip
    episode.dead_letters.extend(dead)
    return episode, blobs

"""`--ui-objects padded:N`: a UI screen's objects as fixed-shape, model-ready tensors with a mask.

Pure functions (a `llm4mobile.proto.Observation` in, numpy arrays out). The first N objects of the screen (in
the converter's order, `index`) fill rows 0..k-1, `mask` is true on them; rows k..N-1 are zeros, empty text
and mask false; objects beyond N are left out (`num_objects` says how many the screen had). Boxes are
normalised to 0..1 by the screen size (clipped). The action's `target_index` keeps pointing at its row, or
becomes -1 when the target was beyond N. Accessibility-forest screens add each object's window (row in the
step's windows, its type, layer and focus; -1/""/0/false for objects in no window). Fields:
`schemas/dataset_spec.md` ("Padded UI objects").
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from pipelines.errors import StepmarkError
from protos.llm4mobile import episode_pb2

MAX_PADDED = 4096
_OPTION = re.compile(r"^padded:(\d{1,5})$")

PADDED_FIELDS = (
    "mask",
    "bbox",
    "type",
    "grid_location",
    "depth",
    "pre_order",
    "post_order",
    "is_leaf",
    "is_actionable",
    "clickable",
    "text",
    "resource_id",
    "labels",
    "human_drawn",
    "box_corrected",
    "window",
    "window_type",
    "window_layer",
    "window_focused",
)

#: The text columns of the padded table (numpy str arrays here; TFDS stores them as object tensors).
PADDED_TEXT_FIELDS = ("text", "resource_id", "labels", "window_type")


def parse_ui_objects(text: str) -> int:
    """`padded:N` -> N (1..4096); "" or "full" -> 0 (the full ragged object table)."""
    if text in ("", "full"):
        return 0
    match = _OPTION.match(text.strip())
    if match is None or not 1 <= int(match.group(1)) <= MAX_PADDED:
        raise StepmarkError(f"--ui-objects {text!r}: use padded:N with N from 1 to {MAX_PADDED}, or full")
    return int(match.group(1))


def padded_objects(
    observation: episode_pb2.Observation,
    n: int,
    grounding: tuple[list[str], list[bool], list[bool]] | None = None,
    windows: tuple[list[int], dict[str, list[Any]]] | None = None,
) -> dict[str, Any]:
    """The screen's first `n` objects as fixed-shape arrays (see the module docstring); `grounding` = the
    per-object (labels, human_drawn, box_corrected) of `transform.object_grounding`; `windows` = each
    object's window row (-1: none) and the windows table of `transform.window_table`, whose type, layer and
    focus are repeated on the rows of the window's objects (a fixed shape, unlike a table of windows)."""
    objs = list(observation.objects)[:n]
    k = len(objs)
    rows, wtable = windows if windows else ([-1] * k, {"type": [], "layer": [], "focused": []})
    rows = list(rows[:k])

    def of_window(column: str, none: Any) -> list[Any]:
        return [wtable[column][r] if r >= 0 else none for r in rows]

    w = float(observation.screen_width) or 1.0
    h = float(observation.screen_height) or 1.0
    bbox = np.zeros((n, 4), np.float32)
    if k:
        raw = np.array([[o.bbox.left, o.bbox.top, o.bbox.right, o.bbox.bottom] for o in objs], np.float64)
        bbox[:k] = np.clip(raw / np.array([w, h, w, h]), 0.0, 1.0)

    def ints(values: list[int]) -> np.ndarray:
        out = np.zeros((n,), np.int32)
        out[:k] = values
        return out

    def flags(values: list[bool]) -> np.ndarray:
        out = np.zeros((n,), np.bool_)
        out[:k] = values
        return out

    def texts(values: list[str]) -> np.ndarray:
        return np.array(values + [""] * (n - k), dtype=np.str_)

    return {
        "num_objects": np.int32(len(observation.objects)),
        "mask": flags([True] * k),
        "bbox": bbox,
        "type": ints([int(o.type) for o in objs]),
        "grid_location": ints([int(o.grid_location) for o in objs]),
        "depth": ints([o.dom_position.depth for o in objs]),
        "pre_order": ints([o.dom_position.pre_order_id for o in objs]),
        "post_order": ints([o.dom_position.post_order_id for o in objs]),
        "is_leaf": flags([o.is_leaf for o in objs]),
        "is_actionable": flags([o.is_actionable for o in objs]),
        "clickable": flags([o.clickable for o in objs]),
        "text": texts([o.text for o in objs]),
        "resource_id": texts([o.resource_id for o in objs]),
        "labels": texts(list(grounding[0][:k]) if grounding else [""] * k),
        "human_drawn": flags(list(grounding[1][:k]) if grounding else [False] * k),
        "box_corrected": flags(list(grounding[2][:k]) if grounding else [False] * k),
        "window": ints(rows),
        "window_type": texts(of_window("type", "")),
        "window_layer": ints(of_window("layer", 0)),
        "window_focused": flags(of_window("focused", False)),
    }


def padded_target(target_index: int, n: int) -> int:
    """The action's target row in the padded table: itself when < n, else -1 (beyond the padding)."""
    return target_index if 0 <= target_index < n else -1

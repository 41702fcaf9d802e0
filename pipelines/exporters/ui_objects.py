"""`--ui-objects padded:N`: a UI screen's objects as fixed-shape, model-ready tensors with a mask.

Pure functions (a `llm4mobile.proto.Observation` in, numpy arrays out). Which objects fill the N rows
(`select_rows`): first those that must never be cut silently (the action's target, the converter's target
when an annotator changed it, every object an annotator drew, labelled or corrected), then the runner-up
targets, then the rest in the converter's order; the chosen objects fill rows 0..k-1 in the converter's order
(`object_index` says which object each row holds), `mask` is true on them; rows k..N-1 are zeros, empty text,
mask false and `object_index` -1. When the objects that must be kept are more than N the episode is refused
(`PaddingOverflow`, naming the episode and the step: a dead letter `padding_overflow`). Boxes are normalised
to 0..1 by the screen size (clipped). The action's indices point at rows of this table. Accessibility-forest screens add each object's window (row in the
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
    "object_index",
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


class PaddingOverflow(StepmarkError):
    """A screen whose objects that must be kept (the action's targets, annotated objects) exceed N rows."""


def select_rows(num_objects: int, n: int, keep: list[int], prefer: list[int] = ()) -> list[int]:
    """The objects (indices into the screen's objects) that fill the `n` rows, in the converter's order: every
    index of `keep` (raises `PaddingOverflow` when they are more than `n`), then `prefer`'s, then the first
    others. Indices outside the screen are ignored."""
    must = sorted({i for i in keep if 0 <= i < num_objects})
    if len(must) > n:
        raise PaddingOverflow(
            f"--ui-objects padded:{n}: {len(must)} objects must be kept (the action's target, annotated objects: "
            f"{must[:8]}{'...' if len(must) > 8 else ''}); export with a larger N"
        )
    chosen = set(must)
    for i in [*prefer, *range(num_objects)]:
        if len(chosen) >= min(n, num_objects):
            break
        if 0 <= i < num_objects:
            chosen.add(i)
    return sorted(chosen)


def padded_objects(
    observation: episode_pb2.Observation,
    n: int,
    grounding: tuple[list[str], list[bool], list[bool]] | None = None,
    windows: tuple[list[int], dict[str, list[Any]]] | None = None,
    selected: list[int] | None = None,
) -> dict[str, Any]:
    """The screen's `selected` objects (default: the first `n`) as fixed-shape arrays (see the module
    docstring); `grounding` = the per-object (labels, human_drawn, box_corrected) of
    `transform.object_grounding`; `windows` = each object's window row (-1: none) and the windows table of
    `transform.window_table`, whose type, layer and focus are repeated on the rows of the window's objects (a
    fixed shape, unlike a table of windows)."""
    every = list(observation.objects)
    chosen = list(selected) if selected is not None else list(range(min(n, len(every))))
    objs = [every[i] for i in chosen]
    k = len(objs)
    rows_all, wtable = windows if windows else ([-1] * len(every), {"type": [], "layer": [], "focused": []})
    rows = [rows_all[i] for i in chosen]
    if grounding:
        grounding = tuple([column[i] for i in chosen] for column in grounding)  # type: ignore[assignment]

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

    object_index = np.full((n,), -1, np.int32)
    object_index[:k] = chosen
    return {
        "num_objects": np.int32(len(observation.objects)),
        "object_index": object_index,
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


def padded_target(target_index: int, selected: list[int]) -> int:
    """An object's row in the padded table of the `selected` objects, -1 when none or not in the table."""
    try:
        return selected.index(target_index)
    except ValueError:
        return -1

"""Android in the Wild UI annotations -> `Screen`. AITW has no view hierarchy: each OCR/icon annotation of a
screenshot becomes one object of a flat DOM (every object a depth-0 root and a leaf).

Input is the small JSON document `pipelines.traces.aitw` writes from a step's Example features (also what
`Observation.json` keeps): {"width": W, "height": H, "annotations": [{"y", "x", "h", "w", "text",
"ui_type"}]}, positions normalised to the screen. Android-in-the-Zoo's boxes (`pipelines.traces.aitz`) are the
same detector's in screenshot pixels: {"units": "pixels", "annotations": [...]} without a size (the screenshot's
is passed as `screen_size`). Mapping documented in schemas/objects.md.
"""

from __future__ import annotations

import json
import math

from protos.llm4mobile import episode_pb2

from .bounds import Box
from .errors import HierarchyError
from .objects import (
    MAX_OBJECTS,
    UNKNOWN_LOCATION,
    Screen,
    build_screen,
    check_size,
    grid_location,
    raw_node,
    too_large,
)

FORMAT = "aitw_annotations"
T = episode_pb2.ObjectType
_FLAGS = (False, True, True, False, False, False, False, False, False, False)  # visible and enabled only


def _norm(value: object) -> float | None:
    return float(value) if type(value) in (int, float) and math.isfinite(value) else None


def normalised_grid(x: float, y: float, w: float, h: float) -> int:
    """Grid cell from the normalised box itself (centre in [0, 1) on both axes), not from rounded pixels."""
    cx, cy = x + w / 2, y + h / 2
    if w <= 0 or h <= 0 or not (0 <= cx < 1 and 0 <= cy < 1):
        return UNKNOWN_LOCATION
    return 1 + min(int(3 * cy), 2) * 3 + min(int(3 * cx), 2)


def parse(data: bytes, *, drop_invisible: bool = False, screen_size: tuple[int, int] | None = None) -> Screen:
    """Objects of one AITW step's annotations. `screen_size` overrides the document's width/height."""
    del drop_invisible  # annotations are what is visible
    check_size(data)
    try:
        doc = json.loads(bytes(data))
    except (ValueError, RecursionError) as exc:
        raise HierarchyError("malformed", f"AITW annotation document is not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("annotations"), list):
        raise HierarchyError("malformed", "AITW annotation document without an 'annotations' list")
    annotations = doc["annotations"]
    if len(annotations) > MAX_OBJECTS:
        raise too_large()
    width, height = screen_size or (doc.get("width"), doc.get("height"))
    if type(width) is not int or type(height) is not int or width <= 0 or height <= 0:
        raise HierarchyError("malformed", f"AITW step without a usable image size ({width!r}x{height!r})")
    pixels = doc.get("units") == "pixels"
    warnings: list[str] = []
    nodes, grids, names = [], [], []
    unusable = 0
    for i, a in enumerate(annotations):
        a = a if isinstance(a, dict) else {}
        x, y, w, h = (_norm(a.get(k)) for k in ("x", "y", "w", "h"))
        ui_type = a.get("ui_type") if isinstance(a.get("ui_type"), str) else ""
        label = a.get("text") if isinstance(a.get("text"), str) else ""
        box = None
        grid = UNKNOWN_LOCATION
        if None in (x, y, w, h):
            unusable += 1
        elif pixels:
            box = Box(round(x), round(y), round(x + w), round(y + h))
            grid = grid_location(box, width, height)
        else:
            box = Box(round(x * width), round(y * height), round((x + w) * width), round((y + h) * height))
            grid = normalised_grid(x, y, w, h)
        text = label if ui_type == "TEXT" or not ui_type.startswith("ICON_") else ""
        nodes.append(raw_node((-1, 0, i, "", "", text, "", "", "", box, _FLAGS, False, (), False)))
        grids.append(grid)
        names.append(ui_type if ui_type.startswith("ICON_") else "")
    if unusable:
        warnings.append(f"{unusable} annotation(s) without four finite positions: bbox unset")
    screen = build_screen(nodes, width, height, fmt=FORMAT, warnings=warnings)
    for o, grid, icon in zip(screen.objects, grids, names, strict=True):
        o.grid_location = grid
        if icon:  # an icon: its class is its name and it is drawn as an image
            o.name = icon
            o.type = T.IMAGEVIEW
            o.multi_types[:] = [T.IMAGEVIEW, T.VIEW]
        else:
            o.type = T.TEXTVIEW
            o.multi_types[:] = [T.TEXTVIEW, T.VIEW]
    return screen

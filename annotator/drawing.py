"""Drawing a UI step for the replay page: the screenshot with object boxes, the 3x3 grid and the touch point.

Boxes are in screenshot pixels (`Object.bbox`, as written by convert-ui), so they are drawn straight onto the
screenshot; the result is scaled down for display only at the end, which keeps the drawing cheap.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image, ImageDraw

from protos.llm4mobile import episode_pb2

BOX_MODES = ("all", "actionable", "leaves", "none")
BOX_COLOUR = (0, 160, 255)
ACTIONABLE_COLOUR = (255, 140, 0)
HIGHLIGHT_COLOUR = (255, 0, 80)
GRID_COLOUR = (255, 255, 255)
TOUCH_COLOUR = (255, 0, 0)


@dataclass(frozen=True)
class Touch:
    """Where the step's action touched (screenshot pixels); end_* set for swipes."""

    x: int
    y: int
    end_x: int | None = None
    end_y: int | None = None


def shown_objects(objects: Sequence[episode_pb2.Object], mode: str) -> list[int]:
    """Indices of the objects whose boxes the toggle asks for (invisible objects are never boxed)."""
    if mode not in BOX_MODES:
        raise ValueError(f"box mode {mode!r} is not one of {BOX_MODES}")
    if mode == "none":
        return []
    chosen = []
    for i, obj in enumerate(objects):
        if not obj.visible or not _valid(obj.bbox):
            continue
        if mode == "actionable" and not obj.is_actionable:
            continue
        if mode == "leaves" and not obj.is_leaf:
            continue
        chosen.append(i)
    return chosen


def _valid(box: episode_pb2.BoundingBox) -> bool:
    return box.right > box.left and box.bottom > box.top


def render_step(
    image: bytes,
    objects: Sequence[episode_pb2.Object] = (),
    *,
    boxes: str = "all",
    grid: bool = False,
    touch: Touch | None = None,
    highlight: int | None = None,
    max_height: int = 960,
) -> bytes:
    """The screenshot (PNG/JPEG bytes) with the chosen overlays, as JPEG bytes no taller than max_height.

    A large JPEG is decoded at a reduced scale straight away (libjpeg's DCT scaling via `draft`), and the boxes
    are scaled to it: drawing a 1440x2560 screenshot costs about a quarter of a full decode.
    """
    with Image.open(io.BytesIO(image)) as src:
        full_w, full_h = src.size
        if src.format == "JPEG" and full_h > max_height:
            src.draft("RGB", (max(1, full_w * max_height // full_h), max_height))
        canvas = src.convert("RGB")
    width, height = canvas.size
    k = height / full_h if full_h else 1.0  # boxes and touch points are in full-size screenshot pixels
    draw = ImageDraw.Draw(canvas, "RGBA")
    line = max(2, width // 300)
    for i in shown_objects(objects, boxes):
        box = objects[i].bbox
        colour = ACTIONABLE_COLOUR if objects[i].is_actionable else BOX_COLOUR
        draw.rectangle(_clip(box, width, height, k), outline=colour, width=line)
    if highlight is not None and 0 <= highlight < len(objects) and _valid(objects[highlight].bbox):
        rect = _clip(objects[highlight].bbox, width, height, k)
        draw.rectangle(rect, outline=HIGHLIGHT_COLOUR, fill=(*HIGHLIGHT_COLOUR, 60), width=line * 2)
    if grid:
        for third in (1, 2):
            x = width * third // 3
            y = height * third // 3
            draw.line([(x, 0), (x, height)], fill=(*GRID_COLOUR, 200), width=line)
            draw.line([(0, y), (width, y)], fill=(*GRID_COLOUR, 200), width=line)
            draw.line([(x + line, 0), (x + line, height)], fill=(0, 0, 0, 120), width=1)
            draw.line([(0, y + line), (width, y + line)], fill=(0, 0, 0, 120), width=1)
    if touch is not None:
        radius = max(8, width // 40)
        x, y = round(touch.x * k), round(touch.y * k)
        if touch.end_x is not None and touch.end_y is not None:
            ex, ey = round(touch.end_x * k), round(touch.end_y * k)
            draw.line([(x, y), (ex, ey)], fill=TOUCH_COLOUR, width=line * 2)
            draw.ellipse(_circle(ex, ey, radius // 2), outline=TOUCH_COLOUR, width=line)
        draw.ellipse(_circle(x, y, radius), outline=TOUCH_COLOUR, width=line * 2)
        draw.ellipse(_circle(x, y, max(2, radius // 4)), fill=TOUCH_COLOUR)
    if height > max_height:
        canvas = canvas.resize((max(1, width * max_height // height), max_height), Image.Resampling.BILINEAR)
    out = io.BytesIO()
    canvas.save(out, format="JPEG", quality=85)
    return out.getvalue()


def _clip(box: episode_pb2.BoundingBox, width: int, height: int, k: float = 1.0) -> tuple[int, int, int, int]:
    left = min(max(round(box.left * k), 0), width - 1)
    right = min(max(round(box.right * k), 0), width - 1)
    top = min(max(round(box.top * k), 0), height - 1)
    bottom = min(max(round(box.bottom * k), 0), height - 1)
    return left, top, max(left, right), max(top, bottom)


def _circle(x: int, y: int, r: int) -> tuple[int, int, int, int]:
    return x - r, y - r, x + r, y + r


def enlarge(image: bytes, min_side: int = 256) -> bytes:
    """A small frame (Procgen's 64x64) scaled up by a whole factor with nearest-neighbour sampling, so the
    browser shows crisp pixels instead of stretching it into a blur. Larger frames come back unchanged."""
    with Image.open(io.BytesIO(image)) as src:
        width, height = src.size
        factor = min_side // max(1, min(width, height))
        if factor < 2:
            return image
        big = src.convert("RGB").resize((width * factor, height * factor), Image.Resampling.NEAREST)
    out = io.BytesIO()
    big.save(out, format="PNG", compress_level=1)
    return out.getvalue()

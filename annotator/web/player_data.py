"""What the browser step player receives: per-step JSON and display-sized frames, computed from episode readers.

Pure functions of a reader `Step` (no HTTP, no store), so the routes stay thin and the payloads are tested alone.
Texts are sent as data and shown by the browser with `textContent`: nothing from a trace is ever markup.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from typing import Any

from PIL import Image

from annotator.step_data import to_data
from annotator.ui_step import ui_step_view
from pipelines.hierarchy.screenshot import sniff_format
from protos.llm4mobile import episode_pb2
from protos.rlds_creator import study_pb2

# A screenshot is shown at most this tall; larger ones are decoded at a reduced scale (JPEG) or refused.
DISPLAY_HEIGHT = 1280
# Pixels decoded for one frame at most (4096x4096): a JPEG is decoded at a reduced scale first, so this bounds
# PNG/WebP screenshots, which Pillow can only decode whole (about 3 bytes a pixel, twice while scaling); a
# decompression bomb (12000x12000) is refused before decoding.
MAX_DECODE_PIXELS = 4096 * 4096
MAX_JSON_CHARS = 4000
# A step text (instruction, chain-of-action-thought) is sent whole up to this many characters.
MAX_TEXT_CHARS = 4000
MAX_OBJECTS = 5000
STEPS_PER_REQUEST = 200

_CONTENT_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}


class FrameError(ValueError):
    """The step has no frame the browser can be given (none stored, or too large to decode)."""


@dataclass(frozen=True)
class Frame:
    data: bytes
    content_type: str


def frame(step: Any, kind: str) -> Frame:
    """The step's picture for the browser: an environment frame as stored (the browser scales it, pixelated),
    a UI screenshot scaled to DISPLAY_HEIGHT (boxes are drawn over it in the browser)."""
    image = step.image
    if not image and kind == "ui":
        image = ui_step_view(step).image
    if not image:
        raise FrameError(f"step {step.index} has no frame")
    image = bytes(image)
    fmt = sniff_format(image)
    if fmt is None:
        raise FrameError(f"step {step.index}: the stored frame is not a PNG/JPEG/GIF/WebP image")
    with Image.open(io.BytesIO(image)) as src:
        width, height = src.size
        if height <= DISPLAY_HEIGHT:
            return Frame(image, _CONTENT_TYPES[fmt])
        if src.format == "JPEG":  # libjpeg decodes straight at 1/2, 1/4 or 1/8 scale
            src.draft("RGB", (max(1, width * DISPLAY_HEIGHT // height), DISPLAY_HEIGHT))
        if src.size[0] * src.size[1] > MAX_DECODE_PIXELS:
            raise FrameError(f"step {step.index}: the screenshot is {width}x{height} pixels, too large to show")
        canvas = src.convert("RGB")
    if canvas.height > DISPLAY_HEIGHT:
        canvas = canvas.resize(
            (max(1, canvas.width * DISPLAY_HEIGHT // canvas.height), DISPLAY_HEIGHT), Image.Resampling.BILINEAR
        )
    out = io.BytesIO()
    canvas.save(out, format="JPEG", quality=85)
    return Frame(out.getvalue(), "image/jpeg")


def _short_json(value: Any) -> str | None:
    if value is None:
        return None
    data = to_data(value)
    if not data.HasField("json_encoded"):
        return None
    text = data.json_encoded
    return text if len(text) <= MAX_JSON_CHARS else text[:MAX_JSON_CHARS] + " …"


def _object(i: int, o: episode_pb2.Object) -> dict[str, Any]:
    box = o.bbox
    return {
        "i": i,
        "box": [box.left, box.top, box.right, box.bottom] if box.right > box.left and box.bottom > box.top else None,
        "type": episode_pb2.ObjectType.Name(o.type),
        "text": o.text,
        "desc": o.content_desc,
        "rid": o.resource_id,
        "cls": o.android_class,
        "actionable": o.is_actionable,
        "leaf": o.is_leaf,
        "visible": o.visible,
        "grid": episode_pb2.GridLocation.Name(o.grid_location),
    }


def step_payload(step: Any, kind: str) -> dict[str, Any]:
    """One step as the player needs it (JSON-ready)."""
    payload: dict[str, Any] = {
        "index": step.index,
        "reward": float(step.reward or 0.0),
        "keys": [str(k) for k in (step.keys or [])],
        "has_frame": bool(step.image),
    }
    if kind == "ui":
        view = ui_step_view(step)
        payload["has_frame"] = bool(view.image)
        if view.image:
            try:
                with Image.open(io.BytesIO(bytes(view.image))) as src:
                    payload["size"] = list(src.size)
            except OSError:
                payload["has_frame"] = False
        payload["objects"] = [_object(i, o) for i, o in enumerate(view.objects[:MAX_OBJECTS])]
        payload["objects_total"] = len(view.objects)
        payload["action_text"] = view.action_text
        payload["target"] = view.target_index
        payload["touch"] = (
            None
            if view.touch is None
            else [view.touch.x, view.touch.y, view.touch.end_x, view.touch.end_y]
        )
        payload["warnings"] = [str(w) for w in view.warnings]
        payload["texts"] = step_text_rows(view.texts)
    else:
        payload["observation"] = _short_json(step.observation)
        payload["action"] = _short_json(step.action)
        payload["last"] = bool(step.is_last)
    return payload


def step_text_rows(texts: dict[str, str]) -> list[dict[str, str]]:
    """The step's non-empty texts in STEP_TEXT_FIELDS order, each with its name and a label to show (plain
    text: the browser sets it with textContent)."""
    rows = []
    for name, text in texts.items():
        if text:
            shown = text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + " …"
            rows.append({"name": name, "label": name.replace("_", " ").capitalize(), "text": shown})
    return rows


def tags_payload(
    episode: study_pb2.Episode, locked: tuple[list[str], dict[int, list[str]]] | None = None
) -> dict[str, Any]:
    """Tags and state of the episode as stored now, with a version string that changes when any of them do.
    `locked` (`Repository.locked_tags`): the tags the viewer may not remove, which the player shows with no ✕."""
    steps = {
        str(index): [t.label for t in meta.tags]
        for index, meta in sorted(episode.step_metadata.items())
        if len(meta.tags)
    }
    body = {
        "episode_tags": [t.label for t in episode.tags],
        "step_tags": steps,
        "state": study_pb2.Episode.State.Name(episode.state),
        "notes_length": len(episode.notes),
    }
    if locked is not None:
        body["locked"] = {"episode_tags": locked[0], "step_tags": {str(i): v for i, v in sorted(locked[1].items())}}
    body["version"] = tags_payload_version(body)
    return body


def tags_payload_version(body: dict[str, Any]) -> str:
    """A short digest of what the player shows: it polls and redraws only when this changes."""
    shown = {k: v for k, v in body.items() if k != "version"}
    return hashlib.sha1(json.dumps(shown, sort_keys=True).encode()).hexdigest()[:16]

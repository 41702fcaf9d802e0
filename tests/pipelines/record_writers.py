"""Independent writers for the TFRecord inputs of convert-ui, built from the real fixtures.

Nothing here uses the project's readers: tf.train.Examples are encoded by hand from the protobuf wire format
(TensorFlow's example.proto field numbers), TFRecord framing and gzip with google_crc32c and the gzip module,
and accessibility forests with the android_env protos from uiautomator dumps read by lxml.
"""

from __future__ import annotations

import gzip
import io
import re
import struct
from pathlib import Path

import google_crc32c
from android_env.proto.a11y import android_accessibility_forest_pb2 as forest_pb2
from android_env.proto.a11y import android_accessibility_window_info_pb2 as window_pb2
from lxml import etree
from PIL import Image

WindowInfo = window_pb2.AndroidAccessibilityWindowInfo
_BOUNDS = re.compile(r"\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]")


# ---- protobuf wire format ---------------------------------------------------------------------------------
def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:  # length-delimited
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def feature_bytes(*values: bytes) -> bytes:
    return _field(1, b"".join(_field(1, v) for v in values))  # Feature.bytes_list = 1; BytesList.value = 1


def feature_floats(*values: float) -> bytes:
    return _field(2, _field(1, b"".join(struct.pack("<f", v) for v in values)))  # float_list = 2, packed


def feature_ints(*values: int) -> bytes:
    return _field(3, _field(1, b"".join(_varint(v) for v in values)))  # int64_list = 3, packed


def example(features: dict[str, bytes]) -> bytes:
    """Example{features(1): Features{feature(1): map entries {key(1), value(2)}}}."""
    entries = b"".join(_field(1, _field(1, k.encode()) + _field(2, v)) for k, v in features.items())
    return _field(1, entries)


# ---- TFRecord ---------------------------------------------------------------------------------------------
def _masked(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", _masked(length)) + data + struct.pack("<I", _masked(data))


def write_tfrecord(path: Path, records: list[bytes], *, compress: bool = True) -> Path:
    body = b"".join(frame(r) for r in records)
    path.write_bytes(gzip.compress(body, mtime=0) if compress else body)
    return path


# ---- forests from uiautomator dumps ------------------------------------------------------------------------
def _flag(node, name: str) -> bool:
    return node.get(name) == "true"


def forest_from_dump(
    xml: bytes, *, window_types: list[int] | None = None
) -> forest_pb2.AndroidAccessibilityForest:
    """Each top-level <node> of the dump becomes a window; node attributes become node fields."""
    root = etree.fromstring(xml, etree.XMLParser(resolve_entities=False))
    forest = forest_pb2.AndroidAccessibilityForest()
    next_id = 1
    tops = [n for n in root if n.tag == "node"]
    for w, top in enumerate(tops):
        window = forest.windows.add(id=w + 10, layer=len(tops) - w, display_id=0)
        window.window_type = (window_types or [WindowInfo.TYPE_APPLICATION] * len(tops))[w]
        window.is_focused = window.is_active = w == len(tops) - 1
        window.title = f"window {w}"
        m = _BOUNDS.match(top.get("bounds", ""))
        if m:
            r = window.bounds_in_screen
            r.left, r.top, r.right, r.bottom = map(int, m.groups())
        ids: dict = {}
        order = list(top.iter("node"))
        for el in order:
            ids[el] = next_id
            next_id += 1
        for el in order:
            node = window.tree.nodes.add(unique_id=ids[el], window_id=window.id)
            node.class_name = el.get("class", "")
            node.package_name = el.get("package", "")
            node.text = el.get("text", "")
            node.content_description = el.get("content-desc", "")
            node.view_id_resource_name = el.get("resource-id", "")
            node.is_clickable = _flag(el, "clickable")
            node.is_visible_to_user = el.get("visible-to-user", "true") == "true"
            node.is_enabled = _flag(el, "enabled")
            node.is_focusable = _flag(el, "focusable")
            node.is_focused = _flag(el, "focused")
            node.is_scrollable = _flag(el, "scrollable")
            node.is_long_clickable = _flag(el, "long-clickable")
            node.is_selected = _flag(el, "selected")
            node.is_checkable = _flag(el, "checkable")
            node.is_checked = _flag(el, "checked")
            node.is_editable = node.class_name.endswith("EditText")
            m = _BOUNDS.match(el.get("bounds", ""))
            if m:
                r = node.bounds_in_screen
                r.left, r.top, r.right, r.bottom = map(int, m.groups())
            node.child_ids.extend(ids[c] for c in el if c.tag == "node")
    return forest


def png_from(jpeg: Path, width: int, height: int) -> bytes:
    """A real screenshot (a fixture JPEG) resized to width x height, as PNG."""
    with Image.open(jpeg) as image:
        out = io.BytesIO()
        image.convert("RGB").resize((width, height)).save(out, format="PNG")
        return out.getvalue()


def raw_pixels(jpeg: Path, width: int, height: int) -> bytes:
    """A fixture JPEG as raw RGB bytes (what AITW's image/encoded holds)."""
    with Image.open(jpeg) as image:
        return image.convert("RGB").resize((width, height)).tobytes()

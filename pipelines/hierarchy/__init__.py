"""View hierarchies (uiautomator XML, Rico JSON, DroidBot JSON, DroidRun portal JSON, ...) -> `Screen`s of llm4mobile `Object`s.

Pure functions from bytes: no file or network I/O. `parse` detects the format; the per-format modules hold the
syntax, `objects` every computed field (defined in `schemas/objects.md`).
"""

from __future__ import annotations

import re
from functools import partial

from . import a11y_forest, aitw, droidbot, droidrun, rico, uiautomator
from .bounds import Box, parse_bounds
from .encoding import bom_encoding
from .errors import REASONS, HierarchyError
from .jsonio import with_json_document
from .objects import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_OBJECTS,
    RawNode,
    Screen,
    build_screen,
    grid_location,
    object_at,
    rescale,
)
from .screenshot import ImageInfo, image_info

forest_json = a11y_forest.to_json

__all__ = [
    "FORMATS", "MAX_BYTES", "MAX_DEPTH", "MAX_OBJECTS", "REASONS", "Box", "HierarchyError", "ImageInfo", "RawNode", "Screen",
    "build_screen", "detect_format", "forest_json", "grid_location", "image_info", "object_at", "parse", "parse_bounds",
    "rescale",
]  # fmt: skip

FORMATS = ("uiautomator", "rico", "droidbot", "a11y_forest", "a11y_forest_text", "aitw_annotations", "droidrun")
_NON_BLANK = re.compile(rb"\S")
_XML_START = re.compile(rb"<\?xml|<hierarchy[\s>]")


def detect_format(data: bytes) -> str:
    """'uiautomator' for XML (and dump error text), 'json' for JSON; raises `empty`/`unknown_format`."""
    head = bytes(data[:4096])
    if not head.strip():  # blank so far: look from the first non-blank byte, however far in it is
        first = _NON_BLANK.search(data)
        if first is None:
            raise HierarchyError("empty", "the hierarchy file is empty")
        head = bytes(data[first.start() : first.start() + 4096])
    bom = bom_encoding(head)
    if bom is not None:
        head = head.decode(bom, errors="replace").encode("utf-8")
    elif head.count(b"\x00") > len(head) // 4:
        head = head.replace(b"\x00", b"")
    stripped = head.lstrip()
    if not stripped:
        raise HierarchyError("empty", "the hierarchy file holds only a byte order mark or whitespace")
    if stripped[:1] == b"{":
        return "json"
    if stripped[:1] == b"[":
        # A log line such as "[INFO] ..." or "[2024-05-01 ...]" before a dump is not JSON: every supported JSON
        # hierarchy is an object, so a leading "[" is a dump when the XML follows (repaired by the parser).
        return "uiautomator" if _XML_START.search(head) else "json"
    if b"<" in head or uiautomator.failed_dump_message(stripped.decode("utf-8", errors="replace")):
        return "uiautomator"
    raise HierarchyError("unknown_format", f"neither XML nor JSON (starts with {stripped[:40]!r})")


def parse(
    data: bytes,
    *,
    fmt: str | None = None,
    drop_invisible: bool = False,
    screen_size: tuple[int, int] | None = None,
) -> Screen:
    """A `Screen` from hierarchy bytes in `fmt` (one of FORMATS), detected when None (XML and JSON only).

    JSON is told apart by its keys: Rico documents have `activity`, DroidBot states have `views` (or are the
    bare list of views, with `temp_id`s, LlamaTouch's `N.vh`), DroidRun portal states have `a11y_tree`.
    `screen_size` (width, height), when known (e.g. the screenshot's size), replaces the size estimated from
    the window bounds for uiautomator and DroidBot; Rico's coordinate space is always 1440x2560 and ignores it.
    """
    if fmt == "uiautomator":
        return uiautomator.parse(data, drop_invisible=drop_invisible, screen_size=screen_size)
    if fmt == "rico":
        return rico.parse(data, drop_invisible=drop_invisible)
    if fmt == "droidbot":
        return droidbot.parse(data, drop_invisible=drop_invisible, screen_size=screen_size)
    if fmt == "a11y_forest":  # binary protobuf: never detected, always named by the caller
        return a11y_forest.parse(data, drop_invisible=drop_invisible, screen_size=screen_size)
    if fmt == "a11y_forest_text":
        return a11y_forest.parse_text(data, drop_invisible=drop_invisible, screen_size=screen_size)
    if fmt == "aitw_annotations":
        return aitw.parse(data, screen_size=screen_size)
    if fmt == "droidrun":
        return droidrun.parse(data, drop_invisible=drop_invisible, screen_size=screen_size)
    if fmt is not None:
        raise ValueError(f"unknown hierarchy format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if detect_format(data) == "uiautomator":
        return uiautomator.parse(data, drop_invisible=drop_invisible, screen_size=screen_size)
    return with_json_document(bytes(data), partial(_from_json, drop_invisible, screen_size))


def _from_json(
    drop_invisible: bool, screen_size: tuple[int, int] | None, doc: object, warnings: list[str]
) -> Screen:
    if isinstance(doc, dict) and "activity" in doc:
        return rico.from_document(doc, drop_invisible=drop_invisible, warnings=warnings)
    if isinstance(doc, dict) and "views" in doc:
        return droidbot.from_document(
            doc, drop_invisible=drop_invisible, screen_size=screen_size, warnings=warnings
        )
    if isinstance(doc, list) and doc and isinstance(doc[0], dict) and "temp_id" in doc[0]:
        # DroidBot's views alone, as a bare list (LlamaTouch's N.vh files): the state without its wrapper
        return droidbot.from_document(
            {"views": doc}, drop_invisible=drop_invisible, screen_size=screen_size, warnings=warnings
        )
    if isinstance(doc, dict) and "a11y_tree" in doc:
        return droidrun.from_document(
            doc, drop_invisible=drop_invisible, screen_size=screen_size, warnings=warnings
        )
    keys = ", ".join(sorted(doc)[:8]) if isinstance(doc, dict) else type(doc).__name__
    raise HierarchyError(
        "unknown_format", f"JSON that is neither Rico (activity), DroidBot (views) nor DroidRun (a11y_tree): {keys}"
    )

"""The one parser of bounding boxes, for every hierarchy format.

Notations: uiautomator `"[x1,y1][x2,y2]"`, DroidBot `[[x1,y1],[x2,y2]]`, Rico `[l,t,r,b]`, DroidRun portal
`"l, t, r, b"` (its simple tree) and `{"left", "top", "right", "bottom"}` (its full tree's `boundsInScreen`).

Boxes are kept exactly as the source wrote them (no clamping): an inverted or off-screen box is evidence of
what the device reported, and the caller flags it instead of silently repairing it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

_NUM = r"\s*(-?[0-9]+(?:\.[0-9]+)?)\s*"  # ASCII digits only (\d and int() also take other scripts')
_BOUNDS_RE = re.compile(rf"\[{_NUM},{_NUM}\]\s*\[{_NUM},{_NUM}\]")
_CANONICAL = r"\[-?[0-9]+,-?[0-9]+\]\[-?[0-9]+,-?[0-9]+\]"
#: Canonical bounds strings joined by "|": one regex match vouches for a whole screen's boxes at once.
_CANONICAL_LIST = re.compile(rf"{_CANONICAL}(?:\|{_CANONICAL})*")
#: The same with every edge in 0..SMALL_EDGES-1 (no sign, at most four digits): most screens', tried first.
SMALL_EDGES = 10_000
_SMALL = r"\[[0-9]{1,4},[0-9]{1,4}\]\[[0-9]{1,4},[0-9]{1,4}\]"
_SMALL_LIST = re.compile(rf"{_SMALL}(?:\|{_SMALL})*")
# The C scanner behind JSONDecoder.raw_decode, without its Python wrapper: (value, end), or StopIteration /
# JSONDecodeError. The text is ours (no surrounding whitespace to skip).
_scan_json = json.JSONDecoder().scan_once


class Box(NamedTuple):
    """Pixel box with exclusive right/bottom edges, as uiautomator, Rico and DroidBot write them."""

    left: int
    top: int
    right: int
    bottom: int

    @property
    def width(self) -> int:
        return self.right - self.left

    @property
    def height(self) -> int:
        return self.bottom - self.top

    @property
    def valid(self) -> bool:
        """True when the box has a positive area (not inverted, not zero-size)."""
        return self.right > self.left and self.bottom > self.top

    def contains(self, x: float, y: float) -> bool:
        return self.left <= x < self.right and self.top <= y < self.bottom


#: Box from a 4-tuple without NamedTuple's Python-level __new__ (hot path).
_new_box = partial(tuple.__new__, Box)


def _int(value: object) -> int:
    if isinstance(value, bool):
        raise TypeError("boolean is not a coordinate")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return round(value)
    if isinstance(value, str):
        if not value.isascii() or "_" in value:  # int()/float() would take "1_0" and "١"
            raise ValueError(f"not a coordinate: {value!r}")
        return round(float(value)) if "." in value else int(value)
    raise TypeError(f"not a coordinate: {value!r}")


def from_string(text: str) -> Box | None:
    """uiautomator `"[x1,y1][x2,y2]"`; None when the text is not a bounds string."""
    # Fast path for the canonical form; the regex copes with spaces and decimals.
    parts = text[1:-1].replace("][", ",").split(",")
    # int() alone would also accept "1_000" and non-ASCII digits ("１"), which no dump writes.
    if len(parts) == 4 and text[:1] == "[" and text[-1:] == "]" and text.isascii() and "_" not in text:
        try:
            return _new_box((int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3])))
        except ValueError:
            pass
    m = _BOUNDS_RE.fullmatch(text.strip())
    if m is None:
        return None
    try:
        return Box(*(_int(g) for g in m.groups()))
    except (ValueError, OverflowError):
        return None


def from_strings(texts: Sequence[str | None]) -> tuple[list[Sequence[int] | None], list[str] | None]:
    """`from_string` of every text (None for None or ""), in bulk, as (left, top, right, bottom) sequences
    (`Box`es or lists), and each box as "left,top,right,bottom" text when that is exactly how the input wrote
    it (else None: the caller formats the boxes itself).

    When every text is a canonical `[x1,y1][x2,y2]` with plain integers (what every dump writes), one regex
    match vouches for all of them and one JSON decode converts all the integers; otherwise each text goes
    through `from_string`."""
    boxes, box_texts, _ = from_strings_sized(texts)
    return boxes, box_texts


def from_strings_sized(
    texts: Sequence[str | None],
) -> tuple[list[Sequence[int] | None], list[str] | None, bool]:
    """`from_strings`, and whether every text was read and every edge is in 0..SMALL_EDGES-1 (what lets
    `objects.build_columns` write the boxes from code tables)."""
    if texts and None not in texts and "" not in texts:
        joined = "|".join(texts)  # type: ignore[arg-type]
        small = _SMALL_LIST.fullmatch(joined) is not None
        if small or _CANONICAL_LIST.fullmatch(joined):
            body = ",".join(texts).replace("][", ",")  # type: ignore[arg-type]  # "[l,t,r,b],[l,t,r,b]"
            try:  # JSON refuses leading zeros (and int() over 4,300 digits): from_string decides those
                boxes = _scan_json(f"[{body}]", 0)[0]
            except (ValueError, StopIteration):
                pass
            else:  # "-0" is read as 0 and so would not be written back as it was
                return boxes, None if "-0" in body else body[1:-1].split("],["), small
    return [from_string(text) if text else None for text in texts], None, False


def from_pairs(pairs: object) -> Box | None:
    """DroidBot `[[x1,y1],[x2,y2]]`; None when malformed."""
    try:
        (x1, y1), (x2, y2) = pairs  # type: ignore[misc]
    except (TypeError, ValueError):
        return None
    if type(x1) is int and type(y1) is int and type(x2) is int and type(y2) is int:
        return Box(x1, y1, x2, y2)
    try:
        return Box(_int(x1), _int(y1), _int(x2), _int(y2))
    except (TypeError, ValueError, OverflowError):
        return None


def from_ltrb(values: object) -> Box | None:
    """Rico `[left, top, right, bottom]`; None when malformed."""
    if type(values) is list and len(values) == 4:
        left, top, right, bottom = values
        if type(left) is int and type(top) is int and type(right) is int and type(bottom) is int:
            return _new_box((left, top, right, bottom))
    if not isinstance(values, Sequence) or isinstance(values, str) or len(values) != 4:
        return None
    try:
        return Box(_int(values[0]), _int(values[1]), _int(values[2]), _int(values[3]))
    except (TypeError, ValueError, OverflowError):
        return None


def from_csv(text: object) -> Box | None:
    """DroidRun portal `"l, t, r, b"` (four integers separated by commas, spaces allowed); None when malformed."""
    if not isinstance(text, str):
        return None
    parts = text.split(",")
    if len(parts) != 4:
        return None
    try:
        return Box(*(_int(p.strip()) for p in parts))
    except (TypeError, ValueError, OverflowError):
        return None


_EDGES = ("left", "top", "right", "bottom")


def from_rect(value: object) -> Box | None:
    """DroidRun portal `{"left": l, "top": t, "right": r, "bottom": b}`; None when malformed."""
    if not isinstance(value, dict):
        return None
    try:
        return Box(*(_int(value[edge]) for edge in _EDGES))
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


def parse_bounds(value: object) -> Box | None:
    """Any of the notations above; None when the value is none of them."""
    if isinstance(value, str):
        return from_string(value) if value.lstrip()[:1] == "[" else from_csv(value)
    if isinstance(value, dict):
        return from_rect(value)
    if isinstance(value, Sequence) and len(value) == 2:
        return from_pairs(value)
    return from_ltrb(value)

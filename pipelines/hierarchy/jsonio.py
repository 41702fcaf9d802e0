"""JSON bytes -> Python values for the JSON hierarchy formats, with their failures as `HierarchyError`s."""

from __future__ import annotations

import json
import re
import sys
import threading

from .errors import HierarchyError
from .objects import MAX_DEPTH

# Rico nests a node as {"children": [{...}]}: two JSON levels per view level, plus the document's own.
_DEEP_LIMIT = 2 * MAX_DEPTH + 200
_deep_lock = threading.Lock()

# An escaped backslash, a valid surrogate pair escape, or a lone surrogate escape (left to right, so the
# `\\` of an escaped backslash is never mistaken for the start of a `\uXXXX` escape).
_SURROGATE_ESCAPES = re.compile(
    rb"(\\\\)|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})"
)


def _replace_lone_surrogates(data: bytes) -> tuple[bytes, int]:
    """Lone `\\udXXX` escapes (not encodable, so unusable in protos) replaced by U+FFFD."""
    count = 0

    def fix(match: re.Match[bytes]) -> bytes:
        nonlocal count
        if match.group(2) is None:
            return match.group(0)
        count += 1
        return b"\\ufffd"

    return _SURROGATE_ESCAPES.sub(fix, data), count


def _loads(data: bytes | str) -> object:
    try:
        return json.loads(data)
    except RecursionError:
        pass
    with _deep_lock:
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, _DEEP_LIMIT))
        try:
            return json.loads(data)
        except RecursionError:
            raise HierarchyError("too_deep", f"JSON nested deeper than {MAX_DEPTH} view levels") from None
        finally:
            sys.setrecursionlimit(old)


def load_json(data: bytes) -> tuple[object, list[str]]:
    """(parsed JSON, warnings); `empty`, `malformed` or `too_deep` when it cannot be parsed.

    Repairs, each with a warning: bytes invalid in UTF-8 become U+FFFD; lone surrogate escapes (`\\ud800`
    without its pair) become U+FFFD. The C decoder recurses once per nesting level and counts against
    Python's recursion limit (1000 by default), which a 1,000-level Rico hierarchy exceeds: only documents
    that hit it are retried once, under a lock, with the limit raised far enough for MAX_DEPTH view levels;
    deeper documents are `too_deep`.
    """
    if not data or not data.strip():
        raise HierarchyError("empty", "the hierarchy file is empty")
    warnings: list[str] = []
    if b"\\u" in data and (b"\\ud" in data or b"\\uD" in data):
        data, count = _replace_lone_surrogates(data)
        if count:
            warnings.append(f"replaced {count} lone surrogate escape(s) by U+FFFD")
    try:
        return _loads(data), warnings
    except UnicodeDecodeError as exc:
        warnings.append(f"bytes invalid in UTF-8 replaced by U+FFFD (first at byte {exc.start})")
        text = data.decode("utf-8", errors="replace")
    except ValueError as exc:
        raise HierarchyError("malformed", f"not valid JSON: {exc}") from None
    try:
        return _loads(text), warnings
    except ValueError as exc:
        raise HierarchyError("malformed", f"not valid JSON: {exc}") from None

"""JSON bytes -> Python values for the JSON hierarchy formats, with their failures as `HierarchyError`s."""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from .errors import HierarchyError
from .objects import MAX_DEPTH

# Rico nests a node as {"children": [{...}]}: two JSON levels per view level, plus the document's own.
_DEEP_LIMIT = 2 * MAX_DEPTH + 200
_deep_lock = threading.Lock()
T = TypeVar("T")

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_LOW = b"cdefCDEF"


def _replace_lone_surrogates(data: bytes) -> tuple[bytes, int]:
    """Lone `\\udXXX` escapes (not encodable, so unusable in protos) replaced by U+FFFD.

    Only surrogate escapes are visited (emoji pairs are common, lone halves rare): a high half directly followed
    by a low half is a pair; an escape whose backslash is itself escaped (`\\\\ud800`) is plain text.
    """
    pieces: list[bytes] = []
    last = 0
    skip_until = -1
    count = 0
    for match in _SURROGATE_ESCAPE.finditer(data):
        start = match.start()
        if start < skip_until:
            continue
        backslashes = 0
        while start - backslashes - 1 >= 0 and data[start - backslashes - 1] == 0x5C:
            backslashes += 1
        if backslashes % 2:
            continue  # "\\ud800": an escaped backslash followed by the text "ud800"
        high = data[start + 3] in b"89abAB"
        if high:
            after = data[start + 6 : start + 12]
            if len(after) == 6 and after[:3] in (b"\\ud", b"\\uD") and after[3] in _LOW:
                skip_until = start + 12
                continue
        pieces.append(data[last:start])
        pieces.append(b"\\ufffd")
        last = start + 6
        count += 1
    if not count:
        return data, 0
    pieces.append(data[last:])
    return b"".join(pieces), count


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


def load_json(data: bytes, *, repair_surrogates: bool = False) -> tuple[object, list[str]]:
    """(parsed JSON, warnings); `empty`, `malformed` or `too_deep` when it cannot be parsed.

    Bytes invalid in UTF-8 become U+FFFD, with a warning. With `repair_surrogates`, lone surrogate escapes
    (`\\ud800` without its pair, which no proto string can hold) become U+FFFD too; callers ask for that only
    after a first attempt failed with UnicodeEncodeError (`with_json_document`), so the scan costs nothing on
    clean input. The C decoder recurses once per nesting level and counts against Python's recursion limit
    (1000 by default), which a 1,000-level Rico hierarchy exceeds: only documents that hit it are retried once,
    under a lock, with the limit raised far enough for MAX_DEPTH view levels; deeper ones are `too_deep`.
    """
    if not data or not data.strip():
        raise HierarchyError("empty", "the hierarchy file is empty")
    warnings: list[str] = []
    if repair_surrogates:
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


def with_json_document(data: bytes, build: Callable[[object, list[str]], T]) -> T:
    """`build(document, warnings)`, retried once with lone surrogates repaired if it hit one."""
    doc, warnings = load_json(data)
    try:
        return build(doc, warnings)
    except UnicodeEncodeError:
        doc, warnings = load_json(data, repair_surrogates=True)
        return build(doc, warnings)

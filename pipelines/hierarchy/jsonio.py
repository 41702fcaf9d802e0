"""JSON bytes -> Python values for the JSON hierarchy formats, with their failures as `HierarchyError`s."""

from __future__ import annotations

import json
import sys
import threading

from .errors import HierarchyError
from .objects import MAX_DEPTH

# Rico nests a node as {"children": [{...}]}: two JSON levels per view level, plus the document's own.
_DEEP_LIMIT = 2 * MAX_DEPTH + 200
_deep_lock = threading.Lock()


def load_json(data: bytes) -> object:
    """Parsed JSON; `empty`, `malformed` or `too_deep` when it cannot be parsed.

    The C decoder recurses once per nesting level and counts against Python's recursion limit (1000 by
    default), which a 1,000-level Rico hierarchy exceeds. Only documents that hit it are retried once, under a
    lock, with the limit raised far enough for MAX_DEPTH view levels; deeper documents are `too_deep`.
    """
    if not data or not data.strip():
        raise HierarchyError("empty", "the hierarchy file is empty")
    try:
        return json.loads(data)
    except RecursionError:
        pass
    except (ValueError, UnicodeDecodeError) as exc:
        raise HierarchyError("malformed", f"not valid JSON: {exc}") from None
    with _deep_lock:
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, _DEEP_LIMIT))
        try:
            return json.loads(data)
        except RecursionError:
            raise HierarchyError("too_deep", f"JSON nested deeper than {MAX_DEPTH} view levels") from None
        finally:
            sys.setrecursionlimit(old)

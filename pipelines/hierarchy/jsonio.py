"""JSON bytes -> Python values for the JSON hierarchy formats, with their failures as `HierarchyError`s."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from json.decoder import scanstring
from typing import TypeVar

from .encoding import decode_detected
from .errors import HierarchyError
from .objects import MAX_DEPTH, check_size

# Rico nests a node as {"children": [{...}]}: two JSON levels per view level, plus the document's own
# ({"activity": {"root": ...}}) and small lists inside a node (bounds, content-desc).
MAX_NESTING = 2 * MAX_DEPTH + 8
T = TypeVar("T")

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_LOW = b"cdefCDEF"


def replace_lone_surrogates(data: bytes) -> tuple[bytes, int]:
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


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = (("true", True), ("false", False), ("null", None))


def _read_key(text: str, pos: int) -> tuple[str, int]:
    if text[pos : pos + 1] != '"':
        raise ValueError(f"Expecting property name enclosed in double quotes at char {pos}")
    key, pos = scanstring(text, pos + 1, True)
    pos = _WHITESPACE.match(text, pos).end()
    if text[pos : pos + 1] != ":":
        raise ValueError(f"Expecting ':' delimiter at char {pos}")
    return key, _WHITESPACE.match(text, pos + 1).end()


def loads_iterative(text: str, max_nesting: int = MAX_NESTING) -> object:
    """Strict JSON without recursion: an explicit stack, so depth costs neither C stack nor recursion limit.

    Used only for documents the C decoder refuses with RecursionError (deeper than about 1,000 levels);
    nesting beyond `max_nesting` raises `too_deep` as soon as it is seen.
    """
    skip = _WHITESPACE.match
    stack: list[dict | list] = []  # open containers
    keys: list[str] = []  # the pending key of every open object (lists hold "")
    pos = skip(text, 0).end()
    while True:
        char = text[pos : pos + 1]
        if char == "{" or char == "[":
            stack.append({} if char == "{" else [])
            keys.append("")
            if len(stack) > max_nesting:
                raise HierarchyError("too_deep", f"JSON nested deeper than {MAX_DEPTH} view levels")
            pos = skip(text, pos + 1).end()
            if text[pos : pos + 1] != ("}" if char == "{" else "]"):
                if char == "{":
                    keys[-1], pos = _read_key(text, pos)
                continue  # read the first member
            pos += 1
            keys.pop()
            value: object = stack.pop()
        elif char == '"':
            value, pos = scanstring(text, pos + 1, True)
        else:
            number = _NUMBER.match(text, pos)
            if number is not None:
                value = float(number.group()) if number.group(1) or number.group(2) else int(number.group())
                pos = number.end()
            else:
                for literal, literal_value in _LITERALS:
                    if text.startswith(literal, pos):
                        value = literal_value
                        pos += len(literal)
                        break
                else:
                    raise ValueError(f"Expecting value at char {pos}")
        while True:  # a value is complete: store it, then close every container that ends here
            if not stack:
                if skip(text, pos).end() != len(text):
                    raise ValueError(f"Extra data at char {pos}")
                return value
            parent = stack[-1]
            if type(parent) is dict:
                parent[keys[-1]] = value
            else:
                parent.append(value)
            pos = skip(text, pos).end()
            char = text[pos : pos + 1]
            if char == ",":
                pos = skip(text, pos + 1).end()
                if type(parent) is dict:
                    keys[-1], pos = _read_key(text, pos)
                break
            if char != ("}" if type(parent) is dict else "]"):
                raise ValueError(f"Expecting ',' delimiter at char {pos}")
            pos += 1
            keys.pop()
            value = stack.pop()


def _loads(data: bytes | str) -> object:
    try:
        return json.loads(data)
    except RecursionError:
        pass
    text = data if isinstance(data, str) else data.decode(json.detect_encoding(data), "surrogatepass")
    return loads_iterative(text)


def load_json(data: bytes, *, repair_surrogates: bool = False) -> tuple[object, list[str]]:
    """(parsed JSON, warnings); `empty`, `malformed` or `too_deep` when it cannot be parsed.

    Bytes invalid in UTF-8 are decoded in the encoding detected (`encoding.decode_detected`), else become
    U+FFFD, with a warning either way. With `repair_surrogates`, lone surrogate escapes
    (`\\ud800` without its pair, which no proto string can hold) become U+FFFD too; callers ask for that only
    after a first attempt failed with UnicodeEncodeError (`with_json_document`), so the scan costs nothing on
    clean input. The C decoder recurses once per nesting level and stops with RecursionError near 1,000
    levels, which a 1,000-level Rico hierarchy (two JSON levels per view) exceeds: such documents are read
    again by `loads_iterative`, which needs no stack, and nesting beyond MAX_NESTING is `too_deep`.
    """
    if not data or not data.strip():
        raise HierarchyError("empty", "the hierarchy file is empty")
    check_size(data)
    warnings: list[str] = []
    if repair_surrogates:
        data, count = replace_lone_surrogates(data)
        if count:
            warnings.append(f"replaced {count} lone surrogate escape(s) by U+FFFD")
    try:
        return _loads(data), warnings
    except UnicodeDecodeError as exc:
        text, warning = decode_detected(bytes(data), "utf-8", exc.start)
        warnings.append(warning)
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

"""One line of a JSON-lines file a command refuses whole on a bad line (`fields import`, `evaluate`): the object
it holds, or StoreError `FILE:LINE: reason`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Set
from typing import Any

from pipelines.store.errors import StoreError


def object_line(where: str, text: str, known: Set[str]) -> dict[str, Any]:
    """The JSON object on the line (`where` is `FILE:LINE`); keys outside `known` are refused, so a typo never
    passes as a missing value."""
    try:
        line = json.loads(text)
    except (ValueError, RecursionError):
        raise StoreError(f"{where}: not a JSON object") from None
    if not isinstance(line, dict):
        raise StoreError(f"{where}: not a JSON object")
    unknown = sorted(set(line) - set(known))
    if unknown:
        raise StoreError(f"{where}: unknown key(s) {unknown} (known: {sorted(known)})")
    return line


def numbered(
    raw_lines: Iterable[bytes], path: str, *, max_lines: int | None = None, max_line: int | None = None
) -> Iterator[tuple[int, str]]:
    """The non-blank lines of a file as (number from 1, text stripped), decoded as UTF-8; StoreError naming the
    line when one is not UTF-8 or longer than `max_line` bytes, or when there are more than `max_lines`."""
    for number, raw in enumerate(raw_lines, 1):
        if max_lines is not None and number > max_lines:
            raise StoreError(f"{path}: more than {max_lines} lines")
        if max_line is not None and len(raw) > max_line and not raw.endswith(b"\n"):
            raise StoreError(f"{path}:{number}: line longer than {max_line} bytes")
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise StoreError(f"{path}:{number}: not UTF-8 text") from None
        if text:
            yield number, text

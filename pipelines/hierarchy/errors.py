"""Why a view hierarchy could not be turned into objects.

`HierarchyError.reason` is a short stable code: the convert pipeline writes it into dead letters and counts
metrics by it, so the codes below are an interface and must not be renamed.
"""

from __future__ import annotations

from pipelines.errors import StepmarkError

#: Every reason code a parser may raise, with what it means.
REASONS: dict[str, str] = {
    "failed_dump": "the dump tool reported an error instead of a hierarchy (e.g. 'null root node')",
    "empty": "no bytes, or only whitespace",
    "malformed": "not well-formed XML/JSON, or the structure is not a view hierarchy",
    "too_deep": "nesting deeper than the documented limit (MAX_DEPTH)",
    "too_large": "more views than MAX_OBJECTS or more bytes than MAX_BYTES in one screen; a file, screenshot "
    "(bytes or pixels) or episode beyond its limit",
    "not_regular": "a FIFO, device, socket or folder where a file was expected (never opened)",
    "outside_input": "a symlink leading out of INPUT (read only with --follow-links)",
    "forbidden_entity": "XML with a DOCTYPE or entity declarations (external entities, expansion bombs)",
    "unknown_format": "bytes that are none of the supported hierarchy formats",
    "bad_screenshot": "screenshot bytes that are not a readable PNG/JPEG/WebP/GIF image",
    "missing_screenshot": "a record-based step (AndroidControl, AITW) without screenshot bytes",
}


class HierarchyError(StepmarkError):
    """A hierarchy or screenshot that cannot be used; `reason` is one of `REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown HierarchyError reason {reason!r}")
        super().__init__(f"{message} [{reason}]")
        self.reason = reason
        self.message = message

    def __reduce__(self):  # Beam pickles exceptions into dead letters: keep both arguments.
        return (type(self), (self.reason, self.message))

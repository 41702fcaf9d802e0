"""JSON Schema validation of the small layout files (actions.jsonl lines, gestures.json, episode.json, DroidBot
events) against the schemas in `schemas/`, with messages that say where in the document the problem is."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_DIR = Path(__file__).resolve().parent.parent.parent / "schemas"

ACTIONS = "actions"
GESTURES = "gestures"
MANIFEST = "episode_manifest"
DROIDBOT_EVENT = "droidbot_event"
#: Longest schema message kept per violation, and most violations listed in one description.
MAX_MESSAGE = 300
MAX_LISTED = 10


@functools.cache
def validator(name: str) -> jsonschema.protocols.Validator:
    """A compiled validator for `schemas/<name>.schema.json` (loaded once per process)."""
    schema = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _where(error: jsonschema.ValidationError) -> str:
    path = "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in error.absolute_path)
    return path or "(top level)"


def problems(name: str, instance: Any) -> list[tuple[tuple, str]]:
    """Every violation as (absolute path within the document, message), sorted by path."""
    out = []
    for error in validator(name).iter_errors(instance):
        message = error.message  # quotes the offending value, which may be huge: keep dead letters short
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 20] + f"... ({len(message)} chars)"
        out.append((tuple(error.absolute_path), f"{_where(error)}: {message}"))
    return sorted(out, key=lambda p: tuple(str(x) for x in p[0]))


def describe(name: str, instance: Any) -> str | None:
    """One line naming every violation, or None when `instance` is valid."""
    found = problems(name, instance)
    if not found:
        return None
    listed = "; ".join(msg for _, msg in found[:MAX_LISTED])
    more = f"; and {len(found) - MAX_LISTED} more" if len(found) > MAX_LISTED else ""
    return f"does not match schemas/{name}.schema.json: {listed}{more}"

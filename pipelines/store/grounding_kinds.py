"""The names grounding annotations are known by (their kinds and audit actions) and how an audit entry of one
reads. Apart from `grounding.py` (which re-exports them) so that `audit.py` can word a grounding change
without importing grounding, which imports the mapping that imports the audit module."""

from __future__ import annotations

from typing import Any

ADD = "grounding.add"
REMOVE = "grounding.remove"
#: Audit actions of grounding; revert.py undoes and redoes them through `grounding.swap`.
AUDIT_ACTIONS = (ADD, REMOVE)

TARGET, NO_TARGET, LABEL, BOX, WRONG_BOX = "target", "no_target", "label", "box", "wrong_box"
KINDS = (TARGET, NO_TARGET, LABEL, BOX, WRONG_BOX)


def describe(action: str, value: dict[str, Any] | None, step: int | None) -> str:
    """A grounding change in plain words (audit.describe knows only the action's name)."""
    if not value:
        return f"nothing left to change on step {step}"
    kind, oid = value.get("kind"), value.get("object_id")
    what = {
        TARGET: f"target set to object {oid}",
        NO_TARGET: "marked as having no valid target",
        LABEL: f"label {value.get('payload', {}).get('label')!r} on object {oid}",
        BOX: f"box drawn ({value.get('payload', {}).get('type')})",
        WRONG_BOX: f"box of object {oid} corrected",
    }.get(kind, str(kind))
    verb = "removed: " if action == REMOVE else ""
    return f"{verb}{what} (step {step})"

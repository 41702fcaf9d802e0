"""The audit actions of study fields (issue 26) and how an entry of one reads. Apart from `field_values.py` so
that `audit.py` can word a field change without importing the store code (which imports the audit module)."""

from __future__ import annotations

from typing import Any

SET = "field.set"
CLEAR = "field.clear"
DEFINE = "study.fields"
ADJUDICATE = "field.adjudicate"
IMPORT = "field.import"
#: Changes to a value; revert.py undoes and redoes them through `field_values.swap`.
AUDIT_ACTIONS = (SET, CLEAR)


def where(value: dict[str, Any]) -> str:
    """"step 3", "steps 2–5" or "the episode", from a value's JSON."""
    step, end = value.get("step"), value.get("end")
    if step is None or step < 0:
        return "the episode"
    return f"step {step}" if end == step else f"steps {step}–{end}"


def describe(action: str, value: dict[str, Any] | None, step: int | None) -> str:
    """A field change in plain words (audit.describe knows only the action's name)."""
    if not value:
        return f"nothing left to change on step {step}"
    shown = str(value.get("value"))
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    if action == CLEAR:
        return f"field {value.get('field')!r} cleared on {where(value)}"
    if action == ADJUDICATE:
        return f"consensus of field {value.get('field')!r} set to {shown!r} on {where(value)}"
    if action == IMPORT:
        return f"{value.get('values')} field value(s) and {value.get('suggestions')} suggestion(s) imported"
    return f"field {value.get('field')!r} set to {shown!r} on {where(value)}"

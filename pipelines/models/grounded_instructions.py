"""A backend that needs no weights: a step's low-level instruction written from its grounded action, in
AndroidControl's phrasing ("Click on ...", "Type ... in ...", "Scroll down", "Open the ... app", "Go back").

Reached through the same contract as any model (`--backend grounded-instructions`, or
`python:pipelines.models.grounded_instructions:suggest`), so a team can pre-fill instructions on its own data
today and review them like any model's suggestions. The verbs follow AndroidControl's `step_instructions` as
published ("Click on the correct icon", "Type 1000", "Type ... in the search bar", "Swipe up for more details"
for a scroll down); an object is named by its text, else its content description, else the words of its
resource id, quoted as on screen. A step with no action (the last screen) or a status step gets no answer.
"""

from __future__ import annotations

from typing import Any

from pipelines.models.contract import Answer, FieldAnswer, StepRequest

NAME = "grounded-instructions"
VERSION = "1"
#: The field this backend fills when the study has it; else the one text field asked for, if exactly one.
FIELD = "instruction"


def label(obj: dict[str, Any] | None) -> str:
    """What a person would call the object: its text, content description or resource id's words."""
    if not obj:
        return ""
    for key in ("text", "content_desc"):
        value = " ".join(str(obj.get(key) or "").split())
        if value:
            return value[:80]
    rid = str(obj.get("resource_id") or "")
    return rid.rsplit("/", 1)[-1].replace("_", " ").strip()[:80]


def _scroll(action: dict[str, Any]) -> str:
    """The direction the content moves: AndroidControl's `direction`, else the opposite of the finger's."""
    if action.get("direction") in ("up", "down", "left", "right"):
        return action["direction"]
    dx, dy = action.get("end_x", 0) - action.get("x", 0), action.get("end_y", 0) - action.get("y", 0)
    if abs(dy) >= abs(dx):
        return "down" if dy < 0 else "up"
    return "right" if dx < 0 else "left"


def instruction(request: StepRequest) -> str | None:
    """The step's instruction from its action, or None when the action has none (no action, a status)."""
    action = request.action
    kind = action.get("type")
    name = label(request.target())
    quoted = f"'{name}'" if name else ""
    at = f"at ({action.get('x', 0)}, {action.get('y', 0)})"
    if kind == "TAP":
        return f"Click on {quoted}" if quoted else f"Click {at}"
    if kind == "LONG_PRESS":
        return f"Long press on {quoted}" if quoted else f"Long press {at}"
    if kind == "SWIPE":
        return f"Scroll {_scroll(action)}" + (f" on {quoted}" if quoted else "")
    if kind == "TYPE_TEXT":
        typed = " ".join(str(action.get("text") or "").split())
        return f"Type '{typed}'" + (f" in {quoted}" if quoted else "")
    if kind == "OPEN_APP":
        return f"Open the {action.get('text') or 'requested'} app"
    return {"BACK": "Go back", "HOME": "Go to the home screen", "ENTER": "Press enter", "WAIT": "Wait"}.get(kind)


def target_field(request: StepRequest) -> str | None:
    if FIELD in request.wanted:
        return FIELD
    texts = [d["name"] for d in request.fields if d.get("name") in request.wanted and d.get("kind") == "text"]
    return texts[0] if len(texts) == 1 else None


def suggest(request: StepRequest) -> Answer:
    """The contract's answer: the instruction for the instruction field (see `target_field`), nothing else."""
    name, text = target_field(request), instruction(request)
    fields = (FieldAnswer(name, text),) if name and text else ()
    return Answer(NAME, VERSION, fields)


suggest.model_name = NAME  # type: ignore[attr-defined]
suggest.model_version = VERSION  # type: ignore[attr-defined]

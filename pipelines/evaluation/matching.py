"""The matching rule of `stepmark evaluate` (schemas/evaluation.md): one predicted action in AndroidControl's
JSON action space against one recorded step. Pure: no I/O, no store.

The rule is AndroidControl's / Android in the Wild's step-accuracy rule as papers report it: the action types
must be the same; a `click`/`long_press` matches when the predicted point falls inside the target object's box
(the annotators' corrected target when there is one) or within 14% of the screen diagonal of the recorded point;
`scroll` by direction; `input_text` and `open_app` by normalised text; `status` by its goal status; the actions
without an argument (`navigate_back`, `navigate_home`, `keyboard_enter`, `wait`) by type alone.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import asdict, dataclass
from typing import Any

from protos.stepmark import ui_episode_pb2

#: A tap matches within this fraction of the screen diagonal of the recorded point (AitW's 0.14).
TAP_DISTANCE = 0.14
#: AndroidControl's action types (plus `keyboard_enter`, AndroidWorld's name for the ENTER key, which AitW
#: and AitZ record) and the argument each one needs.
ACTION_TYPES: dict[str, tuple[str, ...]] = {
    "click": ("x", "y"),
    "long_press": ("x", "y"),
    "scroll": ("direction",),
    "input_text": ("text",),
    "open_app": ("app_name",),
    "navigate_back": (),
    "navigate_home": (),
    "keyboard_enter": (),
    "wait": (),
    "status": ("goal_status",),
}
DIRECTIONS = ("up", "down", "left", "right")
GOAL_STATUSES = ("complete", "infeasible")
MAX_TEXT = 2000

_A = ui_episode_pb2.Action
#: Recorded Action.Type -> AndroidControl type. ACTION_UNSPECIFIED (a trace's last screen) and OTHER have
#: none: such a step is not scored.
_RECORDED = {
    _A.TAP: "click", _A.LONG_PRESS: "long_press", _A.SWIPE: "scroll", _A.TYPE_TEXT: "input_text",
    _A.BACK: "navigate_back", _A.HOME: "navigate_home", _A.ENTER: "keyboard_enter", _A.WAIT: "wait",
    _A.OPEN_APP: "open_app", _A.TASK_COMPLETE: "status", _A.TASK_IMPOSSIBLE: "status",
}  # fmt: skip


class InvalidAction(ValueError):
    """A predicted action that is not one of AndroidControl's; the message says what is wrong."""


@dataclass(frozen=True)
class Predicted:
    """One predicted action, checked. Only the fields its type needs are set."""

    action_type: str
    x: float | None = None
    y: float | None = None
    direction: str | None = None
    text: str | None = None
    app_name: str | None = None
    goal_status: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Recorded:
    """What a recorded step is scored against: its AndroidControl type, the point and the target box (pixels,
    [left, top, right, bottom]; None without a target), the scroll direction, the text (typed text, app name,
    goal status) and the screen size."""

    action_type: str
    x: int | None = None
    y: int | None = None
    box: tuple[int, int, int, int] | None = None
    direction: str | None = None
    text: str | None = None
    width: int = 0
    height: int = 0

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if v is not None}
        if self.box is not None:
            out["box"] = list(self.box)
        return out


@dataclass(frozen=True)
class Outcome:
    """`matched`, and when not, `reason` (one of REASONS) and `detail` (a short plain-text explanation)."""

    matched: bool
    reason: str | None = None
    detail: str = ""


#: Why a step failed: a different action type, a tap outside the box and too far, another scroll direction,
#: other text / app / goal status, or no prediction for the step.
REASONS = ("type", "point", "direction", "text", "app", "status", "missing")


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidAction(f"{key!r} must be a number (screen pixels)")
    if value < 0:
        raise InvalidAction(f"{key!r} must not be negative")
    return float(value)


def _string(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise InvalidAction(f"{key!r} must be a string")
    if len(value) > MAX_TEXT:
        raise InvalidAction(f"{key!r} is longer than {MAX_TEXT} characters")
    return value


def parse_action(value: Any) -> Predicted:
    """A predicted action from its JSON object (`{"action_type": "click", "x": 10, "y": 20}`); InvalidAction
    naming the problem otherwise. Keys other than the type's own are refused (a typo must not pass)."""
    if not isinstance(value, dict):
        raise InvalidAction("'action' must be a JSON object with an 'action_type'")
    kind = value.get("action_type")
    if kind not in ACTION_TYPES:
        raise InvalidAction(f"unknown action_type {str(kind)[:40]!r} (one of {', '.join(ACTION_TYPES)})")
    needed = ACTION_TYPES[kind]
    extra = sorted(set(value) - {"action_type", *needed})
    if extra:
        raise InvalidAction(f"{kind} takes {', '.join(needed) or 'no arguments'}; unknown key(s) {extra}")
    missing = [k for k in needed if k not in value]
    if missing:
        raise InvalidAction(f"{kind} needs {', '.join(repr(k) for k in missing)}")
    fields: dict[str, Any] = {}
    if "x" in needed:
        fields["x"], fields["y"] = _number(value["x"], "x"), _number(value["y"], "y")
    if kind == "scroll":
        direction = _string(value["direction"], "direction").lower()
        if direction not in DIRECTIONS:
            raise InvalidAction(f"scroll direction {direction[:20]!r} is not one of {', '.join(DIRECTIONS)}")
        fields["direction"] = direction
    if kind == "input_text":
        fields["text"] = _string(value["text"], "text")
    if kind == "open_app":
        fields["app_name"] = _string(value["app_name"], "app_name")
    if kind == "status":
        status = _string(value["goal_status"], "goal_status").lower()
        if status not in GOAL_STATUSES:
            raise InvalidAction(f"goal_status {status[:20]!r} is not one of {', '.join(GOAL_STATUSES)}")
        fields["goal_status"] = status
    return Predicted(kind, **fields)


def swipe_direction(x: int, y: int, end_x: int, end_y: int) -> str | None:
    """The scroll direction of a swipe in AndroidControl's sense, which names where the content goes, not
    the finger: a finger moving up scrolls `down` (the converter's rule for AndroidControl scrolls,
    schemas/layouts.md). The larger of the two movements decides; None for a swipe that does not move."""
    dx, dy = end_x - x, end_y - y
    if dx == 0 and dy == 0:
        return None
    if abs(dy) >= abs(dx):
        return "down" if dy < 0 else "up"
    return "right" if dx < 0 else "left"


def recorded(
    action: ui_episode_pb2.Action, box: tuple[int, int, int, int] | None, width: int, height: int
) -> Recorded | None:
    """The scored form of a recorded step's action, `box` being its target's box (the corrected target's, when
    annotators corrected it; None without one). None for a step that has no scorable action."""
    kind = _RECORDED.get(action.type)
    if kind is None:
        return None
    common = {"width": width, "height": height}
    if kind in ("click", "long_press"):
        return Recorded(kind, x=action.x, y=action.y, box=box, **common)
    if kind == "scroll":
        direction = action.direction or swipe_direction(action.x, action.y, action.end_x, action.end_y)
        return Recorded(kind, direction=direction, **common)
    if kind in ("input_text", "open_app"):
        return Recorded(kind, text=action.text, **common)
    if kind == "status":
        status = "complete" if action.type == _A.TASK_COMPLETE else "infeasible"
        return Recorded(kind, text=status, **common)
    return Recorded(kind, **common)


def normalise(text: str) -> str:
    """Text as compared: Unicode NFKC, case-folded, whitespace collapsed, surrounding spaces and quotes gone."""
    folded = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    return folded.strip(" \"'.")


def _inside(x: float, y: float, box: tuple[int, int, int, int]) -> bool:
    left, top, right, bottom = box
    return left <= x <= right and top <= y <= bottom


def match(step: Recorded, predicted: Predicted | None) -> Outcome:
    """Whether `predicted` matches the recorded step (the rule in the module docstring)."""
    if predicted is None:
        return Outcome(False, "missing", "no prediction for this step")
    if predicted.action_type != step.action_type:
        return Outcome(False, "type", f"predicted {predicted.action_type}, recorded {step.action_type}")
    kind = step.action_type
    if kind in ("click", "long_press"):
        px, py = predicted.x or 0.0, predicted.y or 0.0
        if step.box is not None and _inside(px, py, step.box):
            return Outcome(True)
        if step.x is None or step.y is None:
            return Outcome(False, "point", "outside the target's box")
        limit = TAP_DISTANCE * math.hypot(step.width, step.height)
        distance = math.hypot(px - step.x, py - step.y)
        if distance <= limit:
            return Outcome(True)
        where = "outside the target's box and " if step.box is not None else ""
        return Outcome(
            False, "point", f"{where}{distance:.0f} px from the recorded point (limit {limit:.0f} px)"
        )
    if kind == "scroll":
        if predicted.direction == step.direction:
            return Outcome(True)
        return Outcome(
            False, "direction", f"scroll {predicted.direction}, recorded {step.direction or 'no direction'}"
        )
    if kind in ("input_text", "open_app"):
        said = predicted.text if kind == "input_text" else predicted.app_name
        if normalise(said or "") == normalise(step.text or ""):
            return Outcome(True)
        return Outcome(False, "text" if kind == "input_text" else "app", "different text")
    if kind == "status":
        if predicted.goal_status == step.text:
            return Outcome(True)
        return Outcome(False, "status", f"goal_status {predicted.goal_status}, recorded {step.text}")
    return Outcome(True)

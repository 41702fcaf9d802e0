"""What the Replay and Label pages draw for a UI step: the objects, the screenshot, the action and where it
touched, pulled out of a UI episode's `Step`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format

from pipelines.step_text import texts_of

Progress = Callable[[float], None]

@dataclass(frozen=True)
class Touch:
    """Where the step's action touched (screenshot pixels); end_* set for swipes."""

    x: int
    y: int
    end_x: int | None = None
    end_y: int | None = None


@dataclass
class UiStepView:
    objects: list[Any]
    image: bytes | None
    action: Any
    touch: Any
    target_index: int | None
    action_text: str
    warnings: list[str]
    #: The step's texts (`pipelines.step_text.texts_of`: every name of STEP_TEXT_FIELDS, "" when none).
    texts: dict[str, str] = field(default_factory=dict)


def ui_step_view(step: Any) -> UiStepView:
    """Pull the objects, screenshot and action out of a UI episode's `Step` (observation: llm4mobile TimeStep
    or Observation; action: stepmark `Action`)."""
    from protos.stepmark import ui_episode_pb2

    observation = step.observation
    if hasattr(observation, "observation") and not hasattr(observation, "objects"):
        observation = observation.observation  # a TimeStep
    objects = list(getattr(observation, "objects", []) or [])
    image = step.image or getattr(observation, "screenshot", b"") or None
    action = step.action
    if isinstance(action, dict):
        action = json_format.ParseDict(action, ui_episode_pb2.Action(), ignore_unknown_fields=True)
    info = step.info if isinstance(step.info, dict) else {}
    warnings = list(info.get("warnings", []) or [])
    recorded = action if isinstance(action, ui_episode_pb2.Action) else None
    texts = texts_of(recorded, info.get("text") if isinstance(info.get("text"), dict) else None)
    if (
        not isinstance(action, ui_episode_pb2.Action)
        or action.type == ui_episode_pb2.Action.ACTION_UNSPECIFIED
    ):
        return UiStepView(
            objects, image, None, None, None, "none recorded (last screen or no input)", warnings, texts
        )
    kind = ui_episode_pb2.Action.Type.Name(action.type)
    touch = None
    if action.type in (ui_episode_pb2.Action.TAP, ui_episode_pb2.Action.LONG_PRESS):
        touch = Touch(action.x, action.y)
    elif action.type == ui_episode_pb2.Action.SWIPE:
        touch = Touch(action.x, action.y, action.end_x, action.end_y)
    target = action.target_index if action.HasField("target_index") else None
    parts = [kind]
    if touch is not None:
        parts.append(f"at ({action.x}, {action.y})")
        if touch.end_x is not None:
            parts.append(f"to ({action.end_x}, {action.end_y})")
    if action.text:
        parts.append(f"text {action.text!r}")
    if target is not None and 0 <= target < len(objects):
        obj = objects[target]
        label = obj.text or obj.content_desc or obj.resource_id or obj.android_class
        parts.append(f"on object #{target} ({label})")
    return UiStepView(objects, image, action, touch, target, " ".join(parts), warnings, texts)

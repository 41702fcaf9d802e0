"""A converted UI step as a backend request (`contract.StepRequest`): the screenshot, the objects with their
boxes, the recorded action and its target, the step texts, the goal. Built by `stepmark suggest`'s workers from
the episode's record, one step at a time; everything sent is bounded (contract.MAX_*)."""

from __future__ import annotations

import base64
from typing import Any

from pipelines.models.contract import MAX_IMAGE_BYTES, MAX_OBJECTS, StepRequest, _cut
from pipelines.step_text import step_texts
from protos.llm4mobile import episode_pb2
from protos.stepmark import ui_episode_pb2

_IMAGE_TYPES = {"jpeg": "image/jpeg", "png": "image/png", "webp": "image/webp", "gif": "image/gif"}


def object_json(o: episode_pb2.Object) -> dict[str, Any]:
    b = o.bbox
    return {
        "index": o.index, "id": o.id, "type": episode_pb2.ObjectType.Name(o.type), "class": o.android_class,
        "text": _cut(o.text), "content_desc": _cut(o.content_desc), "resource_id": o.resource_id,
        "box": [b.left, b.top, b.right, b.bottom], "clickable": o.clickable, "visible": o.visible,
        "enabled": o.enabled, "scrollable": o.scrollable, "editable": o.type == episode_pb2.ObjectType.EDITTEXT,
    }  # fmt: skip


def action_json(a: ui_episode_pb2.Action) -> dict[str, Any]:
    return {
        "type": ui_episode_pb2.Action.Type.Name(a.type), "x": a.x, "y": a.y, "end_x": a.end_x, "end_y": a.end_y,
        "text": _cut(a.text), "direction": a.direction,
        "target_index": a.target_index if a.HasField("target_index") else None, "target_id": a.target_id,
    }  # fmt: skip


def image_json(data: bytes, fmt: str) -> dict[str, Any] | None:
    if not data or len(data) > MAX_IMAGE_BYTES:
        return None
    return {"format": fmt or "jpeg", "media_type": _IMAGE_TYPES.get(fmt, "image/jpeg"),
            "base64": base64.b64encode(data).decode("ascii")}  # fmt: skip


def step_request(
    record: ui_episode_pb2.UiEpisode, index: int, *, study: str, episode: str, fields: list[dict[str, Any]],
    wanted: list[str], tags: list[str] = (), with_image: bool = True,
) -> StepRequest:
    ts = record.episode.time_steps[index]
    obs = ts.observation
    action = record.actions[index] if index < len(record.actions) else ui_episode_pb2.Action()
    fmt = record.step_info[index].screenshot_format if index < len(record.step_info) else ""
    image = image_json(bytes(obs.screenshot), fmt) if with_image else None
    return StepRequest(
        study=study, episode=episode, episode_key=record.episode_id, step=index,
        steps=len(record.episode.time_steps), goal=_cut(record.goal), app_package=record.app_package,
        screen={"width": obs.screen_width, "height": obs.screen_height, "image": image,
                "image_bytes": len(obs.screenshot)},
        objects=[object_json(o) for o in obs.objects[:MAX_OBJECTS]], objects_total=len(obs.objects),
        action=action_json(action), texts={k: _cut(v) for k, v in step_texts(record, index).items()},
        fields=fields, wanted=list(wanted), tags=list(tags),
    )  # fmt: skip

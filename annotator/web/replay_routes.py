"""HTTP routes of the step player: episode data, frames, tags and undo for the browser, on the annotator's origin.

Every request carries a token minted by the Replay page for its annotator (`X-Stepmark-Token` header; `t=` on the
frame route only, for an `<img>`), so only pages this server showed can read or change anything, as that annotator.
Changes are `application/json` POSTs with the header token (routes_common.with_body). Changes take the
step index the browser sends: the step whose frame was on screen when the key was pressed.

    GET  /api/replay/{study}/{session}/{episode}/meta            kind, length, rewards, tags, palette
    GET  /api/replay/{study}/{session}/{episode}/steps?start=&end= per-step data (objects, action, keys, ...)
    GET  /api/replay/{study}/{session}/{episode}/frames/{step}   the step's frame (cacheable)
    GET  /api/replay/{study}/{session}/{episode}/tags            tags and state now (polled for live updates)
    GET  /api/replay/{study}/{session}/{episode}/evaluation?run=  a `stepmark evaluate` run's rows of this episode
    POST /api/replay/{study}/{session}/{episode}/tags            add/remove a step, segment or episode tag
    POST /api/replay/{study}/{session}/{episode}/undo | /redo    this annotator's last change on this episode
    GET  /api/labels/{study}/{session}/{episode}                  this annotator's own labels (the Label page)
    POST /api/labels/{study}/{session}/{episode}                  add/remove one of them on a step
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from annotator.operations import episode_kind
from annotator.web import context, player_data
from annotator.web.routes_common import (
    RequestError,
    Where,
    check_step,
    episode_ref,
    error_response,
    guarded,
    json_body,
    whole_number,
    with_body,
)
from pipelines.store.audit import describe
from pipelines.store.errors import PermissionDenied

PREFIX = "/api/replay/{study}/{session}/{episode}"
LABELS = "/api/labels/{study}/{session}/{episode}"
MAX_LABEL = 256


def _meta(request: Request, claims: context.Claims, where: Where) -> Response:
    ref = episode_ref(request)
    episode, reader = where.open(ref)
    palette = list(where.repo().get_palette(ref.study_id))
    body = {
        "kind": episode_kind(episode),
        "num_steps": len(reader),
        "transitions": episode.num_steps,  # as the Episodes table counts; one less with a final observation
        "rewards": reader.rewards(),
        "palette": palette,
        "user": claims.user,
        **_tags(where, episode, ref, claims.user),
    }
    return JSONResponse(body, headers={"cache-control": "no-store"})


def _steps(request: Request, claims: context.Claims, where: Where) -> Response:
    ref = episode_ref(request)
    episode, reader = where.open(ref)
    kind = episode_kind(episode)
    start = max(0, whole_number(request.query_params.get("start", 0), "start"))
    end = min(len(reader), whole_number(request.query_params.get("end", start + 50), "end"))
    end = min(end, start + player_data.STEPS_PER_REQUEST)
    steps = [player_data.step_payload(reader.step(i), kind) for i in range(start, end)]
    return JSONResponse({"start": start, "steps": steps}, headers={"cache-control": "private, max-age=3600"})


def _frame(request: Request, claims: context.Claims, where: Where) -> Response:
    ref = episode_ref(request)
    episode, reader = where.open(ref)
    index = whole_number(request.path_params["step"], "step")
    check_step(index, len(reader))
    picture = player_data.frame(reader.step(index), episode_kind(episode))
    return Response(
        picture.data, media_type=picture.content_type, headers={"cache-control": "private, max-age=86400, immutable"}
    )


def _tags_now(request: Request, claims: context.Claims, where: Where) -> Response:
    ref = episode_ref(request)
    episode = where.repo().get_episode(ref)
    return JSONResponse(_tags(where, episode, ref, claims.user), headers={"cache-control": "no-store"})


def _tags(where: Where, episode, ref, user: str) -> dict[str, Any]:
    """The player's tags of the episode, with those `user` may not remove (no ✕ on them)."""
    return player_data.tags_payload(episode, where.repo().locked_tags(ref, user))


def _evaluation(request: Request, claims: context.Claims, where: Where) -> Response:
    """The episode's rows of one run of its study (by step): what the player draws beside the recorded action."""
    from pipelines.evaluation import runs

    ref = episode_ref(request)
    where.repo().get_episode(ref)  # NotFound for an unknown episode
    name = request.query_params.get("run", "")
    if not name or len(name) > runs.MAX_NAME:
        raise RequestError("name the run: ?run=NAME")
    rows = runs.step_results(where.repo(), ref.study_id, name, ref.episode_id)
    return JSONResponse({"run": name, "steps": {str(r["step"]): r for r in rows}}, headers={"cache-control": "no-store"})


def _label(body: dict[str, Any]) -> str:
    label = body.get("label")
    if not isinstance(label, str) or not label.strip():
        raise RequestError("a tag needs a non-empty label")
    if len(label) > MAX_LABEL:
        raise RequestError(f"a tag label is at most {MAX_LABEL} characters")
    return label.strip()


def _change_tags(request: Request, claims: context.Claims, where: Where) -> Response:
    ref = episode_ref(request)
    body = json_body(request)
    repo = where.repo()
    op, scope, label = body.get("op"), body.get("scope"), _label(body)
    if op not in ("add", "remove") or scope not in ("step", "segment", "episode"):
        raise RequestError("op must be add/remove and scope step/segment/episode")
    user = claims.user
    try:
        ok, message = _apply_tag_change(repo, ref, op, scope, label, user, body)
    except PermissionDenied:  # the store's reason is long; the player shows one line
        return error_response(403, f"You may not remove another annotator's tag {label!r}: ask a reviewer")
    episode = repo.get_episode(ref)
    return JSONResponse({"ok": bool(ok), "message": message, **_tags(where, episode, ref, user)})


def _apply_tag_change(repo, ref, op: str, scope: str, label: str, user: str, body: dict[str, Any]):
    """(changed, the message the player shows) of one add/remove."""
    if scope == "episode":
        ok = (repo.add_episode_tag if op == "add" else repo.remove_episode_tag)(ref, label, user)
        message = f"{'Tagged' if op == 'add' else 'Removed from'} the episode: {label}"
    elif scope == "step":
        step = whole_number(body.get("step"), "step")
        ok = (repo.add_step_tag if op == "add" else repo.remove_step_tag)(ref, step, label, user)
        message = f"{'Tagged' if op == 'add' else 'Removed from'} step {step}: {label}"
    else:
        start, end = sorted((whole_number(body.get("step"), "step"), whole_number(body.get("end"), "end")))
        changer = repo.add_segment_tag if op == "add" else repo.remove_segment_tag
        count = changer(ref, start, end, label, user)
        ok = bool(count)
        message = f"{'Tagged' if op == 'add' else 'Removed from'} steps {start}–{end} ({count} changed): {label}"
    if not ok:
        message = f"Nothing changed ({label} was {'already there' if op == 'add' else 'not there'})"
    return ok, message


def _undo_or_redo(redo: bool):
    def handler(request: Request, claims: context.Claims, where: Where) -> Response:
        ref = episode_ref(request)
        repo = where.repo()
        entry = (repo.redo_last if redo else repo.undo_last)(claims.user, ref=ref)
        if entry is None:
            message = f"Nothing of yours to {'redo' if redo else 'undo'} on this episode"
        else:
            message = describe(entry)
        episode = repo.get_episode(ref)
        return JSONResponse(
            {"ok": entry is not None, "message": message, "step": getattr(entry, "step_index", None),
             **_tags(where, episode, ref, claims.user)}  # fmt: skip
        )

    return handler


def _labels_payload(repo, episode_id: str, user: str) -> dict[str, Any]:
    """The annotator's own labels in the player's tag shape (no episode tags: labels are per step)."""
    from pipelines.store import queue

    labels = queue.user_labels(repo, episode_id, user)
    body = {"episode_tags": [], "step_tags": {str(k): v for k, v in sorted(labels.items())}, "state": ""}
    body["version"] = player_data.tags_payload_version(body)
    return body


def _labels_now(request: Request, claims: context.Claims, where: Where) -> Response:
    ref = episode_ref(request)
    where.repo().get_episode(ref)  # NotFound for an unknown episode
    return JSONResponse(_labels_payload(where.repo(), ref.episode_id, claims.user), headers={"cache-control": "no-store"})


def _change_labels(request: Request, claims: context.Claims, where: Where) -> Response:
    from pipelines.store import queue

    ref = episode_ref(request)
    body = json_body(request)
    op, label = body.get("op"), _label(body)
    if op not in ("add", "remove") or body.get("scope", "step") != "step":
        raise RequestError("op must be add/remove; labels are per step")
    step = whole_number(body.get("step"), "step")
    _, reader = where.open(ref)
    check_step(step, len(reader))
    ok = queue.set_step_label(where.repo(), ref.episode_id, claims.user, step, label, op == "add")
    message = f"{'Labelled' if op == 'add' else 'Removed from'} step {step}: {label}" if ok else "Nothing changed"
    return JSONResponse({"ok": ok, "message": message, **_labels_payload(where.repo(), ref.episode_id, claims.user)})


def routes(settings: context.Settings | None = None) -> list[BaseRoute]:
    """The player's routes over the store and episode files of `settings` (default: this process's)."""
    where = Where(settings or context.settings())
    return [
        Route(PREFIX + "/meta", guarded(_meta, where), methods=["GET"]),
        Route(PREFIX + "/steps", guarded(_steps, where), methods=["GET"]),
        Route(PREFIX + "/frames/{step}", guarded(_frame, where, query_token=True), methods=["GET"]),
        Route(PREFIX + "/tags", guarded(_tags_now, where), methods=["GET"]),
        Route(PREFIX + "/evaluation", guarded(_evaluation, where), methods=["GET"]),
        Route(PREFIX + "/tags", with_body(_change_tags, where), methods=["POST"]),
        Route(PREFIX + "/undo", with_body(_undo_or_redo(redo=False), where), methods=["POST"]),
        Route(PREFIX + "/redo", with_body(_undo_or_redo(redo=True), where), methods=["POST"]),
        Route(LABELS, guarded(_labels_now, where), methods=["GET"]),
        Route(LABELS, with_body(_change_labels, where), methods=["POST"]),
    ]

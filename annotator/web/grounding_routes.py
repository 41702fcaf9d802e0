"""HTTP routes of the Replay player's grounding tools (issue 11): read and change the grounding annotations of
one step of a UI episode. Same rules as `replay_routes.py`: every request carries the page's token
(`X-Stepmark-Token` header) and acts as that annotator; handlers run in a worker thread; errors are JSON
`{"ok": false, "error": "<reason in plain words>"}` with status 400 (bad request), 401 (token), 403 (not
allowed), 404 (no such study/session/episode/annotation), 409 (conflict, e.g. an undo refused).

Contract (PREFIX = /api/grounding/{study}/{session}/{episode}; {step} is the 0-based step index):

    GET    PREFIX/labels
        -> {"ok": true, "labels": [str], "kinds": ["target", "no_target", "label", "box", "wrong_box"],
            "types": [ObjectType names, e.g. "BUTTON"]}
           labels: the study's label set (goal_element, wrong_box, decorative, missing_text, then labels already
           used in the study).
    GET    PREFIX/steps/{step}
        -> STEP = {"ok": true, "step": int, "user": str (this annotator),
                   "annotations": [ANNOTATION], "object_ids": [str] (Object.id by object index "i"),
                   "drawn": [{"i": int, "id": str, "box": [l,t,r,b], "type": str, "text": str, "user": str,
                              "annotation": int}],
                   "target": TARGET (everyone's annotations, newest wins), "my_target": TARGET (mine only),
                   "consensus_target": TARGET (majority of the step's annotators),
                   "orphans": [{"annotation": ANNOTATION, "reason": str}], "labels": [str]}
           ANNOTATION = {"id": int, "episode_id": str, "step": int, "kind": str, "object_id": str|null,
                         "user": str, "time": ISO-8601 UTC, "mine": bool, "object_index": int|null,
                         + by kind: "label": str | "box": [l,t,r,b], "type": str, "text": str}
             object_index is where the object is now (null for no_target; a drawn box's "i").
           TARGET = {"index": int|null, "object_id": str|null, "source": "converter"|"annotator",
                     "rule": str, "authors": [str], "converter_index": int|null,
                     "converter_rule": str|null (how the converter chose converter_index)}
           drawn: boxes drawn on this step (any author); their "i" continues the object list (len(object_ids),
           len+1, ...) so they can be targeted and labelled like objects.
    POST   PREFIX/steps/{step}    body {"kind": str, "object_id"?: str, "object_index"?: int, "label"?: str,
                                        "box"?: [l,t,r,b], "type"?: str, "text"?: str}
        -> STEP + {"message": str (plain words), "annotation": ANNOTATION}
           target / label / wrong_box need object_id or object_index (an index "i" of this step's objects or of
           a drawn box; object_id wins when both are given and must then name that object); label needs label
           (<= 256 chars); box needs box (inside the screen), type (default UNKNOWN_TYPE), text (optional);
           wrong_box needs box (the corrected one). Boxes are in the step's object space (the same as the objects'
           "box" in /api/replay/.../steps). A second target/no_target (or the same label, or box correction of
           the same object) by the same annotator replaces the first.
    DELETE PREFIX/steps/{step}/annotations/{id}
    POST   PREFIX/steps/{step}/annotations/{id}/remove          (same, for clients without DELETE)
        -> STEP + {"message": str}; someone else's annotation: 403 unless the episode's user, the study's
           creator or a reviewer. An id already gone: 200 with ok false and a message.
    POST   PREFIX/undo | PREFIX/redo                            body {}
        -> {"ok": bool, "message": str, "step": int|null} + STEP fields for that step (when there is one)
           this annotator's last change on this episode (grounding or tag: the store has one undo history).

Text from annotators is returned as JSON strings: the player must render it as text, never as HTML.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from annotator.operations import episode_kind
from annotator.web import context
from annotator.web.routes_common import (
    RequestError,
    Where,
    check_step,
    episode_ref,
    guarded,
    json_body,
    whole_number,
    with_body,
)
from pipelines.exporters import grounding as apply
from pipelines.store import grounding as store
from pipelines.store.errors import StoreError
from protos.llm4mobile import episode_pb2

PREFIX = "/api/grounding/{study}/{session}/{episode}"
_STORE_REFUSALS = ("NotFound", "PermissionDenied", "Conflict")


def _record(where: Where, ref) -> Any:
    episode, reader = where.open(ref)
    if episode_kind(episode) != "ui":
        raise RequestError(f"episode {ref.episode_id!r} is not a UI episode: grounding applies to UI steps only")
    # the UiEpisode held by the shared reader (annotator.readers.SharedReader wraps a UiEpisodeReader); read
    # only: every change here goes to the store, and effective targets are computed on copies
    return getattr(reader, "_reader", reader).record


def _step_payload(where: Where, ref, step: int, user: str) -> dict[str, Any]:
    record = _record(where, ref)
    check_step(step, len(record.episode.time_steps))
    repo = where.repo()
    notes = store.for_step(repo, ref, step)
    objects = record.episode.time_steps[step].observation.objects
    ids = [o.id for o in objects]
    drawn = [a for a in notes if a.kind == store.BOX]
    where_now = {oid: i for i, oid in enumerate(ids)}
    where_now.update({a.object_id: len(ids) + k for k, a in enumerate(drawn)})
    action = record.actions[step] if step < len(record.actions) else None

    def annotation(a: store.Annotation) -> dict[str, Any]:
        return {**a.to_json(), "mine": a.user == user, "object_index": where_now.get(a.object_id or "")}

    orphans = [o for o in store.orphans(notes, record) if o.annotation.step == step]
    out: dict[str, Any] = {
        "ok": True,
        "step": step,
        "user": user,
        "annotations": [annotation(a) for a in notes],
        "object_ids": ids,
        "drawn": [
            {"i": len(ids) + k, "id": a.object_id, "box": a.payload["box"], "type": a.payload.get("type"),
             "text": a.payload.get("text", ""), "user": a.user, "annotation": a.id}
            for k, a in enumerate(drawn)
        ],  # fmt: skip
        "orphans": [{"annotation": annotation(o.annotation), "reason": o.reason} for o in orphans],
        "labels": store.label_set(repo, ref.study_id),
    }
    if action is not None:
        out["target"] = apply.effective_target(action, objects, notes, "all")
        out["my_target"] = apply.effective_target(action, objects, notes, "mine", user)
        out["consensus_target"] = apply.effective_target(action, objects, notes, "consensus")
        for name in ("target", "my_target", "consensus_target"):  # the converter's rule, named beside a correction
            out[name]["converter_rule"] = action.target_rule if action.HasField("target_index") else None
    return out


def _object_id(body: dict[str, Any], record, step: int, drawn: list[store.Annotation]) -> tuple[str, int]:
    """(object id, index) named by the body: an object of the step or a box drawn on it."""
    objects = record.episode.time_steps[step].observation.objects
    ids = [o.id for o in objects] + [a.object_id for a in drawn]
    oid, index = body.get("object_id"), body.get("object_index")
    if index is not None:
        index = whole_number(index, "object_index")
        if not 0 <= index < len(ids):
            raise RequestError(f"object_index {index} is out of range: step {step} has {len(ids)} objects")
    if oid is not None:
        if not isinstance(oid, str) or oid not in ids:
            raise RequestError(f"object {oid!r} is not on step {step}")
        if index is not None and ids[index] != oid:
            raise RequestError(f"object_index {index} is object {ids[index]}, not {oid}")
        return oid, ids.index(oid)
    if index is None:
        raise RequestError(f"a {body.get('kind')} annotation needs object_id or object_index")
    return ids[index], index


def _check_in_screen(box: Any, obs) -> None:
    left, top, right, bottom = store.check_box(box)
    w, h = obs.screen_width, obs.screen_height
    if w > 0 and h > 0 and (left < 0 or top < 0 or right > w or bottom > h):
        raise RequestError(f"box {[left, top, right, bottom]} is not inside the {w}x{h} screen")


def _name(record, step: int, index: int, drawn: list[store.Annotation]) -> str:
    objects = record.episode.time_steps[step].observation.objects
    if index >= len(objects):
        a = drawn[index - len(objects)]
        return f"drawn box {index} ({a.payload.get('text') or a.payload.get('type')})"
    o = objects[index]
    kind = episode_pb2.ObjectType.Name(o.type).lower()
    return f"object {index} ({kind}{' ' + repr(o.name) if o.name else ''})"


def _added(made: store.Annotation, what: str) -> str:
    """What an added annotation did, in plain words."""
    step = made.step
    if made.kind == store.TARGET:
        return f"Step {step}: target set to {what}"
    if made.kind == store.NO_TARGET:
        return f"Step {step}: marked as having no valid target"
    if made.kind == store.LABEL:
        return f"Step {step}: {what} labelled {made.payload.get('label')!r}"
    if made.kind == store.BOX:
        return f"Step {step}: box drawn ({str(made.payload.get('type')).lower()})"
    return f"Step {step}: box of {what} corrected"


def _get_step(request: Request, claims: context.Claims, where: Where) -> Response:
    ref = episode_ref(request)
    step = whole_number(request.path_params["step"], "step")
    return JSONResponse(_step_payload(where, ref, step, claims.user), headers={"cache-control": "no-store"})


def _add(request: Request, claims: context.Claims, where: Where) -> Response:
    ref = episode_ref(request)
    step = whole_number(request.path_params["step"], "step")
    body = json_body(request)
    kind = body.get("kind")
    if kind not in store.KINDS:
        raise RequestError(f"kind must be one of {', '.join(store.KINDS)}, got {kind!r}")
    record = _record(where, ref)
    check_step(step, len(record.episode.time_steps))
    repo = where.repo()
    obs = record.episode.time_steps[step].observation
    drawn = [a for a in store.for_step(repo, ref, step) if a.kind == store.BOX]
    fields: dict[str, Any] = {}
    index = None
    if kind in (store.TARGET, store.LABEL, store.WRONG_BOX):
        fields["object_id"], index = _object_id(body, record, step, drawn)
        fields["object_index"] = index
    if kind in (store.BOX, store.WRONG_BOX):
        try:
            _check_in_screen(body.get("box"), obs)
        except StoreError as exc:
            raise RequestError(str(exc)) from None
        fields["box"] = body.get("box")
    if kind == store.LABEL:
        fields["label"] = body.get("label")
    if kind == store.BOX:
        fields["type"], fields["text"] = body.get("type"), body.get("text")
    try:
        made = store.add(repo, ref, step, kind, claims.user, **fields)
    except StoreError as exc:
        if type(exc).__name__ in _STORE_REFUSALS:
            raise
        raise RequestError(str(exc)) from None
    message = _added(made, _name(record, step, index, drawn) if index is not None else "")
    payload = _step_payload(where, ref, step, claims.user)
    mine = next(a for a in payload["annotations"] if a["id"] == made.id)
    return JSONResponse({**payload, "message": message, "annotation": mine})


def _remove(request: Request, claims: context.Claims, where: Where) -> Response:
    ref = episode_ref(request)
    step = whole_number(request.path_params["step"], "step")
    annotation_id = whole_number(request.path_params["annotation"], "annotation id")
    gone = store.remove(where.repo(), ref, annotation_id, claims.user)
    payload = _step_payload(where, ref, step, claims.user)
    if gone is None:
        return JSONResponse({**payload, "ok": False, "message": f"Annotation {annotation_id} was already gone"})
    whose = "your" if gone.user == claims.user else f"{gone.user}'s"
    return JSONResponse({**payload, "message": f"Step {gone.step}: removed {whose} {gone.kind.replace('_', ' ')}"})


def _labels(request: Request, claims: context.Claims, where: Where) -> Response:
    ref = episode_ref(request)
    where.repo().get_episode(ref)  # 404 for an unknown episode
    return JSONResponse(
        {"ok": True, "labels": store.label_set(where.repo(), ref.study_id), "kinds": list(store.KINDS),
         "types": list(episode_pb2.ObjectType.keys())},  # fmt: skip
        headers={"cache-control": "no-store"},
    )


def _undo_or_redo(redo: bool):
    def handler(request: Request, claims: context.Claims, where: Where) -> Response:
        ref = episode_ref(request)
        repo = where.repo()
        entry = (repo.redo_last if redo else repo.undo_last)(claims.user, ref=ref)
        verb = "Redid" if redo else "Undid"
        if entry is None:
            return JSONResponse({"ok": False, "step": None,
                                 "message": f"Nothing of yours to {'redo' if redo else 'undo'} on this episode"})  # fmt: skip
        if entry.reverted_action in store.AUDIT_ACTIONS:
            # the original change: an undo's `before` is what it took away (the change's `after`); a redo's
            # before/after are the change itself
            change = (entry.after or entry.before) if redo else (entry.before or entry.after)
            words = store.describe(str(entry.reverted_action), change, entry.step_index)
            message = f"{verb}: {words}"
        else:
            from pipelines.store.audit import describe

            message = describe(entry)
        out: dict[str, Any] = {"ok": True, "message": message, "step": entry.step_index}
        if entry.step_index is not None and episode_kind(repo.get_episode(ref)) == "ui":
            out.update(_step_payload(where, ref, entry.step_index, claims.user))
            out["message"] = message
        return JSONResponse(out)

    return handler


def routes(settings: context.Settings | None = None) -> list[BaseRoute]:
    """The grounding routes over the store and episode files of `settings` (default: this process's)."""
    where = Where(settings or context.settings())
    step = PREFIX + "/steps/{step}"
    return [
        Route(PREFIX + "/labels", guarded(_labels, where), methods=["GET"]),
        Route(step, guarded(_get_step, where), methods=["GET"]),
        Route(step, with_body(_add, where), methods=["POST"]),
        Route(step + "/annotations/{annotation}", with_body(_remove, where), methods=["DELETE"]),
        Route(step + "/annotations/{annotation}/remove", with_body(_remove, where), methods=["POST"]),
        Route(PREFIX + "/undo", with_body(_undo_or_redo(redo=False), where), methods=["POST"]),
        Route(PREFIX + "/redo", with_body(_undo_or_redo(redo=True), where), methods=["POST"]),
    ]

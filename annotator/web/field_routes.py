"""HTTP routes of the player's study-field form (issue 26): one step's form and setting one value. Same rules as
`replay_routes.py`: the page's token in the `X-Stepmark-Token` header, writes as `application/json`, handlers in a
worker thread, errors as JSON. The value goes to the step the browser names: the step whose frame and form were
on screen when the key was pressed.

    GET  /api/fields/{study}/{session}/{episode}/steps/{step}
        -> FORM = {"ok": true, "step": int, "user": str, "fields": [FIELD],
                   "values": {name: VALUE} (this annotator's only: the step's, the episode's, and for segment
                              fields the segment that holds the step),
                   "suggestions": {name: [{"source": str, "value": any}]}}
           FIELD = the definition (schemas/study_fields.schema.json) + "option_keys": [str]
           VALUE = {"value": any, "origin": str, "step": int, "end": int, "created_time": str}
           Suggestions: a converted episode's step text of the field's name (source "episode"), and values
           imported under a source name.
    POST /api/fields/{study}/{session}/{episode}/steps/{step}
         body {"field": str, "value": any | null (clears; [] of a multi_choice field clears too),
               "start"?: int, "end"?: int (segments: the segment start..end, which must hold {step}; without
               "start" it starts at {step}), "seconds"?: number,
               "replaces"?: any | null (the value the form showed there, null: none; when the store holds
               another by now, nothing changes: 409 and the error)}
        -> FORM + {"message": str}   (the form of {step}, the step on screen)
           The player sends a segment field's value to the saved segment that holds the step on screen (so
           clearing or changing it reaches that segment), or to the segment being marked.

Text is returned as JSON strings: the player shows it with textContent, never as HTML.
"""

from __future__ import annotations

import math
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
from pipelines.step_text import STEP_TEXT_FIELDS, step_texts
from pipelines.store import field_values as fv
from pipelines.store.field_defs import FieldDef, FieldValueError

PREFIX = "/api/fields/{study}/{session}/{episode}/steps/{step}"


def text_suggestions(where: Where, ref: Any, step: int, fields: list[FieldDef]) -> dict[str, str]:
    """The converted episode's step texts for the step fields named like one (pipelines/step_text.py)."""
    wanted = [d.name for d in fields if d.scope == "step" and d.kind == "text" and d.name in STEP_TEXT_FIELDS]
    if not wanted:
        return {}
    episode, reader = where.open(ref)
    if episode_kind(episode) != "ui":
        return {}
    record = getattr(reader, "_reader", reader).record
    texts = step_texts(record, step)
    return {name: texts[name] for name in wanted if texts.get(name)}


def _step(request: Request, where: Where) -> tuple[Any, int]:
    ref = episode_ref(request)
    step = whole_number(request.path_params["step"], "step")
    _, reader = where.open(ref)
    check_step(step, len(reader))
    return ref, step


def form_payload(where: Where, ref: Any, step: int, user: str) -> dict[str, Any]:
    repo = where.repo()
    fields = fv.definitions(repo, ref.study_id)
    mine = fv.values(repo, [ref.episode_id], user=user).get(ref.episode_id, [])
    by_name = {d.name: d for d in fields}
    values: dict[str, Any] = {}
    for v in mine:
        d = by_name.get(v.field)
        if d is None:
            continue
        here = (d.scope == "episode") or (d.scope == "step" and v.step == step) or (
            d.scope == "segment" and v.step <= step <= v.end
        )
        if here:
            values[v.field] = {"value": v.value, "origin": v.origin, "step": v.step, "end": v.end,
                               "created_time": v.to_json()["created_time"]}  # fmt: skip
    suggestions: dict[str, list[dict[str, Any]]] = {}
    for name, text in text_suggestions(where, ref, step, fields).items():
        suggestions.setdefault(name, []).append({"source": "episode", "value": text})
    for v in fv.suggestions(repo, [ref.episode_id]).get(ref.episode_id, []):
        d = by_name.get(v.field)
        if d is not None and (d.scope == "episode" or v.step <= step <= v.end):
            suggestions.setdefault(v.field, []).append({"source": v.user, "value": v.value})
    return {
        "ok": True, "step": step, "user": user,
        "fields": [d.to_json() | {"option_keys": list(d.option_keys())} for d in fields],
        "values": values, "suggestions": suggestions,
    }  # fmt: skip


def _form(request: Request, claims: context.Claims, where: Where) -> Response:
    ref, step = _step(request, where)
    return JSONResponse(form_payload(where, ref, step, claims.user), headers={"cache-control": "no-store"})


def _set(request: Request, claims: context.Claims, where: Where) -> Response:
    ref, step = _step(request, where)
    body = json_body(request)
    name = body.get("field")
    if not isinstance(name, str) or not name:
        raise RequestError("a field value needs the field's name")
    seconds = body.get("seconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int | float)
                                or not math.isfinite(seconds)):  # fmt: skip
        raise RequestError("seconds must be a number")
    end = body.get("end")
    end = None if end is None else whole_number(end, "end")
    start = body.get("start")
    start = None if start is None else whole_number(start, "start")
    repo = where.repo()
    fields = fv.definitions(repo, ref.study_id)
    definition = next((d for d in fields if d.name == name), None)
    if definition is None:
        raise RequestError(f"study {ref.study_id!r} has no field {name!r}")
    place_step = None if definition.scope == "episode" else step
    if start is not None and definition.scope == "segment":
        if not start <= step <= (step if end is None else end):
            raise RequestError(f"the segment {start}–{end} of {name} does not hold step {step}, the step on screen")
        place_step = start
    elif start is not None and start != place_step:
        raise RequestError(f"field {name} is given to {'the episode' if place_step is None else 'one step'}: "
                           f"'start' is for segment fields")  # fmt: skip
    suggested = list(text_suggestions(where, ref, step, [definition]).values())
    try:
        stored = fv.set_value(repo, ref, name, claims.user, body.get("value"), step=place_step, end=end,
                              seconds=seconds, suggested=suggested,
                              replaces=body["replaces"] if "replaces" in body else fv.UNCHECKED)  # fmt: skip
    except FieldValueError as exc:  # a value that does not fit its field: a bad request, said in plain words
        raise RequestError(str(exc)) from None
    where_text = "the episode" if place_step is None else (
        f"steps {place_step}–{end}" if definition.scope == "segment" and end is not None and end != place_step
        else f"step {place_step}"
    )
    message = f"Cleared {name} on {where_text}" if stored is None else (
        f"Saved {name} on {where_text} ({stored.origin})"
    )
    return JSONResponse({**form_payload(where, ref, step, claims.user), "message": message})


def routes(settings: context.Settings | None = None) -> list[BaseRoute]:
    where = Where(settings or context.settings())
    return [
        Route(PREFIX, guarded(_form, where), methods=["GET"]),
        Route(PREFIX, with_body(_set, where), methods=["POST"]),
    ]

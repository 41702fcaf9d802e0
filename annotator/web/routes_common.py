"""What every route of the annotator's own server shares: the token check, errors as JSON, bounded JSON bodies,
and where the store and episode files are (`Where`). Used by replay_routes and grounding_routes."""

from __future__ import annotations

import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from annotator.web import context, player_data
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2

MAX_BODY = 16 * 1024


class RequestError(StepmarkError):
    """A request the player should not have sent (bad step, bad body): 400 with the reason."""


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse({"ok": False, "error": message}, status_code=status, headers={"cache-control": "no-store"})


def claims_of(request: Request) -> context.Claims:
    return context.verify(request.headers.get("x-stepmark-token") or request.query_params.get("t"))


def episode_ref(request: Request) -> client_pb2.EpisodeRef:
    p = request.path_params
    return client_pb2.EpisodeRef(study_id=p["study"], session_id=p["session"], episode_id=p["episode"])


class Where:
    """The store and episode files the routes serve (the server's settings)."""

    def __init__(self, settings: context.Settings) -> None:
        self.settings = settings

    def repo(self):
        return context.repository(self.settings.store, str(self.settings.data_dir))

    def open(self, ref: client_pb2.EpisodeRef):
        episode = self.repo().get_episode(ref)
        return episode, context.readers(str(self.settings.data_dir))(episode)


def whole_number(value: Any, name: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise RequestError(f"{name} must be a whole number, got {value!r}") from None


def guarded(handler, where: Where):
    """Token check, then the handler in a worker thread (readers and the store block); errors become JSON."""

    async def endpoint(request: Request) -> Response:
        try:
            claims = claims_of(request)
        except context.TokenError as exc:
            return error_response(401, str(exc))
        try:
            return await run_in_threadpool(handler, request, claims, where)
        except (RequestError, player_data.FrameError) as exc:
            return error_response(400 if isinstance(exc, RequestError) else 404, str(exc))
        except StepmarkError as exc:
            name = type(exc).__name__
            status = 404 if "NotFound" in name else 403 if "Permission" in name else 409
            return error_response(status, str(exc))

    return endpoint


def json_body(request: Request) -> dict[str, Any]:
    raw = request.state.body
    if len(raw) > MAX_BODY:
        raise RequestError("request body too large")
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        raise RequestError("request body is not JSON") from None
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    return body


def with_body(handler, where: Where):
    """Read the body on the event loop (Starlette's stream), then hand over to the threaded handler."""
    threaded = guarded(handler, where)

    async def endpoint(request: Request) -> Response:
        request.state.body = await request.body()
        return await threaded(request)

    return endpoint

"""What every route of the annotator's own server shares: the token check, errors as JSON, bounded JSON bodies,
and where the store and episode files are (`Where`). Used by replay_routes, grounding_routes and field_routes."""

from __future__ import annotations

import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from annotator.web import context, player_data
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2

MAX_BODY = 16 * 1024
MAX_DEPTH = 32
MAX_INT = 2**63 - 1


class RequestError(StepmarkError):
    """A request the player should not have sent (bad step, bad body): 400 with the reason."""


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse({"ok": False, "error": message}, status_code=status, headers={"cache-control": "no-store"})


def claims_of(request: Request, query_token: bool = False) -> context.Claims:
    """The claims of the request's token: the `X-Stepmark-Token` header, or `t=` where the route allows it (GET
    frame routes only: an `<img>` cannot send headers; a write never, so no form or link can carry one)."""
    token = request.headers.get("x-stepmark-token")
    if token is None and query_token:
        token = request.query_params.get("t")
    return context.verify(token)


def unknown_api_route() -> Route:
    """The last route: any other `/api/...` path is a JSON 404, not the app's HTML page with 200."""

    async def endpoint(request: Request) -> Response:
        return error_response(404, "no such API route")

    return Route("/api/{rest:path}", endpoint, methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"])


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


def check_step(step: int, count: int) -> None:
    """A step the request names must be one of the episode's `count` steps: else a bad request saying so."""
    if not 0 <= step < count:
        raise RequestError(f"step {step} is out of range: the episode has {count} steps")


def whole_number(value: Any, name: str) -> int:
    """An integer from a path or query parameter or a JSON number; a bool, a fraction, NaN, an infinity or a
    number beyond what the store keeps (64-bit) is a bad request, not a 500."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise RequestError(f"{name} must be a whole number, got {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise RequestError(f"{name} must be a whole number, got {_shown(value)}") from None
    if abs(number) > MAX_INT:
        raise RequestError(f"{name} is out of range")
    return number


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def guarded(handler, where: Where, query_token: bool = False):
    """A GET route: token check, then the handler in a worker thread (readers and the store block); errors
    become JSON."""

    async def endpoint(request: Request) -> Response:
        try:
            claims = claims_of(request, query_token)
        except context.TokenError as exc:
            return error_response(401, str(exc))
        return await _run(handler, request, claims, where)

    return endpoint


async def _run(handler, request: Request, claims: context.Claims, where: Where) -> Response:
    try:
        return await run_in_threadpool(handler, request, claims, where)
    except (RequestError, player_data.FrameError) as exc:
        return error_response(400 if isinstance(exc, RequestError) else 404, str(exc))
    except StepmarkError as exc:
        name = type(exc).__name__
        status = 404 if "NotFound" in name else 403 if "Permission" in name else 409
        return error_response(status, str(exc))


def json_body(request: Request) -> dict[str, Any]:
    """The body `with_body` read and checked: a JSON object."""
    return request.state.json


def parse_json(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object of plain values: valid UTF-8, no NaN/Infinity, no lone surrogate (which
    json accepts as an escape but no database can store), nested at most MAX_DEPTH deep."""
    if len(raw) > MAX_BODY:
        raise RequestError("request body too large")
    try:
        text = raw.decode("utf-8") if raw else "{}"
        body = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise RequestError("request body is not JSON") from None
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    _check_values(body)
    return body


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_values(value: Any) -> None:
    """Depth and strings of a parsed body, without recursion (a deep body must not reach the stack limit)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise RequestError(f"request body is nested deeper than {MAX_DEPTH}")
        if isinstance(item, dict):
            stack.extend((k, depth) for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise RequestError("request body holds a lone surrogate (not a Unicode character)") from None


def is_json(content_type: str | None) -> bool:
    return (content_type or "").split(";", 1)[0].strip().lower() == "application/json"


def with_body(handler, where: Where):
    """A write route (POST, DELETE): only `application/json` and only the header token, so a cross-site form or
    a `text/plain` fetch (no CORS preflight) cannot reach it; the body is read on the event loop within
    MAX_BODY (the guard refused a larger Content-Length unread) and checked before the threaded handler."""

    async def endpoint(request: Request) -> Response:
        declared = request.headers.get("content-length")
        body_expected = request.method != "DELETE" or declared not in (None, "0") or "transfer-encoding" in request.headers
        if body_expected and not is_json(request.headers.get("content-type")):
            return error_response(415, "write requests must be application/json")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
            return error_response(413, "request body too large")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY:
                return error_response(413, "request body too large")
            chunks.append(chunk)
        try:
            claims = claims_of(request)
            request.state.json = parse_json(b"".join(chunks)) if body_expected else {}
        except context.TokenError as exc:
            return error_response(401, str(exc))
        except RequestError as exc:
            return error_response(400, str(exc))
        return await _run(handler, request, claims, where)

    return endpoint

"""Requests from anywhere but the annotator's own origin are refused, and its pages fetch nothing from outside.

A pure ASGI middleware (it sees HTTP and WebSocket alike, Streamlit's own routes included), so every refusal
happens before a route runs, before a body is read and before any token is checked:
- `Host` must be a loopback name (or the name the server was started with) with an optional port, parsed as a
  URL authority: `localhost:1@evil`, `127.0.0.1:evil` or `[::1]evil` are not loopback (DNS rebinding: a foreign
  name that resolves to 127.0.0.1 gets 403);
- a WebSocket handshake or a write (any method but GET/HEAD/OPTIONS) whose `Origin` is not this server's own
  origin, or whose `Sec-Fetch-Site` (where the browser sends it) is not `same-origin`, is refused (403), so no
  foreign page can open a recording or change a tag;
- a body larger than the path allows is refused (413) by its `Content-Length` before a byte of it is read, and a
  body sent without one (chunked) is cut off at the same size; the annotator's own WebSocket gets the same small
  cap per message at the protocol layer, so a huge message is refused before it is buffered;
- every HTTP response, refusals included, carries a Content-Security-Policy that allows only this origin (plus the
  blob: URLs Streamlit's component loader uses), so text that slipped into a page cannot make the browser fetch
  elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Headers the checks read: a request carrying one twice is refused (servers and frameworks disagree on which
# copy counts).
_SINGLE = (b"host", b"origin", b"sec-fetch-site", b"content-length")
# The annotator's own routes take small JSON bodies (routes_common.MAX_BODY) and WebSocket messages
# (live.routes.MAX_MESSAGE); Streamlit's file upload checks its own size (server.maxUploadSize); anything else
# Streamlit serves takes no body worth more than this.
API_PREFIX = "/api/"
API_MAX_BODY = 16 * 1024
API_MAX_MESSAGE = 16 * 1024
OTHER_MAX_BODY = 1024 * 1024
UPLOAD_PREFIX = "/_stcore/upload_file"

CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline' 'unsafe-eval' blob:",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "media-src 'self' data: blob:",
        "connect-src 'self'",
        "worker-src 'self' blob:",
        "frame-src 'none'",
        "frame-ancestors 'none'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
    ]
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


def parse_authority(value: str) -> tuple[str, int | None] | None:
    """(host, port) of a `Host` value or an origin's authority, or None unless it is exactly `name[:port]`.

    urlsplit alone is lenient (`[::1]evil` parses as ::1), so the authority must also read back unchanged from
    the parts: no user info, no path, a port of digits only, nothing after a bracketed address."""
    value = value.lower()
    try:
        parts = urlsplit("//" + value)
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if not host or parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    shown = f"[{host}]" if ":" in host else host
    if parts.netloc != shown + (f":{port}" if port is not None else "") or port == 0:
        return None
    return host, port


class OriginGuard:
    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = LOOPBACK_NAMES) -> None:
        self.app = app
        self.allowed = {h.lower().strip("[]") for h in allowed_hosts}

    def _host(self, headers: dict[bytes, bytes]) -> tuple[str, int | None] | None:
        authority = parse_authority(headers.get(b"host", b"").decode("latin-1"))
        return authority if authority and authority[0] in self.allowed else None

    def _refusal(self, scope: Scope, headers: dict[bytes, bytes]) -> str | None:
        """Why this request is refused (403), or None."""
        host = self._host(headers)
        if host is None:
            return "forbidden host"
        cross_site_matters = scope["type"] == "websocket" or scope.get("method", "GET") not in SAFE_METHODS
        if not cross_site_matters:
            return None
        fetch_site = headers.get(b"sec-fetch-site")
        if fetch_site is not None and fetch_site.lower() != b"same-origin":
            return "cross-site request refused"
        origin = headers.get(b"origin")
        if origin is not None:
            parts = urlsplit(origin.decode("latin-1"))
            if parts.scheme not in ("http", "https", "ws", "wss") or parse_authority(parts.netloc) != host:
                return "foreign origin refused"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        raw = scope.get("headers") or []
        headers = dict(raw)
        why = self._refusal(scope, headers)
        if why is None and any(sum(k == name for k, _ in raw) > 1 for name in _SINGLE):
            why = "repeated Host, Origin, Sec-Fetch-Site or Content-Length header"  # which one would count?
        path = scope.get("path", "")
        if scope["type"] == "websocket":
            if why is not None:
                if "websocket.http.response" in (scope.get("extensions") or {}):  # a 403 with the CSP, like HTTP
                    await _plain(send, 403, why, prefix="websocket.http.response")
                else:  # closing before accepting answers the handshake with a bare 403
                    await send({"type": "websocket.close", "code": 1008})
                return
            if path.startswith(API_PREFIX):
                limit_websocket_messages(receive, API_MAX_MESSAGE)
            await self.app(scope, receive, send)
            return
        if why is not None:
            await _plain(send, 403, why)
            return
        limit = _body_limit(path)
        if limit is not None:
            declared = headers.get(b"content-length")
            if declared is not None:
                try:
                    size = int(declared)
                except ValueError:
                    await _plain(send, 400, "bad Content-Length")
                    return
                if size > limit:
                    await _plain(send, 413, f"request body too large (at most {limit} bytes)")
                    return
            elif b"transfer-encoding" in headers:  # chunked: no size up front, so read it here, at most `limit`
                body = await _read_at_most(receive, limit)
                if body is None:
                    await _plain(send, 413, f"request body too large (at most {limit} bytes)")
                    return
                receive = _replay(body, receive)

        async def send_with_csp(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*(message.get("headers") or []), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_csp)


def _body_limit(path: str) -> int | None:
    if path.startswith(API_PREFIX):
        return API_MAX_BODY
    if path.startswith(UPLOAD_PREFIX):
        return None  # Streamlit refuses uploads over server.maxUploadSize by Content-Length itself
    return OTHER_MAX_BODY


async def _plain(send: Send, status: int, text: str, prefix: str = "http.response") -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store"),
               (b"connection", b"close"), *SECURITY_HEADERS]  # fmt: skip
    await send({"type": f"{prefix}.start", "status": status, "headers": headers})
    await send({"type": f"{prefix}.body", "body": text.encode()})


async def _read_at_most(receive: Receive, limit: int) -> bytes | None:
    """A body sent without Content-Length, read up to `limit` bytes; None as soon as it is longer."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def limit_websocket_messages(receive: Receive, size: int) -> bool:
    """Cap incoming WebSocket messages of this connection at `size` bytes in the protocol itself.

    Uvicorn's connection is set up with Streamlit's `server.maxMessageSize` (200 MB) for every WebSocket,
    Streamlit's own included; the server's `receive` is a method of uvicorn's protocol object, whose websockets
    `ServerProtocol` reads its `max_message_size` when the next frame header arrives. A bigger message then
    closes the connection (1009) unread. False where the server is not uvicorn's websockets-sansio (the route
    still refuses big messages once received)."""
    protocol = getattr(getattr(receive, "__self__", None), "conn", None)
    if protocol is None or not hasattr(protocol, "max_message_size"):
        return False
    current = protocol.max_message_size
    protocol.max_message_size = size if current is None else min(current, size)
    return True

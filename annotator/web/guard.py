"""Requests from anywhere but the annotator's own origin are refused, and its pages fetch nothing from outside.

A pure ASGI middleware (it sees HTTP and WebSocket alike, Streamlit's own routes included):
- `Host` must be the loopback address or name the server was started with (DNS rebinding: a foreign name that
  resolves to 127.0.0.1 gets 403);
- a WebSocket handshake whose `Origin` is another site is refused (403), so no foreign page can open one;
- every HTTP response carries a Content-Security-Policy that allows only this origin (plus the blob: URLs
  Streamlit's component loader uses), so text that slipped into a page cannot make the browser fetch elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")

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


def _hostname(value: str) -> str:
    """The host part of a `Host` header value (`name:port`, `[v6]:port`), lower-cased."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end > 0 else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class OriginGuard:
    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = LOOPBACK_NAMES) -> None:
        self.app = app
        self.allowed = {h.lower() for h in allowed_hosts} | {f"[{h}]" for h in allowed_hosts if ":" in h}

    def _allowed(self, scope: Scope) -> bool:
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        if _hostname(host) not in self.allowed:
            return False
        origin = headers.get(b"origin")
        if scope["type"] == "websocket" and origin is not None:
            parts = urlsplit(origin.decode("latin-1"))
            if (parts.hostname or "").lower() not in {h.strip("[]") for h in self.allowed}:
                return False
            if parts.netloc.lower() != host.lower():
                return False
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if not self._allowed(scope):
            if scope["type"] == "websocket":  # closing before accepting answers the handshake with 403
                await send({"type": "websocket.close", "code": 1008})
                return
            await send({"type": "http.response.start", "status": 403,
                        "headers": [(b"content-type", b"text/plain; charset=utf-8")]})  # fmt: skip
            await send({"type": "http.response.body", "body": b"forbidden host"})
            return
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return

        async def send_with_csp(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                headers.append((b"content-security-policy", CSP.encode()))
                headers.append((b"x-content-type-options", b"nosniff"))
                headers.append((b"referrer-policy", b"no-referrer"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_csp)

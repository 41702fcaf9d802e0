"""Pages opened at a sub-path (/replay, /quality, ...) tell Streamlit's frontend where its server is.

Streamlit's frontend cannot tell a page's path from a base path: opened at /quality it first asks
/quality/_stcore/health and /quality/_stcore/host-config (two 404s in the browser's console on every page but
the first), then falls back to /. The annotator is always served at the root of its origin, so each page is
told so before the frontend starts: the HTML page gets a one-line script setting `window.__streamlit
.BACKEND_BASE_URL` (the frontend's documented embedding setting) to this origin's root. Nothing else changes:
the script names no other host, and the Content-Security-Policy still allows only this origin.

A pure ASGI middleware: page requests are asked for uncompressed (the page is a few kilobytes), so the HTML can
be amended; every other request passes untouched.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

SCRIPT = (
    b"<script>window.__streamlit = Object.assign({}, window.__streamlit,"
    b' {BACKEND_BASE_URL: window.location.origin + "/"});</script>'
)
# Paths that are never a page: Streamlit's own routes and files, and the annotator's routes.
_NOT_PAGES = ("/_stcore/", "/api/", "/static/", "/media/", "/component/", "/app/static/", "/auth/", "/oauth2callback")


def is_page(path: str) -> bool:
    """A path the frontend's page (index.html) answers: `/` or a page name, no file name, no route prefix."""
    if path.startswith(_NOT_PAGES):
        return False
    return "." not in path.rsplit("/", 1)[-1]


class PageBase:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "GET" or not is_page(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        headers = [(k, v) for k, v in scope.get("headers") or [] if k.lower() != b"accept-encoding"]
        scope = {**scope, "headers": headers}
        start: Message | None = None
        chunks: list[bytes] = []

        async def amend(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = b"".join(chunks)
            response_headers = list(start.get("headers") or [])
            kind = next((v for k, v in response_headers if k.lower() == b"content-type"), b"")
            if start["status"] == 200 and kind.startswith(b"text/html") and b"<head>" in body:
                body = body.replace(b"<head>", b"<head>" + SCRIPT, 1)
                response_headers = [(k, v) for k, v in response_headers if k.lower() != b"content-length"]
                response_headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": response_headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, amend)

"""Pages tell Streamlit's frontend where the server is (annotator/web/page_base.py): the HTML page gets the one
script, asked for uncompressed; routes, files and other methods pass untouched. (In chromium: no 404 in the
console on any page, tests/e2e/test_player_browser.py.)"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from annotator.web.page_base import SCRIPT, PageBase, is_page

PAGE = "<!DOCTYPE html><html><head><title>t</title></head><body>" + "x" * 2000 + "</body></html>"


def _page(request: Request) -> Response:
    return HTMLResponse(PAGE)


def _api(request: Request) -> Response:
    return JSONResponse({"page": "<head>"})


def _client() -> TestClient:
    app = Starlette(
        routes=[Route("/", _page), Route("/quality", _page, methods=["GET", "POST"]), Route("/api/x", _api),
                Route("/static/index.html", _page)],
        middleware=[Middleware(PageBase), Middleware(GZipMiddleware, minimum_size=100)],
    )  # fmt: skip
    return TestClient(app, base_url="http://127.0.0.1:8501")


def test_a_page_gets_the_script_once_uncompressed():
    client = _client()
    for path in ("/", "/quality"):
        response = client.get(path, headers={"Accept-Encoding": "gzip"})
        assert response.status_code == 200
        assert "content-encoding" not in response.headers  # asked for uncompressed, so it could be amended
        assert response.content.count(SCRIPT) == 1
        assert response.content.startswith(PAGE.split("<head>")[0].encode() + b"<head>" + SCRIPT)
        assert int(response.headers["content-length"]) == len(response.content) == len(PAGE) + len(SCRIPT)


def test_routes_files_and_other_methods_pass_untouched():
    client = _client()
    assert client.get("/api/x").json() == {"page": "<head>"}
    assert SCRIPT not in client.get("/static/index.html").content
    assert client.post("/quality").content == PAGE.encode()
    assert [is_page(p) for p in ("/", "/replay", "/_stcore/health", "/api/replay/a/b/c/meta", "/favicon.png")] == [
        True, True, False, False, False,
    ]  # fmt: skip

"""The annotator's HTTP surface as an attacker sees it (issue 22): cross-site writes, the query token, bodies refused
before they are read, JSON that parses but cannot be stored, Host authorities that only look like loopback, the CSP
on refusals, unknown API paths. In process with Starlette's TestClient over a real store of recorded Procgen
episodes, and against a real `streamlit run` server whose memory is read from /proc while it is sent 100 MB."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from annotator.operations import ref_key, ref_of
from annotator.web import context, guard, replay_routes, routes_common
from tests.annotator.annotator_data import ALICE, build_env_data

pytestmark = pytest.mark.slow
ORIGIN = "http://127.0.0.1:8501"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("http_surface")
    env = build_env_data(data_dir, episodes=1, max_steps=8)

    async def echo(websocket):
        await websocket.accept()
        await websocket.send_text(await websocket.receive_text())
        await websocket.close()

    settings = context.Settings(data_dir=data_dir, store=None, user=None)
    app = Starlette(
        routes=[*replay_routes.routes(settings), WebSocketRoute("/api/echo", echo), routes_common.unknown_api_route()],
        middleware=[Middleware(guard.OriginGuard, allowed_hosts=guard.LOOPBACK_NAMES)],
    )
    with TestClient(app, base_url=ORIGIN) as client:
        yield client, env


def url(episode, path: str) -> str:
    return f"/api/replay/{ref_key(ref_of(episode))}/{path}"


def token_header() -> dict[str, str]:
    return {"X-Stepmark-Token": context.mint(ALICE)}


def json_headers(**extra: str) -> dict[str, str]:
    return {**token_header(), "Content-Type": "application/json", "Origin": ORIGIN, **extra}


def episode_tags(env) -> list[str]:
    return [t.label for t in env.repo.get_episode(ref_of(env.episodes[0])).tags]


TAG = {"op": "add", "scope": "episode", "label": "cross-site"}


@pytest.mark.parametrize(
    "headers, query_token, status",
    [
        # the probe of the issue: a simple request (no preflight) with the <img> token and a foreign Origin
        ({"Content-Type": "text/plain", "Origin": "http://evil.example"}, True, 403),
        # the same from this origin: still no header token and no JSON
        ({"Content-Type": "text/plain", "Origin": ORIGIN}, True, 415),
        ({"Content-Type": "text/plain"}, False, 415),
        ({"Content-Type": "application/x-www-form-urlencoded"}, False, 415),
        ({"Content-Type": "multipart/form-data; boundary=x"}, False, 415),
        # JSON with the query token only: the query token is for frames
        ({"Content-Type": "application/json", "Origin": ORIGIN}, True, 401),
        # the header token but another origin, or the browser saying it is not same-origin
        (json_headers(Origin="http://evil.example"), False, 403),
        (json_headers(Origin="null"), False, 403),
        (json_headers(Origin="http://localhost:8501"), False, 403),  # another origin, though loopback
        (json_headers(Origin="http://127.0.0.1:8502"), False, 403),
        (json_headers(Origin="file://"), False, 403),
        (json_headers(**{"Sec-Fetch-Site": "cross-site"}), False, 403),
        (json_headers(**{"Sec-Fetch-Site": "same-site"}), False, 403),
        (json_headers(**{"Sec-Fetch-Site": "none"}), False, 403),
    ],
)
def test_cross_site_and_simple_writes_change_nothing(world, headers, query_token, status):
    client, env = world
    headers = {k: v for k, v in headers.items() if not (query_token and k == "X-Stepmark-Token")}
    params = {"t": context.mint(ALICE)} if query_token else None
    reply = client.post(url(env.episodes[0], "tags"), content=json.dumps(TAG), headers=headers, params=params)
    assert reply.status_code == status, reply.text
    assert "default-src 'self'" in reply.headers["content-security-policy"]
    assert "cross-site" not in episode_tags(env)


def test_a_same_origin_json_write_with_the_header_token_works(world):
    client, env = world
    body = {**TAG, "label": "mine"}
    headers = json_headers(**{"Sec-Fetch-Site": "same-origin"})
    assert client.post(url(env.episodes[0], "tags"), json=body, headers=headers).json()["ok"]
    headers = {**token_header(), "Content-Type": "application/json; charset=utf-8"}  # no Origin: not a browser
    assert client.post(url(env.episodes[0], "undo"), content=b"{}", headers=headers).json()["ok"]
    assert "mine" not in episode_tags(env)


def test_the_query_token_is_taken_on_frame_routes_only(world):
    client, env = world
    episode = env.episodes[0]
    t = {"t": context.mint(ALICE)}
    assert client.get(url(episode, "frames/1"), params=t).status_code == 200
    for path in ("meta", "tags", "steps"):
        reply = client.get(url(episode, path), params=t)
        assert reply.status_code == 401, path
    assert client.get(url(episode, "meta"), headers=token_header()).status_code == 200


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b'{"op": "add", "scope": "episode", "label": "\\ud800"}', "surrogate"),
        (b'{"op": "add", "scope": "episode", "label": "a\\udfffb"}', "surrogate"),
        (b'{"op": "add", "scope": "episode", "label": "x", "\\ud83d": 1}', "surrogate"),
        (b"[" * 5000 + b"]" * 5000, "not JSON|nested"),
        (b'{"a":' * 2000 + b"1" + b"}" * 2000, "not JSON|nested"),
        (b'{"op": "add", "scope": "step", "step": ' + b"[" * 40 + b"]" * 40 + b', "label": "x"}', "nested"),
        (b'{"op": "add", "scope": "step", "step": NaN, "label": "x"}', "not JSON"),
        (b'{"op": "add", "scope": "step", "step": Infinity, "label": "x"}', "not JSON"),
        (b'{"op": "add", "scope": "step", "step": 1e400, "label": "x"}', "whole number"),
        (b'{"op": "add", "scope": "step", "step": 1.5, "label": "x"}', "whole number"),
        (b'{"op": "add", "scope": "step", "step": true, "label": "x"}', "whole number"),
        (b'{"op": "add", "scope": "step", "step": 99999999999999999999999, "label": "x"}', "out of range"),
        (b'{"op": "add", "scope": "segment", "step": 0, "end": -99999999999999999999, "label": "x"}', "out of range"),
        (b'{"op": "add", "scope": "episode", "label": "\xff\xfe"}', "not JSON"),
        (b'{"op": "add", "scope": "episode", "label": "x"', "not JSON"),
        (b'"just a string"', "JSON object"),
        (b"\xef\xbb\xbf{}", "not JSON"),  # a BOM is not JSON
    ],
)
def test_bodies_that_parse_but_cannot_be_stored_are_400(world, raw, reason):
    import re

    client, env = world
    before = episode_tags(env)
    reply = client.post(url(env.episodes[0], "tags"), content=raw, headers=json_headers())
    assert reply.status_code == 400, reply.text
    assert re.search(reason, reply.json()["error"])
    assert episode_tags(env) == before


def test_bodies_are_refused_by_size_before_they_are_read_or_a_token_is_checked(world):
    client, env = world
    target = url(env.episodes[0], "tags")
    big = b"x" * (routes_common.MAX_BODY + 1)
    # no token at all: the size is refused first (413, not 401)
    reply = client.post(target, content=big, headers={"Content-Type": "application/json"})
    assert reply.status_code == 413 and "default-src" in reply.headers["content-security-policy"]
    # a body without Content-Length (chunked) is cut off at the same size
    chunks = (b"x" * 4096 for _ in range(1000))
    reply = client.post(target, content=chunks, headers={"Content-Type": "application/json"})
    assert reply.status_code == 413
    # a lying Content-Length
    reply = client.post(target, content=b"{}", headers={**json_headers(), "Content-Length": "nope"})
    assert reply.status_code == 400


@pytest.mark.parametrize(
    "host",
    [
        "localhost:8501@evil.example", "127.0.0.1:evil", "[::1]evil.example", "127.0.0.1.evil.example",
        "evil.example", "127.0.0.1:8501/x", "127.0.0.1:0", "127.0.0.1:99999", "127.0.0.1:", "127.0.0.1:+80",
        "user@127.0.0.1", "127.0.0.1 ", " 127.0.0.1", "127.0.0.1:8501:8501", "[::1", "::1:8501", "", "127.0.0.1#x",
        "127.0.0.1?x", "127.0.0.1\\@evil", "2130706433", "0x7f.1",
    ],
)  # fmt: skip
def test_host_authorities_that_only_look_like_loopback_get_403_with_the_csp(world, host):
    client, env = world
    reply = client.get(url(env.episodes[0], "meta"), headers={**token_header(), "Host": host})
    assert reply.status_code == 403
    assert reply.headers["content-security-policy"] == guard.CSP
    assert reply.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("host", ["127.0.0.1:8501", "127.0.0.1", "localhost:8501", "LOCALHOST", "[::1]:8501", "[::1]"])
def test_loopback_authorities_are_served(world, host):
    client, env = world
    reply = client.get(url(env.episodes[0], "meta"), headers={**token_header(), "Host": host})
    assert reply.status_code == 200


def test_repeated_checked_headers_are_refused(world):
    client, env = world
    target = url(env.episodes[0], "tags")
    for name, values in (("host", ("evil.example", "127.0.0.1:8501")), ("origin", ("http://evil.example", ORIGIN)),
                         ("sec-fetch-site", ("cross-site", "same-origin"))):  # fmt: skip
        headers = [(k, v) for k, v in json_headers().items() if k.lower() != name] + [(name, v) for v in values]
        reply = client.post(target, content=json.dumps(TAG), headers=headers)
        assert reply.status_code == 403, (name, reply.status_code)
    assert "cross-site" not in episode_tags(env)


def test_unknown_api_paths_are_json_404(world):
    client, _ = world
    for method in ("GET", "POST", "DELETE"):
        reply = client.request(method, "/api/nothing/here", headers=json_headers())
        assert reply.status_code == 404 and reply.json() == {"ok": False, "error": "no such API route"}
        assert "default-src" in reply.headers["content-security-policy"]


def test_websockets_check_sec_fetch_site_like_origin(world):
    client, _ = world
    same = {"Origin": ORIGIN, "Sec-Fetch-Site": "same-origin", "Host": "127.0.0.1:8501"}
    with client.websocket_connect("/api/echo", headers=same) as ws:
        ws.send_text("hi")
        assert ws.receive_text() == "hi"
    for headers in ({"Origin": ORIGIN, "Sec-Fetch-Site": "cross-site"}, {"Origin": "null"},
                    {"Origin": "http://127.0.0.1:8501@evil.example"}, {"Sec-Fetch-Site": "same-site"}):  # fmt: skip
        with pytest.raises(WebSocketDisconnect) as refused:
            with client.websocket_connect("/api/echo", headers={**headers, "Host": "127.0.0.1:8501"}):
                pass
        assert refused.value.status_code == 403  # a denial response, with the CSP like every refusal
        assert refused.value.headers["content-security-policy"] == guard.CSP


def test_parse_authority_reads_back_exactly():
    assert guard.parse_authority("127.0.0.1:8501") == ("127.0.0.1", 8501)
    assert guard.parse_authority("[::1]:80") == ("::1", 80)
    assert guard.parse_authority("LocalHost") == ("localhost", None)
    for bad in ("[::1]evil", "a:1@b", "h:x", "h:08501", "h:1/p", "", ":80"):
        assert guard.parse_authority(bad) is None, bad


# --- against a real server process -------------------------------------------------------------------------


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _post_huge(port: int, path: str, total: int, chunked: bool = False) -> tuple[bytes, int]:
    """Send a POST of `total` bytes without a token; returns (the status line, bytes the server let us send)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {total}\r\n\r\n"
    sock.sendall(head.encode())
    block = b"x" * (1 << 20)
    if chunked:
        block = b"%x\r\n" % len(block) + block + b"\r\n"
    sent = 0
    try:
        while sent < total:
            sent += sock.send(block)
    except OSError:  # the server answered and closed: the rest is never read
        pass
    sock.settimeout(30)
    reply = b""
    try:
        while b"\r\n" not in reply:
            data = sock.recv(4096)
            if not data:
                break
            reply += data
    except OSError:
        pass
    sock.close()
    return reply.split(b"\r\n", 1)[0], sent


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from annotator import launch

    data_dir = tmp_path_factory.mktemp("http_server")
    port = launch.free_port()
    process = launch.start(launch.LaunchConfig(data_dir=data_dir, port=port))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(f"GET /_stcore/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
                if b" 200 " in s.recv(200):
                    break
        except OSError:
            time.sleep(0.5)
    else:
        process.kill()
        pytest.fail("the annotator did not start")
    yield process, port
    process.terminate()
    process.wait(60)


def test_a_real_server_refuses_100_mb_bodies_without_holding_them(server):
    process, port = server
    path = "/api/replay/s/x/e/tags"
    before = _rss_mb(process.pid)
    status, _ = _post_huge(port, path, 100 << 20)
    assert b" 413 " in status
    status, _ = _post_huge(port, path, 100 << 20, chunked=True)
    assert b" 413 " in status
    status, _ = _post_huge(port, "/", 100 << 20)  # Streamlit's own paths: bounded too
    assert b" 413 " in status
    time.sleep(1)
    grown = _rss_mb(process.pid) - before
    assert grown < 30, f"the server grew by {grown:.0f} MB while refusing 300 MB of bodies"


def test_a_real_server_refuses_a_huge_websocket_message_unbuffered(server):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    process, port = server
    before = _rss_mb(process.pid)
    closed, closed_with = False, None
    with connect(f"ws://127.0.0.1:{port}/api/record/ws", origin=f"http://127.0.0.1:{port}", max_size=None) as ws:
        try:
            ws.send("x" * (100 << 20))
            ws.recv(timeout=30)
        except ConnectionClosed as exc:
            closed, closed_with = True, exc.rcvd.code if exc.rcvd else None
    # message too big: refused from its frame header (1009; the close frame may be lost when the server drops
    # the connection while the client is still sending: then none was received)
    assert closed and closed_with in (1009, None)
    time.sleep(1)
    grown = _rss_mb(process.pid) - before
    assert grown < 30, f"the server grew by {grown:.0f} MB for a refused WebSocket message"


def test_a_real_server_refuses_foreign_websockets_and_hosts_with_the_csp(server):
    _, port = server
    for head in (
        f"GET /api/record/ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://evil.example\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        f"GET /_stcore/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}@evil.example\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        f"GET / HTTP/1.1\r\nHost: [::1]evil.example:{port}\r\n\r\n",
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(head.encode())
            reply = b""
            while b"\r\n\r\n" not in reply:
                data = sock.recv(4096)
                if not data:
                    break
                reply += data
        status, _, headers = reply.partition(b"\r\n")
        assert b" 403 " in status, reply[:300]
        assert b"content-security-policy: default-src 'self'" in headers.lower(), reply[:600]

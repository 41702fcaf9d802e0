"""A stand-in model server for tests and benchmarks: a real HTTP server process on loopback implementing
`POST /v1/chat/completions` (OpenAI-compatible, messages with `image_url` parts).

It answers from the request's own text, so a wrong prompt gives a wrong answer: "exactly one of: A, B" -> the
option the prompt's other lines name (else the first), "a JSON list of any of: ..." -> [that option], "true or
false" -> true, "a number" -> 7, "the text only" -> the prompt's `Action:` line. A prompt holding "[bad]" gets a
reply that fits no field, one holding "[refuse]" HTTP 400 (a request the server will not serve); the model named
"down" gets HTTP 503. `--latency S` waits that long per request (the
benchmark). GET /stats -> {"requests", "images", "by_model", "prompts", "first", "last"}; POST /reset zeroes them.

Run: python tests/chat_server.py [--port 0] [--latency 0] ; prints the port on its first line.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_LOCK = threading.Lock()
STATS: dict = {"requests": 0, "images": 0, "by_model": {}, "prompts": [], "first": None, "last": None}


def _options(line: str) -> list[str]:
    return [json.loads(m) for m in re.findall(r'"(?:[^"\\]|\\.)*"', line)]


def reply_to(prompt: str) -> str:
    if "[bad]" in prompt:
        return "no idea, sorry"
    lines = prompt.splitlines()
    # what the prompt says besides the options list (the text after "one of:" / "any of:" on its line)
    rest = "\n".join(re.split(r"(?:one|any) of:", line)[0] for line in lines).casefold()
    for line in lines:
        if "exactly one of:" in line or "any of:" in line:
            options = _options(line)
            if not options:
                return "I cannot see any options"
            named = [o for o in options if o.casefold() in rest] or options[:1]
            return json.dumps(named[:1]) if "any of:" in line else named[0]
    if "true or false" in prompt:
        return "true"
    if "a number" in prompt:
        return "7"
    if "the text only" in prompt:
        action = next((line[len("Action:"):].strip() for line in lines if line.startswith("Action:")), "")
        return action or "I was not told what happened"
    return "I do not understand the question"


class Handler(BaseHTTPRequestHandler):
    latency = 0.0

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/stats":
            with _LOCK:
                self._send(200, STATS)
        else:
            self._send(404, {"error": "no such route"})

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/reset":
            with _LOCK:
                STATS.update(requests=0, images=0, by_model={}, prompts=[], first=None, last=None)
            return self._send(200, {})
        if self.path != "/v1/chat/completions":
            return self._send(404, {"error": "no such route"})
        try:
            request = json.loads(body)
            model = request["model"]
            parts = [p for m in request["messages"] if m["role"] == "user" for p in m["content"]]
        except (ValueError, KeyError, TypeError):
            return self._send(400, {"error": "not a chat-completions request"})
        prompt = "\n".join(p["text"] for p in parts if p.get("type") == "text")
        images = 0
        for p in parts:
            url = (p.get("image_url") or {}).get("url", "") if p.get("type") == "image_url" else ""
            if url.startswith("data:image/"):
                raw = base64.b64decode(url.split(",", 1)[1])
                images += raw[:3] == b"\xff\xd8\xff" or raw[:8] == b"\x89PNG\r\n\x1a\n"
        with _LOCK:
            STATS["requests"] += 1
            STATS["images"] += images
            STATS["by_model"][model] = STATS["by_model"].get(model, 0) + 1
            STATS["prompts"] = (STATS["prompts"] + [prompt])[-50:]
        started = time.time()
        if self.latency:
            time.sleep(self.latency)
        with _LOCK:  # the served window: first request received .. last answer sent (the benchmark's clock)
            STATS["first"] = started if STATS["first"] is None else min(STATS["first"], started)
            STATS["last"] = time.time() if STATS["last"] is None else max(STATS["last"], time.time())
        if model == "down":
            return self._send(503, {"error": "model is loading"})
        if "[refuse]" in prompt:
            return self._send(400, {"error": "this request is refused"})
        self._send(200, {"id": "chat-1", "object": "chat.completion", "model": model, "choices": [
            {"index": 0, "message": {"role": "assistant", "content": reply_to(prompt)}, "finish_reason": "stop"}]})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the listen backlog (set before the socket listens): 5 by default, and a dropped
    # connection attempt is retried by TCP only after a second


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency", type=float, default=0.0)
    args = p.parse_args(argv)
    Handler.latency = args.latency
    server = Server(("127.0.0.1", args.port), Handler)
    print(server.server_address[1], flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()

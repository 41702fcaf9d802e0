"""`stepmark suggest` throughput against requests in flight: a loopback chat-completions server
(tests/chat_server.py) answering each request after an artificial latency (default 50 ms), side by side for
several `--in-flight` values in one run.

The figure is requests per second over the served window (the server's first request received to its last
answer sent: pipeline start-up is left out, and printed separately as the wall time of the command) divided by
the ideal `in_flight / latency`; issue 33 asks >= 0.8. Beside it, a bare threaded urllib client's ratio against
the same server (what this machine allows at that concurrency). Data: the DroidBot Yelp run of ../shared/fixtures
(32 steps) converted and imported once, its row copied into a study of N episodes (same record, new ids); one
text field asked per step. FnApiRunner (one worker). Nothing is asserted.

    .venv/bin/python bench/bench_suggest.py [--episodes 10] [--latency 0.05] [--in-flight 1 4 8 16]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_evaluate import template  # noqa: E402
from bench_export_scale import USER, grow  # noqa: E402

FIELDS = "fields:\n  - {name: instruction, scope: step, kind: text}\n"


def stats(url: str, reset: bool = False) -> dict:
    if reset:
        urllib.request.urlopen(urllib.request.Request(url + "/reset", b"", method="POST"), timeout=10).read()
    return json.loads(urllib.request.urlopen(url + "/stats", timeout=10).read())


def bare(url: str, in_flight: int, requests: int) -> float:
    """Requests/s of a bare threaded client sending the same kind of request (what the machine allows)."""
    from concurrent.futures import ThreadPoolExecutor

    body = json.dumps({"model": "bare", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Action: Click on 'Bookmarks'\nAnswer with the text only."}]}]}).encode()  # fmt: skip

    def one(_: int) -> None:
        request = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()

    start = time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        list(pool.map(one, range(requests)))
    return requests / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 4, 8, 16])
    args = parser.parse_args()
    from pipelines.store import field_values, open_store
    from pipelines.store.field_defs import parse_text
    from stepmark.cli import main as stepmark

    root = Path(tempfile.mkdtemp(prefix="bench-suggest-"))
    data = root / "data"
    data.mkdir()
    rows, _ = template(data)
    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "chat_server.py"), "--latency",
                               str(args.latency)], stdout=subprocess.PIPE, text=True)  # fmt: skip
    url = f"http://127.0.0.1:{int(server.stdout.readline())}"
    print(f"latency {args.latency * 1000:.0f} ms, {args.episodes} episodes x 32 steps, one field per step")
    print("IN FLIGHT  REQUESTS  WALL S  SERVED S  REQ/S  IDEAL  RATIO  BARE CLIENT RATIO")
    try:
        for n in args.in_flight:
            study_id = _study(data, f"bench in flight {n}")
            grow(data, study_id, rows, 0, args.episodes)
            with open_store(None, data) as repo:
                field_values.define(repo, study_id, parse_text(FIELDS, "bench"), USER)
            stats(url, reset=True)
            start = time.perf_counter()
            code = stepmark(["suggest", "--study", study_id, "--backend", f"openai:{url}", "--model", "bench@1",
                             "--in-flight", str(n), "--no-image", "--quiet", "--data", str(data), "--user", USER])  # fmt: skip
            wall = time.perf_counter() - start
            seen = stats(url)
            served = seen["last"] - seen["first"]
            rate, ideal = seen["requests"] / served, n / args.latency
            baseline = bare(url, n, seen["requests"])
            print(f"{n:9d}  {seen['requests']:8d}  {wall:6.1f}  {served:8.2f}  {rate:5.0f}  {ideal:5.0f}  "
                  f"{rate / ideal:5.2f}  {baseline / ideal:17.2f}" + ("" if code == 0 else f"  (exit {code})"))
    finally:
        server.terminate()
        server.wait(10)


def _study(data: Path, name: str) -> str:
    from pipelines.store import open_store
    from protos.rlds_creator import study_pb2

    with open_store(None, data) as repo:
        return repo.create_study(study_pb2.StudySpec(name=name), USER).id


if __name__ == "__main__":
    main()

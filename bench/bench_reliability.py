"""Costs and shapes of convert-ui's safety limits (issue 13), measured side by side in one run.

    .venv/bin/python bench/bench_reliability.py [--lines 100000] [--copies 2] [--skip-memory]

1. Failed-dump detection on pathological text: time for N and 2N lines of each shape, new detector vs the old
   `^\\s*(...)$` MULTILINE pattern (the old one only at a small N: it is quadratic). A ratio near 2 is linear,
   near 4 quadratic.
2. The per-episode time budget: the fixture episodes converted in a forked worker with a deadline per episode
   (`GuardedConverter`) vs in-process (`convert_source`): the price of being able to stop a stuck episode.
3. Peak RSS of convert-ui against dataset size: fresh processes on N, 2N and 4N episodes; the pipeline process
   itself and the largest per-episode child. Flat memory means ratios near 1.0.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_pipeline import replicate  # noqa: E402 - this folder is on sys.path when a bench runs

from pipelines.convert_guarded import GuardedConverter, convert_source  # noqa: E402
from pipelines.hierarchy import HierarchyError, parse  # noqa: E402
from pipelines.hierarchy.uiautomator import failed_dump_message  # noqa: E402
from pipelines.traces import EpisodeSource, discover  # noqa: E402
from pipelines.traces.files import ReadPolicy  # noqa: E402

OLD_ERROR_LINE = re.compile(  # the pattern before issue 13, for comparison
    r"^\s*(ERROR:.*|.*could not get idle state.*|.*null root node returned.*"
    r"|(?:Exception in thread .*|java\.[\w.$]+(?:Exception|Error)\b.*))$",
    re.MULTILINE | re.IGNORECASE,
)


def shapes(lines: int) -> dict[str, str]:
    return {
        "LF": "<x" + "\n" * lines + "y",
        "CRLF": "<x" + "\r\n" * lines + "y",
        "blank line": "<x\n" + " " * (lines * 10) + "y",
        "java lines": "<x\n" + "java.a\n" * lines,
    }


def timed(fn, text: str | bytes) -> float:
    """CPU seconds of fn(text)."""
    start = time.process_time()
    fn(text)
    return time.process_time() - start


def bench_regex(lines: int) -> None:
    print("1. failed-dump detection (CPU seconds; ratio 2N/N: ~2 linear, ~4 quadratic)")
    print(
        f"   {'shape':12s} {'new N':>8s} {'new 2N':>8s} {'ratio':>6s}   {'old n':>8s} {'old 2n':>8s} {'ratio':>6s}"
    )
    small = max(lines // 50, 500)
    for name in shapes(1):
        new = [timed(failed_dump_message, shapes(n)[name]) for n in (lines, 2 * lines)]
        old = [timed(OLD_ERROR_LINE.search, shapes(n)[name]) for n in (small, 2 * small)]
        print(
            f"   {name:12s} {new[0]:8.4f} {new[1]:8.4f} {new[1] / max(new[0], 1e-9):6.2f}   "
            f"{old[0]:8.4f} {old[1]:8.4f} {old[1] / max(old[0], 1e-9):6.2f}  (old at {small}/{2 * small} lines)"
        )
    data = ("<x" + "\r\n" * lines + "y").encode()
    start = time.process_time()
    _parse_quietly(data)
    seconds = time.process_time() - start
    print(f"   parse() of '<x' + {lines:,} CRLF + 'y': {seconds:.3f} s CPU")


NODE = b'<node class="a.B" bounds="[0,0][10,10]" text="x"/>'
HIERARCHIES = {
    "xml siblings": lambda n: b"<hierarchy>" + NODE * n + b"</hierarchy>",
    "xml nested": lambda n: (
        b"<hierarchy>"
        + b'<node class="a" bounds="[0,0][9,9]">' * (n // 50)
        + b"</node>" * (n // 50)
        + b"</hierarchy>"
    ),
    "xml long text": lambda n: (
        b'<hierarchy><node class="a" bounds="[0,0][1,1]" text="' + b"x" * (n * 50) + b'"/></hierarchy>'
    ),
    "xml appended dumps": lambda n: (
        (b"<?xml version='1.0'?><hierarchy>" + NODE + b"</hierarchy>\n") * (n // 10)
    ),
    "rico siblings": lambda n: json.dumps(
        {"activity": {"root": {"class": "a", "bounds": [0, 0, 9, 9], "children": [{"class": "b"}] * n}}}
    ).encode(),
}


def bench_shapes(n: int) -> None:
    print(f"1b. parse() of hierarchy shapes at N={n:,} and 2N (CPU seconds; ~2 is linear)")
    for name, build in HIERARCHIES.items():
        small, large = build(n), build(2 * n)
        a = timed(_parse_quietly, small)
        b = timed(_parse_quietly, large)
        print(f"   {name:20s} {a:8.4f} {b:8.4f} ratio {b / max(a, 1e-9):5.2f}  ({len(small):,} bytes at N)")


def _parse_quietly(data: bytes) -> None:
    try:
        parse(data)
    except HierarchyError:
        pass


def bench_budget(inp: Path) -> None:
    sources = [s for s in discover(str(inp)) if isinstance(s, EpisodeSource)]
    policy = ReadPolicy(follow_links=True)
    for s in sources:  # warm the file cache and lazy imports for both sides
        convert_source(s, policy)
    timings = {}
    start = time.perf_counter()
    steps = sum(convert_source(s, policy).steps for s in sources)
    timings["in-process"] = (time.perf_counter() - start, steps)
    start = time.perf_counter()
    with GuardedConverter(policy) as convert:  # one forked worker for the batch, as ConvertShard does
        steps = sum(convert(s).steps for s in sources)
    timings["forked worker + deadline"] = (time.perf_counter() - start, steps)
    base = timings["in-process"][0]
    print(f"2. per-episode time budget over {len(sources)} episodes ({timings['in-process'][1]} steps)")
    for name, (secs, _steps) in timings.items():
        print(f"   {name:26s} {secs:7.2f} s  {len(sources) / secs:7.1f} episodes/s  ratio {secs / base:5.2f}")


PEAK = """
import json, resource, sys
from pipelines.convert import run
run([sys.argv[1], sys.argv[2], "--quiet", "--follow-links", "--shards", "2"])
print(json.dumps({"self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def bench_memory(fixtures: Path, tmp: Path, copies: int) -> None:
    print("3. peak RSS of convert-ui (fresh process each; MB)")
    rows = []
    for factor in (1, 2, 4):
        inp = replicate(fixtures, tmp / f"mem{factor}", copies * factor)
        out = tmp / f"mem_out{factor}"
        proc = subprocess.run(
            [sys.executable, "-c", PEAK, str(inp), str(out)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        peak = json.loads(proc.stdout.strip().splitlines()[-1])
        episodes = json.loads((out / "summary.json").read_text())["episodes"]
        rows.append((episodes, peak["self"] / 1024, peak["children"] / 1024))
    for episodes, own, child in rows:
        print(
            f"   {episodes:5d} episodes: pipeline {own:6.0f} MB (x{own / rows[0][1]:.2f}), "
            f"largest worker {child:6.0f} MB (pages shared with the pipeline included) (x{child / rows[0][2]:.2f})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", type=Path, default=REPO.parent / "shared" / "fixtures")
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    bench_regex(args.lines)
    bench_shapes(min(args.lines, 40_000))  # MAX_OBJECTS (100,000) caps the sibling shapes
    with tempfile.TemporaryDirectory() as tmp:
        bench_budget(replicate(args.fixtures, Path(tmp) / "budget", 1))
        if not args.skip_memory:
            bench_memory(args.fixtures, Path(tmp), args.copies)
    return 0


if __name__ == "__main__":
    sys.exit(main())

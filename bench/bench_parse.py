"""Parser throughput on the real fixtures, side by side with the bare lxml/json parse of the same bytes.

Run: `.venv/bin/python bench/bench_parse.py [--rounds N] [--fixtures DIR]`. Prints screens/s ("steps/s") and
objects/s per format and the ratio full conversion / bare parse (target: at most 2.5). Timings are CPU time of
this process (`time.process_time`), so other work on a shared machine does not leak in; each file's bare parse
and full conversion are timed alternately, and per file the best of the rounds counts.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from lxml import etree

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipelines.hierarchy import parse  # noqa: E402

TARGET = 2.5


def _fixture_sets(root: Path) -> dict[str, list[bytes]]:
    sets = {
        "uiautomator": sorted((root / "uiautomator").glob("*.xml")),
        "rico": sorted((root / "rico").glob("*.json")),
        "droidbot": sorted((root / "droidbot" / "yelp" / "states").glob("state_*.json")),
    }
    return {fmt: [p.read_bytes() for p in paths] for fmt, paths in sets.items() if paths}


def _bare_once(fmt: str) -> Callable[[bytes], object]:
    return etree.fromstring if fmt == "uiautomator" else json.loads


def _timed(func: Callable[[bytes], object], data: bytes, inner: int) -> float:
    clock = time.process_time
    start = clock()
    for _ in range(inner):
        func(data)
    return (clock() - start) / inner


def _measure(fmt: str, blobs: list[bytes], rounds: int, inner: int) -> tuple[float, float]:
    """(bare, full) seconds for one pass over `blobs`: per file, the best of `rounds` alternating timings."""
    bare_func = _bare_once(fmt)

    def full_func(data: bytes) -> object:
        return parse(data, fmt=fmt)

    best_bare = [float("inf")] * len(blobs)
    best_full = [float("inf")] * len(blobs)
    for _ in range(rounds):
        for i, data in enumerate(blobs):
            best_bare[i] = min(best_bare[i], _timed(bare_func, data, inner))
            best_full[i] = min(best_full[i], _timed(full_func, data, inner))
    return sum(best_bare), sum(best_full)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--inner", type=int, default=20, help="repetitions of each file per timing")
    ap.add_argument(
        "--fixtures",
        type=Path,
        default=Path(os.environ.get("STEPMARK_FIXTURES", REPO.parent / "shared" / "fixtures")),
    )
    args = ap.parse_args(argv)
    sets = _fixture_sets(args.fixtures)
    if not sets:
        print(f"no fixtures under {args.fixtures}", file=sys.stderr)
        return 2

    print(f"parser benchmark: CPU time, best of {args.rounds} rounds x {args.inner} repetitions per file")
    print(f"fixtures: {args.fixtures}")
    header = f"{'format':<12}{'screens':>8}{'objects':>9}{'bare ms':>10}{'full ms':>10}"
    header += f"{'screens/s':>11}{'objects/s':>11}{'bare scr/s':>11}{'ratio':>7}"
    print(header)
    total_bare = total_full = 0.0
    total_screens = total_objects = 0
    for fmt, blobs in sets.items():
        objects = sum(len(parse(b, fmt=fmt).objects) for b in blobs)
        gc.disable()
        try:
            bare, full = _measure(fmt, blobs, args.rounds, args.inner)
        finally:
            gc.enable()
        n = len(blobs)
        print(
            f"{fmt:<12}{n:>8}{objects:>9}{bare * 1e3:>10.2f}{full * 1e3:>10.2f}"
            f"{n / full:>11.0f}{objects / full:>11.0f}{n / bare:>11.0f}{full / bare:>7.2f}"
        )
        total_bare += bare
        total_full += full
        total_screens += n
        total_objects += objects
    ratio = total_full / total_bare
    print(
        f"{'all':<12}{total_screens:>8}{total_objects:>9}{total_bare * 1e3:>10.2f}{total_full * 1e3:>10.2f}"
        f"{total_screens / total_full:>11.0f}{total_objects / total_full:>11.0f}"
        f"{total_screens / total_bare:>11.0f}{ratio:>7.2f}"
    )
    verdict = "meets" if ratio <= TARGET else "MISSES"
    print(f"full conversion / bare parse = {ratio:.2f} ({verdict} the target of at most {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

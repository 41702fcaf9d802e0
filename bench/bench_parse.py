"""Parser throughput on the real fixtures, side by side with the bare lxml/json/protobuf parse of the same bytes.

Formats: uiautomator, Rico and DroidBot files; `a11y_forest`: the uiautomator fixtures as AndroidEnv
accessibility forests (full = `parse(fmt="a11y_forest")`, bare = decoding the forest proto); `aitw`: one
Android in the Wild step Example per Rico screen with its visible leaves as annotations (full = decoding the
Example, building the annotation objects and the action; bare = decoding the Example). The AITW screenshot's
PNG encoding (raw pixels -> PNG) is left out of both and timed on its own line.

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

from android_env.proto.a11y.android_accessibility_forest_pb2 import AndroidAccessibilityForest  # noqa: E402

from pipelines.hierarchy import parse  # noqa: E402
from pipelines.traces import aitw  # noqa: E402
from pipelines.traces.examples import parse_example  # noqa: E402
from protos.tfexample.example_pb2 import Example  # noqa: E402
from tests.pipelines.record_writers import forest_from_dump, raw_pixels  # noqa: E402
from tests.pipelines.test_aitw import step as aitw_step  # noqa: E402

TARGET = 2.5


def _fixture_sets(root: Path) -> dict[str, list[bytes]]:
    sets = {
        "uiautomator": sorted((root / "uiautomator").glob("*.xml")),
        "rico": sorted((root / "rico").glob("*.json")),
        "droidbot": sorted((root / "droidbot" / "yelp" / "states").glob("state_*.json")),
    }
    sets.setdefault("rico", [])
    blobs = {fmt: [p.read_bytes() for p in paths] for fmt, paths in sets.items() if paths}
    if "uiautomator" in blobs:
        blobs["a11y_forest"] = [forest_from_dump(b).SerializeToString() for b in blobs["uiautomator"]]
    if sets["rico"]:
        blobs["aitw"] = [aitw_step(root, "bench", 0, 1, p.stem, 4, touch=(0.5, 0.5), lift=(0.5, 0.5),
                                   image=b"\0") for p in sets["rico"]]  # fmt: skip
    return blobs


def _aitw_full(data: bytes) -> object:
    example = parse_example(data)
    warnings: list[str] = []
    document = aitw.annotations_json(example, 1080, 1920, warnings)
    return parse(document, fmt="aitw_annotations"), aitw.action_of(example, warnings)


BARE: dict[str, Callable[[bytes], object]] = {
    "uiautomator": etree.fromstring,
    "a11y_forest": AndroidAccessibilityForest.FromString,
    "aitw": Example.FromString,
}
FULL: dict[str, Callable[[bytes], object]] = {"aitw": _aitw_full}


def _bare_once(fmt: str) -> Callable[[bytes], object]:
    return BARE.get(fmt, json.loads)


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

    full_func = FULL.get(fmt, full_func)

    best_bare = [float("inf")] * len(blobs)
    best_full = [float("inf")] * len(blobs)
    for _ in range(rounds):
        for i, data in enumerate(blobs):
            best_bare[i] = min(best_bare[i], _timed(bare_func, data, inner))
            best_full[i] = min(best_full[i], _timed(full_func, data, inner))
    return sum(best_bare), sum(best_full)


PROTO_FORMATS = ("a11y_forest", "aitw")


def _total_line(screens: int, objects: int, bare: float, full: float) -> None:
    ratio = full / bare
    print(
        f"{'all text':<12}{screens:>8}{objects:>9}{bare * 1e3:>10.2f}{full * 1e3:>10.2f}"
        f"{screens / full:>11.0f}{objects / full:>11.0f}{screens / bare:>11.0f}{ratio:>7.2f}"
    )
    verdict = "meets" if ratio <= TARGET else "MISSES"
    print(f"full conversion / bare parse = {ratio:.2f} ({verdict} the target of at most {TARGET})")


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
        if fmt == PROTO_FORMATS[0]:  # the aggregate and its target are over the text formats
            _total_line(total_screens, total_objects, total_bare, total_full)
            print("protobuf inputs (bare = C protobuf decoding, which builds no objects; no target):")
        if fmt == "aitw":
            objects = sum(len(_aitw_full(b)[0].objects) for b in blobs)
        else:
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
        if fmt not in PROTO_FORMATS:
            total_bare += bare
            total_full += full
            total_screens += n
            total_objects += objects
    if not any(f in sets for f in PROTO_FORMATS):
        _total_line(total_screens, total_objects, total_bare, total_full)
    if "rico" in sets:
        pixels = raw_pixels(args.fixtures / "rico" / "336.jpg", 1080, 1920)
        png = _timed(lambda d: aitw.screenshot_png(d, 1080, 1920, 3), pixels, 3)
        print(f"aitw screenshot: raw 1080x1920 RGB -> PNG {png * 1e3:.1f} ms per step (not in the table)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Parser throughput on the real fixtures, side by side with the bare lxml/json/protobuf parse of the same bytes.

Formats: uiautomator, Rico and DroidBot files; `a11y_forest`: the uiautomator fixtures as AndroidEnv
accessibility forests (full = `parse(fmt="a11y_forest")`, bare = decoding the forest proto); `aitw`: one
Android in the Wild step Example per Rico screen with its visible leaves as annotations (full = decoding the
Example, building the annotation objects and the action; bare = decoding the Example). The AITW screenshot's
PNG encoding (raw pixels -> PNG) is left out of both and timed on its own line.

Run: `.venv/bin/python bench/bench_parse.py [--rounds N] [--fixtures DIR] [--only parsers|layouts]`. Prints
screens/s ("steps/s") and objects/s per format and the ratio full conversion / bare parse (target: at most
2.5). Timings are CPU time of this process (`time.process_time`), so other work on a shared machine does not
leak in; each file's bare parse and full conversion are timed alternately, and per file the best of the rounds
counts.

Layouts (`LAYOUTS`, one entry per trace layout: how to build a sample trace from the real fixtures and what
its bare parse is): each trace is converted the way a convert-ui worker does it (discover, the layout's reader,
`convert_episode`), side by side with the bare parse of the same files: `lxml`/`json` of every hierarchy and
layout file plus decoding every screenshot's pixels (Pillow). Printed: the throughput ratio bare time / layout
time (target: at least 0.5). Screenshots are the Rico fixtures' real JPEGs, resized to each dump's screen and
stored as the layout stores them (PNG). Beside it, for information, the bare parse without the pixels (the
converter reads only an image's header): bare hierarchy time / layout time.
"""

from __future__ import annotations

import argparse
import base64
import gc
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lxml import etree
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from android_env.proto.a11y.android_accessibility_forest_pb2 import AndroidAccessibilityForest  # noqa: E402

from pipelines.hierarchy import parse  # noqa: E402
from pipelines.hierarchy.bounds import from_string  # noqa: E402
from pipelines.traces import EpisodeSource, aitw, discover, read_episode  # noqa: E402
from pipelines.traces.examples import parse_example  # noqa: E402
from pipelines.ui_episode import convert_episode  # noqa: E402
from protos.tfexample.example_pb2 import Example  # noqa: E402
from tests.pipelines.record_writers import forest_from_dump, raw_pixels  # noqa: E402
from tests.pipelines.test_aitw import step as aitw_step  # noqa: E402

TARGET = 2.5
LAYOUT_TARGET = 0.5


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


# ---------------------------------------------------------------------------------------------- layouts


def _screens(root: Path) -> list[tuple[bytes, int, int]]:
    """(uiautomator dump, its screen width, height) for every real dump with a known size."""
    out = []
    for path in sorted((root / "uiautomator").glob("*.xml")):
        screen = parse(path.read_bytes())
        if screen.width > 0 and screen.height > 0:
            out.append((path.read_bytes(), screen.width, screen.height))
    return out


def _photo(root: Path, i: int, width: int, height: int) -> bytes:
    """A real screenshot (a Rico JPEG) resized to width x height, as PNG."""
    shots = sorted((root / "rico").glob("*.jpg"))
    with Image.open(shots[i % len(shots)]) as im:
        buf = io.BytesIO()
        im.convert("RGB").resize((width, height)).save(buf, format="PNG")
    return buf.getvalue()


def _portal_node(element: etree._Element) -> dict:
    """A uiautomator <node> as the DroidRun portal's full tree writes it (children filled by the caller)."""
    get = element.get
    box = from_string(get("bounds", "")) or (0, 0, 0, 0)
    return {
        "resourceId": get("resource-id", ""), "className": get("class", ""), "packageName": get("package", ""),
        "text": get("text", ""), "contentDescription": get("content-desc", ""), "hint": "",
        "boundsInScreen": dict(zip(("left", "top", "right", "bottom"), box, strict=True)),
        "isClickable": get("clickable") == "true", "isLongClickable": get("long-clickable") == "true",
        "isFocusable": get("focusable") == "true", "isFocused": get("focused") == "true",
        "isSelected": get("selected") == "true", "isCheckable": get("checkable") == "true",
        "isChecked": get("checked") == "true", "isEnabled": get("enabled") != "false",
        "isVisibleToUser": get("visible-to-user") != "false", "isScrollable": get("scrollable") == "true",
        "isEditable": False, "children": [],
    }  # fmt: skip


def portal_state(dump: bytes, width: int, height: int) -> dict:
    """A DroidRun portal `/state_full` document holding a real uiautomator dump's tree (iterative walk)."""
    root = etree.fromstring(dump)
    roots: list[dict] = []
    stack = [(child, roots) for child in reversed(list(root)) if child.tag == "node"]
    while stack:
        element, siblings = stack.pop()
        node = _portal_node(element)
        siblings.append(node)
        stack.extend((child, node["children"]) for child in reversed(list(element)) if child.tag == "node")
    package = roots[0]["packageName"] if roots else ""
    tree = roots[0] if len(roots) == 1 else roots  # several windows: a list of roots, as the simple form has
    return {
        "a11y_tree": tree,
        "phone_state": {"currentApp": package, "packageName": package, "activityName": "", "keyboardVisible": False},
        "device_context": {"screen_bounds": {"width": width, "height": height}},
    }  # fmt: skip


def build_llamatouch(root: Path, out: Path, episodes: int) -> None:
    screens = _screens(root)
    for e in range(episodes):
        folder = out / f"trace_{e}"
        folder.mkdir(parents=True)
        lines = []
        for i, (dump, w, h) in enumerate(screens):
            (folder / f"{i}.xml").write_bytes(dump)
            (folder / f"{i}.png").write_bytes(_photo(root, e + i, w, h))
            (folder / f"{i}.activity").write_text("com.example/.Main\n")
            lines.append(f"[Click] Screen Resolution (320, 720), Click Position ({40 + i * 20}, {100 + i * 50})")
        (folder / "eventStructs.txt").write_text("\n".join(lines[:-1]) + "\n[Back]\n")
        (folder / "instruction.txt").write_text(f"{e}\nOpen the settings and turn on dark mode\n")


def build_droidrun(root: Path, out: Path, episodes: int) -> None:
    screens = _screens(root)
    for e in range(episodes):
        folder = out / f"2025_{e:04d}"
        (folder / "ui_states").mkdir(parents=True)
        (folder / "screenshots").mkdir()
        actions = []
        for i, (dump, w, h) in enumerate(screens):
            state = json.dumps(portal_state(dump, w, h), ensure_ascii=False, indent=2)
            (folder / "ui_states" / f"{i}.json").write_text(state, encoding="utf-8")
            (folder / "screenshots" / f"{i}.png").write_bytes(_photo(root, e + i, w, h))
            actions.append({"type": "TapActionEvent", "action_type": "tap", "description": "tap", "x": w // 2,
                            "y": h // 3})  # fmt: skip
        macro = {"version": "1.0", "description": "Open the settings", "actions": actions}
        (folder / "macro.json").write_text(json.dumps(macro))


def _detector_boxes(dump: bytes) -> tuple[list[list[int]], list[str], list[str]]:
    """A real dump's text and image leaves as an OCR/icon detector reports them: `[y, x, h, w]` pixel boxes."""
    positions, texts, types = [], [], []
    for o in parse(dump).objects:
        b = o.bbox
        if o.is_leaf and b.right > b.left and b.bottom > b.top and (o.text or o.type == 6):  # 6: IMAGEVIEW
            positions.append([b.top, b.left, b.bottom - b.top, b.right - b.left])
            texts.append(o.text)
            types.append("TEXT" if o.text else "ICON_IMAGE")
    return positions, texts, types


def build_aitz(root: Path, out: Path, episodes: int) -> None:
    """Android-in-the-Zoo: `<name>/<name>.json` (CoAT's fields) + `<name>_<i>.png`, boxes from real dumps."""
    screens = _screens(root)
    for e in range(episodes):
        name = f"GOOGLE_APPS-{1000 + e}"
        folder = out / name
        folder.mkdir(parents=True)
        steps = []
        for i, (dump, w, h) in enumerate(screens):
            (folder / f"{name}_{i}.png").write_bytes(_photo(root, e + i, w, h))
            positions, texts, types = _detector_boxes(dump)
            steps.append({
                "episode_id": str(1000 + e), "episode_length": len(screens), "step_id": i,
                "instruction": "open the settings and turn on dark mode", "image_path": f"{name}/{name}_{i}.png",
                "ui_positions": json.dumps(positions), "ui_text": json.dumps(texts), "ui_types": json.dumps(types),
                "result_action_type": 4, "result_action_text": "",
                "result_touch_yx": "[0.3, 0.5]", "result_lift_yx": "[0.3, 0.5]",
                "coat_screen_desc": "A settings screen.", "coat_action_think": "The toggle is below: tap it.",
                "coat_action_desc": "tap the toggle", "coat_action_result": "Dark mode is on.",
            })  # fmt: skip
        (folder / f"{name}.json").write_text(json.dumps(steps, indent=4))


def build_gui_odyssey(root: Path, out: Path, episodes: int) -> None:
    """GUI-Odyssey: `annotations/<id>.json` + `screenshots/<id>_<i>.png` (no hierarchy)."""
    screens = _screens(root)
    (out / "annotations").mkdir(parents=True)
    (out / "screenshots").mkdir()
    for e in range(episodes):
        eid = str(5000 + e)
        steps = []
        for i, (_, w, h) in enumerate(screens):
            (out / "screenshots" / f"{eid}_{i}.png").write_bytes(_photo(root, e + i, w, h))
            steps.append({"step": i, "screenshot": f"{eid}_{i}.png", "action": "CLICK",
                          "info": [[300 + i * 10, 500]], "ps": f"tap item {i}"})  # fmt: skip
        doc = {"episode_id": eid, "device_info": {"w": screens[0][1], "h": screens[0][2]},
               "task_info": {"instruction": "Search and set a reminder", "app": ["Clock"]},
               "step_length": len(steps), "steps": steps}  # fmt: skip
        (out / "annotations" / f"{eid}.json").write_text(json.dumps(doc, indent=2))


def build_android_control_json(root: Path, out: Path, episodes: int) -> None:
    """AndroidControl as agent frameworks repackage it: one JSON file of base64 screenshots and actions."""
    screens = _screens(root)
    out.mkdir(parents=True)
    for e in range(episodes):
        shots = [_photo(root, e + i, w, h) for i, (_, w, h) in enumerate(screens)]
        doc = {"episode_id": 7000 + e, "goal": "Search for Zürich in the weather app",
               "screenshots": [base64.b64encode(b).decode() for b in shots],
               "screenshot_widths": [w for _, w, _ in screens], "screenshot_heights": [h for _, _, h in screens],
               "actions": [{"action_type": "click", "x": w // 2, "y": h // 3} for _, w, h in screens[:-1]],
               "step_instructions": [f"tap item {i}" for i in range(len(screens) - 1)]}  # fmt: skip
        (out / f"episode_{7000 + 7 * e}.json").write_text(json.dumps(doc))  # numbered 0..n-1: a step folder


def _bare_file(path: Path) -> object:
    """The bare parse of one trace file: pixels for images, lxml/json for hierarchies and layout files."""
    data = path.read_bytes()
    suffix = path.suffix.lower()
    if suffix in (".png", ".jpg", ".jpeg", ".webp"):
        with Image.open(io.BytesIO(data)) as im:
            return im.load()
    if suffix == ".xml":
        return etree.fromstring(data)
    if suffix in (".json", ".vh"):
        doc = json.loads(data)
        if isinstance(doc, dict) and isinstance(doc.get("screenshots"), list):  # AndroidControl JSON: its images
            for shot in doc["screenshots"]:
                with Image.open(io.BytesIO(base64.b64decode(shot))) as im:
                    im.load()
        return doc
    return data.decode("utf-8", "replace").splitlines()  # eventStructs.txt, instruction.txt, N.activity


def _convert_all(folder: Path) -> int:
    """The layout's conversion of every episode under `folder`, as a convert-ui worker does it: steps made."""
    def read(path: str) -> bytes:
        return Path(path).read_bytes()

    steps = 0
    for source in discover(str(folder)):
        if isinstance(source, EpisodeSource):
            result = convert_episode(read_episode(source, read), read)
            assert not result.dead_letters, result.dead_letters[:2]
            steps += len(result.episode.episode.time_steps)
    return steps


@dataclass(frozen=True)
class LayoutBench:
    """One row of the layout table: `build(fixtures, folder, episodes)` writes sample traces of the layout
    into `folder`; `files(folder)` lists what its bare parse reads (the files the layout's reader uses)."""

    name: str
    build: Callable[[Path, Path, int], None]
    files: Callable[[Path], list[Path]]


def _claimed(folder: Path) -> list[Path]:
    return [Path(p) for s in discover(str(folder)) if isinstance(s, EpisodeSource) for p in s.files]


#: Layouts benchmarked side by side (docs/adding_a_layout.md: a new layout adds its row).
LAYOUTS: list[LayoutBench] = [
    LayoutBench("llamatouch", build_llamatouch, _claimed),
    LayoutBench("droidrun", build_droidrun, _claimed),
    LayoutBench("aitz", build_aitz, _claimed),
    LayoutBench("gui_odyssey", build_gui_odyssey, _claimed),
    LayoutBench("android_control_json", build_android_control_json, _claimed),
]


def bench_layouts(root: Path, rounds: int, episodes: int) -> list[tuple[str, float]]:
    """Print one line per layout (steps, bare ms, layout ms, steps/s, ratio bare / layout); returns the ratios."""
    print(f"layouts: CPU time, best of {rounds} rounds, {episodes} episodes each; ratio = bare / layout "
          f"(target: at least {LAYOUT_TARGET})")  # fmt: skip
    print(f"{'layout':<14}{'steps':>7}{'bare ms':>10}{'layout ms':>11}{'steps/s':>9}{'ratio':>7}"
          f"  (no pixels: bare ms, ratio)")  # fmt: skip
    ratios = []
    with tempfile.TemporaryDirectory(prefix="bench-layouts-") as tmp:
        for bench in LAYOUTS:
            folder = Path(tmp) / bench.name
            bench.build(root, folder, episodes)
            paths = bench.files(folder)
            clock = time.process_time
            text_paths = [p for p in paths if p.suffix.lower() not in (".png", ".jpg", ".jpeg", ".webp")]
            best_bare = best_text = best_full = float("inf")
            steps = 0
            for _ in range(rounds):
                start = clock()
                for path in paths:
                    _bare_file(path)
                best_bare = min(best_bare, clock() - start)
                start = clock()
                for path in text_paths:
                    _bare_file(path)
                best_text = min(best_text, clock() - start)
                start = clock()
                steps = _convert_all(folder)
                best_full = min(best_full, clock() - start)
            ratio = best_bare / best_full
            ratios.append((bench.name, ratio))
            verdict = "meets" if ratio >= LAYOUT_TARGET else "MISSES"
            print(f"{bench.name:<14}{steps:>7}{best_bare * 1e3:>10.1f}{best_full * 1e3:>11.1f}"
                  f"{steps / best_full:>9.0f}{ratio:>7.2f}  {verdict}"
                  f"  ({best_text * 1e3:.1f} ms, {best_text / best_full:.2f})")  # fmt: skip
    return ratios


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--inner", type=int, default=20, help="repetitions of each file per timing")
    ap.add_argument("--only", choices=("parsers", "layouts"), help="run one of the two tables")
    ap.add_argument("--episodes", type=int, default=2, help="sample episodes per layout (layout table)")
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
    if args.only != "parsers":
        bench_layouts(args.fixtures, max(1, min(args.rounds, 5)), args.episodes)
        if args.only == "layouts":
            return 0

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

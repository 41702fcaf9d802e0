"""Rebuild `samples/ui/` from the real fixtures in ../shared/fixtures (see samples/README.md).

Run from the repository root: `.venv/bin/python samples/build_samples.py [FIXTURES]`. Deterministic: the same
fixtures give the same files. Only the Rico gestures and the uiautomator screenshot are made up here (the
gestures tap real clickable objects of each screen; the screenshot is drawn from the dump's boxes).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from PIL import Image, ImageDraw

from pipelines.hierarchy import parse

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "samples" / "ui"
RICO_TRACE = ["33600", "33603", "33605", "33608", "33610", "33613", "33615"]  # com.done.faasos
RICO_SINGLE = ["336", "33638"]
YELP_STEPS = [  # (state tag, event tag whose action is taken on it)
    ("2017-08-11_202351", "2017-08-11_202351"),
    ("2017-08-11_202356", "2017-08-11_202402"),
    ("2017-08-11_202407", "2017-08-11_202407"),
]
YELP_RUN_EVENTS = ["202321", "202324", "202329", "202334", "202339"]
YELP_RUN_STATES = ["202329", "202334", "202339"]


def rico_trace(fx: Path) -> None:
    out = OUT / "rico_trace" / "com.done.faasos"
    (out / "view_hierarchies").mkdir(parents=True)
    (out / "screenshots").mkdir()
    gestures: dict[str, list[list[float]]] = {}
    for i, sid in enumerate(RICO_TRACE):
        shutil.copyfile(fx / "rico" / f"{sid}.json", out / "view_hierarchies" / f"{sid}.json")
        shutil.copyfile(fx / "rico" / f"{sid}.jpg", out / "screenshots" / f"{sid}.jpg")
        screen = parse((fx / "rico" / f"{sid}.json").read_bytes())
        w, h = screen.width, screen.height
        if i == len(RICO_TRACE) - 1:
            gestures[sid] = []  # last screen: nothing recorded
            continue
        scrollable = [
            o for o in screen.objects if o.scrollable and o.visible and o.bbox.bottom - o.bbox.top > h // 4
        ]
        if sid == "33610" and scrollable:  # a swipe up through the middle of the scrolling list
            b = scrollable[-1].bbox
            x = (b.left + b.right) / 2 / w
            ys = [(b.top + (b.bottom - b.top) * f) / h for f in (0.8, 0.6, 0.4, 0.2)]
            gestures[sid] = [[round(x, 4), round(y, 4)] for y in ys]
            continue
        clickable = [
            o for o in screen.objects
            if o.clickable and o.visible and o.bbox.right > o.bbox.left and o.bbox.bottom > o.bbox.top
            and 0 <= o.bbox.left and o.bbox.right <= w and 0 <= o.bbox.top and o.bbox.bottom <= h
        ]  # fmt: skip
        if clickable:
            b = clickable[-1].bbox
            gestures[sid] = [[round((b.left + b.right) / 2 / w, 4), round((b.top + b.bottom) / 2 / h, 4)]]
        else:
            gestures[sid] = []
    lines = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in gestures.items()]
    (out / "gestures.json").write_text("{\n" + ",\n".join(lines) + "\n}\n")
    manifest = {
        "app_package": "com.done.faasos",
        "goal": "Browse the Faasos app: tour, addresses, about, menu, credits, help",
        "metadata": {"derived_from": "Rico screens " + ", ".join(RICO_TRACE) + "; gestures synthesized"},
    }
    (out / "episode.json").write_text(json.dumps(manifest, indent=1) + "\n")


def yelp_step_folder(fx: Path) -> None:
    out = OUT / "step_folders" / "yelp_bookmarks"
    out.mkdir(parents=True)
    states = fx / "droidbot" / "yelp" / "states"
    events = fx / "droidbot" / "yelp" / "events"
    lines = []
    for i, (state, event) in enumerate(YELP_STEPS):
        shutil.copyfile(states / f"state_{state}.json", out / f"{i}.json")
        shutil.copyfile(
            states / f"screen_{state}.png", out / f"{i}.png"
        )  # JPEG bytes, .png name (as DroidBot)
        ev = json.loads((events / f"event_{event}.json").read_text())["event"]
        (x1, y1), (x2, y2) = ev["view"]["bounds"]
        lines.append(
            {"step": i, "action": "tap", "x": (x1 + x2) / 2, "y": (y1 + y2) / 2, "space": "hierarchy",
             "meta": {"droidbot_event": event, "view": ev["view"]["resource_id"]}}
        )  # fmt: skip
    lines.append({"step": len(YELP_STEPS) - 1, "action": "back"})  # deliberate duplicate: shows a dead letter
    (out / "actions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def yelp_run(fx: Path) -> None:
    out = OUT / "droidbot" / "yelp_run"
    (out / "states").mkdir(parents=True)
    (out / "events").mkdir()
    src = fx / "droidbot" / "yelp"
    for tag in YELP_RUN_STATES:
        for name in (f"state_2017-08-11_{tag}.json", f"screen_2017-08-11_{tag}.png"):
            shutil.copyfile(src / "states" / name, out / "states" / name)
    for tag in YELP_RUN_EVENTS:
        name = f"event_2017-08-11_{tag}.json"
        shutil.copyfile(src / "events" / name, out / "events" / name)


def render(xml: bytes, scale: float) -> Image.Image:
    """A wireframe screenshot of a uiautomator dump: every visible node's box, text in its box."""
    screen = parse(xml)
    img = Image.new("RGB", (round(screen.width * scale), round(screen.height * scale)), (250, 250, 250))
    draw = ImageDraw.Draw(img)
    for o in screen.objects:
        b = o.bbox
        if not o.visible or b.right <= b.left or b.bottom <= b.top:
            continue
        box = [b.left * scale, b.top * scale, b.right * scale - 1, b.bottom * scale - 1]
        draw.rectangle(box, outline=(40, 90, 200) if o.clickable else (170, 170, 170))
        label = o.text or o.content_desc
        if label:
            draw.text((box[0] + 3, box[1] + 3), label[:40], fill=(20, 20, 20))
    return img


def single_screens(fx: Path) -> None:
    out = OUT / "single_screens"
    out.mkdir(parents=True)
    for sid in RICO_SINGLE:
        shutil.copyfile(fx / "rico" / f"{sid}.json", out / f"rico_{sid}.json")
        shutil.copyfile(fx / "rico" / f"{sid}.jpg", out / f"rico_{sid}.jpg")
    xml = (fx / "uiautomator" / "avc_mocks_UIAUTOMATOR_DUMP_API27.xml").read_bytes()
    (out / "avc_api27.xml").write_bytes(xml)
    render(xml, 0.5).save(out / "avc_api27.png", optimize=True)  # half size: boxes are rescaled onto it
    shutil.copyfile(fx / "uiautomator" / "keydroidx_ui_menu.xml", out / "keydroidx_menu.xml")  # no screenshot


def main(argv: list[str]) -> int:
    fx = Path(argv[0]) if argv else REPO.parent / "shared" / "fixtures"
    if OUT.exists():
        shutil.rmtree(OUT)
    rico_trace(fx)
    yelp_step_folder(fx)
    yelp_run(fx)
    single_screens(fx)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({total / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

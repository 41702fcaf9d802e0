"""Screenshot-first traces built in tests from the published field lists: Android-in-the-Zoo (fields and values
of IMNearth/CoAT `data-example/GOOGLE_APPS-523638528775825151`), GUI-Odyssey (OpenGVLab/GUI-Odyssey
`introduction.md` and `data/format_converter.py`) and AndroidControl as JSON (the release's feature names).
Screenshots are real PNGs drawn with PIL: a coloured screen with a bar per detector box."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

from PIL import Image, ImageDraw

AITZ_ID = "GOOGLE_APPS-523638528775825151"
AITZ_SIZE = (270, 600)
#: Steps 0-3 of the published AitZ example (positions, texts and types abridged to their first boxes).
AITZ_STEPS = [
    {
        "ui_positions": "[[54, 17, 8, 12], [82, 15, 8, 17], [82, 37, 10, 46], [120, 15, 20, 10], [574, 207, 16, 7]]",
        "ui_text": '["M", "Set", "up email", "G", ""]',
        "ui_types": '["TEXT", "TEXT", "TEXT", "ICON_GOOGLE", "ICON_NAV_BAR_RECT"]',
        "result_action_type": 6,
        "result_action_text": "",
        "result_touch_yx": "[-1.0, -1.0]",
        "result_lift_yx": "[-1.0, -1.0]",
        "coat_screen_desc": 'This screenshot shows the "Set up email" screen on a smartphone.',
        "coat_action_think": 'The screen does not display the "Clock" app; exit the email setup first.',
        "coat_action_desc": "press the home button",
        "coat_action_result": "By doing so, the home screen is displayed with app icons visible.",
    },
    {
        "ui_positions": "[[56, 24, 8, 52], [366, 33, 28, 15], [368, 86, 30, 31], [408, 155, 5, 22]]",
        "ui_text": '["Man, Aug 8", "", "M", "Fhotca"]',
        "ui_types": '["TEXT", "ICON_PLAY", "TEXT", "TEXT"]',
        "result_action_type": 4,
        "result_action_text": "",
        "result_touch_yx": "[0.541063666343689, 0.5073748230934143]",
        "result_lift_yx": "[0.001115699764341116, 0.5788536071777344]",
        "coat_screen_desc": "This is a screenshot of a smartphone home screen.",
        "coat_action_think": "The Clock app is not visible: swipe up to open the app drawer.",
        "coat_action_desc": "scroll up",
        "coat_action_result": "By doing so, the screen now displays a list of applications.",
    },
    {
        "ui_positions": "[[321, 156, 5, 18], [299, 140, 40, 48], [405, 138, 8, 45]]",
        "ui_text": '["Cleck", "", "File Mener"]',
        "ui_types": '["TEXT", "ICON_TIME", "TEXT"]',
        "result_action_type": 4,
        "result_action_text": "",
        "result_touch_yx": "[0.49836206436157227, 0.6069772839546204]",
        "result_lift_yx": "[0.49669790267944336, 0.6069772839546204]",
        "coat_screen_desc": "A grid of applications under All apps.",
        "coat_action_think": "The Clock app is displayed in the list: tap it.",
        "coat_action_desc": "click on the Clock app located at the upper middle right side of the screen.",
        "coat_action_result": "By doing so, the Clock app has been successfully opened.",
    },
    {
        "ui_positions": "[[43, 21, 5, 20], [43, 83, 5, 18]]",
        "ui_text": '["larm", "Clock"]',
        "ui_types": '["TEXT", "TEXT"]',
        "result_action_type": 10,
        "result_action_text": "",
        "result_touch_yx": "[-1.0, -1.0]",
        "result_lift_yx": "[-1.0, -1.0]",
        "coat_screen_desc": "The clock application at 5:35 AM, Mon, Aug 8.",
        "coat_action_think": "The task is done: stop and set the query as completed.",
        "coat_action_desc": "stop and set the query as completed",
        "coat_action_result": "The user can interact with the alarms, timers and stopwatch.",
    },
]
GOAL = 'open app "Clock" (install if not already installed)'


def screenshot(size: tuple[int, int], seed: int, boxes: list[tuple[int, int, int, int]] = ()) -> bytes:
    """A real PNG: a background colour per seed and a dark bar per (left, top, right, bottom) box."""
    image = Image.new("RGB", size, ((seed * 67) % 256, (seed * 131) % 256, 200))
    draw = ImageDraw.Draw(image)
    for box in boxes:
        draw.rectangle(box, fill=(20, 20, 20))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def aitz_steps() -> list[dict]:
    steps = []
    for i, fields in enumerate(AITZ_STEPS):
        steps.append(
            {
                "episode_id": AITZ_ID.split("-")[1],
                "episode_length": len(AITZ_STEPS),
                "step_id": i,
                "instruction": GOAL,
                **fields,
                "image_path": f"google_apps/{AITZ_ID}/{AITZ_ID}_{i}.png",
                "image_full_path": f"android-in-the-wild/aitw_with_gpt/train/google_apps/{AITZ_ID}/{AITZ_ID}_{i}.png",
            }
        )
    return steps


def build_aitz(parent: Path, steps: list[dict] | None = None, name: str = AITZ_ID) -> Path:
    """`parent/<name>/<name>.json` + `<name>_<i>.png` per step."""
    folder = parent / name
    folder.mkdir(parents=True)
    steps = aitz_steps() if steps is None else steps
    for i, step in enumerate(steps):
        try:
            boxes = [(x, y, x + w, y + h) for y, x, h, w in json.loads(step.get("ui_positions", "[]"))]
        except (TypeError, ValueError):  # a malformed sample: a plain screen
            boxes = []
        (folder / f"{name}_{i}.png").write_bytes(screenshot(AITZ_SIZE, i, boxes))
        if isinstance(step.get("image_path"), str):
            step["image_path"] = step["image_path"].replace(AITZ_ID, name)
    (folder / f"{name}.json").write_text(json.dumps(steps, indent=4))
    return folder


ODYSSEY_ID = "1062813046541960"
ODYSSEY_SIZE = (1080, 2400)
ODYSSEY_STEPS = [  # as the release writes them: a press is two equal points, `ps` its debug text
    {"action": "CLICK", "info": [[500, 120], [500, 120]], "ps": "[(500, 120)]",
     "low_level_instruction": "Open the DuckDuckGo app.", "description": "The home screen with app icons.",
     "intention": "I open DuckDuckGo to search for the event.", "context": "Task just started.",
     "sam2_bbox": [450, 90, 550, 150]},
    {"action": "TEXT", "info": "New York Fashion Week", "ps": "",
     "low_level_instruction": "Type the event to search for.", "sam2_bbox": []},
    {"action": "SCROLL", "info": [[500, 800], [500, 200]], "ps": "[(500, 800), (500, 500), (500, 200)]",  # assumed form
     "low_level_instruction": "Scroll to the dates.", "sam2_bbox": []},
    {"action": "LONG_PRESS", "info": [[250, 400], [250, 400]], "ps": "[(250, 400)]",
     "low_level_instruction": "Select the date text.", "sam2_bbox": [200, 380, 300, 420]},
    {"action": "CLICK", "info": "KEY_HOME", "ps": "", "low_level_instruction": "Go to the home screen.",
     "sam2_bbox": []},
    {"action": "COMPLETE", "info": "", "ps": "the reminder is set", "low_level_instruction": "",
     "sam2_bbox": []},
]  # fmt: skip


def odyssey_annotation(episode_id: str = ODYSSEY_ID, steps: list[dict] | None = None) -> dict:
    steps = ODYSSEY_STEPS if steps is None else steps
    return {
        "episode_id": episode_id,
        "device_info": {
            "product": "sdk_gphone64_x86_64",
            "release_version": "34",
            "sdk_version": "34",
            "h": ODYSSEY_SIZE[1],
            "w": ODYSSEY_SIZE[0],
            "device_name": "Pixel 7 Pro",
        },  # fmt: skip
        "task_info": {
            "category": "Multi_Apps",
            "app": ["DuckDuckGo", "TickTick"],
            "meta_task": "Search for the next {} and set a reminder.",
            "task": "Search for the next New York Fashion Week and set a reminder.",
            "instruction": "Utilize DuckDuckgo to find the dates for the next New York Fashion Week and then use "
            "TickTick to set a reminder for the event.",
        },
        "step_length": len(steps),
        "steps": [{"step": i, "screenshot": f"{episode_id}_{i}.png", **s} for i, s in enumerate(steps)],
    }


def build_gui_odyssey(root: Path, annotations: dict[str, dict] | None = None) -> Path:
    """`root/annotations/<id>.json`, `root/screenshots/<id>_<i>.png`, `root/splits/random_split.json`."""
    annotations = annotations or {ODYSSEY_ID: odyssey_annotation()}
    (root / "annotations").mkdir(parents=True)
    (root / "screenshots").mkdir()
    (root / "splits").mkdir()
    for episode_id, doc in annotations.items():
        (root / "annotations" / f"{episode_id}.json").write_text(json.dumps(doc, indent=2))
        steps = doc.get("steps") if isinstance(doc, dict) else None
        for i, _ in enumerate(steps if isinstance(steps, list) else []):
            (root / "screenshots" / f"{episode_id}_{i}.png").write_bytes(screenshot((270, 600), i + 3))
    (root / "splits" / "random_split.json").write_text(json.dumps({"train": list(annotations), "test": []}))
    return root


CONTROL_ACTIONS = [
    {"action_type": "click", "x": 135, "y": 300},
    {"action_type": "scroll", "direction": "down"},
    {"action_type": "input_text", "text": "Zürich"},
]


def android_control_json(
    trees: list[bytes] | None = None, n: int = 4, size: tuple[int, int] = (540, 1200)
) -> dict:
    """An AndroidControl episode as agent frameworks repackage it: base64 PNGs, actions as objects."""
    doc = {
        "episode_id": 4242,
        "goal": "Search for Zürich in the weather app",
        "screenshots": [base64.b64encode(screenshot(size, i + 7)).decode() for i in range(n)],
        "screenshot_widths": [size[0]] * n,
        "screenshot_heights": [size[1]] * n,
        "actions": CONTROL_ACTIONS[: n - 1],
        "step_instructions": ["tap the search field", "scroll down to the list", "type Zürich"][: n - 1],
    }
    if trees is not None:
        doc["accessibility_trees"] = [base64.b64encode(t).decode() for t in trees]
    return doc

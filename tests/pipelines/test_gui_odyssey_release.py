"""GUI-Odyssey as the dataset releases it (issue 32, item 1): every tap and long press is two equal points,
`"info": [[882, 837], [882, 837]]` (the release's own `data/format_converter.py` reads `info[0]`), and `ps` on
a tap is the debug text `"[(882, 837)]"`. The episode below is the public episode 5342205429089853 (Pixel 8 Pro,
1344x2992) with its 11 actions as released; its screenshots are drawn at the device's size."""

from __future__ import annotations

import json
from pathlib import Path

from pipelines import ui_records
from pipelines.convert import run
from pipelines.step_text import step_texts
from protos.stepmark import ui_episode_pb2
from tests.pipelines.screenshot_first import screenshot

EPISODE = "5342205429089853"
SIZE = (1344, 2992)
#: (action, info, ps) of the released episode, in step order.
RELEASED = [
    ("CLICK", [[882, 837], [882, 837]], "[(882, 837)]"),
    ("CLICK", [[433, 490], [433, 490]], "[(433, 490)]"),
    ("CLICK", [[215, 624], [215, 624]], "[(215, 624)]"),
    ("CLICK", [[813, 78], [813, 78]], "[(813, 78)]"),
    ("TEXT", "Todoist", ""),
    ("CLICK", [[380, 139], [380, 139]], "[(380, 139)]"),
    ("CLICK", [[286, 503], [286, 503]], "[(286, 503)]"),
    ("CLICK", [[862, 407], [862, 407]], "[(862, 407)]"),
    ("CLICK", "KEY_HOME", ""),
    ("CLICK", [[636, 531], [636, 531]], "[(636, 531)]"),
    ("COMPLETE", "", ""),
]


def released_annotation(low_level: bool) -> dict:
    """The annotation file as released; with `low_level`, the per-step texts of the newer release too."""
    steps = []
    for i, (action, info, ps) in enumerate(RELEASED):
        step = {"step": i, "screenshot": f"{EPISODE}_{i}.png", "action": action, "info": info, "ps": ps}
        if low_level:
            step |= {
                "description": f"screen {i} of the Settings app",
                "intention": f"I act on screen {i} to reach the notification settings.",
                "context": f"{i} steps done.",
                "low_level_instruction": f"step {i}: do what the task needs",
                "sam2_bbox": [],
            }
        steps.append(step)
    return {
        "episode_id": EPISODE,
        "device_info": {
            "product": "sdk_gphone64_x86_64",
            "release_version": "14",
            "sdk_version": "34",
            "h": SIZE[1],
            "w": SIZE[0],
            "device_name": "Pixel 8 Pro",
        },  # fmt: skip
        "task_info": {
            "category": "General_Tool",
            "app": ["Todoist", "Setting"],
            "meta_task": "Turn on/off notifications for any app on the phone and open the app.",
            "task": "Turn on/off notifications for any app on the phone and open the app.",
            "instruction": "Enable or disable notifications for any application on your device, and then launch "
            "the Todoist app via the Settings app.",
        },
        "step_length": len(steps),
        "steps": steps,
    }


def _convert(tmp_path: Path, low_level: bool) -> tuple[ui_episode_pb2.UiEpisode, list]:
    root = tmp_path / "GUI-Odyssey" / "data"
    (root / "annotations").mkdir(parents=True)
    (root / "annotations" / f"{EPISODE}.json").write_text(
        json.dumps(released_annotation(low_level), indent=4)
    )
    shots = root / "screenshots" / "data_0"  # as downloaded: in a sub-folder
    shots.mkdir(parents=True)
    for i in range(len(RELEASED)):
        (shots / f"{EPISODE}_{i}.png").write_bytes(screenshot(SIZE, i + 1))
    out = tmp_path / "out"
    assert run([str(root), str(out), "--quiet"]) == 0
    (episode,) = ui_records.iter_episodes(str(out))
    return episode, list(ui_records.read_dead_letters(str(out)))


def test_released_episode_keeps_every_action_at_its_pixel(tmp_path: Path) -> None:
    episode, dead = _convert(tmp_path, low_level=False)
    assert dead == []  # base commit: 8 of the 11 actions were bad_action dead letters
    a = episode.actions
    assert [ui_episode_pb2.Action.Type.Name(x.type) for x in a] == ["TAP"] * 4 + ["TYPE_TEXT"] + ["TAP"] * 3 + [
        "HOME", "TAP", "TASK_COMPLETE"]  # fmt: skip
    assert (a[0].x, a[0].y) == (1185, 2504)  # 882/1000 x 1344, 837/1000 x 2992
    assert (a[3].x, a[3].y) == (1093, 233)
    assert a[4].text == "Todoist"
    # The debug text is never the step's instruction; the release's fields stay in raw_json.
    assert all(x.instruction == "" for x in a)
    assert json.loads(a[0].raw_json) == {
        "action": "CLICK",
        "info": [[882, 837], [882, 837]],
        "ps": "[(882, 837)]",
    }
    assert not any("device_info" in w for i in episode.step_info for w in i.warnings)  # the device's own size


def test_newer_release_step_texts_are_read(tmp_path: Path) -> None:
    episode, dead = _convert(tmp_path, low_level=True)
    assert dead == []
    texts = step_texts(episode, 0)
    assert texts["instruction"] == "step 0: do what the task needs"
    assert texts["screen_description"] == "screen 0 of the Settings app"
    assert texts["action_thought"] == "I act on screen 0 to reach the notification settings."
    assert step_texts(episode, 10)["instruction"] == "step 10: do what the task needs"


def test_a_press_with_two_different_points_reads_the_first_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / "in"
    doc = released_annotation(low_level=False)
    doc["steps"][1]["info"] = [[433, 490], [440, 500]]
    doc["steps"][2]["info"] = [[215, 624], [215, 1624]]  # second point off the screen: not a press
    (root / "annotations").mkdir(parents=True)
    (root / "screenshots").mkdir()
    (root / "annotations" / f"{EPISODE}.json").write_text(json.dumps(doc))
    for i in range(len(RELEASED)):
        (root / "screenshots" / f"{EPISODE}_{i}.png").write_bytes(screenshot((336, 748), i + 1))
    out = tmp_path / "out"
    assert run([str(root), str(out), "--quiet"]) == 0
    (episode,) = ui_records.iter_episodes(str(out))
    dead = list(ui_records.read_dead_letters(str(out)))
    assert (episode.actions[1].x, episode.actions[1].y) == (145, 367)  # 433/1000 x 336, 490/1000 x 748
    assert "press info has two points [433, 490] and [440, 500]: the first is the press point" in (
        episode.step_info[1].warnings
    )
    assert [(d.step, d.reason) for d in dead] == [(2, "bad_action")]

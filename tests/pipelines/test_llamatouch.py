"""LlamaTouch traces: eventStructs.txt lines (both recorder forms), instruction.txt, discovery with no flag, and
a converted trace whose dumps (root 1080x2274) are smaller than their 1080x2400 screenshots, with dialog steps
in between: every step gets the screenshot's size and taps land where they were recorded."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image

from pipelines.traces import EpisodeSource, discover
from pipelines.traces.llamatouch import EventLineError, parse_event, parse_instruction
from protos.stepmark import ui_episode_pb2
from tests.pipelines.test_convert import convert, dead_letters, episodes

Action = ui_episode_pb2.Action
PKG = "com.google.android.apps.magazines"


def png(width: int, height: int, colour: tuple[int, int, int] = (30, 120, 200)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buf, format="PNG")
    return buf.getvalue()


def node(bounds: str, cls: str = "android.widget.FrameLayout", text: str = "", clickable: bool = False,
         rid: str = "", children: str = "", package: str = PKG) -> str:  # fmt: skip
    return (
        f'<node index="0" text="{text}" resource-id="{rid}" class="{cls}" package="{package}" content-desc="" '
        f'checkable="false" checked="false" clickable="{str(clickable).lower()}" enabled="true" focusable="false" '
        f'focused="false" scrollable="false" long-clickable="false" password="false" selected="false" '
        f'bounds="{bounds}">{children}</node>'
    )


def dump(root: str) -> bytes:
    return ("<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>"
            f'<hierarchy rotation="0">{root}</hierarchy>').encode()  # fmt: skip


#: The app's window: the 2400-pixel screen less its 126-pixel navigation bar, as LlamaTouch's dumps have it.
APP = dump(
    node(
        "[0,0][1080,2274]",
        children=node("[42,84][1038,210]", "android.widget.EditText", "sustainable living", True, f"{PKG}:id/search_bar")
        + node("[0,1151][1080,1556]", "android.widget.LinearLayout", "", True, f"{PKG}:id/card_content")
        + node("[943,2100][1027,2184]", "android.widget.ImageView", "", True, f"{PKG}:id/follow_button"),
    )
)
#: A dialog window alone: its root does not start at the origin, so the dump's size is only an estimate.
DIALOG = dump(
    node(
        "[84,900][996,1500]",
        children=node("[700,1380][950,1480]", "android.widget.Button", "OK", True, "android:id/button1"),
    )
)


def build_trace(folder: Path, events: str, instruction: str = "18\nPractice pronunciation in French in Duolingo.\n"):
    folder.mkdir(parents=True)
    screens = [APP, DIALOG, APP, DIALOG, APP]
    for i, xml in enumerate(screens):
        (folder / f"{i}.xml").write_bytes(xml)
        (folder / f"{i}.png").write_bytes(png(1080, 2400, (20 * i, 100, 150)))
        (folder / f"{i}_drawed.png").write_bytes(png(108, 240))  # LlamaTouch's annotated copies: not steps
        (folder / f"{i}.activity").write_text(f"{PKG}/com.google.apps.dots.android.newsstand.search.SearchActivity\n\n")
        (folder / f"{i}.json").write_text("[]")  # LlamaTouch's simplified component list: not a hierarchy
        (folder / f"{i}.vh").write_text('{"views": []}')  # the service's hierarchy: used only without N.xml
    (folder / "agg_plot.png").write_bytes(png(64, 64))
    (folder / "eventStructs.txt").write_text(events, encoding="utf-8")
    (folder / "instruction.txt").write_text(instruction, encoding="utf-8")


EVENTS = (
    "[Click] Screen Resolution (320, 720), Click Position (160, 44)\n"  # on the search bar (y 44/720 of 2400)
    "[Click] Screen Resolution (320, 720), Click Position (245, 429)\n"  # the dialog's OK button
    "[Swipe] Screen Resolution (320, 720), Start Position (160, 600), End Position (160, 200)\n"
    "[Input] sustainable living\n"
)


def test_event_lines_of_both_recorder_forms() -> None:
    tap = parse_event("[Click] Screen Resolution (320, 720), Click Position (204, 170)")
    assert (tap.kind, tap.space, tap.x, tap.y) == ("tap", "normalized", 204 / 320, 170 / 720)
    long = parse_event("[Long Click] Screen Resolution (1080, 2400), Long Click Position (540, 1200)")
    assert (long.kind, long.x, long.y, long.duration_ms) == ("long_press", 0.5, 0.5, 500)
    swipe = parse_event("[Swipe] Screen Resolution (320, 720), Start Position (160, 600), End Position (160, 200)")
    assert (swipe.kind, swipe.x, swipe.y, swipe.end_x, swipe.end_y) == ("swipe", 0.5, 600 / 720, 0.5, 200 / 720)
    assert parse_event("[Drag] Screen Resolution (320, 720), Start Position (1, 2), End Position (3, 4)").kind == "swipe"
    assert parse_event("[Input] good burger place").text == "good burger place"
    assert [parse_event(x).kind for x in ("[Home]", "[Back]", "[App Switch]")] == ["home", "back", "other"]
    # The first release's Chinese form
    old = parse_event("【点击事件】屏幕大小：（w320，h720），触摸位置：（x196，y558）")
    assert (old.kind, old.x, old.y) == ("tap", 196 / 320, 558 / 720)
    old_swipe = parse_event("【滑动事件】屏幕大小：（w320，h720），起始位置：（x160，y600），结束位置：（x160，y200）")
    assert (old_swipe.kind, old_swipe.end_y) == ("swipe", 200 / 720)
    assert parse_event("【键盘输入】bestbuy").text == "bestbuy"
    assert [parse_event(x).kind for x in ("【Home键】", "【Back键】")] == ["home", "back"]
    for bad in ("Click at 3, 4", "[Click] Screen Resolution (320, 720)", "[Click] Screen Resolution (0, 720), Click Position (1, 2)"):
        with pytest.raises(EventLineError):
            parse_event(bad)


def test_instruction_file() -> None:
    assert parse_instruction("18\nPractice pronunciation in French in Duolingo.") == (
        "18", "Practice pronunciation in French in Duolingo.",
    )  # fmt: skip
    assert parse_instruction("Open the settings\n") == ("", "Open the settings")


def test_detected_without_a_flag_and_only_its_files_claimed(tmp_path: Path) -> None:
    build_trace(tmp_path / "general" / "trace_18", EVENTS)
    found = list(discover(str(tmp_path)))
    (source,) = [s for s in found if isinstance(s, EpisodeSource)]
    assert (source.layout, source.episode_id) == ("llamatouch", "general/trace_18")
    names = sorted(Path(p).name for p in source.files)
    assert "0_drawed.png" not in names and "0.json" not in names and "agg_plot.png" not in names
    assert "0.vh" not in names
    assert {"eventStructs.txt", "instruction.txt", "0.xml", "0.png", "0.activity"} <= set(names)
    assert not [d for d in found if type(d).__name__ == "DeadLetter"]  # no orphan screenshots


def test_trace_converts_with_actions_goal_and_one_screen_size(tmp_path: Path) -> None:
    build_trace(tmp_path / "in" / "trace_18", EVENTS)
    summary = convert(tmp_path / "in", tmp_path / "out")
    assert summary["episodes_by_layout"] == {"llamatouch": 1}
    (e,) = episodes(tmp_path / "out").values()
    assert e.source == "llamatouch" and e.goal == "Practice pronunciation in French in Duolingo."
    assert e.metadata["llamatouch_episode"] == "18" and e.app_package == PKG
    # Every step, the app's (root 1080x2274) and the dialogs' (size estimated), is in the screenshot's space
    sizes = {(t.observation.screen_width, t.observation.screen_height) for t in e.episode.time_steps}
    assert sizes == {(1080, 2400)}
    assert summary["screenshot_mismatch_steps"] == 0
    app_step = e.step_info[0]
    assert any("less a system bar" in w for w in app_step.warnings)
    assert (e.step_info[0].scale_x, e.step_info[0].scale_y) == (1.0, 1.0)  # boxes unchanged
    boxes = [(o.bbox.left, o.bbox.top, o.bbox.right, o.bbox.bottom) for o in e.episode.time_steps[0].observation.objects]
    assert (42, 84, 1038, 210) in boxes
    # Taps from the recorder's 320x720 onto the 1080x2400 screen, resolved to the objects under them
    tap, ok, swipe, typed, last = e.actions
    assert (tap.type, tap.x, tap.y) == (Action.TAP, 540, round(44 / 720 * 2400))
    assert e.episode.time_steps[0].observation.objects[tap.target_index].resource_id == f"{PKG}:id/search_bar"
    assert (ok.type, ok.x, ok.y) == (Action.TAP, round(245 / 320 * 1080), 1430)
    assert e.episode.time_steps[1].observation.objects[ok.target_index].text == "OK"
    assert (swipe.type, swipe.x, swipe.y, swipe.end_x, swipe.end_y) == (Action.SWIPE, 540, 2000, 540, round(200 / 720 * 2400))
    assert (typed.type, typed.text) == (Action.TYPE_TEXT, "sustainable living")
    assert last.type == Action.ACTION_UNSPECIFIED  # the last screen has no action
    assert "[Click] Screen Resolution (320, 720)" in tap.raw_json
    assert dead_letters(tmp_path / "out") == []


def test_vh_hierarchy_when_the_dump_is_missing(tmp_path: Path, fixtures_dir: Path) -> None:
    """A step without N.xml reads N.vh: the in-app service's DroidBot views as a bare JSON list (LlamaTouch's
    files), here the views of a real DroidBot state."""
    build_trace(tmp_path / "in" / "t", "[Home]\n")
    state = json.loads((fixtures_dir / "droidbot" / "yelp" / "states" / "state_2017-08-11_202329.json").read_text())
    (tmp_path / "in" / "t" / "2.xml").unlink()
    (tmp_path / "in" / "t" / "2.vh").write_text(json.dumps(state["views"], indent=2))
    convert(tmp_path / "in", tmp_path / "out")
    (e,) = episodes(tmp_path / "out").values()
    assert [s.hierarchy_format for s in e.step_info] == ["uiautomator", "uiautomator", "droidbot", "uiautomator",
                                                          "uiautomator"]  # fmt: skip
    assert e.step_info[2].hierarchy_path.endswith("2.vh")
    assert len(e.episode.time_steps[2].observation.objects) == len(state["views"])
    assert all(not any("also found" in w for w in s.warnings) for s in e.step_info)


def test_bad_event_lines_are_dead_letters_and_the_steps_stay(tmp_path: Path) -> None:
    events = (
        "[Click] Screen Resolution (320, 720), Click Position (160, 44)\n"
        "[Click] somewhere\n"
        "[Home]\n[Back]\n[Home]\n[Back]\n"  # one action more than there are screens
    )
    build_trace(tmp_path / "in" / "t", events)
    convert(tmp_path / "in", tmp_path / "out")
    (e,) = episodes(tmp_path / "out").values()
    assert len(e.episode.time_steps) == 5
    assert [a.type for a in e.actions] == [Action.TAP, Action.ACTION_UNSPECIFIED, Action.HOME, Action.BACK, Action.HOME]
    dead = sorted(dead_letters(tmp_path / "out"), key=lambda d: d.exception)
    assert [d.reason for d in dead] == ["bad_action", "bad_action"]
    assert "eventStructs.txt line 2: [Click] needs the screen resolution and 1 position(s)" in dead[0].exception
    assert dead[0].step == 1
    assert "line 6: 1 action(s) beyond the trace's 5 screens (lines 6-6) not used" in dead[1].exception
    assert dead[1].step is None


def test_event_files_not_in_utf8_are_decoded_by_detection(tmp_path: Path) -> None:
    """The first release's Chinese lines in GBK: decoded as the detected encoding, with an episode warning; a
    couple of stray bytes (too few to tell an encoding by) become U+FFFD, also with a warning."""
    events = (
        "【点击事件】屏幕大小：（w320，h720），触摸位置：（x160，y44）\n【键盘输入】可持续生活\n【Back键】\n【Home键】\n"
    )
    build_trace(tmp_path / "in" / "gbk", "")
    (tmp_path / "in" / "gbk" / "eventStructs.txt").write_bytes(events.encode("gbk"))
    build_trace(tmp_path / "in" / "stray", "")
    (tmp_path / "in" / "stray" / "eventStructs.txt").write_bytes(b"[Home]\n[Input] caf\xe9\xff\n")
    convert(tmp_path / "in", tmp_path / "out")
    got = episodes(tmp_path / "out")
    gbk, stray = got["gbk"], got["stray"]
    assert [a.type for a in gbk.actions] == [Action.TAP, Action.TYPE_TEXT, Action.BACK, Action.HOME,
                                             Action.ACTION_UNSPECIFIED]  # fmt: skip
    assert gbk.actions[1].text == "可持续生活" and (gbk.actions[0].x, gbk.actions[0].y) == (540, 147)
    assert "eventStructs.txt: bytes invalid in the declared utf-8" in gbk.metadata["warnings"]
    assert "decoded as gb" in gbk.metadata["warnings"]
    assert [a.type for a in stray.actions][:2] == [Action.HOME, Action.TYPE_TEXT]
    assert stray.actions[1].text == "caf\ufffd\ufffd"
    assert "eventStructs.txt: bytes invalid in utf-8 replaced by U+FFFD" in stray.metadata["warnings"]
    assert dead_letters(tmp_path / "out") == []


def test_an_episode_left_in_two_sizes_says_so(tmp_path: Path) -> None:
    """A dump one side of which matches the screenshot but whose boxes overflow it is not the bar case: that
    step keeps the dump's space (screenshot_mismatch) and the episode names the sizes its steps ended in."""
    build_trace(tmp_path / "in" / "t", EVENTS)
    overflowing = dump(node("[0,0][1080,2274]", children=node("[0,2200][1080,2520]", "android.widget.TextView", "x")))
    (tmp_path / "in" / "t" / "4.xml").write_bytes(overflowing)
    summary = convert(tmp_path / "in", tmp_path / "out")
    (e,) = episodes(tmp_path / "out").values()
    assert summary["screenshot_mismatch_steps"] == 1
    assert (e.episode.time_steps[4].observation.screen_width, e.episode.time_steps[4].observation.screen_height) == (
        1080, 2274,
    )  # fmt: skip
    assert "steps with 1080x2400 screenshots are in 2 screen sizes: 1080x2400 (4 steps), 1080x2274 (1 steps)" in (
        e.metadata["warnings"]
    )  # fmt: skip


def test_a_screenshot_without_a_hierarchy_is_an_orphan_dead_letter(tmp_path: Path) -> None:
    build_trace(tmp_path / "in" / "t", "[Home]\n")
    (tmp_path / "in" / "t" / "5.png").write_bytes(png(1080, 2400))
    convert(tmp_path / "in", tmp_path / "out")
    (e,) = episodes(tmp_path / "out").values()
    assert len(e.episode.time_steps) == 5
    (dead,) = dead_letters(tmp_path / "out")
    assert dead.reason == "orphan_screenshot" and dead.source_path.endswith("5.png")


@pytest.mark.parametrize("leave_screenshot", [True, False])
def test_actions_follow_the_screen_numbers_across_a_gap(tmp_path: Path, leave_screenshot: bool) -> None:
    """Screen 1 has no dump (an orphan 1.png, or no file at all): line 2 is screen 1's action, so it is a dead
    letter naming screen 1, and lines 3 and 4 stay on screens 2 and 3 (they used to shift one screen earlier)."""
    folder = tmp_path / "in" / "t"
    build_trace(folder, EVENTS)
    for name in ("1.xml", "1.vh", "1.activity", *(() if leave_screenshot else ("1.png",))):
        (folder / name).unlink()
    convert(tmp_path / "in", tmp_path / "out")
    (e,) = episodes(tmp_path / "out").values()
    assert [s.index for s in e.step_info] == [0, 2, 3, 4]  # the source screen numbers
    tap, swipe, typed, last = e.actions
    assert (tap.type, swipe.type, typed.type, last.type) == (
        Action.TAP, Action.SWIPE, Action.TYPE_TEXT, Action.ACTION_UNSPECIFIED,
    )  # fmt: skip
    assert "Start Position (160, 600)" in swipe.raw_json and typed.text == "sustainable living"
    assert e.metadata["source_steps"] == "5" and e.metadata["dropped_steps"] == "1"
    assert any(w.startswith("gap after this step: screen 1 has no 1.xml or 1.vh") for w in e.step_info[0].warnings)
    assert any(w.startswith("gap before this step: screen 1 has no 1.xml or 1.vh") for w in e.step_info[1].warnings)
    assert not any("gap" in w for s in e.step_info[2:] for w in s.warnings)
    dead = sorted(dead_letters(tmp_path / "out"), key=lambda d: d.reason)
    assert [(d.reason, d.step) for d in dead] == [("bad_action", 1)] + [("orphan_screenshot", 1)] * leave_screenshot
    assert dead[0].source_path.endswith("eventStructs.txt")
    assert "line 2: the action on screen 1, which has no 1.xml or 1.vh" in dead[0].exception
    assert ("only its screenshot 1.png" if leave_screenshot else "no file at all") in dead[0].exception
    assert "Click Position (245, 429)" in dead[0].exception


def test_a_trace_numbered_from_one_and_a_screen_numbered_far_beyond(tmp_path: Path) -> None:
    """Positions count from the trace's first number; a screen numbered more than MAX_SCREEN_SPAN after it is a
    bad_step dead letter naming its file (it would otherwise make 10^11 source steps)."""
    folder = tmp_path / "in" / "t"
    build_trace(folder, "[Home]\n[Back]\n")
    for name in ("0.xml", "0.vh", "0.png", "0.activity"):
        (folder / name).unlink()
    (folder / "99999999999.xml").write_bytes(APP)
    convert(tmp_path / "in", tmp_path / "out")
    (e,) = episodes(tmp_path / "out").values()
    assert [s.index for s in e.step_info] == [0, 1, 2, 3] and e.step_info[0].hierarchy_path.endswith("1.xml")
    assert [a.type for a in e.actions][:2] == [Action.HOME, Action.BACK]
    assert e.metadata["source_steps"] == "4" and "dropped_steps" not in e.metadata
    (dead,) = dead_letters(tmp_path / "out")
    assert dead.reason == "bad_step" and dead.source_path.endswith("99999999999.xml")
    assert "screen 99999999999 is 99999999998 screens after the trace's first (1)" in dead.exception

"""Screen size without a screenshot (issue 32, item 5): a dump whose top window is a dialog, or whose windows
stop short of the display (a car display, a window beside a navigation bar), once got its windows' extent as
the screen. A step of the same folder that shows the display (its screenshot, a full-screen root) now gives it;
a step nothing else explains keeps its guess and the warning saying so.

The dumps are real uiautomator dumps of ../shared/fixtures/uiautomator; the dialog is built the way such a dump
is written: the dialog's window alone (`[0,583][1080,1718]`), AOSP AlertDialog ids, the attribute set of the
real dump's nodes."""

from __future__ import annotations

import copy
import re
from pathlib import Path

from lxml import etree

from pipelines import ui_records
from pipelines.convert import run
from protos.llm4mobile import episode_pb2
from tests.pipelines.screenshot_first import screenshot

L = episode_pb2.GridLocation
DIALOG = (0, 583, 1080, 1718)
ESTIMATED = "screen size 1080x1718 estimated from windows that do not start at the origin"


def dialog_dump(fixtures_dir: Path) -> bytes:
    """A dialog on top of the fractal-forge app: its window alone, as `uiautomator dump` writes it."""
    real = etree.fromstring((fixtures_dir / "uiautomator" / "fractal-forge_ui_controls.xml").read_bytes())
    template = real[0]  # the app's root node: the attribute set and order of a real node

    def node(parent, cls: str, rid: str, box: tuple[int, int, int, int], text: str = "", clickable=False):
        n = etree.SubElement(parent, "node", {k: v for k, v in template.attrib.items()})
        n.set("index", str(len(parent) - 1))
        n.set("class", cls)
        n.set("resource-id", rid)
        n.set("text", text)
        n.set("clickable", "true" if clickable else "false")
        n.set("focusable", "true" if clickable else "false")
        n.set("bounds", "[{},{}][{},{}]".format(*box))
        return n

    top = etree.Element("hierarchy", rotation="0")
    decor = node(top, "android.widget.FrameLayout", "", DIALOG)
    content = node(decor, "android.widget.FrameLayout", "android:id/content", DIALOG)
    panel = node(content, "android.widget.LinearLayout", "android:id/parentPanel", (63, 583, 1017, 1718))
    title_panel = node(panel, "android.widget.LinearLayout", "android:id/topPanel", (63, 583, 1017, 730))
    node(title_panel, "android.widget.TextView", "android:id/alertTitle", (126, 646, 954, 724), "Delete fractal?")
    body = node(panel, "android.widget.FrameLayout", "android:id/contentPanel", (63, 730, 1017, 1560))
    node(body, "android.widget.TextView", "android:id/message", (126, 760, 954, 1500), "This cannot be undone.")
    buttons = node(panel, "android.widget.ScrollView", "android:id/buttonPanel", (63, 1560, 1017, 1718))
    row = node(buttons, "android.widget.LinearLayout", "", (63, 1560, 1017, 1718))
    node(row, "android.widget.Button", "android:id/button2", (600, 1581, 790, 1697), "CANCEL", True)
    node(row, "android.widget.Button", "android:id/button1", (790, 1581, 996, 1697), "DELETE", True)
    return etree.tostring(top, xml_declaration=True, encoding="UTF-8", standalone=True)


def short_windows(fixtures_dir: Path, width: int, height: int) -> bytes:
    """The landscape tablet dump with every box clipped to [0,0][width,height]: windows that stop short of the
    2000x1128 display, as on a car display whose system bars are windows the dump leaves out."""
    text = (fixtures_dir / "uiautomator" / "UltraNavbar_uidump.xml").read_text()

    def clip(m: re.Match) -> str:
        left, top, right, bottom = map(int, m.groups())
        return f'bounds="[{min(left, width)},{min(top, height)}][{min(right, width)},{min(bottom, height)}]"'

    return re.sub(r'bounds="\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]"', clip, text).encode()


def _convert(inp: Path, out: Path) -> dict:
    assert run([str(inp), str(out), "--quiet"]) == 0
    assert list(ui_records.read_dead_letters(str(out))) == []
    return {e.episode_id: e for e in ui_records.iter_episodes(str(out))}


def _title(step) -> episode_pb2.Object:
    return next(o for o in step.observation.objects if o.text == "Delete fractal?")


def test_a_dialog_takes_the_display_size_a_sibling_screenshot_shows(tmp_path: Path, fixtures_dir: Path) -> None:
    folder = tmp_path / "in" / "run"
    folder.mkdir(parents=True)
    (folder / "0.xml").write_bytes((fixtures_dir / "uiautomator" / "fractal-forge_ui_controls.xml").read_bytes())
    (folder / "0.png").write_bytes(screenshot((1080, 2400), 1))
    (folder / "1.xml").write_bytes(dialog_dump(fixtures_dir))  # no screenshot
    (episode,) = _convert(tmp_path / "in", tmp_path / "out").values()
    step = episode.episode.time_steps[1]
    assert (step.observation.screen_width, step.observation.screen_height) == (1080, 2400)
    warnings = list(episode.step_info[1].warnings)
    assert ESTIMATED not in warnings and not any(w.startswith("no screenshot: screen size 1080x1718") for w in warnings)
    assert "no screenshot: screen size 1080x2400 from step 0's screenshot (this dump's windows span only 1080x1718)" in (
        " ".join(warnings)
    )
    assert (_title(step).bbox.top, _title(step).bbox.bottom) == (646, 724)  # boxes unchanged
    assert _title(step).grid_location == L.TOP_CENTER  # on the 1080x1718 guess it was CENTER
    assert (episode.step_info[1].hierarchy_width, episode.step_info[1].hierarchy_height) == (1080, 2400)


def test_a_dialog_takes_a_sibling_full_screen_root_and_alone_keeps_its_warning(
    tmp_path: Path, fixtures_dir: Path
) -> None:
    with_root, alone = tmp_path / "in" / "with_root", tmp_path / "in" / "alone"
    for folder in (with_root, alone):
        folder.mkdir(parents=True)
        (folder / "1.xml").write_bytes(dialog_dump(fixtures_dir))
    (with_root / "0.xml").write_bytes((fixtures_dir / "uiautomator" / "fractal-forge_ui_controls.xml").read_bytes())
    (alone / "0.xml").write_bytes(dialog_dump(fixtures_dir))
    episodes = _convert(tmp_path / "in", tmp_path / "out")
    helped = next(e for k, e in episodes.items() if k.endswith("with_root"))
    obs = helped.episode.time_steps[1].observation
    assert (obs.screen_width, obs.screen_height) == (1080, 2400)
    assert "from step 0's full-screen window" in " ".join(helped.step_info[1].warnings)
    lone = next(e for k, e in episodes.items() if k.endswith("alone"))
    for i in (0, 1):  # still a guess: the dialog's extent, said on every step
        obs = lone.episode.time_steps[i].observation
        assert (obs.screen_width, obs.screen_height) == DIALOG[2:]
        assert ESTIMATED in lone.step_info[i].warnings
        assert "no screenshot: screen size 1080x1718 from the hierarchy" in lone.step_info[i].warnings
        assert _title(lone.episode.time_steps[i]).grid_location == L.CENTER


def test_windows_short_of_the_display_and_beside_a_bar_take_the_screenshot_size(
    tmp_path: Path, fixtures_dir: Path
) -> None:
    folder = tmp_path / "in" / "car"
    folder.mkdir(parents=True)
    (folder / "0.xml").write_bytes((fixtures_dir / "uiautomator" / "UltraNavbar_uidump.xml").read_bytes())
    (folder / "0.png").write_bytes(screenshot((2000, 1128), 2))
    (folder / "1.xml").write_bytes(short_windows(fixtures_dir, 1898, 965))
    # The real dump of the same launcher beside the navigation bar: its window starts at x = 176.
    (folder / "2.xml").write_bytes((fixtures_dir / "uiautomator" / "UltraNavbar_split.xml").read_bytes())
    (episode,) = _convert(tmp_path / "in", tmp_path / "out").values()
    sizes = [(t.observation.screen_width, t.observation.screen_height) for t in episode.episode.time_steps]
    assert sizes == [(2000, 1128)] * 3
    for i, span in ((1, "1898x965"), (2, "2000x1128")):
        text = " ".join(episode.step_info[i].warnings)
        if i == 1:
            assert f"from step 0's screenshot (this dump's windows span only {span})" in text
        assert "estimated from windows" not in text
    # Step 2's own extent was already 2000x1128 (the bar is at the left): the screenshot confirms the guess.
    assert "no screenshot: screen size 2000x1128 from the hierarchy, as step 0's screenshot shows" in (
        episode.step_info[2].warnings
    )


def test_a_sibling_of_another_rotation_or_too_small_says_nothing(tmp_path: Path, fixtures_dir: Path) -> None:
    folder = tmp_path / "in" / "mixed"
    folder.mkdir(parents=True)
    (folder / "0.xml").write_bytes((fixtures_dir / "uiautomator" / "UltraNavbar_uidump.xml").read_bytes())
    (folder / "0.png").write_bytes(screenshot((2000, 1128), 3))  # landscape (rotation 1)
    (folder / "1.xml").write_bytes(dialog_dump(fixtures_dir))  # portrait (rotation 0), 1718 tall: not held
    (episode,) = _convert(tmp_path / "in", tmp_path / "out").values()
    obs = episode.episode.time_steps[1].observation
    assert (obs.screen_width, obs.screen_height) == (1080, 1718)
    assert ESTIMATED in episode.step_info[1].warnings


def test_shared_dump_objects_are_not_changed_in_place(fixtures_dir: Path) -> None:
    """The resized copy leaves the parsed screen as it was (steps sharing a dump share its Observed)."""
    from pipelines.display_size import on_display
    from pipelines.ui_episode import observe

    data = dialog_dump(fixtures_dir)
    obs = observe(data, None)
    before = copy.deepcopy([o.grid_location for o in obs.screen.objects])
    moved = on_display(obs, 1080, 2400, "step 0's screenshot")
    assert [o.grid_location for o in obs.screen.objects] == before
    assert moved.width == 1080 and moved.height == 2400 and obs.height == 1718


def test_a_lone_dialog_takes_a_sibling_screenshot_of_its_folder(tmp_path: Path, fixtures_dir: Path) -> None:
    """Single screens: each dump is its own episode; a dump without a screenshot consults its folder's."""
    folder = tmp_path / "in" / "screens"
    folder.mkdir(parents=True)
    (folder / "dialog.xml").write_bytes(dialog_dump(fixtures_dir))
    (folder / "home.xml").write_bytes((fixtures_dir / "uiautomator" / "fractal-forge_ui_controls.xml").read_bytes())
    (folder / "home.png").write_bytes(screenshot((1080, 2400), 4))
    # A feature phone's dump in the same folder: 1080x2400 holds its 240x320 but is another device's screen.
    (folder / "menu.xml").write_bytes((fixtures_dir / "uiautomator" / "keydroidx_ui_menu.xml").read_bytes())
    episodes = _convert(tmp_path / "in", tmp_path / "out")
    menu = next(e for k, e in episodes.items() if k.endswith("menu"))
    obs = menu.episode.time_steps[0].observation
    assert (obs.screen_width, obs.screen_height) == (240, 320)
    assert "no screenshot: screen size 240x320 from the hierarchy" in menu.step_info[0].warnings
    dialog = next(e for k, e in episodes.items() if k.endswith("dialog"))
    obs = dialog.episode.time_steps[0].observation
    assert (obs.screen_width, obs.screen_height) == (1080, 2400)
    assert f"from {folder / 'home.png'} beside it" in " ".join(dialog.step_info[0].warnings)
    assert _title(dialog.episode.time_steps[0]).grid_location == L.TOP_CENTER


DUMPSYS_DISPLAY = (
    "DISPLAY MANAGER (dumpsys display)\n"
    "  mDisplayInfo=DisplayInfo{\"Built-in Screen\", displayId 0, FLAG_SECURE, FLAG_SUPPORTS_PROTECTED_BUFFERS, "
    "real 1080 x 2400, largest app 2400 x 2337, smallest app 1080 x 1017, mode 1, defaultMode 1}\n"
)
DUMPSYS_WINDOW = (
    "WINDOW MANAGER DISPLAY CONTENTS (dumpsys window displays)\n"
    "  Display: mDisplayId=0\n"
    "    init=2000x1128 213dpi cur=2000x1128 app=1898x965 rng=965x905-1898x1838\n"
)


def test_saved_dumpsys_output_gives_the_display(tmp_path: Path, fixtures_dir: Path) -> None:
    dialog, car, plain = (tmp_path / "in" / n for n in ("dialog", "car", "plain"))
    for folder in (dialog, car, plain):
        folder.mkdir(parents=True)
    (dialog / "dialog.xml").write_bytes(dialog_dump(fixtures_dir))
    (dialog / "dumpsys_display.txt").write_text(DUMPSYS_DISPLAY)
    (car / "0.xml").write_bytes(short_windows(fixtures_dir, 1898, 965))
    (car / "1.xml").write_bytes(short_windows(fixtures_dir, 1898, 965))
    (car / "dumpsys.txt").write_text(DUMPSYS_WINDOW)
    (plain / "wm_size.txt").write_text("Physical size: 1080x2400\n")  # no dump in the folder: not taken
    whole = tmp_path / "in" / "whole"  # every dump has its screenshot: nothing reads its dumpsys
    whole.mkdir()
    (whole / "home.xml").write_bytes((fixtures_dir / "uiautomator" / "fractal-forge_ui_controls.xml").read_bytes())
    (whole / "home.png").write_bytes(screenshot((1080, 2400), 5))
    (whole / "dumpsys.txt").write_text(DUMPSYS_DISPLAY)
    out = tmp_path / "out"
    episodes = _convert(tmp_path / "in", out)
    d = next(e for k, e in episodes.items() if k.endswith("dialog"))
    assert (d.episode.time_steps[0].observation.screen_width, d.episode.time_steps[0].observation.screen_height) == (
        1080, 2400)  # fmt: skip
    assert f"from {dialog / 'dumpsys_display.txt'} beside it" in " ".join(d.step_info[0].warnings)
    c = next(e for k, e in episodes.items() if k.endswith("car"))
    assert [(t.observation.screen_width, t.observation.screen_height) for t in c.episode.time_steps] == [
        (2000, 1128), (2000, 1128)]  # fmt: skip
    assert "this dump's windows span only 1898x965" in " ".join(c.step_info[1].warnings)
    summary = ui_records.read_summary(str(out))
    assert summary["ignored_files"] == 2  # plain/wm_size.txt, whole/dumpsys.txt; the other two were read


def test_size_in_text_reads_each_tool_s_output() -> None:
    from pipelines.display_size import size_in_text

    assert size_in_text(DUMPSYS_DISPLAY.encode()) == (1080, 2400)
    assert size_in_text(DUMPSYS_WINDOW.encode()) == (2000, 1128)
    assert size_in_text(b"Physical size: 1440x3120\nOverride size: 1080x2340\n") == (1080, 2340)
    assert size_in_text(b"Physical size: 1440x3120\n") == (1440, 3120)
    assert size_in_text(b"no display here") is None

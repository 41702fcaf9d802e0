"""DroidRun / Mobilerun portal states (`a11y_tree` + `phone_state`, simple and full forms, as the portal's
JsonBuilders / AccessibilityTreeBuilder write them) and DroidRun trajectory folders (ui_states/, screenshots/,
macro.json), converted with no flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.hierarchy import MAX_DEPTH, HierarchyError, parse
from pipelines.hierarchy.bounds import Box, parse_bounds
from pipelines.traces import EpisodeSource, discover
from protos.llm4mobile import episode_pb2
from protos.stepmark import ui_episode_pb2
from tests.pipelines.test_convert import convert, dead_letters, episodes
from tests.pipelines.test_llamatouch import png

Action = ui_episode_pb2.Action
T = episode_pb2.ObjectType
PKG = "com.example.notes"


def simple_state(package: str = PKG) -> dict:
    """`/state`: visible elements only, bounds as "l, t, r, b"."""
    return {
        "a11y_tree": [
            {"index": 1, "resourceId": f"{package}:id/toolbar", "className": "android.widget.FrameLayout", "text": "",
             "bounds": "0, 0, 1080, 220", "children": [
                 {"index": 2, "resourceId": f"{package}:id/search", "className": "android.widget.EditText",
                  "text": "Search notes", "bounds": "40, 60, 900, 180", "children": []},
             ]},
            {"index": 3, "resourceId": f"{package}:id/add", "className": "android.widget.ImageButton", "text": "",
             "bounds": "880, 2000, 1040, 2160", "children": []},
        ],
        "phone_state": {"currentApp": "Notes", "packageName": package, "activityName": f"{package}.MainActivity",
                        "keyboardVisible": False, "isEditable": False,
                        "focusedElement": {"text": None, "className": None, "resourceId": ""}},
    }  # fmt: skip


def full_node(cls: str, bounds: tuple[int, int, int, int], children: list, **flags) -> dict:
    left, top, right, bottom = bounds
    node = {
        "resourceId": flags.pop("resourceId", ""), "className": cls, "packageName": flags.pop("packageName", PKG),
        "text": flags.pop("text", ""), "contentDescription": flags.pop("contentDescription", ""), "hint": "",
        "boundsInScreen": {"left": left, "top": top, "right": right, "bottom": bottom},
        "boundsInParent": {"left": 0, "top": 0, "right": right - left, "bottom": bottom - top},
        "isClickable": False, "isLongClickable": False, "isFocusable": False, "isFocused": False,
        "isSelected": False, "isCheckable": False, "isChecked": False, "isEnabled": True, "isVisibleToUser": True,
        "isEditable": False, "isScrollable": False, "childCount": len(children), "children": children,
    }  # fmt: skip
    node.update(flags)
    return node


def full_state() -> dict:
    """`/state_full`: one root with every property, and the device context."""
    tree = full_node("android.widget.FrameLayout", (0, 0, 1080, 2400), [
        full_node("android.widget.Button", (100, 300, 500, 420), [], text="Save", isClickable=True,
                  resourceId=f"{PKG}:id/save"),
        full_node("android.widget.EditText", (100, 500, 1000, 700), [], hint="Title", isEditable=True,
                  isFocused=True, isFocusable=True),
        full_node("android.widget.TextView", (0, 2500, 1080, 2600), [], text="below the fold",
                  isVisibleToUser=False),
    ])  # fmt: skip
    return {
        "a11y_tree": tree,
        "phone_state": simple_state()["phone_state"],
        "device_context": {"screen_bounds": {"width": 1080, "height": 2400},
                           "display_metrics": {"widthPixels": 1080, "heightPixels": 2400, "density": 2.625}},
    }  # fmt: skip


def test_portal_bounds_notations() -> None:
    assert parse_bounds("40, 60, 900, 180") == Box(40, 60, 900, 180)
    assert parse_bounds({"left": 1, "top": 2, "right": 3, "bottom": 4}) == Box(1, 2, 3, 4)
    assert parse_bounds("1, 2, 3") is None and parse_bounds("a, b, c, d") is None
    assert parse_bounds({"left": 1, "top": 2}) is None


def test_simple_state_is_detected_and_parsed() -> None:
    screen = parse(json.dumps(simple_state()).encode())
    assert screen.format == "droidrun" and screen.foreground_package == PKG
    assert [o.android_class for o in screen.objects] == [
        "android.widget.FrameLayout", "android.widget.EditText", "android.widget.ImageButton",
    ]  # fmt: skip
    search = screen.objects[1]
    assert (search.bbox.left, search.bbox.top, search.bbox.right, search.bbox.bottom) == (40, 60, 900, 180)
    assert search.type == T.EDITTEXT and search.text == "Search notes" and search.resource_id.endswith("search")
    assert search.parent_index == 0 and search.android_package == PKG  # the package phone_state names
    assert (screen.width, screen.height) == (1080, 2160) and screen.size_estimated is False


def test_full_state_with_flags_and_device_size() -> None:
    screen = parse(json.dumps(full_state()).encode(), screen_size=None)
    assert (screen.width, screen.height) == (1080, 2400)  # device_context.screen_bounds
    root, save, title, hidden = screen.objects
    assert save.clickable and save.is_actionable and save.type == T.BUTTON and save.text == "Save"
    assert title.focused and title.text_hint == "Title" and title.type == T.EDITTEXT
    assert not hidden.visible
    dropped = parse(json.dumps(full_state()).encode(), drop_invisible=True)
    assert len(dropped.objects) == 3 and any("dropped 1 node" in w for w in dropped.warnings)


def test_malformed_states_are_errors_with_reasons() -> None:
    with pytest.raises(HierarchyError) as err:
        parse(b'{"a11y_tree": 5, "phone_state": {}}', fmt="droidrun")
    assert err.value.reason == "malformed"
    levels = MAX_DEPTH + 2  # written as text: json.dumps itself recurses
    node = '{"className": "android.view.View", "bounds": "0, 0, 10, 10", "children": ['
    deep = '{"a11y_tree": [' + node * levels + "]}" * levels + "]}"
    with pytest.raises(HierarchyError) as err:
        parse(deep.encode(), fmt="droidrun")
    assert err.value.reason == "too_deep"
    odd = parse(b'{"a11y_tree": [{"className": "x", "bounds": "nope", "children": [7]}]}', fmt="droidrun")
    assert any("2 node(s) or bounds" in w for w in odd.warnings)


def build_trajectory(folder: Path, actions: list, goal: str = "Add a note called groceries") -> None:
    (folder / "ui_states").mkdir(parents=True)
    (folder / "screenshots").mkdir()
    for i in range(3):
        state = simple_state() if i != 1 else full_state()
        (folder / "ui_states" / f"{i}.json").write_text(json.dumps(state, ensure_ascii=False, indent=2))
        (folder / "screenshots" / f"{i}.png").write_bytes(png(1080, 2400, (10, 40 * i, 90)))
    (folder / "trajectory.json").write_text("[]")
    (folder / "macro.json").write_text(json.dumps({
        "version": "1.0", "description": goal, "timestamp": "20250101_120000", "total_actions": len(actions),
        "actions": actions,
    }))  # fmt: skip


MACRO = [
    {"type": "TapActionEvent", "action_type": "tap", "description": "Tap the add button", "x": 960, "y": 2080,
     "element_index": 3, "element_text": "", "element_bounds": "880, 2000, 1040, 2160"},
    {"type": "InputTextActionEvent", "action_type": "input_text", "description": "Type the title",
     "text": "groceries"},
    {"type": "KeyPressActionEvent", "action_type": "key_press", "description": "Go back", "keycode": 4,
     "key_name": "BACK"},
]  # fmt: skip


def test_trajectory_folder_converts(tmp_path: Path) -> None:
    build_trajectory(tmp_path / "in" / "trajectories" / "20250101_120000_ab12cd34", MACRO)
    (source,) = [s for s in discover(str(tmp_path / "in")) if isinstance(s, EpisodeSource)]
    assert source.layout == "droidrun" and not any(p.endswith("trajectory.json") for p in source.files)
    summary = convert(tmp_path / "in", tmp_path / "out")
    assert summary["episodes_by_layout"] == {"droidrun": 1}
    (e,) = episodes(tmp_path / "out").values()
    assert e.goal == "Add a note called groceries" and e.app_package == PKG
    assert [s.hierarchy_format for s in e.step_info] == ["droidrun"] * 3
    tap, typed, back = e.actions
    objects = e.episode.time_steps[0].observation.objects
    assert (tap.type, tap.x, tap.y) == (Action.TAP, 960, 2080)
    assert objects[tap.target_index].resource_id == f"{PKG}:id/add"
    assert tap.instruction == "Tap the add button"
    assert (typed.type, typed.text) == (Action.TYPE_TEXT, "groceries")
    focused = e.episode.time_steps[1].observation.objects[typed.target_index]
    assert focused.android_class == "android.widget.EditText"  # the focused field of the full state
    assert back.type == Action.BACK
    sizes = {(t.observation.screen_width, t.observation.screen_height) for t in e.episode.time_steps}
    assert sizes == {(1080, 2400)}  # the simple state's extent (1080x2160) is the screenshot less a bar
    assert dead_letters(tmp_path / "out") == []


def test_a_screenshot_without_a_state_is_an_orphan_dead_letter(tmp_path: Path) -> None:
    folder = tmp_path / "in" / "run"
    build_trajectory(folder, MACRO)
    (folder / "screenshots" / "3.png").write_bytes(png(1080, 2400))
    convert(tmp_path / "in", tmp_path / "out")
    (e,) = episodes(tmp_path / "out").values()
    assert len(e.episode.time_steps) == 3
    (dead,) = dead_letters(tmp_path / "out")
    assert dead.reason == "orphan_screenshot" and dead.source_path.endswith("screenshots/3.png")


def test_bad_macro_actions_and_states_are_dead_letters(tmp_path: Path) -> None:
    folder = tmp_path / "in" / "run"
    build_trajectory(folder, [MACRO[0], {"type": "TeleportEvent"}, "tap", MACRO[2]])
    (folder / "ui_states" / "2.json").write_text('{"a11y_tree": [')  # cut short
    convert(tmp_path / "in", tmp_path / "out")
    (e,) = episodes(tmp_path / "out").values()
    assert [s.index for s in e.step_info] == [0, 1]
    assert [a.type for a in e.actions] == [Action.TAP, Action.ACTION_UNSPECIFIED]
    dead = sorted((d.reason, -1 if d.step is None else d.step) for d in dead_letters(tmp_path / "out"))
    assert dead == [("bad_action", -1), ("bad_action", 1), ("bad_action", 2), ("malformed", 2)]
    assert any("unknown action type 'TeleportEvent'" in d.exception for d in dead_letters(tmp_path / "out"))


def _fuzz_outcome(data: bytes) -> None:
    from tests.pipelines.test_fuzz_hierarchy import outcome

    for fmt in (None, "droidrun"):
        for drop in (False, True):
            outcome(data, fmt=fmt, drop_invisible=drop)


def test_truncated_and_flipped_states_parse_or_fail_with_a_reason() -> None:
    import random

    for state in (simple_state(), full_state()):
        data = json.dumps(state, ensure_ascii=False).encode()
        for cut in range(0, len(data), max(1, len(data) // 60)):
            _fuzz_outcome(data[:cut])
        rng = random.Random(25)
        for _ in range(150):
            flipped = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                flipped[rng.randrange(len(flipped))] = rng.randrange(256)
            _fuzz_outcome(bytes(flipped))


@pytest.mark.parametrize(
    "node",
    [
        {"className": 5, "text": ["x"], "bounds": [1, 2, 3, 4], "children": {"a": 1}},
        {"boundsInScreen": {"left": "1", "top": None, "right": 3, "bottom": 4}, "isClickable": "yes"},
        {"bounds": "1, 2, 3, 99999999999999999999", "isVisibleToUser": 0, "children": [None, 3, "x", []]},
        {"bounds": "1e400, 2, 3, 4", "packageName": {"p": 1}, "isEditable": "true"},
    ],
)
def test_wrong_typed_node_fields_are_treated_as_absent(node: dict) -> None:
    screen = parse(json.dumps({"a11y_tree": [node], "phone_state": ["not", "a", "dict"]}).encode())
    assert screen.format == "droidrun" and len(screen.objects) == 1
    screen.objects[0].SerializeToString()


@pytest.mark.parametrize("missing", [0, 1])
def test_macro_actions_follow_the_state_numbers_across_a_gap(tmp_path: Path, missing: int) -> None:
    """ui_states/<missing>.json was never saved (its screenshot was): macro action <missing> is that screen's,
    a dead letter naming it, and the others stay on their own screens (they used to shift one screen earlier,
    the last reported beyond the states)."""
    folder = tmp_path / "in" / "run"
    build_trajectory(folder, MACRO)
    (folder / "ui_states" / f"{missing}.json").unlink()
    convert(tmp_path / "in", tmp_path / "out")
    (e,) = episodes(tmp_path / "out").values()
    kept = [i for i in range(3) if i != missing]
    assert [s.index for s in e.step_info] == kept
    expected = {0: Action.TAP, 1: Action.TYPE_TEXT, 2: Action.BACK}
    assert [a.type for a in e.actions] == [expected[i] for i in kept]
    assert e.metadata["source_steps"] == "3" and e.metadata["dropped_steps"] == str(missing)
    gap = f"screen {missing} has no ui_states/{missing}.json"
    for info in e.step_info:
        assert any(gap in w for w in info.warnings) == (abs(info.index - missing) == 1)
    dead = sorted(dead_letters(tmp_path / "out"), key=lambda d: d.reason)
    assert [(d.reason, d.step) for d in dead] == [("bad_action", missing), ("orphan_screenshot", missing)]
    assert dead[0].source_path.endswith("macro.json")
    assert f"actions[{missing}] is the action on screen {missing}, which has no ui_states/{missing}.json" in (
        dead[0].exception
    )  # fmt: skip
    assert f"only its screenshot {folder / 'screenshots' / f'{missing}.png'}" in dead[0].exception


def test_a_long_gap_of_missing_screens_is_one_dead_letter(tmp_path: Path) -> None:
    """States 0, 1, 2 and 3000, nothing between, a macro action per screen: the 2997 actions on screens with no
    file at all are one dead letter (step = the first of them), not one each; action 3000 stays on state 3000."""
    folder = tmp_path / "in" / "run"
    build_trajectory(folder, MACRO + [{"type": "WaitEvent"}] * 2997 + [MACRO[2]])
    (folder / "ui_states" / "3000.json").write_text(json.dumps(simple_state()))
    (folder / "screenshots" / "3000.png").write_bytes(png(1080, 2400))
    convert(tmp_path / "in", tmp_path / "out")
    (e,) = episodes(tmp_path / "out").values()
    assert [s.index for s in e.step_info] == [0, 1, 2, 3000]
    assert [a.type for a in e.actions] == [Action.TAP, Action.TYPE_TEXT, Action.BACK, Action.BACK]
    assert e.metadata["source_steps"] == "3001"
    assert any("gap before this step: screen 2999 has no ui_states/2999.json" in w for w in e.step_info[3].warnings)
    (dead,) = dead_letters(tmp_path / "out")
    assert (dead.reason, dead.step) == ("bad_action", 3)
    assert "actions[3..2999] are the actions on screens 3-2999, which have no ui_states/N.json" in dead.exception

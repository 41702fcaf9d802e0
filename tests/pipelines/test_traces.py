"""Trace layouts: discovery and the four readers, on layouts built in tmp_path from the real fixtures.

The builders here are also used by the convert tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pipelines.traces import (
    DeadLetter,
    EpisodeSource,
    IgnoredFile,
    discover,
    files,
    plan,
    read_episode,
)
from pipelines.traces.discover import natural_key

FAASOS = ["33600", "33603", "33605", "33608", "33610", "33613", "33615"]  # one app's Rico screens


# ------------------------------------------------------------------------------------------------ builders


def link(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(src, dst)
    return dst


def build_rico_trace(dst: Path, fx: Path, ids: list[str], gestures: dict | str | None) -> Path:
    for sid in ids:
        link(fx / "rico" / f"{sid}.json", dst / "view_hierarchies" / f"{sid}.json")
        link(fx / "rico" / f"{sid}.jpg", dst / "screenshots" / f"{sid}.jpg")
    if gestures is not None:
        text = gestures if isinstance(gestures, str) else json.dumps(gestures)
        (dst / "gestures.json").write_text(text)
    return dst


YELP_STATES = ["2017-08-11_202351", "2017-08-11_202356", "2017-08-11_202407"]


def build_step_folder(
    dst: Path, fx: Path, actions: list[str] | None, states: list[str] = YELP_STATES
) -> Path:
    src = fx / "droidbot" / "yelp" / "states"
    for i, tag in enumerate(states):
        link(src / f"state_{tag}.json", dst / f"{i}.json")
        link(src / f"screen_{tag}.png", dst / f"{i}.png")
    if actions is not None:
        (dst / "actions.jsonl").write_text("".join(line + "\n" for line in actions))
    return dst


def build_droidbot(dst: Path, fx: Path, skip_events: tuple[str, ...] = ()) -> Path:
    src = fx / "droidbot" / "yelp"
    for sub in ("states", "events"):
        for f in sorted((src / sub).iterdir()):
            if f.name not in skip_events:
                link(f, dst / sub / f.name)
    return dst


# ------------------------------------------------------------------------------------------------ discovery


def sources_of(items) -> list[EpisodeSource]:
    return [i for i in items if isinstance(i, EpisodeSource)]


def test_discovers_the_fixture_folders(fixtures_dir: Path) -> None:
    items = list(discover(str(fixtures_dir)))
    sources = sources_of(items)
    by_layout = {}
    for s in sources:
        by_layout.setdefault(s.layout, []).append(s)
    assert len(by_layout["single_screen"]) == 41 + 10  # every Rico screen and every uiautomator dump
    assert [s.episode_id for s in by_layout["droidbot"]] == ["droidbot/yelp"]
    droidbot = by_layout["droidbot"][0]
    assert len([f for f in droidbot.files if "/events/" in f]) == 35
    assert len([f for f in droidbot.files if "/states/" in f]) == 32
    rico = {s.episode_id: s for s in by_layout["single_screen"] if s.episode_id.startswith("rico/")}
    assert [files.split(f)[1] for f in rico["rico/33600"].files] == ["33600.json", "33600.jpg"]
    ui = {s.episode_id: s for s in by_layout["single_screen"] if s.episode_id.startswith("uiautomator/")}
    assert all(len(s.files) == 1 for s in ui.values())  # dumps without screenshots
    ignored = [i.path for i in items if isinstance(i, IgnoredFile)]
    assert str(fixtures_dir / "README.md") in ignored
    assert str(fixtures_dir / "droidbot" / "yelp" / "logcat.txt") in ignored
    # Nothing listed twice, nothing unaccounted for.
    used = [f for s in sources for f in s.files]
    assert len(used) == len(set(used))
    assert sorted(used + ignored) == sorted(files.list_files(str(fixtures_dir)))


def test_layouts_side_by_side_and_nested(tmp_path: Path, fixtures_dir: Path) -> None:
    build_rico_trace(tmp_path / "apps" / "faasos" / "trace_0", fixtures_dir, FAASOS[:3], {})
    build_step_folder(tmp_path / "runs" / "yelp_steps", fixtures_dir, actions=None)  # numbered 0..2
    build_droidbot(tmp_path / "runs" / "droid", fixtures_dir)
    link(fixtures_dir / "rico" / "336.json", tmp_path / "screens" / "336.json")
    link(fixtures_dir / "rico" / "336.jpg", tmp_path / "screens" / "336.jpg")
    link(fixtures_dir / "rico" / "3360.jpg", tmp_path / "screens" / "3360.jpg")  # orphan
    link(fixtures_dir / "uiautomator" / "banjen_ui_hierarchy.xml", tmp_path / "banjen.xml")
    items = list(discover(str(tmp_path)))
    got = sorted((s.layout, s.episode_id) for s in sources_of(items))
    assert got == [
        ("droidbot", "runs/droid"),
        ("rico_trace", "apps/faasos/trace_0"),
        ("single_screen", "banjen"),
        ("single_screen", "screens/336"),
        ("step_folder", "runs/yelp_steps"),
    ]
    (orphan,) = [i for i in items if isinstance(i, DeadLetter)]
    assert orphan.reason == "orphan_screenshot" and orphan.source_path.endswith("screens/3360.jpg")


def test_input_that_is_a_rico_trace_or_one_file(tmp_path: Path, fixtures_dir: Path) -> None:
    trace = build_rico_trace(tmp_path / "trace", fixtures_dir, FAASOS[:2], {})
    (source,) = sources_of(discover(str(trace) + "/"))
    assert (source.layout, source.episode_id, source.source_path) == ("rico_trace", "trace", str(trace))
    (one,) = sources_of(discover(str(fixtures_dir / "rico" / "33600.json")))
    assert one.layout == "single_screen"
    assert [files.split(f)[1] for f in one.files] == ["33600.json", "33600.jpg"]


def test_step_folder_needs_actions_or_numbered_steps(tmp_path: Path) -> None:
    root = "/data"
    paths = [f"{root}/a/{n}" for n in ("1.xml", "1.png", "2.xml", "2.png", "3.xml")]  # numbered 1..3
    paths += [f"{root}/b/{n}" for n in ("home.xml", "home.png", "menu.xml", "actions.jsonl")]
    paths += [f"{root}/c/{n}" for n in ("12.xml", "40.xml")]  # ids, not step numbers
    paths += [f"{root}/d/step_{n:03d}.xml" for n in range(12)]  # prefixed, zero-padded step numbers
    paths += [f"{root}/e/{n}.xml" for n in ("home1", "menu2")]  # different prefixes
    got = sorted((s.layout, s.episode_id) for s in sources_of(plan(root, paths)))
    assert got == [
        ("single_screen", "c/12"),
        ("single_screen", "c/40"),
        ("single_screen", "e/home1"),
        ("single_screen", "e/menu2"),
        ("step_folder", "a"),
        ("step_folder", "b"),
        ("step_folder", "d"),
    ]


def test_natural_order() -> None:
    assert sorted(["10", "2", "1", "b2", "b10"], key=natural_key) == ["1", "2", "10", "b2", "b10"]


def test_missing_input_is_a_clear_error(tmp_path: Path) -> None:
    from pipelines.errors import StepmarkError

    with pytest.raises(StepmarkError, match="no such file or folder"):
        list(discover(str(tmp_path / "nope")))


# ------------------------------------------------------------------------------------------------ readers


def read(path: Path):
    (source,) = sources_of(discover(str(path)))
    return read_episode(source, files.read_bytes)


def test_rico_trace_steps_and_gestures(tmp_path: Path, fixtures_dir: Path) -> None:
    gestures = {"33600": [[0.5, 0.25]], "33603": [[0.5, 0.8], [0.5, 0.5], [0.5, 0.2]], "33605": []}
    ep = read(build_rico_trace(tmp_path / "t", fixtures_dir, ["33605", "33600", "33603"], gestures))
    assert [s.name for s in ep.steps] == ["33600", "33603", "33605"]  # numeric id order
    tap, swipe, none = (s.action for s in ep.steps)
    assert (tap.kind, tap.x, tap.y, tap.space) == ("tap", 0.5, 0.25, "normalized")
    assert (swipe.kind, swipe.x, swipe.y, swipe.end_x, swipe.end_y) == ("swipe", 0.5, 0.8, 0.5, 0.2)
    assert json.loads(swipe.raw_json) == gestures["33603"]  # every point kept
    assert none is None
    assert all(s.screenshot_path.endswith(f"{s.name}.jpg") for s in ep.steps)
    assert ep.dead_letters == [] and ep.num_source_steps == 3


def test_rico_trace_bad_gestures_are_dead_letters(tmp_path: Path, fixtures_dir: Path) -> None:
    gestures = {"33600": [[1.5, 0.2]], "33603": "tap", "99999": [[0.1, 0.1]], "33605": [[0.2, 0.3]]}
    ep = read(build_rico_trace(tmp_path / "t", fixtures_dir, ["33600", "33603", "33605"], gestures))
    dead = sorted((d.step, d.reason) for d in ep.dead_letters if d.step is not None)
    assert dead == [(0, "bad_action"), (1, "bad_action")]
    (unknown,) = [d for d in ep.dead_letters if d.step is None]
    assert "99999" in unknown.exception and unknown.source_path.endswith("gestures.json")
    assert [s.action is None for s in ep.steps] == [True, True, False]  # steps kept, without the bad actions

    broken = read(build_rico_trace(tmp_path / "u", fixtures_dir, ["33600"], "{not json"))
    assert [d.reason for d in broken.dead_letters] == ["bad_gestures"]
    assert len(broken.steps) == 1


def test_step_folder_actions(tmp_path: Path, fixtures_dir: Path) -> None:
    lines = [
        '{"step": 0, "action": "tap", "x": 1296, "y": 2294, "space": "hierarchy"}',
        '{"step": 2, "action": "type", "text": "pizza"}',
    ]
    ep = read(build_step_folder(tmp_path / "s", fixtures_dir, lines))
    assert [s.name for s in ep.steps] == ["0", "1", "2"]
    assert ep.steps[0].action.kind == "tap" and ep.steps[0].action.space == "hierarchy"
    assert ep.steps[1].action is None
    assert (ep.steps[2].action.kind, ep.steps[2].action.text) == ("type", "pizza")
    assert ep.dead_letters == []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"step": 0, "action": "tap", "x": 5}', "'y' is a required property"),
        ('{"step": 0, "action": "fly"}', "is not one of"),
        ('{"step": 0, "action": "back", "colour": "red"}', "Additional properties"),
        ('{"step": 7, "action": "back"}', "no step 7"),
        (
            '{"step": 0, "action": "tap", "x": 1.5, "y": 0.5, "space": "normalized"}',
            "greater than the maximum",
        ),
    ],
)
def test_step_folder_bad_action_lines(tmp_path: Path, fixtures_dir: Path, line: str, message: str) -> None:
    ep = read(build_step_folder(tmp_path / "s", fixtures_dir, ['{"step": 1, "action": "back"}', line]))
    (dead,) = ep.dead_letters
    assert dead.reason == "bad_action"
    assert dead.source_path.endswith("actions.jsonl")
    assert "actions.jsonl line 2:" in dead.exception and message in dead.exception
    assert ep.steps[1].action.kind == "back"  # the good line still applies
    assert len(ep.steps) == 3


def test_step_folder_duplicate_action(tmp_path: Path, fixtures_dir: Path) -> None:
    lines = ['{"step": 1, "action": "back"}', '{"step": "1", "action": "home"}']
    ep = read(build_step_folder(tmp_path / "s", fixtures_dir, lines))
    (dead,) = ep.dead_letters
    assert dead.step == 1 and "already has an action (line 1)" in dead.exception
    assert ep.steps[1].action.kind == "back"


def test_step_folder_manifest(tmp_path: Path, fixtures_dir: Path) -> None:
    folder = build_step_folder(tmp_path / "s", fixtures_dir, None)
    (folder / "episode.json").write_text(json.dumps({"goal": "open bookmarks", "metadata": {"device": "N5"}}))
    ep = read(folder)
    assert (ep.goal, ep.metadata) == ("open bookmarks", {"device": "N5"})
    (folder / "episode.json").write_text(json.dumps({"goal": 3}))
    ep = read(folder)
    assert [d.reason for d in ep.dead_letters] == ["bad_manifest"] and ep.goal == ""


def test_single_screen_without_screenshot(fixtures_dir: Path) -> None:
    ep = read(fixtures_dir / "uiautomator" / "keydroidx_ui_menu.xml")
    (step,) = ep.steps
    assert step.screenshot_path is None and step.action is None
    assert any("no screenshot" in w for w in step.warnings)


def test_droidbot_sequence_and_missing_states(fixtures_dir: Path) -> None:
    ep = read(fixtures_dir / "droidbot" / "yelp")
    assert ep.num_source_steps == 35
    missing = [(d.step, d.reason) for d in ep.dead_letters]
    assert missing == [(0, "missing_state"), (1, "missing_state"), (5, "missing_state")]
    assert sorted([s.index for s in ep.steps] + [d.step for d in ep.dead_letters]) == list(range(35))
    first = ep.steps[0]  # event 202329 starts in state 36b4f247..., saved as state_2017-08-11_202329
    assert first.name == "2017-08-11_202329"
    assert first.hierarchy_path.endswith("states/state_2017-08-11_202329.json")
    assert first.screenshot_path.endswith("states/screen_2017-08-11_202329.png")
    a = first.action
    assert (a.kind, a.x, a.y, a.space) == ("tap", 1062.0, 2244.5, "hierarchy")  # centre of the touched view
    assert a.target_bounds == (737, 2150, 1387, 2339) and a.target_class == "android.widget.Button"
    # Event 202436 starts in state 7690400f..., first seen (and saved) later, at tag 202441.
    by_name = {s.name: s for s in ep.steps}
    assert by_name["2017-08-11_202436"].hierarchy_path.endswith("state_2017-08-11_202441.json")


def test_droidbot_bad_event_file(tmp_path: Path, fixtures_dir: Path) -> None:
    run = build_droidbot(tmp_path / "run", fixtures_dir, skip_events=("event_2017-08-11_202334.json",))
    (run / "events" / "event_2017-08-11_202334.json").write_text('{"tag": "x"}')
    ep = read(run)
    bad = [d for d in ep.dead_letters if d.reason == "bad_event"]
    assert len(bad) == 1 and bad[0].step == 3 and "'event' is a required property" in bad[0].exception
    assert len(ep.steps) == 35 - 3 - 1


def test_droidbot_event_mapping() -> None:
    from pipelines.traces.droidbot import event_action

    view = {"bounds": [[0, 100], [200, 300]], "class": "android.widget.EditText", "resource_id": "a:id/q"}
    typed = event_action({"event_type": "set_text", "view": view, "text": "hi"}, "{}")
    assert (typed.kind, typed.text, typed.x, typed.y) == ("type", "hi", 100.0, 200.0)
    scroll = event_action({"event_type": "scroll", "view": view, "direction": "up"}, "{}")
    assert (scroll.kind, scroll.direction, scroll.target_bounds) == ("swipe", "UP", (0, 100, 200, 300))
    long = event_action({"event_type": "long_touch", "x": 10, "y": 20}, "{}")
    assert (long.kind, long.x, long.y, long.duration_ms) == ("long_press", 10.0, 20.0, 2000)
    assert event_action({"event_type": "key", "name": "BACK"}, "{}").kind == "back"
    menu = event_action({"event_type": "key", "name": "MENU"}, "{}")
    assert (menu.kind, menu.text) == ("other", "MENU")
    assert event_action({"event_type": "intent", "intent": "am start x"}, '{"i": 1}').raw_json == '{"i": 1}'


def test_episode_ids_are_unique() -> None:
    paths = ["/d/a/b.xml", "/d/a/b/actions.jsonl", "/d/a/b/0.xml"]
    ids = sorted(s.episode_id for s in sources_of(plan("/d", paths)))
    assert ids == ["a/b", "a/b~2"]


def test_every_layout_is_named_where_the_spec_lists_the_source_values() -> None:
    """`UiEpisode.source` (the exported `source` field) takes every name of LAYOUTS: the prose spec's row and the
    JSON schema's description list them all (they listed six, then nine, of the eleven)."""
    import re

    from pipelines.traces.model import LAYOUTS
    from tests.conftest import REPO_ROOT

    prose = (REPO_ROOT / "schemas" / "dataset_spec.md").read_text()
    (row,) = [line for line in prose.splitlines() if line.startswith("| `app_package`, `goal`, `source` |")]
    listed = row.split("the trace layout (", 1)[1].split(")", 1)[0]
    assert set(re.findall(r"`(\w+)`", listed)) == set(LAYOUTS)
    schema = json.loads((REPO_ROOT / "schemas" / "dataset_spec.schema.json").read_text())
    described = schema["$defs"]["episode_metadata_properties"]["source"]["description"]
    assert set(re.findall(r"\w+", described.split("(", 1)[1].split(")", 1)[0])) == set(LAYOUTS)

"""Screenshot-first layouts (issue 25): Android-in-the-Zoo, GUI-Odyssey and AndroidControl as JSON, each found
with no flag, converted by `stepmark convert-ui`, with their step texts in named fields and their malformed
files as dead letters naming the file."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from pipelines import ui_records
from pipelines.convert import run
from pipelines.hierarchy import Box, grid_location
from pipelines.step_text import step_texts
from pipelines.traces import EpisodeSource, discover
from protos.llm4mobile import episode_pb2
from protos.stepmark import ui_episode_pb2
from tests.pipelines.record_writers import forest_from_dump
from tests.pipelines.screenshot_first import (
    AITZ_ID,
    AITZ_SIZE,
    GOAL,
    ODYSSEY_ID,
    aitz_steps,
    android_control_json,
    build_aitz,
    build_gui_odyssey,
    odyssey_annotation,
    screenshot,
)

Action = ui_episode_pb2.Action
T = episode_pb2.ObjectType


def _convert(inp: Path, out: Path) -> tuple[dict[str, ui_episode_pb2.UiEpisode], list]:
    assert run([str(inp), str(out), "--quiet"]) == 0
    episodes = {e.episode_id: e for e in ui_records.iter_episodes(str(out))}
    return episodes, list(ui_records.read_dead_letters(str(out)))


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path):
    """One input folder holding every screenshot-first layout, good and malformed, side by side."""
    tmp = tmp_path_factory.mktemp("screenshot_first")
    inp = tmp / "in"
    build_aitz(inp / "aitz")
    # AitZ, malformed: one step without its screenshot, one with unusable boxes, one with an unusable action.
    steps = aitz_steps()
    steps[1]["image_path"] = "google_apps/elsewhere/nothing_9.png"
    steps[2]["ui_positions"] = "[[1, 2, 3"
    steps[3]["result_action_type"] = "ten"
    bad = build_aitz(inp / "aitz_bad", steps, name="GENERAL-1")
    (bad / "GENERAL-1_1.png").unlink()
    broken = build_aitz(inp / "aitz_broken", name="INSTALL-2")
    (broken / "INSTALL-2.json").write_text('[{"step_id": 0,')  # cut short
    # GUI-Odyssey: a good episode, one with an unknown action and a missing screenshot, one not an object.
    odd = odyssey_annotation("2222")
    odd["steps"][1]["action"] = "DOUBLE_TAP"
    annotations = {ODYSSEY_ID: odyssey_annotation(), "2222": odd, "3333": odyssey_annotation("3333")}
    root = build_gui_odyssey(inp / "odyssey", annotations)
    (root / "screenshots" / "2222_3.png").unlink()
    (root / "annotations" / "3333.json").write_text('["not", "an", "episode"]')
    # AndroidControl JSON: without trees, with trees (a real dump as a forest), and one broken screenshot.
    (inp / "control").mkdir()
    (inp / "control" / "no_trees.json").write_text(json.dumps(android_control_json()))
    xml = (fixtures_dir / "uiautomator" / "fractal-forge_ui_controls.xml").read_bytes()
    forest = forest_from_dump(xml).SerializeToString()
    with_trees = android_control_json([forest] * 3, n=3, size=(540, 1200))
    with_trees["actions"][0] = json.dumps(
        with_trees["actions"][0]
    )  # actions as JSON strings, as in the release
    (inp / "control" / "trees.json").write_text(json.dumps(with_trees))
    damaged = android_control_json(n=3)
    damaged["screenshots"][1] = "not base64 !!"
    (inp / "control" / "damaged.json").write_text(json.dumps(damaged))
    out = tmp / "out"
    episodes, dead = _convert(inp, out)
    return inp, out, episodes, dead


def test_each_layout_is_found_with_no_flag(converted) -> None:
    inp, _, _, _ = converted
    sources = {s.episode_id: s.layout for s in discover(str(inp)) if isinstance(s, EpisodeSource)}
    assert sources[f"aitz/{AITZ_ID}"] == "aitz"
    assert sources["aitz_bad/GENERAL-1"] == "aitz"
    assert sources[f"odyssey/{ODYSSEY_ID}"] == "gui_odyssey"
    assert sources["odyssey/2222"] == "gui_odyssey"
    # AndroidControl JSON is named like any `.json` screen: it is told apart by its bytes when read.
    assert sources["control/no_trees"] == "single_screen"
    summary = ui_records.read_summary(str(converted[1]))
    assert summary["episodes_by_layout"] == {"aitz": 2, "gui_odyssey": 2, "android_control_json": 3}
    assert summary["ignored_files"] == 1  # GUI-Odyssey's splits/random_split.json


def test_aitz_steps_objects_actions_and_texts(converted) -> None:
    episode = converted[2][f"aitz/{AITZ_ID}"]
    assert episode.source == "aitz" and episode.goal == GOAL
    assert len(episode.episode.time_steps) == 4
    # Detector boxes: [y, x, h, w] pixels -> objects with their text and type, marked by the hierarchy format.
    first = episode.episode.time_steps[0].observation
    assert (first.screen_width, first.screen_height) == AITZ_SIZE
    assert [o.text for o in first.objects] == ["M", "Set", "up email", "", ""]
    google = first.objects[3]
    assert (google.name, google.type) == ("ICON_GOOGLE", T.IMAGEVIEW)
    assert (google.bbox.left, google.bbox.top, google.bbox.right, google.bbox.bottom) == (15, 120, 25, 140)
    for o in first.objects:  # grid locations as for every other object
        b = o.bbox
        assert o.grid_location == grid_location(Box(b.left, b.top, b.right, b.bottom), *AITZ_SIZE)
    assert first.objects[4].grid_location == episode_pb2.BOTTOM_RIGHT
    assert {i.hierarchy_format for i in episode.step_info} == {"aitw_annotations"}
    # Actions: AITW's codes; normalised (y, x) points into screenshot pixels; taps resolve to detector boxes.
    a = episode.actions
    assert [Action.Type.Name(x.type) for x in a] == ["HOME", "SWIPE", "TAP", "TASK_COMPLETE"]
    assert (a[1].x, a[1].y, a[1].end_x, a[1].end_y) == (137, 325, 156, 1)
    assert (a[2].x, a[2].y) == (round(0.6069772839546204 * 270), round(0.49836206436157227 * 600))
    clock = episode.episode.time_steps[2].observation.objects[a[2].target_index]
    assert clock.name == "ICON_TIME" and a[2].target_rule
    # Chain-of-action-thought texts land in named fields; the one reader returns them.
    texts = step_texts(episode, 2)
    assert (
        texts["action_description"]
        == "click on the Clock app located at the upper middle right side of the screen."
    )
    assert texts["screen_description"] == "A grid of applications under All apps."
    assert texts["action_thought"].startswith("The Clock app is displayed")
    assert texts["action_result"] == "By doing so, the Clock app has been successfully opened."
    assert texts["instruction"] == ""


def test_gui_odyssey_is_screenshot_only_with_instructions(converted) -> None:
    episode = converted[2][f"odyssey/{ODYSSEY_ID}"]
    assert episode.source == "gui_odyssey"
    assert episode.goal.startswith("Utilize DuckDuckgo to find the dates")
    assert json.loads(episode.metadata["device_info"])["w"] == 1080
    steps = episode.episode.time_steps
    assert len(steps) == 6
    assert all(not s.observation.objects and not s.observation.json and not s.observation.xml for s in steps)
    assert {i.hierarchy_format for i in episode.step_info} == {"none"}
    assert (steps[0].observation.screen_width, steps[0].observation.screen_height) == (270, 600)
    a = episode.actions
    assert [Action.Type.Name(x.type) for x in a] == [
        "TAP",
        "TYPE_TEXT",
        "SWIPE",
        "LONG_PRESS",
        "HOME",
        "TASK_COMPLETE",
    ]
    # 0..1000 coordinates: fractions of the screen, here a 270x600 screenshot of a 1080x2400 device.
    assert (a[0].x, a[0].y) == (135, 72)
    assert (a[2].x, a[2].y, a[2].end_x, a[2].end_y) == (135, 480, 135, 120)
    assert not a[0].HasField("target_index")  # an action point with no object
    assert a[1].text == "New York Fashion Week"
    assert [step_texts(episode, i)["instruction"] for i in range(3)] == [
        "Open the DuckDuckGo app.", "Type the event to search for.", "Scroll to the dates."]  # fmt: skip
    assert step_texts(episode, 0)["screen_description"] == "The home screen with app icons."
    assert step_texts(episode, 0)["action_thought"] == "I open DuckDuckGo to search for the event."
    assert a[5].text == "the reminder is set" and a[5].instruction == ""  # COMPLETE's ps: the annotator's note
    assert json.loads(a[2].raw_json)["ps"] == "[(500, 800), (500, 500), (500, 200)]"  # kept, not an instruction
    assert all(i.screenshot_path.endswith(f"{ODYSSEY_ID}_{n}.png") for n, i in enumerate(episode.step_info))
    # The screenshots are a quarter of the device's size: said on every step, points placed on the screenshot.
    assert all("screenshot is 270x600 but device_info says 1080x2400" in " ".join(i.warnings) for i in episode.step_info)


def test_android_control_json_with_and_without_trees(converted) -> None:
    plain = converted[2]["control/no_trees"]
    assert plain.source == "android_control_json" and plain.goal == "Search for Zürich in the weather app"
    assert {i.hierarchy_format for i in plain.step_info} == {"none"}
    assert [Action.Type.Name(a.type) for a in plain.actions] == [
        "TAP",
        "SWIPE",
        "TYPE_TEXT",
        "ACTION_UNSPECIFIED",
    ]
    assert (plain.actions[0].x, plain.actions[0].y) == (135, 300)
    assert (plain.actions[1].y, plain.actions[1].end_y) == (
        1080,
        120,
    )  # scroll down: 9/10 to 1/10 of the height
    assert [step_texts(plain, i)["instruction"] for i in range(3)] == [
        "tap the search field", "scroll down to the list", "type Zürich"]  # fmt: skip
    trees = converted[2]["control/trees"]
    assert {i.hierarchy_format for i in trees.step_info} == {"a11y_forest"}
    obs = trees.episode.time_steps[0].observation
    assert obs.objects and (obs.screen_width, obs.screen_height) == (540, 1200)
    assert trees.actions[0].HasField("target_index")  # the tap resolves to a forest object


def test_malformed_files_are_dead_letters_naming_the_file(converted) -> None:
    _, _, episodes, dead = converted
    found = {(d.episode_id, d.step, d.reason) for d in dead}
    assert ("aitz_bad/GENERAL-1", 1, "missing_screenshot") in found
    assert ("aitz_bad/GENERAL-1", 2, "bad_step") in found
    assert ("aitz_bad/GENERAL-1", 3, "bad_action") in found
    assert ("aitz_broken/INSTALL-2", None, "bad_episode_file") in found
    assert ("aitz_broken/INSTALL-2", None, "no_steps") in found
    assert ("odyssey/2222", 1, "bad_action") in found
    assert ("odyssey/2222", 3, "missing_screenshot") in found
    assert ("odyssey/3333", None, "bad_episode_file") in found
    assert ("control/damaged", 1, "bad_screenshot") in found
    for d in dead:
        assert d.exception.startswith(d.source_path.split("#")[0]) or d.source_path in d.exception, d
    bad = episodes["aitz_bad/GENERAL-1"]
    assert [i.index for i in bad.step_info] == [0, 3]  # step 3 kept without its action
    assert bad.actions[1].type == Action.ACTION_UNSPECIFIED
    assert bad.metadata["dropped_steps"] == "1,2"
    assert [i.index for i in episodes["odyssey/2222"].step_info] == [0, 1, 2, 4, 5]
    assert [i.index for i in episodes["control/damaged"].step_info] == [0, 2]


def test_aitz_steps_with_shared_or_missing_step_ids_keep_their_own_boxes(tmp_path: Path) -> None:
    """Two steps with step_id 0, and a step without step_id at file index 3 beside one whose step_id is 3: each
    step keeps its own detector boxes and its own name (they were keyed by step_id, so the later step's boxes
    replaced the earlier one's and both steps showed them), with warnings naming the ids."""
    steps = aitz_steps()
    steps[1]["step_id"] = 0
    steps[2]["step_id"] = 3
    del steps[3]["step_id"]
    build_aitz(tmp_path / "in", steps)
    episodes, dead = _convert(tmp_path / "in", tmp_path / "out")
    assert dead == []
    episode = episodes[AITZ_ID]
    assert [len(t.observation.objects) for t in episode.episode.time_steps] == [5, 4, 3, 2]
    texts = [[o.text for o in t.observation.objects if o.text] for t in episode.episode.time_steps]
    assert texts == [["M", "Set", "up email"], ["Man, Aug 8", "M", "Fhotca"], ["Cleck", "File Mener"],
                     ["larm", "Clock"]]  # fmt: skip
    image_ids = [t.observation.image_id for t in episode.episode.time_steps]
    assert len(set(image_ids)) == 4 and image_ids[3] == f"{AITZ_ID}/step_3"
    assert [i.index for i in episode.step_info] == [0, 1, 2, 3]
    assert "step_id 0 is given to 2 steps: placed in file order" in episode.step_info[1].warnings
    assert "no integer step_id: placed by its file position 3 (also another step's step_id)" in (
        episode.step_info[3].warnings
    )  # fmt: skip
    assert "step_id given to several steps: 0 (2 steps)" in episode.metadata["warnings"]
    assert "1 step(s) without an integer step_id, placed by file position" in episode.metadata["warnings"]


def test_gui_odyssey_reader_keeps_no_screenshot_bytes(tmp_path: Path) -> None:
    """The reader reads the annotation only: each screenshot is read by the converter when it converts the step
    (the reader used to read every screenshot of the episode into `blobs`, all held at once, to check its size).
    The size check is kept: a screenshot of another size than device_info's is still a step warning, one of the
    device's size none, and a screenshot that is no image is still the converter's bad_screenshot."""
    from pipelines.traces import files as trace_files
    from pipelines.traces import read_episode
    from pipelines.ui_episode import convert_episode

    root = build_gui_odyssey(tmp_path / "in")
    (root / "screenshots" / f"{ODYSSEY_ID}_2.png").write_bytes(screenshot((1080, 2400), 9))  # the device's size
    (root / "screenshots" / f"{ODYSSEY_ID}_4.png").write_bytes(b"not an image")
    (source,) = [s for s in discover(str(root)) if isinstance(s, EpisodeSource)]
    read: list[str] = []

    def reader(path: str) -> bytes:
        read.append(path)
        return trace_files.read_bytes(path)

    raw = read_episode(source, reader)
    assert read == [source.source_path] and raw.blobs == {}
    result = convert_episode(raw, reader)
    assert sorted(read[1:]) == sorted(s.screenshot_path for s in raw.steps)  # each screenshot read once
    mismatch = "screenshot is 270x600 but device_info says 1080x2400: points (0..1000) placed as fractions"
    warned = {i.index: any(w.startswith(mismatch) for w in i.warnings) for i in result.episode.step_info}
    assert warned == {0: True, 1: True, 2: False, 3: True, 5: True}
    (dead,) = result.dead_letters
    assert (dead.step, dead.reason) == (4, "bad_screenshot") and dead.source_path.endswith(f"{ODYSSEY_ID}_4.png")


def test_a_rico_screen_holding_the_key_names_as_values_stays_a_screen(tmp_path: Path, fixtures_dir: Path) -> None:
    """A real Rico screen whose texts are "screenshots" and "actions" has both words in its bytes, so the cheap
    byte test sends it to the AndroidControl JSON reader; the keys are not at its top level, so it is read as
    the single screen it is (it used to become an empty android_control_json episode: no_steps, the screen
    lost). A JSON list holding the words (DroidBot's bare views) falls back the same way."""
    import shutil

    doc = json.loads((fixtures_dir / "rico" / "336.json").read_text())

    def nodes(node):
        yield node
        for child in node.get("children") or []:
            if child:
                yield from nodes(child)

    texts = [n for n in nodes(doc["activity"]["root"]) if n.get("text")]
    texts[0]["text"], texts[1]["text"] = "screenshots", "actions"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "336.json").write_text(json.dumps(doc))
    shutil.copy(fixtures_dir / "rico" / "336.jpg", tmp_path / "in" / "336.jpg")
    state = json.loads((fixtures_dir / "droidbot" / "yelp" / "states" / "state_2017-08-11_202329.json").read_text())
    views = state["views"]
    views[0]["text"], views[1]["content_description"] = "screenshots", "actions"
    (tmp_path / "in" / "views.json").write_text(json.dumps(views))
    episodes, dead = _convert(tmp_path / "in", tmp_path / "out")
    assert dead == []
    screen = episodes["336"]
    assert screen.source == "single_screen" and len(screen.episode.time_steps) == 1
    assert {"screenshots", "actions"} <= {o.text for o in screen.episode.time_steps[0].observation.objects}
    assert screen.step_info[0].screenshot_path.endswith("336.jpg")
    assert episodes["views"].source == "single_screen"
    assert len(episodes["views"].episode.time_steps[0].observation.objects) == len(views)


def test_base64_data_urls_and_bounded_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.traces import android_control_json as reader

    big = android_control_json(n=2)
    smallest = min(len(base64.b64decode(shot)) for shot in big["screenshots"])
    monkeypatch.setattr(reader, "MAX_SCREENSHOT_BYTES", smallest - 1)
    doc = android_control_json(n=2, size=(60, 80))
    doc["screenshots"][0] = "data:image/png;base64," + doc["screenshots"][0]
    too_many = {"screenshots": [base64.b64encode(b"x").decode()] * 100_001, "actions": []}
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "url.json").write_text(json.dumps(doc))
    (tmp_path / "in" / "huge.json").write_text(json.dumps(too_many))
    (tmp_path / "in" / "big.json").write_text(json.dumps(big))
    episodes, dead = _convert(tmp_path / "in", tmp_path / "out")
    assert len(episodes["url"].episode.time_steps) == 2
    # A screenshot beyond the limit is refused from the length of its base64 text, before decoding.
    assert {(d.step, d.reason) for d in dead if d.episode_id == "big"} >= {(0, "too_large"), (1, "too_large")}
    (letter,) = [d for d in dead if d.episode_id == "huge" and d.step is None and d.reason != "no_steps"]
    assert letter.reason == "bad_episode_file" and "at most 100000" in letter.exception


# Values of the wrong type or out of range, put into every field of a good step in turn.
ODD_VALUES = [None, True, -1, 1e308, "", "x", "[[1, 2]]", "[", [], {}, [[1, 2, 3, 4]], [None] * 4, "\ud800", "A" * 5000]
KNOWN = {"bad_episode_file", "bad_step", "bad_action", "missing_screenshot", "bad_screenshot", "malformed",
         "no_steps", "unreadable"}  # fmt: skip


def _every_step_accounted(source, tmp: Path) -> tuple[ui_episode_pb2.UiEpisode | None, set[str]]:
    """Read and convert in process: nothing raises, every reason is known, every step is converted or dead."""
    from pipelines.traces import files as trace_files
    from pipelines.traces import read_episode
    from pipelines.ui_episode import convert_episode

    raw = read_episode(source, trace_files.read_bytes)
    result = convert_episode(raw, trace_files.read_bytes)
    reasons = {d.reason for d in result.dead_letters}
    assert reasons <= KNOWN, reasons
    kept = {i.index for i in result.episode.step_info} if result.episode else set()
    dead = {d.step for d in result.dead_letters if d.step is not None and d.reason != "bad_action"}
    assert kept | dead == set(range(raw.num_source_steps)), (kept, dead)
    for d in result.dead_letters:
        assert d.exception.startswith(str(tmp)) or d.source_path in d.exception, d
    return result.episode, reasons


@pytest.mark.parametrize("layout", ["aitz", "gui_odyssey", "android_control_json"])
def test_odd_values_in_every_field_are_dead_letters_or_warnings_never_a_crash(tmp_path: Path, layout: str) -> None:
    n = 0
    if layout == "aitz":
        keys = list(aitz_steps()[0])
    elif layout == "gui_odyssey":
        keys = ["step", "screenshot", "action", "info", "ps", "low_level_instruction", "description", "intention"]
    else:
        keys = ["screenshots", "actions", "step_instructions", "accessibility_trees", "goal", "screenshot_widths"]
    for key in keys:
        for value in ODD_VALUES:
            n += 1
            inp = tmp_path / f"case{n}"
            if layout == "aitz":
                steps = aitz_steps()
                steps[1][key] = value
                build_aitz(inp, steps)
            elif layout == "gui_odyssey":
                doc = odyssey_annotation()
                doc["steps"][1][key] = value
                build_gui_odyssey(inp, {ODYSSEY_ID: doc})
            else:
                doc = android_control_json(n=2)
                doc[key] = value
                inp.mkdir()
                (inp / "ep_4242.json").write_text(json.dumps(doc))
            (source,) = [s for s in discover(str(inp)) if isinstance(s, EpisodeSource)]
            _every_step_accounted(source, tmp_path)
    # Whole files of the wrong shape.
    for i, text in enumerate(['{"steps": 3}', "[1, 2]", "null", "\xff\xfe", '{"screenshots": [], "actions": []}']):
        inp = tmp_path / f"file{i}"
        if layout == "aitz":
            folder = build_aitz(inp)
            (folder / f"{AITZ_ID}.json").write_text(text, errors="surrogateescape")
        elif layout == "gui_odyssey":
            build_gui_odyssey(inp)
            (inp / "annotations" / f"{ODYSSEY_ID}.json").write_text(text, errors="surrogateescape")
        else:
            inp.mkdir()
            (inp / "ep_4242.json").write_text(text + ' "screenshots" "actions"', errors="surrogateescape")
        (source,) = [s for s in discover(str(inp)) if isinstance(s, EpisodeSource)]
        _every_step_accounted(source, tmp_path)


def test_numbered_json_episode_files_alone_in_a_folder_are_a_step_folder_and_say_why(tmp_path: Path) -> None:
    """Detection looks at names only (schemas/layouts.md (j)): `ep_0.json`, `ep_1.json` are a step folder; each
    file is then an `unknown_format` dead letter naming the file and its keys, never lost silently."""
    (tmp_path / "in").mkdir()
    for n in range(2):
        (tmp_path / "in" / f"ep_{n}.json").write_text(json.dumps(android_control_json(n=2)))
    episodes, dead = _convert(tmp_path / "in", tmp_path / "out")
    assert not episodes
    letters = sorted((d.step, d.reason) for d in dead if d.step is not None)
    assert letters == [(0, "unknown_format"), (1, "unknown_format")]
    assert all("screenshots" in d.exception and "ep_" in d.exception for d in dead if d.step is not None)


def test_inspect_shows_a_steps_texts(converted, capsys) -> None:
    from stepmark.cli import main

    _, out, _, _ = converted
    assert main(["inspect", str(out), "--episode", f"aitz/{AITZ_ID}", "--step", "2"]) == 0
    text = capsys.readouterr().out
    assert "      action_description: click on the Clock app located at the upper middle right side" in text
    assert "      screen_description: A grid of applications under All apps." in text
    assert main(["inspect", str(out), "--episode", f"odyssey/{ODYSSEY_ID}", "--step", "0"]) == 0
    assert "      instruction: Open the DuckDuckGo app." in capsys.readouterr().out

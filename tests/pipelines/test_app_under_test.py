"""Which app an episode tested (`app_package`: utg.js, else the foreground package of most steps, not the
package with most objects) and DroidBot states whose size is turned sideways while some boxes overflow the
screen, on copies of the real DroidBot Yelp run (fixtures/droidbot/yelp)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipelines.hierarchy import parse
from pipelines.traces import RawStep, discover, read_episode
from pipelines.traces.droidbot import utg_app_package
from pipelines.ui_episode import MISMATCH, app_under_test, convert_episode, foreground_package, observe
from protos.stepmark import ui_episode_pb2
from tests.pipelines.test_convert import convert, dead_letters, episodes

PICKER = "com.google.android.documentsui"
PICKER_STATES = ("state_2017-08-11_202356.json", "state_2017-08-11_202351.json")  # 10 of the run's 32 steps


@pytest.fixture()
def yelp_run(fixtures_dir: Path, tmp_path: Path) -> Path:
    """The Yelp run's states and events (not its view crops), copied so the test may change them."""
    run = tmp_path / "in" / "yelp"
    for sub in ("states", "events"):
        shutil.copytree(fixtures_dir / "droidbot" / "yelp" / sub, run / sub)
    return run


def make_picker(run: Path) -> None:
    """Two states become a system file picker listing 3,000 rows each: the picker then owns most objects of
    the run, while the app under test is in the foreground on most steps."""
    for name in PICKER_STATES:
        path = run / "states" / name
        state = json.loads(path.read_text())
        state["foreground_activity"] = f"{PICKER}/.picker.PickActivity"
        first = max(v["temp_id"] for v in state["views"]) + 1
        root = state["views"][0]
        for i in range(3000):
            top = 300 + (i % 20) * 100
            state["views"].append({
                "temp_id": first + i, "parent": root["temp_id"], "children": [], "class": "android.widget.TextView",
                "package": PICKER, "text": f"file_{i}.pdf", "bounds": [[0, top], [1440, top + 100]],
                "visible": True, "enabled": True,
            })  # fmt: skip
            root.setdefault("children", []).append(first + i)
        path.write_text(json.dumps(state))


def test_utg_js_names_the_app() -> None:
    text = 'var utg = \n{\n  "num_nodes": 20,\n  "app_package": "com.example.chatter",\n  "app_main_activity": "x"\n};'
    assert utg_app_package(text) == "com.example.chatter"
    assert utg_app_package('var utg = {"nodes": []}') == ""
    with pytest.raises(ValueError):
        utg_app_package("console.log(1)")


def test_most_steps_not_most_objects(yelp_run: Path, tmp_path: Path) -> None:
    make_picker(yelp_run)
    (source,) = [s for s in discover(str(yelp_run.parent)) if hasattr(s, "layout")]
    raw = read_episode(source, lambda p: Path(p).read_bytes())
    result = convert_episode(raw, lambda p: Path(p).read_bytes())
    e = result.episode
    objects: dict[str, int] = {}
    for t in e.episode.time_steps:
        for o in t.observation.objects:
            objects[o.android_package] = objects.get(o.android_package, 0) + 1
    assert max(objects, key=objects.get) == PICKER  # what the old rule picked
    assert e.app_package == "com.yelp.android"


def test_utg_js_wins_and_a_broken_one_is_a_dead_letter(yelp_run: Path, tmp_path: Path) -> None:
    (yelp_run / "utg.js").write_text('var utg = \n{"app_package": "com.yelp.android.debug", "nodes": []};')
    convert(yelp_run.parent, tmp_path / "out")
    (e,) = episodes(tmp_path / "out").values()
    assert e.app_package == "com.yelp.android.debug"
    (yelp_run / "utg.js").write_text("var utg = {broken")
    convert(yelp_run.parent, tmp_path / "out2")
    (e,) = episodes(tmp_path / "out2").values()
    assert e.app_package == "com.yelp.android"  # the foreground package of most steps
    bad = [d for d in dead_letters(tmp_path / "out2") if d.reason == "bad_manifest"]
    assert len(bad) == 1 and bad[0].source_path.endswith("utg.js") and "utg.js" in bad[0].exception


def test_app_under_test_rule() -> None:
    assert app_under_test(["a.app", "android", "b.picker", "a.app", "b.picker", "com.android.systemui"]) == "a.app"
    assert app_under_test(["com.android.systemui", "android", "com.android.systemui"]) == "com.android.systemui"
    assert app_under_test(["", ""]) == ""


def test_sideways_size_with_boxes_scrolled_off_screen(fixtures_dir: Path) -> None:
    """A state that reports its size landscape (2560x1440) beside a portrait 1440x2560 screenshot, holding a
    WebView whose content runs far below the screen (as Firefox custom tabs do): the screenshot's orientation
    is used, and the boxes beyond the screen are counted, not a reason to keep the swapped size."""
    states = fixtures_dir / "droidbot" / "yelp" / "states"
    state = json.loads((states / "state_2017-08-11_202417.json").read_text())
    shot = (states / "screen_2017-08-11_202417.png").read_bytes()
    state["width"], state["height"] = 2560, 1440
    first = max(v["temp_id"] for v in state["views"]) + 1
    root = state["views"][0]
    for i in range(40):  # web content down to y = 32,250
        top = 2400 + i * 750
        state["views"].append({
            "temp_id": first + i, "parent": root["temp_id"], "children": [], "class": "android.view.View",
            "package": "org.mozilla.firefox", "text": f"paragraph {i}", "bounds": [[0, top], [1440, top + 750]],
            "visible": True,
        })  # fmt: skip
        root.setdefault("children", []).append(first + i)
    data = json.dumps(state).encode()
    assert (parse(data).width, parse(data).height) == (2560, 1440)
    obs = observe(data, shot)
    assert (obs.width, obs.height) == (1440, 2560) and not obs.mismatch
    assert not any(w.startswith(MISMATCH) for w in obs.warnings)
    (note,) = [w for w in obs.warnings if "turned sideways" in w]
    assert "box(es) lie outside it" in note
    bottoms = [o.bbox.bottom for o in obs.screen.objects]
    assert max(bottoms) == 32_400  # boxes unchanged


def test_step_foreground_package_sources(fixtures_dir: Path) -> None:
    """Per step: the trace's note, else the dump's, else the active application window (forests), else the
    package with most objects, system packages last."""
    state = (fixtures_dir / "droidbot" / "yelp" / "states" / "state_2017-08-11_202329.json").read_bytes()
    screen = parse(state)
    step = RawStep(0, "0", "s.json", None)
    assert foreground_package(step, screen) == "com.yelp.android"  # foreground_activity
    noted = RawStep(0, "0", "s.json", None, foreground_package="com.example.noted")
    assert foreground_package(noted, screen) == "com.example.noted"
    screen.foreground_package = ""
    for o in screen.objects[:3]:
        o.android_package = "com.android.systemui"
    assert foreground_package(step, screen) == "com.yelp.android"  # most objects
    n = len(screen.objects)
    for o in screen.objects[n // 2 :]:
        o.android_package = "com.google.android.inputmethod.latin"
    screen.windows = [
        ui_episode_pb2.WindowInfo(type="APPLICATION", active=False, layer=1, first_object=n // 2, num_objects=n - n // 2),
        ui_episode_pb2.WindowInfo(type="APPLICATION", active=True, layer=0, first_object=0, num_objects=n // 2),
    ]
    screen.objects[0].android_package = "com.yelp.android"
    assert foreground_package(step, screen) == "com.yelp.android"  # the active application window

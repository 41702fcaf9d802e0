"""UiEpisode assembly: fitting hierarchies to screenshots, action mapping and target resolution, dead letters,
on real fixture screens."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from pipelines.hierarchy import HierarchyError, object_at, parse, rescale
from pipelines.traces import EpisodeSource, RawAction, RawEpisode, RawStep, files
from pipelines.ui_episode import (
    MISMATCH,
    aspect_matches,
    convert_episode,
    observe,
    resolve_action,
)
from protos.stepmark import ui_episode_pb2

Action = ui_episode_pb2.Action


def png(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def rico(fixtures_dir: Path) -> tuple[bytes, bytes]:
    return (fixtures_dir / "rico" / "33603.json").read_bytes(), (
        fixtures_dir / "rico" / "33603.jpg"
    ).read_bytes()


@pytest.fixture(scope="module")
def yelp(fixtures_dir: Path) -> tuple[bytes, bytes]:
    states = fixtures_dir / "droidbot" / "yelp" / "states"
    return (states / "state_2017-08-11_202329.json").read_bytes(), (
        states / "screen_2017-08-11_202329.png"
    ).read_bytes()


def test_rico_boxes_are_rescaled_to_the_screenshot(rico) -> None:
    hierarchy, shot = rico
    obs = observe(hierarchy, shot)
    assert (obs.hierarchy_width, obs.hierarchy_height) == (1440, 2560)
    assert (obs.width, obs.height) == (540, 960) and not obs.mismatch
    assert obs.screen.scale == (0.375, 0.375)
    assert obs.image.format == "jpeg"
    expected = rescale(parse(hierarchy), 540, 960).objects
    assert [o.SerializeToString() for o in obs.screen.objects] == [o.SerializeToString() for o in expected]
    assert any("rescaled from 1440x2560 to 540x960" in w for w in obs.warnings)


def test_screenshot_of_another_shape_is_reported_not_used(rico) -> None:
    hierarchy, _ = rico
    obs = observe(hierarchy, png(500, 500))
    assert obs.mismatch
    assert (obs.width, obs.height) == (1440, 2560)  # boxes stay in hierarchy coordinates
    assert [o.bbox for o in obs.screen.objects] == [o.bbox for o in parse(hierarchy).objects]
    (warning,) = [w for w in obs.warnings if w.startswith(MISMATCH)]
    assert "500x500" in warning and "1440x2560" in warning
    assert obs.screenshot is not None  # kept


def test_aspect_tolerance() -> None:
    assert aspect_matches(540, 960, 1440, 2560)
    assert aspect_matches(1080, 1794, 540, 897)
    assert not aspect_matches(1080, 2340, 1080, 2400)  # 2.5% taller: a bar missing from one of them


def test_jpeg_named_png_is_trusted_by_bytes(yelp) -> None:
    hierarchy, shot = yelp
    obs = observe(hierarchy, shot)
    assert obs.image.format == "jpeg" and (obs.width, obs.height) == (1440, 2560)
    assert obs.screen.scale == (1.0, 1.0)


def test_truncated_screenshots_are_rejected(rico) -> None:
    hierarchy, shot = rico
    with pytest.raises(HierarchyError) as err:
        observe(hierarchy, shot[: len(shot) // 2])
    assert err.value.reason == "bad_screenshot" and "truncated JPEG" in str(err.value)
    with pytest.raises(HierarchyError) as err:
        observe(hierarchy, png(540, 960)[:-20])
    assert err.value.reason == "bad_screenshot"


def test_trailers_after_the_end_marker_are_not_truncation(rico) -> None:
    hierarchy, shot = rico
    for trailer in (b"\x00" * 700, b"SEFH" + bytes(range(256)) * 4 + b"SEFT"):
        assert observe(hierarchy, shot + trailer).image.format == "jpeg"
        assert observe(hierarchy, png(540, 960) + trailer).image.format == "png"
    with pytest.raises(HierarchyError, match="truncated JPEG"):
        observe(hierarchy, shot[:-2] + b"\x00" * 10)


def test_no_screenshot_uses_the_hierarchy_size(fixtures_dir: Path) -> None:
    obs = observe((fixtures_dir / "uiautomator" / "keydroidx_ui_menu.xml").read_bytes(), None)
    assert (obs.width, obs.height) == (240, 320) and obs.image is None
    assert any(w.startswith("no screenshot") for w in obs.warnings)


def test_normalized_tap_resolves_to_the_button_under_it(rico) -> None:
    hierarchy, shot = rico
    obs = observe(hierarchy, shot)
    sign_in = next(o for o in obs.screen.objects if o.text == "SIGN IN")
    # The button's centre in Rico's 1440x2560 space, as a Rico gesture records it (fractions of the screen).
    raw = RawAction("tap", x=720 / 1440, y=1763 / 2560, space="normalized", raw_json="[[0.5, 0.6887]]")
    action, warnings = resolve_action(raw, obs)
    assert (action.type, action.x, action.y) == (Action.TAP, 270, 661)
    assert action.target_index == sign_in.index and action.target_id == sign_in.id
    assert action.raw_json == "[[0.5, 0.6887]]" and warnings == []


def test_droidbot_recorded_target_is_matched(yelp) -> None:
    obs = observe(*yelp)
    raw = RawAction(
        "tap", x=1062.0, y=2244.5, space="hierarchy", target_bounds=(737, 2150, 1387, 2339),
        target_class="android.widget.Button", target_resource_id="com.yelp.android:id/accept_button",
    )  # fmt: skip
    action, warnings = resolve_action(raw, obs)
    target = obs.screen.objects[action.target_index]
    assert (target.resource_id, target.text) == ("com.yelp.android:id/accept_button", "Yes, turn it on")
    assert warnings == []
    # A recorded view that is not on this screen falls back to the object under the point, with a warning.
    stale = RawAction("tap", x=1062.0, y=2244.5, space="hierarchy", target_bounds=(1, 2, 3, 4))
    action2, warnings2 = resolve_action(stale, obs)
    assert action2.target_index == object_at(obs.screen.objects, 1062, 2244) == action.target_index
    assert any("not found" in w for w in warnings2)


def test_hierarchy_points_are_scaled_with_the_boxes(rico) -> None:
    obs = observe(*rico)
    action, _ = resolve_action(
        RawAction("long_press", x=720, y=1763, space="hierarchy", duration_ms=900), obs
    )
    assert (action.type, action.x, action.y, action.duration_ms) == (Action.LONG_PRESS, 270, 661, 900)


def test_scroll_becomes_a_swipe_through_the_view(yelp) -> None:
    obs = observe(*yelp)
    raw = RawAction("swipe", space="hierarchy", direction="UP", target_bounds=(0, 100, 200, 300))
    action, _ = resolve_action(raw, obs)
    assert (action.type, action.x, action.y, action.end_x, action.end_y) == (Action.SWIPE, 100, 120, 100, 280)
    assert action.target_index == object_at(obs.screen.objects, 100, 120)


def test_typing_without_a_point_targets_the_focused_object(fixtures_dir: Path) -> None:
    obs = observe((fixtures_dir / "uiautomator" / "avc_mocks_UIAUTOMATOR_DUMP.xml").read_bytes(), None)
    action, _ = resolve_action(RawAction("type", text="hello"), obs)
    assert (action.type, action.text, action.target_index) == (Action.TYPE_TEXT, "hello", 4)
    assert obs.screen.objects[4].focused


def test_keys_have_no_target_and_no_action_is_unspecified(yelp) -> None:
    obs = observe(*yelp)
    back, _ = resolve_action(RawAction("back", text="BACK"), obs)
    assert back.type == Action.BACK and not back.HasField("target_index")
    none, _ = resolve_action(None, obs)
    assert none.type == Action.ACTION_UNSPECIFIED


def _episode(steps: list[RawStep], layout: str = "step_folder") -> RawEpisode:
    source = EpisodeSource(layout, "ep", "/x", ())
    return RawEpisode(source=source, steps=steps, num_source_steps=len(steps))


def test_failing_step_is_a_dead_letter_and_the_episode_keeps_the_rest(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    good = fixtures_dir / "rico" / "33603"
    empty = tmp_path / "empty.xml"
    empty.write_bytes(b"")
    failed = tmp_path / "failed.xml"
    failed.write_bytes(b"ERROR: null root node returned by UiTestAutomationBridge.\n")
    bad_jpg = tmp_path / "bad.jpg"
    bad_jpg.write_bytes((fixtures_dir / "rico" / "33600.jpg").read_bytes()[:5000])
    steps = [
        RawStep(0, "0", f"{good}.json", f"{good}.jpg", RawAction("back")),
        RawStep(1, "1", str(empty), None),
        RawStep(2, "2", str(failed), None),
        RawStep(3, "3", str(fixtures_dir / "rico" / "33600.json"), str(bad_jpg)),
        RawStep(4, "4", str(tmp_path / "missing.xml"), None),
        RawStep(5, "5", f"{good}.json", f"{good}.jpg", RawAction("home")),
    ]
    result = convert_episode(_episode(steps), files.read_bytes)
    reasons = {(d.step, d.reason, Path(d.source_path).name) for d in result.dead_letters}
    assert reasons == {
        (1, "empty", "empty.xml"),
        (2, "failed_dump", "failed.xml"),
        (3, "bad_screenshot", "bad.jpg"),
        (4, "unreadable", "missing.xml"),
    }
    e = result.episode
    assert [i.index for i in e.step_info] == [0, 5]
    assert [t.index for t in e.episode.time_steps] == [0, 1]
    assert [a.type for a in e.actions] == [Action.BACK, Action.HOME]
    assert e.metadata["dropped_steps"] == "1,2,3,4" and e.metadata["source_steps"] == "6"
    assert result.num_objects == 2 * len(parse(Path(f"{good}.json").read_bytes()).objects)


def test_episode_with_no_good_step_is_one_dead_letter(tmp_path: Path) -> None:
    empty = tmp_path / "0.xml"
    empty.write_bytes(b"  \n")
    result = convert_episode(_episode([RawStep(0, "0", str(empty), None)]), files.read_bytes)
    assert result.episode is None
    assert [(d.step, d.reason) for d in result.dead_letters] == [(0, "empty"), (None, "no_steps")]


def test_assembled_droidbot_episode(fixtures_dir: Path) -> None:
    from pipelines.traces import discover, read_episode

    (source,) = [s for s in discover(str(fixtures_dir / "droidbot" / "yelp")) if isinstance(s, EpisodeSource)]
    reads: Counter[str] = Counter()

    def counting_read(path: str) -> bytes:
        reads[path] += 1
        return files.read_bytes(path)

    raw = read_episode(source, counting_read)
    result = convert_episode(raw, counting_read)
    e = result.episode
    assert len(e.episode.time_steps) == len(e.actions) == len(e.step_info) == 32
    assert e.app_package == "com.yelp.android" and e.source == "droidbot"
    assert e.metadata["dropped_steps"] == "0,1,5"
    # A state shown by several steps is read and parsed once.
    assert max(reads.values()) <= 2  # state JSON: once for its state_str, once to parse
    ts = e.episode.time_steps[0]
    assert ts.observation.json and not ts.observation.xml
    assert ts.observation.screenshot[:3] == b"\xff\xd8\xff"
    assert e.step_info[0].screenshot_format == "jpeg" and e.step_info[0].hierarchy_format == "droidbot"
    expected = sum(len(parse(files.read_bytes(s.hierarchy_path)).objects) for s in raw.steps)
    assert result.num_objects == expected


def test_estimated_hierarchy_size_gives_way_to_the_screenshot(fixtures_dir: Path) -> None:
    # A DroidBot state holding only a dialog: the parser can only estimate the screen (1404x1441) from the
    # window bounds; the 1440x2560 screenshot is the real screen, and the boxes are already in its pixels.
    states = fixtures_dir / "droidbot" / "yelp" / "states"
    hierarchy = (states / "state_2017-08-11_202345.json").read_bytes()
    parsed = parse(hierarchy)
    assert parsed.size_estimated and (parsed.width, parsed.height) == (1404, 1441)
    obs = observe(hierarchy, (states / "screen_2017-08-11_202345.png").read_bytes())
    assert (obs.width, obs.height) == (1440, 2560) and not obs.mismatch
    assert [o.bbox for o in obs.screen.objects] == [o.bbox for o in parsed.objects]
    assert any("was estimated" in w for w in obs.warnings)
    from pipelines.hierarchy import Box, grid_location

    for o in obs.screen.objects:
        b = o.bbox
        assert o.grid_location == grid_location(Box(b.left, b.top, b.right, b.bottom), 1440, 2560)

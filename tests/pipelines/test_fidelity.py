"""Four fidelity fixes, each on a real input of its class: `[`-prefixed log lines before a uiautomator dump,
a DroidBot state whose width/height are the screenshot's turned sideways, grid cells from the source
coordinates (not the rounded rescaled box), and sliders (SeekBar and subclasses) as actionable objects."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from PIL import Image

from pipelines.hierarchy import Box, grid_location, parse
from pipelines.ui_episode import observe
from protos.llm4mobile import episode_pb2

T = episode_pb2.ObjectType
G = episode_pb2.GridLocation
DUMPS = sorted(
    p.name for p in (Path(__file__).resolve().parents[3] / "shared/fixtures/uiautomator").glob("*.xml")
)
RICO = sorted(p.stem for p in (Path(__file__).resolve().parents[3] / "shared/fixtures/rico").glob("*.json"))


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (40, 90, 160)).save(out, format="PNG")
    return out.getvalue()


@pytest.mark.parametrize("name", DUMPS)
@pytest.mark.parametrize(
    "log", [b"[INFO] dumping window hierarchy\n", b"[2024-05-01 10:00:00] adb: uiautomator dump\r\n"]
)
def test_dump_after_a_bracketed_log_line_is_repaired(fixtures_dir: Path, name: str, log: bytes) -> None:
    xml = (fixtures_dir / "uiautomator" / name).read_bytes()
    repaired = parse(log + xml)
    assert repaired.format == "uiautomator"
    assert repaired.objects == parse(xml).objects
    assert any("ignored text before the XML" in w and "[" in w for w in repaired.warnings)


def test_json_arrays_are_still_json(fixtures_dir: Path) -> None:
    from pipelines.hierarchy import HierarchyError, detect_format

    assert detect_format(b'[{"views": []}]') == "json"
    with pytest.raises(HierarchyError) as err:
        parse(b'[{"views": []}]')
    assert err.value.reason == "unknown_format"


def _yelp_state(fixtures_dir: Path) -> tuple[dict, bytes]:
    states = fixtures_dir / "droidbot" / "yelp" / "states"
    state = sorted(states.glob("state_*.json"))[1]
    shot = states / state.name.replace("state_", "screen_").replace(".json", ".png")
    return json.loads(state.read_text()), shot.read_bytes()


def test_droidbot_state_with_swapped_size_takes_the_screenshot_orientation(fixtures_dir: Path) -> None:
    doc, shot = _yelp_state(fixtures_dir)  # a 1440x2560 portrait screenshot
    right = observe(json.dumps({**doc, "width": 1440, "height": 2560}).encode(), shot)
    swapped = observe(json.dumps({**doc, "width": 2560, "height": 1440}).encode(), shot)
    assert (swapped.width, swapped.height) == (1440, 2560) and not swapped.mismatch
    assert [(o.grid_location, o.is_actionable) for o in swapped.screen.objects] == [
        (o.grid_location, o.is_actionable) for o in right.screen.objects
    ]
    lower = [o for o in swapped.screen.objects if o.bbox.top >= 1440 and o.visible and o.clickable]
    assert lower and all(o.grid_location != G.UNKNOWN_LOCATION for o in lower)  # were all UNKNOWN
    assert any("turned sideways" in w for w in swapped.warnings)


def test_grid_of_a_rescaled_box_comes_from_the_source_coordinates(fixtures_dir: Path) -> None:
    """A centre half a pixel left of the first third line (1080 wide: x = 360) stays in the left column when
    the boxes are halved, although the rounded box (0..360 of 540) would put its centre on the line."""
    xml = (fixtures_dir / "uiautomator" / "avc_mocks_UIAUTOMATOR_DUMP_API27.xml").read_text()
    first_leaf = re.search(r'<node [^>]*bounds="(\[[^"]*)"\s*/>', xml)
    xml = xml[: first_leaf.start(1)] + "[0,100][719,200]" + xml[first_leaf.end(1) :]
    observed = observe(xml.encode(), _png(540, 897))  # 1080x1794 halved
    leaf = next(o for o in observed.screen.objects if o.bbox.top == 50 and o.bbox.bottom == 100)
    assert (leaf.bbox.left, leaf.bbox.right) == (0, 360)  # rounded half away from zero
    assert leaf.grid_location == G.TOP_LEFT


@pytest.mark.parametrize("screen", RICO)
def test_rico_grids_are_exact_after_rescaling(fixtures_dir: Path, screen: str) -> None:
    source = parse((fixtures_dir / "rico" / f"{screen}.json").read_bytes())
    observed = observe(
        (fixtures_dir / "rico" / f"{screen}.json").read_bytes(),
        (fixtures_dir / "rico" / f"{screen}.jpg").read_bytes(),
    )
    for src, out in zip(source.objects, observed.screen.objects, strict=True):
        b = src.bbox
        assert out.grid_location == grid_location(Box(b.left, b.top, b.right, b.bottom), 1440, 2560)


def test_focusable_seekbar_is_actionable(fixtures_dir: Path) -> None:
    """Rico 33695: an enabled, visible, focusable android.widget.SeekBar that is not clickable."""
    screen = parse((fixtures_dir / "rico" / "33695.json").read_bytes())
    bar = next(o for o in screen.objects if o.android_class == "android.widget.SeekBar")
    assert not bar.clickable and bar.focusable and bar.enabled and bar.visible
    assert bar.is_actionable


@pytest.mark.parametrize("screen", RICO)
def test_slider_rule_on_every_rico_screen(fixtures_dir: Path, screen: str) -> None:
    objects = parse((fixtures_dir / "rico" / f"{screen}.json").read_bytes()).objects
    for o in objects:
        slider = (o.type == T.SEEKBAR or T.SEEKBAR in o.multi_types) and o.focusable
        if slider and o.visible and o.enabled and o.grid_location != G.UNKNOWN_LOCATION:
            assert o.is_actionable, (screen, o.index)

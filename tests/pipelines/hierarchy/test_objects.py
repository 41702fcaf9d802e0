"""Class -> type mapping, bounds notations, grid cells, rescaling and hit testing."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from PIL import Image

from pipelines.hierarchy import (
    Box,
    HierarchyError,
    grid_location,
    image_info,
    object_at,
    parse,
    parse_bounds,
    rescale,
)
from pipelines.hierarchy.classes import classify, multi_types, object_type
from pipelines.hierarchy.objects import object_id
from protos.llm4mobile import episode_pb2
from tests.conftest import FIXTURES

T = episode_pb2.ObjectType
G = episode_pb2.GridLocation


# --- types -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("android_class", "ancestors", "expected"),
    [
        # 1. exact known classes (including AppCompat / AndroidX / Material twins)
        ("android.widget.AutoCompleteTextView", (), T.EDITTEXT),
        ("androidx.appcompat.widget.AppCompatButton", (), T.BUTTON),
        ("android.support.v7.widget.AppCompatImageView", (), T.IMAGEVIEW),
        ("com.google.android.material.floatingactionbutton.FloatingActionButton", (), T.IMAGEBUTTON),
        ("androidx.recyclerview.widget.RecyclerView", (), T.VIEW),
        # 2. android.widget/view/webkit.X
        ("android.widget.SeekBar", (), T.SEEKBAR),
        ("android.widget.MultiAutoCompleteTextView", (), T.MULTIAUTOCOMPLETETEXTVIEW),
        ("android.view.View", (), T.VIEW),
        ("android.webkit.WebView", (), T.WEBVIEW),
        ("android.widget.HorizontalScrollView", (), T.HORIZONTALSCROLLVIEW),
        # 3. Rico ancestors win over the name
        ("android.support.v7.widget.al", ("android.widget.TextView", "android.view.View"), T.TEXTVIEW),
        ("com.x.FancyButton", ("android.view.ViewGroup", "android.view.View"), T.VIEW),
        ("com.android.internal.policy.PhoneWindow$DecorView", ("android.widget.FrameLayout",), T.FRAMELAYOUT),
        # 4. suffix of the simple name
        ("com.x.widgets.AppCompatButton", (), T.BUTTON),
        ("com.x.SearchEditText", (), T.EDITTEXT),
        ("com.x.MyImageButton", (), T.IMAGEBUTTON),
        ("android.widget.ActionMenuPresenter$OverflowMenuButton", (), T.BUTTON),
        ("com.x.PagerView", (), T.VIEW),
        # nothing
        ("com.x.Thing", (), T.UNKNOWN_TYPE),
        ("", (), T.UNKNOWN_TYPE),
        ("android.widget.Space", (), T.UNKNOWN_TYPE),
    ],
)
def test_object_type_rules(android_class: str, ancestors: tuple[str, ...], expected: int):
    assert object_type(android_class, ancestors) == expected


def test_multi_types_follow_the_ancestry():
    assert multi_types("android.widget.CheckBox") == (T.CHECKBOX, T.BUTTON, T.TEXTVIEW, T.VIEW)
    assert multi_types("android.widget.SeekBar") == (T.SEEKBAR, T.PROGRESSBAR, T.VIEW)
    rico_chain = (
        "android.widget.ImageButton",
        "android.widget.ImageView",
        "android.view.View",
        "java.lang.Object",
    )
    assert classify("com.x.Fab", rico_chain) == (T.IMAGEBUTTON, (T.IMAGEBUTTON, T.IMAGEVIEW, T.VIEW))
    assert multi_types("com.x.Thing") == ()


def test_every_object_type_has_a_class_that_maps_to_it():
    names = {
        "APPWIDGETHOSTVIEW": "android.appwidget.AppWidgetHostView",
        "WEBVIEW": "android.webkit.WebView",
        "VIEW": "android.view.View",
    }
    for name, number in T.items():
        if number == T.UNKNOWN_TYPE:
            continue
        android_class = names.get(name) or next(
            f"android.widget.{s}" for s in _FRAMEWORK_SIMPLE_NAMES if s.upper() == name
        )
        assert object_type(android_class) == number, android_class


_FRAMEWORK_SIMPLE_NAMES = [
    "Button", "CheckBox", "CheckedTextView", "EditText", "ImageButton", "ImageView", "RadioButton", "SlidingDrawer",
    "Spinner", "Switch", "TabWidget", "TextView", "ToggleButton", "VideoView", "FrameLayout", "HorizontalScrollView",
    "LinearLayout", "ListView", "MultiAutoCompleteTextView", "ProgressBar", "RelativeLayout", "ScrollView", "TabHost",
    "ViewSwitcher", "SeekBar",
]  # fmt: skip


# --- bounds ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("[0,0][1080,1920]", Box(0, 0, 1080, 1920)),
        ("[-5,-10][0,0]", Box(-5, -10, 0, 0)),
        ("[ 1 , 2 ][ 3 , 4 ]", Box(1, 2, 3, 4)),
        ("[1.4,2.6][3,4]", Box(1, 3, 3, 4)),
        ([[36, 1035], [1404, 1441]], Box(36, 1035, 1404, 1441)),
        ([0, 280, 1440, 2224], Box(0, 280, 1440, 2224)),
        ([0, 2002, -55, 2170], Box(0, 2002, -55, 2170)),
        ("[1,2][3]", None),
        ("", None),
        ([1, 2, 3], None),
        ([[1, 2], [3]], None),
        ([True, 0, 1, 1], None),
        ([float("nan"), 0, 1, 1], None),
        (None, None),
    ],
)
def test_parse_bounds(value, expected):
    assert parse_bounds(value) == expected


def test_box_helpers():
    box = Box(10, 20, 30, 60)
    assert (box.width, box.height, box.valid) == (20, 40, True)
    assert box.contains(10, 20) and not box.contains(30, 59)
    assert not Box(5, 5, 5, 9).valid and not Box(5, 9, 6, 5).valid


# --- grid --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("box", "expected"),
    [
        (Box(0, 0, 10, 10), G.TOP_LEFT),
        (Box(300, 0, 400, 10), G.TOP_CENTER),  # centre x 350 of 900: second column
        (Box(890, 0, 900, 10), G.TOP_RIGHT),
        (Box(0, 450, 10, 460), G.LEFT),
        (Box(0, 0, 900, 900), G.CENTER),
        (Box(600, 300, 900, 600), G.RIGHT),
        (Box(0, 890, 10, 900), G.BOTTOM_LEFT),
        (Box(400, 600, 500, 900), G.BOTTOM_CENTER),
        (Box(599, 599, 601, 601), G.BOTTOM_RIGHT),  # centre exactly on the 600 line: lower-right cell
        (Box(598, 598, 600, 600), G.CENTER),
        (Box(-100, -100, 300, 300), G.TOP_LEFT),  # partly off-screen, centre (100, 100) on screen
        (Box(-100, -100, 50, 50), G.UNKNOWN_LOCATION),  # centre (-25, -25) off-screen
        (Box(850, 850, 950, 950), G.UNKNOWN_LOCATION),  # centre (900, 900) is on the far edge: off-screen
        (Box(10, 10, 5, 20), G.UNKNOWN_LOCATION),
        (Box(10, 10, 10, 20), G.UNKNOWN_LOCATION),
        (None, G.UNKNOWN_LOCATION),
    ],
)
def test_grid_location_on_a_900_square(box, expected):
    assert grid_location(box, 900, 900) == expected


def test_grid_location_unknown_screen():
    assert grid_location(Box(0, 0, 10, 10), 0, 0) == G.UNKNOWN_LOCATION


# --- ids, rescale, hit test --------------------------------------------------------------------------------


def test_object_id_reference_matches_the_parser():
    screen = parse((FIXTURES / "uiautomator" / "avc_mocks_UIAUTOMATOR_DUMP.xml").read_bytes())
    root, child = screen.objects[0], screen.objects[1]
    assert root.id == object_id("", 0, root.android_class, Box(0, 0, 480, 800))
    assert child.id == object_id(root.id, 0, child.android_class, Box(0, 0, 480, 800))
    assert root.id != child.id


def test_rescale_rounds_half_away_from_zero():
    data = (
        b'<hierarchy rotation="0"><node class="android.widget.FrameLayout" bounds="[0,0][1440,2560]">'
        b'<node class="android.widget.Button" clickable="true" bounds="[-3,1][721,1281]"/></node></hierarchy>'
    )
    screen = parse(data)
    assert screen.objects[1].grid_location == G.TOP_LEFT  # centre (359, 641)
    half = rescale(screen, 720, 1280)
    box = half.objects[1].bbox
    assert (box.left, box.top, box.right, box.bottom) == (
        -2,
        1,
        361,
        641,
    )  # -1.5 -> -2, 0.5 -> 1, 360.5 -> 361
    assert half.objects[1].grid_location == G.TOP_LEFT
    assert half.scale == (0.5, 0.5) and half.warnings[-1] == "boxes rescaled from 1440x2560 to 720x1280"
    twice = rescale(half, 360, 640)
    assert twice.scale == (0.25, 0.25)
    same = rescale(screen, 1440, 2560)
    assert [o.SerializeToString() for o in same.objects] == [o.SerializeToString() for o in screen.objects]
    with pytest.raises(ValueError):
        rescale(screen, 0, 10)


def test_rescaled_real_screens_keep_ids_and_take_grids_from_the_source():
    """Grid cells come from the source boxes exactly, not from the rounded rescaled boxes (issue 10)."""
    for path in sorted((FIXTURES / "rico").glob("*.json")):
        screen = parse(path.read_bytes())
        image = image_info(path.with_suffix(".jpg").read_bytes())
        scaled = rescale(screen, image.width, image.height)
        assert scaled.scale == (image.width / 1440, image.height / 2560)
        for before, after in zip(screen.objects, scaled.objects, strict=True):
            assert after.id == before.id and after.type == before.type
            box = Box(before.bbox.left, before.bbox.top, before.bbox.right, before.bbox.bottom)
            assert after.grid_location == grid_location(box, 1440, 2560)


def test_object_at_picks_the_deepest_visible_object():
    data = (
        b'<hierarchy rotation="0"><node class="android.widget.FrameLayout" bounds="[0,0][100,100]">'
        b'<node class="android.widget.LinearLayout" bounds="[0,0][100,50]">'
        b'<node class="android.widget.Button" bounds="[10,10][40,40]"/>'
        b'<node class="android.widget.Button" visible-to-user="false" bounds="[10,10][40,40]"/>'
        b"</node>"
        b'<node class="android.widget.TextView" bounds="[0,50][100,100]"/>'
        b'<node class="android.widget.ImageView" bounds="[0,50][100,100]"/>'
        b"</node></hierarchy>"
    )
    objects = parse(data).objects
    assert object_at(objects, 20, 20) == 2  # the visible button, not the invisible one on top of it
    assert object_at(objects, 60, 20) == 1
    assert object_at(objects, 40, 40) == 1  # right/bottom edges are exclusive
    assert object_at(objects, 50, 75) == 5  # equal depth: the later (drawn on top) wins
    assert object_at(objects, 100, 100) is None
    assert object_at([], 1, 1) is None


# --- screenshots -------------------------------------------------------------------------------------------


def _image_bytes(fmt: str, size: tuple[int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(buffer, format=fmt)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("fmt", "name"), [("PNG", "png"), ("JPEG", "jpeg"), ("WEBP", "webp"), ("GIF", "gif")]
)
def test_image_info_of_generated_images(fmt: str, name: str):
    info = image_info(_image_bytes(fmt, (37, 81)))
    assert (info.format, info.width, info.height) == (name, 37, 81)


def test_image_info_of_real_screenshots():
    droidbot_png = FIXTURES / "droidbot" / "yelp" / "states" / "screen_2017-08-11_202329.png"
    info = image_info(droidbot_png.read_bytes())
    assert (info.format, info.width, info.height) == ("jpeg", 1440, 2560)  # JPEG data in a .png file
    infos = [image_info(p.read_bytes()) for p in sorted((FIXTURES / "rico").glob("*.jpg"))]
    assert {i.format for i in infos} == {"jpeg"}
    sizes = {(i.width, i.height) for i in infos}
    assert sizes == {(540, 960), (1080, 1920)}


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not an image at all",
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 10,
        b"\xff\xd8\xff" + b"\x00" * 5,
        b"GIF89a",
        b"RIFF\x00\x00\x00\x00WEBPVP8 ",
    ],
)
def test_image_info_rejects_bad_bytes(data: bytes):
    with pytest.raises(HierarchyError) as info:
        image_info(data)
    assert info.value.reason == "bad_screenshot"


def _png_header(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    )


def test_image_info_reads_only_the_header():
    info = image_info(_png_header(1080, 2400))  # no pixel data at all: the size still comes from IHDR
    assert (info.format, info.width, info.height) == ("png", 1080, 2400)


def test_image_info_refuses_decompression_bombs():
    with pytest.raises(HierarchyError) as info:
        image_info(_png_header(50_000, 50_000))
    assert info.value.reason == "bad_screenshot" and "implausibly large" in info.value.message

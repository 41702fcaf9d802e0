"""Malformed variants of real hierarchies and screenshots against `pipelines.hierarchy`.

The contract under test: `parse` either returns a `Screen` whose objects serialize, or raises `HierarchyError`
with one of the documented reasons; never KeyError/TypeError/ValueError/RecursionError/MemoryError.
`image_info` likewise returns an `ImageInfo` or raises `HierarchyError("bad_screenshot")`. Every random
mutation is seeded, so a failure names a case that reproduces.
"""

from __future__ import annotations

import codecs
import json
import random
from pathlib import Path

import pytest

from pipelines.hierarchy import REASONS, HierarchyError, Screen, image_info, parse, rescale
from pipelines.hierarchy.objects import INT32_MAX, MAX_BYTES, MAX_OBJECTS
from tests.conftest import FIXTURES
from tests.pipelines.images import png_header

UIAUTOMATOR = sorted((FIXTURES / "uiautomator").glob("*.xml"))
RICO = sorted((FIXTURES / "rico").glob("*.json"))
STATES = sorted((FIXTURES / "droidbot" / "yelp" / "states").glob("state_*.json"))
HIERARCHIES = UIAUTOMATOR[:4] + RICO[:3] + STATES[:2]
SCREENSHOTS = (
    sorted((FIXTURES / "rico").glob("*.jpg"))[:2]
    + sorted((FIXTURES / "droidbot" / "yelp" / "states").glob("screen_*.png"))[:1]
)
FORMATS = (None, "uiautomator", "rico", "droidbot")


def outcome(data: bytes, **kwargs) -> Screen | HierarchyError:
    """The Screen, or the HierarchyError; any other exception fails the calling test (with the input)."""
    try:
        screen = parse(data, **kwargs)
    except HierarchyError as exc:
        assert exc.reason in REASONS
        return exc
    except BaseException as exc:  # the bug this module hunts
        pytest.fail(f"parse({data[:80]!r}..., {kwargs}) raised {type(exc).__name__}: {exc}")
    for o in screen.objects:
        o.SerializeToString()
    for value in (screen.width, screen.height):
        assert type(value) is int and -INT32_MAX <= value <= INT32_MAX
    assert screen.rotation in (0, 1, 2, 3)
    return screen


def outcomes(data: bytes) -> None:
    for fmt in FORMATS:
        for drop in (False, True):
            outcome(data, fmt=fmt, drop_invisible=drop)


def reason(data: bytes, **kwargs) -> str:
    result = outcome(data, **kwargs)
    assert isinstance(result, HierarchyError), f"parsed: {result.warnings}"
    return result.reason


# --- mutations of the real fixtures --------------------------------------------------------------------------


@pytest.mark.parametrize("path", HIERARCHIES, ids=lambda p: p.name)
def test_truncated_at_many_points(path: Path):
    data = path.read_bytes()
    rng = random.Random(f"cut {path.name}")
    cuts = {0, 1, 2, 3, 7, 16, 64, len(data) - 1} | {rng.randrange(len(data)) for _ in range(24)}
    for cut in sorted(cuts):
        for fmt in (None, "uiautomator" if path.suffix == ".xml" else "rico"):
            outcome(data[:cut], fmt=fmt)
    assert reason(data[:0]) == "empty"
    assert reason(data[: len(data) // 2]) == "malformed"


@pytest.mark.parametrize("path", HIERARCHIES, ids=lambda p: p.name)
def test_random_byte_flips(path: Path):
    data = path.read_bytes()
    rng = random.Random(f"flip {path.name}")
    for _ in range(25):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 12)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        outcome(bytes(mutated))
        outcome(bytes(mutated), drop_invisible=True)


@pytest.mark.parametrize("path", HIERARCHIES[:1] + RICO[:1] + STATES[:1], ids=lambda p: p.name)
@pytest.mark.parametrize(
    "bom,encoding",
    [
        (codecs.BOM_UTF8, "utf-8"),
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"),
        (codecs.BOM_UTF32_LE, "utf-32-le"),
        (codecs.BOM_UTF32_BE, "utf-32-be"),
    ],
    ids=["utf8", "utf16le", "utf16be", "utf32le", "utf32be"],
)
def test_every_byte_order_mark_gives_the_same_objects(path: Path, bom: bytes, encoding: str):
    text = path.read_bytes().decode("utf-8")
    clean = parse(text.encode("utf-8")).objects
    again = outcome(bom + text.encode(encoding))
    assert isinstance(again, Screen)
    assert again.objects == clean


@pytest.mark.parametrize(
    "bom,encoding",
    [(codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF32_BE, "utf-32-be")],
)
def test_a_byte_order_mark_alone_is_empty(bom: bytes, encoding: str):
    assert reason(bom) == "empty"
    assert reason(bom + "  \r\n".encode(encoding)) == "empty"


# --- bounds --------------------------------------------------------------------------------------------------


def _xml(bounds: str) -> bytes:
    return (
        '<?xml version="1.0"?><hierarchy rotation="0"><node index="0" class="android.widget.Button" '
        f'bounds="{bounds}" clickable="true"/></hierarchy>'
    ).encode()


@pytest.mark.parametrize(
    "bounds",
    [
        "[1,2][3,4",
        "[a,b][c,d]",
        "[-2147483649,0][1,1]",
        "[0,0][2147483648,1]",
        "[0,0][99999999999999999999999999,1]",
        "[" + "9" * 5000 + ",0][1,1]",
        "[1e400,0][1,1]",
        "[NaN,0][1,1]",
        "",
        "[]",
        "[0,0][1,1][2,2]",
        "[1,2][3,4]junk",
        "[１,２][３,４]",
        "[1_0,0][2_0,5]",
        "[\u0661,0][1,1]",
    ],
)
def test_unusable_bounds_keep_the_object_without_a_box(bounds: str):
    screen = outcome(_xml(bounds))
    assert isinstance(screen, Screen)
    (o,) = screen.objects
    assert o.android_class == "android.widget.Button"
    assert not o.HasField("bbox")
    assert o.grid_location == 0 and not o.is_actionable
    assert any("without usable bounds" in w for w in screen.warnings)


@pytest.mark.parametrize(
    "bounds,box",
    [
        ("[ 1 , 2 ] [ 30 , 40 ]", (1, 2, 30, 40)),
        ("[1.5,2.4][30.5,40]", (2, 2, 30, 40)),
        ("[-0,0][5,5]", (0, 0, 5, 5)),
    ],
)
def test_odd_but_readable_bounds(bounds: str, box: tuple[int, int, int, int]):
    (o,) = outcome(_xml(bounds)).objects
    assert (o.bbox.left, o.bbox.top, o.bbox.right, o.bbox.bottom) == box


def test_non_finite_and_huge_json_numbers_in_bounds():
    rico = b'{"activity":{"root":{"class":"a","bounds":[NaN,Infinity,-Infinity,1e400]}}}'
    (o,) = outcome(rico).objects
    assert not o.HasField("bbox")
    droidbot = b'{"views":[{"temp_id":0,"class":"a","bounds":[[0,0],[1e400,' + b"9" * 400 + b"]]}]}"
    (o,) = outcome(droidbot).objects
    assert not o.HasField("bbox")
    assert reason(b'{"activity":{"root":{"bounds":[0,0,' + b"9" * 5000 + b",1]}}}") == "malformed"


# --- wrong-typed fields --------------------------------------------------------------------------------------


def _rico(node: object) -> bytes:
    return json.dumps({"activity": {"root": node}}).encode()


@pytest.mark.parametrize(
    "node",
    [
        {"class": 5, "bounds": [0, 0, 10, 10]},
        {"class": None, "bounds": [0, 0, 10, 10]},
        {"class": ["a"], "bounds": [0, 0, 10, 10]},
        {"class": "a", "children": {"a": 1}, "bounds": [0, 0, 10, 10]},
        {"class": "a", "children": "abc", "bounds": [0, 0, 10, 10]},
        {"class": "a", "children": 5},
        {"class": "a", "children": [None, 3, [1], "x"]},
        {"class": "a", "bounds": "[0,0][10,10]"},
        {"class": "a", "bounds": {"left": 0}},
        {"class": "a", "bounds": [0, 0, 1, 1, 1]},
        {"class": "a", "bounds": [True, False, True, True]},
        {"class": "a", "bounds": ["0", "0", "x", "1"]},
        {"class": "a", "ancestors": "android.widget.Button"},
        {"class": "a", "ancestors": [1, None, {"a": 1}, [2]]},
        {"class": "a", "content-desc": {"a": 1}},
        {"class": "a", "content-desc": [[1], {"a": 1}, "ok"]},
        {"class": "a", "text": 5, "resource-id": [], "text-hint": {}},
        {"class": "a", "visible-to-user": "false", "visibility": 5},
        {"class": "a", "clickable": "true", "enabled": "false"},
        {},
    ],
)
def test_rico_nodes_with_wrong_typed_fields(node: dict):
    for drop in (False, True):
        result = outcome(_rico(node), drop_invisible=drop)
        assert isinstance(result, Screen)
        for o in result.objects:
            assert isinstance(o.android_class, str)


def test_rico_root_dropped_as_invisible_leaves_no_objects():
    screen = outcome(
        _rico({"class": "a", "visibility": "gone", "children": [{"class": "b"}]}), drop_invisible=True
    )
    assert screen.objects == [] and any("dropped" in w for w in screen.warnings)


@pytest.mark.parametrize(
    "views",
    [
        [{"temp_id": 0, "parent": [1]}],
        [{"temp_id": 0, "parent": {"a": 1}}],
        [{"temp_id": 0, "parent": "root"}],
        [{"temp_id": 0, "children": {"1": 1}}, {"temp_id": 1, "parent": 0}],
        [{"temp_id": 0, "children": "12"}],
        [{"temp_id": 0, "children": [[1], {"a": 1}, 1.5, None, True, 0]}],
        [{"temp_id": 0, "class": 5, "bounds": "[0,0][1,1]", "editable": "yes"}],
        [{"temp_id": 0, "bounds": [0, 0, 1, 1]}],
        [{"temp_id": 0, "bounds": ["12", "34"]}],
        [{"temp_id": 10**30}],
        [],
    ],
)
def test_droidbot_views_with_wrong_typed_fields(views: list):
    outcomes(json.dumps({"views": views}).encode())
    assert isinstance(outcome(json.dumps({"views": views}).encode()), Screen)


@pytest.mark.parametrize(
    "views",
    [
        [None],
        [{"temp_id": "0"}],
        [{"temp_id": True}, {"temp_id": False}],
        [{"temp_id": 1.0}],
        [{}, {"temp_id": 0}],
    ],
)
def test_droidbot_bad_temp_ids_are_malformed(views: list):
    assert reason(json.dumps({"views": views}).encode()) == "malformed"


@pytest.mark.parametrize("size", [True, -5, 0, 10**20, 1e300, "1080", None])
def test_droidbot_stated_size_must_be_a_usable_integer(size: object):
    doc = {"views": [{"temp_id": 0, "bounds": [[0, 0], [100, 200]]}], "width": size, "height": size}
    screen = outcome(json.dumps(doc).encode())
    assert (screen.width, screen.height) == (100, 200)


# --- documents that are not hierarchies ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "data,expected",
    [
        (b"[1, 2, 3]", "unknown_format"),
        (b'"text"', "unknown_format"),
        (b"null", "unknown_format"),
        (b"[" * 100_000 + b"]" * 100_000, "too_deep"),
        (b"[" * 100_000, "too_deep"),
        (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "too_deep"),
        (b'{"activity":{"root":{"children":[' + b"[" * 10_000 + b"]" * 10_000 + b"]}}}", "too_deep"),
        (b'{"activity":{"root":null}}', "malformed"),
        (b'{"activity":[1]}', "malformed"),
        (b'{"views":{"a":1}}', "malformed"),
        (b"<", "malformed"),
        (b"{", "malformed"),
        (b"[", "malformed"),
        (b"\x00", "empty"),
        (b"\x00" * 64, "empty"),
        (b"<hierarchy/>", "failed_dump"),
        (b'<?xml version="1.0"?><hierarchy rotation="0"></hierarchy>', "failed_dump"),
        (b"could not get idle state.", "failed_dump"),
        (b"Killed\nERROR: null root node returned by UiTestAutomationBridge.", "failed_dump"),
        (b"java.lang.SecurityException: Permission denial\n\tat x.y()", "failed_dump"),
        (b'<hierarchy><node class="a" class="b" bounds="[0,0][1,1]"/></hierarchy>', "malformed"),
        (b'<hierarchy><node text="&undefined;" bounds="[0,0][1,1]"/></hierarchy>', "malformed"),
        (b"<!-- only a comment -->", "malformed"),
        (b"<!doctype hierarchy><hierarchy/>", "forbidden_entity"),
        (b"\x89PNG\r\n\x1a\n", "unknown_format"),
    ],
)
def test_documents_that_are_not_hierarchies(data: bytes, expected: str):
    assert reason(data) == expected
    outcomes(data)


def test_too_many_objects_or_bytes_are_too_large_not_a_memory_error():
    node = b'<node class="a" bounds="[0,0][1,1]"/>'
    assert reason(b"<hierarchy>" + node * (MAX_OBJECTS + 1) + b"</hierarchy>") == "too_large"
    assert isinstance(outcome(b"<hierarchy>" + node * 1000 + b"</hierarchy>"), Screen)
    rico = {"activity": {"root": {"class": "a", "children": [{"class": "b"}] * MAX_OBJECTS}}}
    assert reason(json.dumps(rico).encode()) == "too_large"
    views = [{"temp_id": i} for i in range(MAX_OBJECTS + 1)]
    assert reason(json.dumps({"views": views}).encode()) == "too_large"
    assert reason(b" " * MAX_BYTES + b"<hierarchy/>", fmt="uiautomator") == "too_large"


def test_rescaling_a_box_beyond_int32_unsets_it_instead_of_raising():
    xml = (
        b'<hierarchy><node bounds="[0,0][10,20]"><node bounds="[0,0][2000000000,5]"/>'
        b'<node bounds="[-2000000000,0][5,5]"/><node bounds="[1,1][5,5]"/></node></hierarchy>'
    )
    screen = rescale(outcome(xml), 1000, 2000)
    assert [o.HasField("bbox") for o in screen.objects] == [True, False, False, True]
    assert (screen.objects[3].bbox.left, screen.objects[3].bbox.right) == (100, 500)
    assert any("does not fit int32" in w for w in screen.warnings)


def test_leading_blank_space_beyond_the_format_sniffing_window():
    data = RICO[0].read_bytes()
    assert outcome(b" \n" * 5000 + data).objects == parse(data).objects


def test_xml_with_a_namespace_prefix_is_read_by_local_names():
    data = (
        b'<hierarchy xmlns:u="urn:x" rotation="1"><u:node u:class="android.widget.TextView" u:text="hi" '
        b'bounds="[0,0][10,10]"/></hierarchy>'
    )
    (o,) = outcome(data).objects
    assert (o.android_class, o.text) == ("android.widget.TextView", "hi")


@pytest.mark.parametrize(
    "rotation,expected", [("1", 1), ("3", 3), ("-7", 0), ("4", 0), ("9" * 30, 0), ("x", 0)]
)
def test_rotation_outside_0_to_3_is_taken_as_0(rotation: str, expected: int):
    data = f'<hierarchy rotation="{rotation}"><node class="a" bounds="[0,0][10,10]"/></hierarchy>'.encode()
    assert outcome(data).rotation == expected


def test_non_utf8_bytes_are_replaced_not_fatal():
    xml = b'<hierarchy><node class="a" text="caf\xe9 \xff\xfe" bounds="[0,0][1,1]"/></hierarchy>'
    (o,) = outcome(xml).objects
    assert o.text.startswith("caf\ufffd")
    rico = b'{"activity":{"root":{"class":"a","text":"caf\xe9"}}}'
    (o,) = outcome(rico).objects
    assert o.text == "caf\ufffd"


# --- screenshots ---------------------------------------------------------------------------------------------


def _bad_screenshot(data: bytes) -> None:
    with pytest.raises(HierarchyError) as info:
        image_info(data)
    assert info.value.reason == "bad_screenshot"
    assert "0x7f" not in str(info.value)  # no memory addresses: the message is stable


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x89",
        b"\xff",
        b"\x89PNG\r\n\x1a\n",
        b"\xff\xd8\xff",
        png_header(0, 0),
        png_header(2**31 - 1, 2**31 - 1),
        png_header(100_000, 100_000),
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 40,
        b"GIF89a",
        b"RIFF\x00\x00\x00\x00WEBP",
    ],
    ids=[
        "zero",
        "one-png",
        "one-jpeg",
        "png-magic",
        "jpeg-magic",
        "png-0x0",
        "png-int32",
        "png-bomb",
        "png-zeros",
        "gif-magic",
        "webp-magic",
    ],  # fmt: skip
)
def test_screenshots_that_lie_or_are_empty(data: bytes):
    _bad_screenshot(data)


@pytest.mark.parametrize("path", SCREENSHOTS, ids=lambda p: p.name)
def test_screenshot_truncations_and_flips(path: Path):
    data = path.read_bytes()
    rng = random.Random(f"shot {path.name}")
    for cut in sorted({0, 1, 2, 3, 8, 16, 32} | {rng.randrange(len(data)) for _ in range(16)}):
        try:
            image_info(data[:cut])
        except HierarchyError as exc:
            assert exc.reason == "bad_screenshot"
    for _ in range(20):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            mutated[rng.randrange(min(len(mutated), 600))] = rng.randrange(256)  # the header
        try:
            info = image_info(bytes(mutated))
        except HierarchyError as exc:
            assert exc.reason == "bad_screenshot"
        else:
            assert info.width > 0 and info.height > 0


# --- random structures ---------------------------------------------------------------------------------------

_VALUES = [
    "", "true", "false", "[0,0][10,10]", "[-5,-5][0,0]", "[1,2][3,4", "x", "1e400", "-1", "99999999999999999999",
    "&amp;", "&#0;", "&#x1F600;", "\u202e", "日本", "\t\n", "[0,0][2147483647,2147483647]",
]  # fmt: skip
_ATTRIBUTES = [
    "class", "bounds", "text", "content-desc", "resource-id", "package", "clickable", "visible-to-user", "displayed",
    "NAF", "hint", "rotation", "width", "height", "index", "enabled", "checkable", "checked", "scrollable",
]  # fmt: skip
_KEYS = [
    "class", "bounds", "children", "ancestors", "content-desc", "visible-to-user", "visibility", "text", "temp_id",
    "parent", "views", "activity", "root", "width", "height", "editable", "resource_id", "content_description",
]  # fmt: skip


def _random_xml(rng: random.Random, depth: int = 0) -> str:
    tag = rng.choice(["node", "hierarchy", "android.widget.Button", "x"])
    attributes = " ".join(
        f'{name}="{rng.choice(_VALUES).replace("&", "&amp;") if rng.random() < 0.8 else rng.choice(_VALUES)}"'
        for name in rng.sample(_ATTRIBUTES, rng.randint(0, 8))
    )
    children = "".join(_random_xml(rng, depth + 1) for _ in range(rng.randint(0, 3))) if depth < 5 else ""
    return f"<{tag} {attributes}>{children}</{tag}>"


def _random_json(rng: random.Random, depth: int = 0) -> object:
    r = rng.random()
    if depth > 4 or r < 0.3:
        return rng.choice([None, True, False, 0, -1, 1.5, 10**20, "s", "", [], {}, "\ud800"])
    if r < 0.6:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(_KEYS): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 6))}


def test_random_xml_structures():
    rng = random.Random(3)
    for _ in range(600):
        body = "".join(_random_xml(rng) for _ in range(rng.randint(0, 3)))
        text = (
            f'<hierarchy rotation="{rng.choice(_VALUES)}">{body}</hierarchy>' if rng.random() < 0.7 else body
        )
        for encoding in ("utf-8", "utf-16"):
            outcome(text.encode(encoding), drop_invisible=rng.random() < 0.5)


def test_random_json_structures():
    rng = random.Random(4)
    for _ in range(1500):
        views = [
            {"temp_id": k, "parent": rng.choice([-1, 0, 1, None, "x", [1]]), "children": rng.choice([[0, 1], [], None, {}, [k]]),
             "bounds": _random_json(rng, 2)}
            for k in range(rng.randint(0, 4))
        ]  # fmt: skip
        doc = rng.choice([{"activity": {"root": _random_json(rng)}}, {"views": views}, _random_json(rng)])
        outcome(json.dumps(doc).encode(), drop_invisible=rng.random() < 0.5)

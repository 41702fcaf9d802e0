"""Damaged, hostile and unusual hierarchies: each converts with a warning or fails with its reason code."""

from __future__ import annotations

import codecs
import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipelines.errors import StepmarkError
from pipelines.hierarchy import MAX_DEPTH, HierarchyError, detect_format, droidbot, parse, rico, uiautomator
from pipelines.hierarchy.jsonio import loads_iterative
from protos.llm4mobile import episode_pb2
from tests.conftest import FIXTURES, REPO_ROOT

T = episode_pb2.ObjectType
G = episode_pb2.GridLocation
API27 = FIXTURES / "uiautomator" / "avc_mocks_UIAUTOMATOR_DUMP_API27.xml"


@pytest.fixture(scope="module")
def api27() -> bytes:
    return API27.read_bytes()


@pytest.fixture(scope="module")
def api27_objects(api27: bytes) -> list[bytes]:
    return [o.SerializeToString() for o in parse(api27).objects]


def _serialized(screen) -> list[bytes]:
    return [o.SerializeToString() for o in screen.objects]


def _reason(data: bytes, **kwargs) -> str:
    with pytest.raises(HierarchyError) as info:
        parse(data, **kwargs)
    assert isinstance(info.value, StepmarkError)
    return info.value.reason


def _node(attrs: str = "", children: str = "", cls: str = "android.widget.FrameLayout") -> str:
    return f'<node class="{cls}" {attrs}>{children}</node>'


def _dump(body: str, rotation: int = 0) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><hierarchy rotation="{rotation}">{body}</hierarchy>'.encode()
    )


# --- shell-redirect damage ---------------------------------------------------------------------------------


def test_utf16_with_bom_under_utf8_declaration(api27: bytes, api27_objects: list[bytes]):
    damaged = api27.decode("utf-8").encode("utf-16")  # BOM + UTF-16LE, declaration still says UTF-8
    assert damaged[:2] == b"\xff\xfe" and 'encoding="UTF-8"'.encode("utf-16-le") in damaged
    screen = parse(damaged)
    assert _serialized(screen) == api27_objects
    assert screen.warnings == ["UTF-16 text with a BOM under a UTF-8 declaration (decoded as UTF-16)"]


def test_utf16_big_endian_and_without_bom(api27: bytes, api27_objects: list[bytes]):
    assert _serialized(parse(api27.decode().encode("utf-16-be"))) == api27_objects
    assert _serialized(parse(codecs.BOM_UTF16_BE + api27.decode().encode("utf-16-be"))) == api27_objects


def test_log_line_before_the_declaration(api27: bytes, api27_objects: list[bytes]):
    screen = parse(b"UI hierchary dumped to: /dev/tty\r\n" + api27)
    assert _serialized(screen) == api27_objects
    assert screen.warnings == ["ignored text before the XML: 'UI hierchary dumped to: /dev/tty'"]


def test_log_line_after_the_xml(api27: bytes, api27_objects: list[bytes]):
    screen = parse(api27.rstrip() + b"UI hierchary dumped to: /dev/tty\n")
    assert _serialized(screen) == api27_objects
    assert screen.warnings == ["ignored text after the XML: 'UI hierchary dumped to: /dev/tty'"]


def test_cr_cr_lf_line_endings(api27: bytes, api27_objects: list[bytes]):
    damaged = api27.replace(b"\n", b"\r\r\n")
    assert damaged.count(b"\r\r\n") > 20
    assert _serialized(parse(damaged)) == api27_objects


def test_all_redirect_damage_at_once(api27: bytes, api27_objects: list[bytes]):
    text = "UI hierchary dumped to: /dev/tty\r\r\n" + api27.decode().replace("\n", "\r\r\n")
    screen = parse(text.encode("utf-16"))
    assert _serialized(screen) == api27_objects
    assert len(screen.warnings) == 3


def test_dumps_appended_to_one_file_use_the_last(api27: bytes, api27_objects: list[bytes]):
    older = (FIXTURES / "uiautomator" / "keydroidx_ui_menu.xml").read_bytes()
    for data in (older + b"\nUI hierchary dumped to: /dev/tty\n" + api27, older + older + api27):
        screen = parse(data)
        assert _serialized(screen) == api27_objects
        assert any("dumps in one file: the last one is used" in w for w in screen.warnings)


# --- failed and empty dumps --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"ERROR: null root node returned by UiTestAutomationBridge.\r\n",
        b"ERROR: could not get idle state.\n",
        b"  ERROR: could not get idle state.",
        "ERROR: null root node returned by UiTestAutomationBridge.\n".encode("utf-16"),
    ],
)
def test_failed_dumps(data: bytes):
    with pytest.raises(HierarchyError) as info:
        parse(data)
    assert info.value.reason == "failed_dump"
    assert "ERROR:" in info.value.message


def test_hierarchy_without_windows_is_a_failed_dump():
    assert _reason(b'<?xml version="1.0"?><hierarchy rotation="0"/>') == "failed_dump"


@pytest.mark.parametrize("data", [b"", b"   \n\r\n", b"\xef\xbb\xbf", b"\xff\xfe"])
def test_empty_files(data: bytes):
    assert _reason(data) == "empty"


@pytest.mark.parametrize("fmt", ["uiautomator", "rico", "droidbot"])
def test_empty_with_explicit_format(fmt: str):
    assert _reason(b"", fmt=fmt) == "empty"


def test_truncated_and_garbage_input():
    assert _reason(API27.read_bytes()[:700]) == "malformed"
    assert _reason(b"hello, not a hierarchy") == "unknown_format"
    assert _reason(b"\x89PNG\r\n\x1a\n\x00\x00") == "unknown_format"
    assert _reason(b'{"activity": ') == "malformed"
    assert _reason(b'{"something": "else"}') == "unknown_format"
    assert _reason(b"<html><body>no</body></html>") == "malformed"
    assert _reason(b'{"activity": {"root": null}}') == "malformed"
    assert _reason(b'{"views": 3}') == "malformed"


def test_error_pickles_with_reason_and_message():
    error = HierarchyError("too_deep", "file x.xml: nested too deep")
    again = pickle.loads(pickle.dumps(error))
    assert (again.reason, again.message, str(again)) == ("too_deep", error.message, str(error))
    with pytest.raises(ValueError):
        HierarchyError("no_such_reason", "x")


# --- depth -------------------------------------------------------------------------------------------------


def _nested_xml(levels: int) -> bytes:
    opening = "".join(
        f'<node class="android.widget.FrameLayout" bounds="[0,0][{levels},{i + 1}]">' for i in range(levels)
    )
    return _dump(opening + "</node>" * levels)


def test_thousand_levels_of_xml_convert():
    screen = parse(_nested_xml(1000))
    assert len(screen.objects) == 1000
    deepest = screen.objects[-1]
    assert (
        deepest.dom_position.depth,
        deepest.dom_position.pre_order_id,
        deepest.dom_position.post_order_id,
    ) == (
        999,
        999,
        0,
    )
    assert screen.objects[0].dom_position.post_order_id == 999
    assert deepest.is_leaf and not screen.objects[0].is_leaf


def test_max_depth_is_the_documented_limit():
    assert MAX_DEPTH == 2000
    assert len(parse(_nested_xml(MAX_DEPTH + 1)).objects) == MAX_DEPTH + 1  # depths 0..2000
    assert _reason(_nested_xml(MAX_DEPTH + 2)) == "too_deep"


@pytest.mark.parametrize("levels", [2047, 2100, 50_000])
def test_deeper_xml_is_too_deep_not_a_crash(levels: int):
    assert _reason(_nested_xml(levels)) == "too_deep"


def _nested_rico(levels: int) -> bytes:
    # Built as text: json.dumps itself would hit the recursion limit.
    node = '{"class": "android.widget.FrameLayout", "bounds": [0, 0, 10, 10], "children": ['
    return ('{"activity": {"root": ' + node * levels + "]}" * levels + "}}").encode()


def test_thousand_levels_of_rico_convert():
    limit = sys.getrecursionlimit()
    screen = parse(_nested_rico(1000))
    assert len(screen.objects) == 1000
    assert screen.objects[-1].dom_position.depth == 999
    assert len(parse(_nested_rico(MAX_DEPTH + 1)).objects) == MAX_DEPTH + 1
    assert sys.getrecursionlimit() == limit  # nothing process-wide was touched


def test_deep_rico_in_a_thread_with_a_small_stack():
    """The deep path needs no C stack: a 256 KiB thread stack parses 2,001 levels (a crash would kill the
    child process, so this runs in one)."""
    code = textwrap.dedent(
        f"""
        import threading
        from pipelines.hierarchy import parse, HierarchyError
        node = '{{"class": "a.B", "bounds": [0, 0, 10, 10], "children": ['
        doc = lambda n: ('{{"activity": {{"root": ' + node * n + "]}}" * n + "}}}}").encode()
        out = []
        def run():
            out.append(len(parse(doc({MAX_DEPTH + 1})).objects))
            try:
                parse(doc(50_000))
            except HierarchyError as error:
                out.append(error.reason)
        threading.stack_size(256 * 1024)
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        print(out)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"[{MAX_DEPTH + 1}, 'too_deep']"


@pytest.mark.parametrize("path", sorted((FIXTURES / "rico").glob("*.json"))[:12], ids=lambda p: p.name)
def test_iterative_json_reader_matches_the_c_decoder(path: Path):
    text = path.read_text(encoding="utf-8")
    assert loads_iterative(text) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    ['{"a": [1, 2.5, -3e2, true, false, null, "x\\u00e9\\n"], "b": {}, "c": []}', "  [ ]  ", '"s"', "0"],
)
def test_iterative_json_reader_on_small_documents(text: str):
    assert loads_iterative(text) == json.loads(text)


@pytest.mark.parametrize(
    "text", ["", "{", '{"a" 1}', '{"a": 1,}', "[1 2]", "[1] x", "{1: 2}", "tru", '"\x01"']
)
def test_iterative_json_reader_rejects_what_json_rejects(text: str):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        loads_iterative(text)


@pytest.mark.parametrize("levels", [MAX_DEPTH + 2, 5000, 100_000])
def test_deeper_rico_is_too_deep(levels: int):
    assert _reason(_nested_rico(levels)) == "too_deep"


def test_deep_droidbot_chain_and_cycles():
    def state(views):
        return json.dumps({"views": views}).encode()

    chain = [
        {"temp_id": i, "parent": i - 1, "children": [i + 1] if i < 999 else [], "bounds": [[0, 0], [9, 9]]}
        for i in range(1000)
    ]
    assert parse(state(chain)).objects[-1].dom_position.depth == 999
    too_deep = [
        {"temp_id": i, "parent": i - 1, "children": [i + 1] if i < 2999 else [], "bounds": [[0, 0], [9, 9]]}
        for i in range(3000)
    ]
    assert _reason(state(too_deep)) == "too_deep"
    cycle = [{"temp_id": 0, "parent": 1, "children": [1]}, {"temp_id": 1, "parent": 0, "children": [0]}]
    assert _reason(state(cycle)) == "malformed"
    back_link = [{"temp_id": 0, "parent": -1, "children": [1]}, {"temp_id": 1, "parent": 0, "children": [0]}]
    screen = parse(state(back_link))
    assert len(screen.objects) == 2
    assert "1 child link(s) to missing or already placed views ignored" in screen.warnings
    assert _reason(state([{"temp_id": 0}, {"temp_id": 0}])) == "malformed"


# --- hostile XML -------------------------------------------------------------------------------------------


@pytest.fixture()
def sentinel(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text("SENTINEL-SECRET-8841")
    return path


def _hostile_documents(sentinel: Path) -> dict[str, bytes]:
    node = '<node class="android.widget.TextView" text="&x;" bounds="[0,0][10,10]"/>'
    lol = '<!ENTITY a "lolololololololol">' + "".join(
        f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">' for i in range(9)
    )
    return {
        "external file": f'<?xml version="1.0"?><!DOCTYPE h [<!ENTITY x SYSTEM "file://{sentinel}">]>'
        f"<hierarchy>{node}</hierarchy>".encode(),
        "external url": b'<?xml version="1.0"?><!DOCTYPE h [<!ENTITY x SYSTEM "http://127.0.0.1:9/x">]>'
        + f"<hierarchy>{node}</hierarchy>".encode(),
        "parameter entity": f'<?xml version="1.0"?><!DOCTYPE h [<!ENTITY % p SYSTEM "file://{sentinel}"> %p;]>'
        "<hierarchy/>".encode(),
        "external dtd": f'<?xml version="1.0"?><!DOCTYPE hierarchy SYSTEM "file://{sentinel}">'
        f"<hierarchy>{node.replace('&x;', '')}</hierarchy>".encode(),
        "billion laughs": f'<?xml version="1.0"?><!DOCTYPE h [{lol}]>'
        f"<hierarchy>{node.replace('&x;', '&j;')}</hierarchy>".encode(),
        "lowercase doctype after log line": b"log\n<!doctype h [<!ENTITY x 'y'>]><hierarchy/>",
    }


@pytest.mark.parametrize(
    "name",
    [
        "external file",
        "external url",
        "parameter entity",
        "external dtd",
        "billion laughs",
        "lowercase doctype after log line",
    ],
)
def test_entities_and_doctypes_are_refused(name: str, sentinel: Path):
    data = _hostile_documents(sentinel)[name]
    with pytest.raises(HierarchyError) as info:
        parse(data)
    assert info.value.reason == "forbidden_entity"
    assert "SENTINEL" not in str(info.value)
    # The same bytes disguised as UTF-16 are refused too (the check runs again after decoding).
    assert _reason(data.decode().encode("utf-16")) == "forbidden_entity"


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_refusal_happens_before_any_file_is_opened(
    sentinel: Path, monkeypatch: pytest.MonkeyPatch, encoding: str
):
    """Even with lxml's own loaders instrumented, nothing is read: the bytes never reach the parser, in any
    encoding (UTF-16/32 without a BOM hide "<!DOCTYPE" from a byte search, so they are decoded first)."""
    import lxml.etree

    calls: list[object] = []
    real = lxml.etree.fromstring
    monkeypatch.setattr(lxml.etree, "fromstring", lambda *a, **k: calls.append(a) or real(*a, **k))
    data = _hostile_documents(sentinel)["external file"].decode().encode(encoding)
    assert _reason(data) == "forbidden_entity"
    assert calls == []


# --- characters --------------------------------------------------------------------------------------------


def test_emoji_and_astral_character_references():
    body = _node('text="🌿 leaf &#127807; &#x1F33F;" bounds="[0,0][100,100]"', cls="android.widget.TextView")
    screen = parse(_dump(body))
    assert screen.objects[0].text == "🌿 leaf 🌿 🌿"
    assert screen.objects[0].name == "🌿 leaf 🌿 🌿"
    assert screen.warnings == []


def test_invalid_xml_characters_are_stripped_with_a_warning():
    body = _node(
        'text="a\x01b&#1;c&#x1F;d&#xFFFE;e&#55296;f\tg&#x110000;h&#'
        + "9" * 5000
        + ';" bounds="[0,0][100,100]"'
    )
    screen = parse(_dump(body))
    assert screen.objects[0].text == "abcdef gh"  # XML attribute normalisation turns the tab into a space
    assert screen.warnings == ["removed 7 character(s) not allowed in XML"]


def test_invalid_utf8_bytes_are_replaced():
    data = b'<?xml version="1.0" encoding="UTF-8"?><hierarchy><node text="caf\xc3\xa9 \xff!" bounds="[0,0][10,10]"/></hierarchy>'
    screen = parse(data)
    assert screen.objects[0].text == "caf\u00e9 \ufffd!"
    first_bad = data.index(b"\xff")
    assert screen.warnings == [f"bytes invalid in utf-8 replaced by U+FFFD (first at byte {first_bad})"]


def test_json_lone_surrogates_and_bad_utf8():
    doc = {
        "activity": {
            "root": {
                "class": "android.widget.TextView",
                "text": "a\ud800b \U0001f33f",
                "bounds": [0, 0, 9, 9],
            }
        }
    }
    screen = parse(json.dumps(doc).encode())
    assert screen.objects[0].text == "a\ufffdb \U0001f33f"
    assert screen.warnings == ["replaced 1 lone surrogate escape(s) by U+FFFD"]
    escaped = b'{"activity": {"root": {"class": "x", "text": "\\\\ud800", "bounds": [0, 0, 9, 9]}}}'
    assert parse(escaped).objects[0].text == "\\ud800"  # an escaped backslash, not a surrogate
    screen = parse(b'{"views": [{"temp_id": 0, "parent": -1, "text": "a\xffb", "bounds": [[0, 0], [9, 9]]}]}')
    assert screen.objects[0].text == "a\ufffdb"


# --- variants ----------------------------------------------------------------------------------------------

APPIUM = b"""<?xml version="1.0" encoding="UTF-8" standalone="yes" ?>
<hierarchy index="0" class="hierarchy" rotation="0" width="1080" height="2208">
  <android.widget.FrameLayout index="0" package="com.x" class="android.widget.FrameLayout" text="" checkable="false"
      checked="false" clickable="false" enabled="true" focusable="false" focused="false" long-clickable="false"
      password="false" scrollable="false" selected="false" bounds="[0,63][1080,2208]" displayed="true">
    <android.widget.EditText index="0" package="com.x" class="android.widget.EditText" text="" hint="Search"
        resource-id="com.x:id/q" clickable="true" enabled="true" focusable="true" bounds="[40,100][1040,220]"
        displayed="true"/>
    <android.widget.Button index="1" package="com.x" class="android.widget.Button" text="Go"
        clickable="true" enabled="true" bounds="[40,300][300,400]" displayed="false"/>
    <android.view.View index="2" package="com.x" bounds="[0,2000][1080,2208]"/>
  </android.widget.FrameLayout>
</hierarchy>
"""


def test_appium_page_source_variant():
    screen = parse(APPIUM)
    assert (screen.width, screen.height) == (1080, 2208)  # from <hierarchy width height>
    root, search, go, bar = screen.objects
    assert root.type == T.FRAMELAYOUT and root.parent_index == -1
    assert (search.type, search.text_hint, search.name, search.resource_id) == (
        T.EDITTEXT,
        "Search",
        "Search",
        "com.x:id/q",
    )
    assert search.is_actionable and search.grid_location == G.TOP_CENTER
    assert go.name == "Go" and not go.visible and not go.is_actionable
    assert (
        bar.android_class == "android.view.View" and bar.type == T.VIEW
    )  # class taken from the element name
    assert [o.index for o in parse(APPIUM, drop_invisible=True).objects] == [0, 1, 2]


def test_multi_window_and_rotation():
    status = _node('bounds="[0,0][2560,60]" package="com.android.systemui"')
    app = _node(
        'bounds="[0,0][2560,1600]" package="com.app"',
        _node('bounds="[2300,1400][2500,1550]" clickable="true"', cls="android.widget.ImageButton"),
    )
    ime = _node('bounds="[0,900][2560,1600]" package="com.ime" visible-to-user="false"')
    screen = parse(_dump(status + app + ime, rotation=3))
    assert (screen.rotation, screen.width, screen.height) == (3, 2560, 1600)
    assert [(o.parent_index, o.dom_position.depth, o.android_package) for o in screen.objects] == [
        (-1, 0, "com.android.systemui"),
        (-1, 0, "com.app"),
        (1, 1, ""),
        (-1, 0, "com.ime"),
    ]
    assert [o.dom_position.post_order_id for o in screen.objects] == [0, 2, 1, 3]
    assert screen.objects[2].grid_location == G.BOTTOM_RIGHT and screen.objects[2].is_actionable
    assert screen.objects[3].visible is False
    dropped = parse(_dump(status + app + ime, rotation=3), drop_invisible=True)
    assert [o.android_package for o in dropped.objects] == ["com.android.systemui", "com.app", ""]
    assert [o.id for o in dropped.objects] == [o.id for o in screen.objects[:3]]


def test_bare_node_root_and_old_attributes():
    data = b'<node class="android.widget.Button" text="OK" bounds="[0,0][100,50]" clickable="true"/>'
    screen = parse(data)
    assert len(screen.objects) == 1 and screen.objects[0].type == T.BUTTON
    assert (screen.width, screen.height) == (100, 50)
    assert any("no <hierarchy> element" in w for w in screen.warnings)


def test_naf_nodes_are_kept_and_listed():
    body = _node(
        'bounds="[0,0][100,100]"',
        _node('NAF="true" clickable="true" bounds="[10,10][40,40]"', cls="android.widget.ImageView"),
    )
    screen = parse(_dump(body))
    assert screen.naf == [1]
    assert screen.objects[1].is_actionable and screen.objects[1].name == ""


# --- bad bounds --------------------------------------------------------------------------------------------


def test_bad_bounds_are_kept_flagged_and_counted():
    body = _node(
        'bounds="[0,0][1000,1000]"',
        "".join(
            [
                _node('bounds="[-50,-50][100,100]" clickable="true"'),  # negative, centre on screen
                _node('bounds="[500,500][400,600]" clickable="true"'),  # inverted
                _node('bounds="[300,300][300,300]" clickable="true"'),  # zero-size
                _node('bounds="[1200,100][1300,200]" clickable="true"'),  # off-screen
                _node('bounds="[-300,0][-100,50]" clickable="true"'),  # off-screen, negative
                _node('bounds="[900,900][1100,1100]" clickable="true"'),  # centre exactly on the edge
                _node('bounds="garbage" clickable="true"'),
                _node('clickable="true"'),
                _node('bounds="[0,0][99999999999,5]" clickable="true"'),
                _node('bounds="[ 1 , 2 ] [ 3 , 4 ]"'),
            ]
        ),
    )
    screen = parse(_dump(body))
    objects = screen.objects
    assert len(objects) == 11
    assert [(o.bbox.left, o.bbox.top, o.bbox.right, o.bbox.bottom) for o in objects[1:6]] == [
        (-50, -50, 100, 100),
        (500, 500, 400, 600),
        (300, 300, 300, 300),
        (1200, 100, 1300, 200),
        (-300, 0, -100, 50),
    ]
    assert [o.grid_location for o in objects[1:]] == [G.TOP_LEFT] + [G.UNKNOWN_LOCATION] * 8 + [G.TOP_LEFT]
    assert [o.is_actionable for o in objects[1:10]] == [True] + [False] * 8
    assert (
        not objects[7].HasField("bbox")
        and not objects[8].HasField("bbox")
        and not objects[9].HasField("bbox")
    )
    assert (objects[10].bbox.left, objects[10].bbox.bottom) == (1, 4)
    assert screen.warnings == [
        "3 object(s) without usable bounds (missing, unparseable or beyond int32): bbox unset, grid UNKNOWN_LOCATION",
        "2 object(s) with inverted or zero-size bounds: grid UNKNOWN_LOCATION",
        "3 object(s) with the box centre off-screen: grid UNKNOWN_LOCATION",
        "1 object(s) partly outside the 1000x1000 screen (boxes kept as is)",
    ]


def test_rico_null_children_and_odd_values():
    doc = {
        "activity": {
            "root": {
                "class": "com.android.internal.policy.PhoneWindow$DecorView",
                "bounds": [0, 0, 1440, 2560],
                "children": [
                    None,
                    {"class": "x.Y", "bounds": "oops", "children": None, "content-desc": ["a", None, "b"]},
                    {"class": 5, "bounds": [0.4, 10, 100.6, 20], "text": 7, "visibility": "gone"},
                ],
            }
        }
    }
    screen = parse(json.dumps(doc).encode())
    assert len(screen.objects) == 3
    assert screen.objects[1].content_desc == "a b" and not screen.objects[1].HasField("bbox")
    third = screen.objects[2]
    assert (third.android_class, third.text, third.visible) == ("", "", False)
    assert (third.bbox.left, third.bbox.right) == (0, 101)
    assert third.dom_position.pre_order_id == 2
    assert "skipped 1 child entr(ies) that are not node objects (e.g. null)" in screen.warnings


def test_detect_format_and_explicit_format():
    assert detect_format(API27.read_bytes()) == "uiautomator"
    assert detect_format(b'  {"views": []}') == "json"
    assert detect_format(b"ERROR: could not get idle state.") == "uiautomator"
    rico_bytes = (FIXTURES / "rico" / "336.json").read_bytes()
    assert len(rico.parse(rico_bytes).objects) == len(parse(rico_bytes, fmt="rico").objects) == 17
    with pytest.raises(HierarchyError) as info:
        droidbot.parse(rico_bytes)
    assert info.value.reason == "malformed"
    with pytest.raises(ValueError):
        parse(rico_bytes, fmt="html")
    with pytest.raises(HierarchyError):
        uiautomator.parse(rico_bytes)


def test_utf8_bom_and_leading_whitespace(api27: bytes, api27_objects: list[bytes]):
    assert _serialized(parse(codecs.BOM_UTF8 + api27)) == api27_objects
    assert _serialized(parse(b"\n\n  " + api27)) == api27_objects


def test_bytes_like_inputs(api27: bytes, api27_objects: list[bytes]):
    assert _serialized(parse(bytearray(api27))) == api27_objects
    assert _serialized(parse(memoryview(api27))) == api27_objects


def test_parser_is_reusable_after_a_failure_in_the_same_thread(api27: bytes, api27_objects: list[bytes]):
    for bad in (
        _nested_xml(MAX_DEPTH + 5),
        API27.read_bytes()[:700],
        b"<hierarchy><node bounds='[0,0][1,1]'>",
    ):
        with pytest.raises(HierarchyError):
            parse(bad)
        assert _serialized(parse(api27)) == api27_objects


def test_parsing_in_threads_gives_the_same_objects():
    from concurrent.futures import ThreadPoolExecutor

    paths = sorted((FIXTURES / "uiautomator").glob("*.xml")) + sorted((FIXTURES / "rico").glob("*.json"))[:10]
    blobs = [p.read_bytes() for p in paths] * 4
    expected = [_serialized(parse(b)) for b in blobs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda b: _serialized(parse(b)), blobs))
    assert got == expected


def test_escaped_ampersands_are_ampersands():
    """libxml2 without entity substitution hands `&amp;` on as `&#38;`; the real dump below says
    "Security &amp; privacy" and its object must read "Security & privacy". A literal "&#38;" stays."""
    data = (FIXTURES / "uiautomator" / "visiontest_hierarchy.xml").read_bytes()
    assert b"Security &amp; privacy" in data
    descs = [o.content_desc for o in parse(data).objects if "Security" in o.content_desc]
    assert descs == ["Security & privacy notification: Set a screen lock"]
    dump = b'<hierarchy><node text="a &amp;#38; b &amp; c" content-desc="&lt;&amp;&gt;" bounds="[0,0][5,5]"/></hierarchy>'
    (o,) = parse(dump).objects
    assert (o.text, o.content_desc) == ("a &#38; b & c", "<&>")

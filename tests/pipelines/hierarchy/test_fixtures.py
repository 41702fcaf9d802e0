"""Every real fixture hierarchy parses, and the parsed objects agree with an independent reading of the source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lxml import etree

from pipelines.hierarchy import object_at, parse, rescale, uiautomator
from protos.llm4mobile import episode_pb2
from tests.conftest import FIXTURES

T = episode_pb2.ObjectType
G = episode_pb2.GridLocation

XML_FILES = sorted((FIXTURES / "uiautomator").glob("*.xml"))
RICO_FILES = sorted((FIXTURES / "rico").glob("*.json"))
DROIDBOT_FILES = sorted((FIXTURES / "droidbot" / "yelp" / "states").glob("state_*.json"))
ALL_FILES = [(p, "uiautomator") for p in XML_FILES] + [(p, "rico") for p in RICO_FILES]
ALL_FILES += [(p, "droidbot") for p in DROIDBOT_FILES]


def _ids(params: list[tuple[Path, str]]) -> list[str]:
    return [f"{fmt}:{path.name}" for path, fmt in params]


def test_fixture_sets_are_present():
    assert len(XML_FILES) == 10 and len(RICO_FILES) == 41 and len(DROIDBOT_FILES) == 16


# --- independent readings of the sources -------------------------------------------------------------------


def _source_count(path: Path, fmt: str) -> int:
    if fmt == "uiautomator":
        return len(etree.parse(str(path)).getroot().findall(".//node"))
    doc = json.loads(path.read_bytes())
    if fmt == "droidbot":
        return len(doc["views"])
    count, stack = 0, [doc["activity"]["root"]]
    while stack:
        node = stack.pop()
        count += 1
        stack.extend(node.get("children") or [])
    return count


def _source_boxes_in_order(path: Path, fmt: str) -> list[tuple[int, int, int, int]]:
    """Boxes in document order read with lxml / json, not with the parser under test."""
    if fmt == "uiautomator":
        boxes = []
        for node in etree.parse(str(path)).getroot().iter("node"):
            a, b = node.get("bounds")[1:-1].split("][")
            x1, y1 = map(int, a.split(","))
            x2, y2 = map(int, b.split(","))
            boxes.append((x1, y1, x2, y2))
        return boxes
    doc = json.loads(path.read_bytes())
    if fmt == "droidbot":
        views = {v["temp_id"]: v for v in doc["views"]}
        order, stack = [], [v for v in doc["views"] if v["parent"] == -1][::-1]
        while stack:
            v = stack.pop()
            order.append(v)
            stack.extend(views[c] for c in reversed(v["children"]))
        return [(v["bounds"][0][0], v["bounds"][0][1], v["bounds"][1][0], v["bounds"][1][1]) for v in order]
    order, stack = [], [doc["activity"]["root"]]
    while stack:
        node = stack.pop()
        order.append(tuple(node["bounds"]))
        stack.extend(reversed(node.get("children") or []))
    return order


def _box(o: episode_pb2.Object) -> tuple[int, int, int, int]:
    return (o.bbox.left, o.bbox.top, o.bbox.right, o.bbox.bottom)


def _expected_grid(box: tuple[int, int, int, int], width: int, height: int) -> int:
    left, top, right, bottom = box
    if right <= left or bottom <= top:
        return G.UNKNOWN_LOCATION
    cx, cy = (left + right) / 2, (top + bottom) / 2
    if not (0 <= cx < width and 0 <= cy < height):
        return G.UNKNOWN_LOCATION
    return 1 + int(cy // (height / 3)) * 3 + int(cx // (width / 3))


# --- properties on every fixture ---------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "fmt"), ALL_FILES, ids=_ids(ALL_FILES))
def test_fixture_parses_with_consistent_structure(path: Path, fmt: str):
    data = path.read_bytes()
    screen = parse(data)
    assert screen.format == fmt
    objects = screen.objects
    assert len(objects) == _source_count(path, fmt)
    assert [_box(o) for o in objects] == _source_boxes_in_order(path, fmt)

    children: dict[int, list[int]] = {i: [] for i in range(len(objects))}
    roots = []
    for i, o in enumerate(objects):
        assert o.index == i
        assert o.dom_position.pre_order_id == i
        if o.parent_index == -1:
            assert o.parent_id == "" and o.dom_position.depth == 0
            roots.append(i)
        else:
            assert 0 <= o.parent_index < i, "parents come before children"
            parent = objects[o.parent_index]
            assert o.parent_id == parent.id
            assert o.dom_position.depth == parent.dom_position.depth + 1
            children[o.parent_index].append(i)
        assert len(o.id) == 16 and int(o.id, 16) >= 0
    assert roots and roots[0] == 0
    assert len({o.id for o in objects}) == len(objects), "ids are unique within a screen"

    # Post-order recomputed with an explicit stack: children before parents, windows in order.
    post, stack = [], [(r, False) for r in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            post.append(node)
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(children[node]))
    assert [objects[i].dom_position.post_order_id for i in post] == list(range(len(objects)))

    for i, o in enumerate(objects):
        assert o.is_leaf == (not children[i])
        assert o.grid_location == _expected_grid(_box(o), screen.width, screen.height)
        assert o.type == T.UNKNOWN_TYPE or o.multi_types[0] == o.type
        assert len(set(o.multi_types)) == len(o.multi_types)
        if o.is_actionable:
            assert o.visible and o.enabled and o.grid_location != G.UNKNOWN_LOCATION
            assert (
                o.clickable
                or o.long_clickable
                or o.checkable
                or o.scrollable
                or T.EDITTEXT in o.multi_types
                or (T.SEEKBAR in o.multi_types and o.focusable)  # sliders (issue 10)
            )

    again = parse(data)
    assert [o.SerializeToString() for o in again.objects] == [o.SerializeToString() for o in objects]


@pytest.mark.parametrize(("path", "fmt"), ALL_FILES, ids=_ids(ALL_FILES))
def test_drop_invisible_removes_exactly_the_hidden_subtrees(path: Path, fmt: str):
    full = parse(path.read_bytes())
    kept = parse(path.read_bytes(), drop_invisible=True)
    hidden: set[int] = set()
    for o in full.objects:  # pre-order: a parent's verdict is known before its children
        if not o.visible or o.parent_index in hidden:
            hidden.add(o.index)
    expected_ids = [o.id for o in full.objects if o.index not in hidden]
    assert [o.id for o in kept.objects] == expected_ids
    assert all(o.visible for o in kept.objects)
    assert [o.dom_position.pre_order_id for o in kept.objects] == list(range(len(kept.objects)))
    if hidden:
        assert any("dropped" in w for w in kept.warnings)


def test_fixtures_really_contain_invisible_nodes():
    """Rico and DroidBot fixtures really exercise invisible nodes (so the test above is not vacuous)."""
    rico_hidden = sum(sum(not o.visible for o in parse(p.read_bytes()).objects) for p in RICO_FILES)
    droid_hidden = sum(sum(not o.visible for o in parse(p.read_bytes()).objects) for p in DROIDBOT_FILES)
    assert rico_hidden == 1808  # 1126 visible-but-not-to-user + 565 gone + 117 invisible
    assert droid_hidden == 121


# --- specific real objects ---------------------------------------------------------------------------------


def _find(objects, **fields) -> episode_pb2.Object:
    found = [o for o in objects if all(getattr(o, k) == v for k, v in fields.items())]
    assert len(found) == 1, f"{len(found)} objects match {fields}"
    return found[0]


def test_landscape_dump_with_naf_nodes():
    screen = parse((FIXTURES / "uiautomator" / "UltraNavbar_uidump.xml").read_bytes())
    assert (screen.rotation, screen.width, screen.height) == (1, 2000, 1128)
    assert screen.warnings == []
    button = _find(screen.objects, resource_id="com.arlosoft.macrodroid:id/custom_widget_button")
    assert _box(button) == (964, 18, 1036, 90)
    assert button.grid_location == G.TOP_CENTER  # centre (1000, 54) of a 2000x1128 landscape screen
    assert button.type == T.IMAGEBUTTON
    assert list(button.multi_types) == [T.IMAGEBUTTON, T.IMAGEVIEW, T.VIEW]
    assert button.name == "custom_widget_button"
    assert button.android_package == "com.arlosoft.macrodroid"
    assert button.clickable and button.focusable and button.is_actionable and button.is_leaf
    assert button.index in screen.naf
    assert len(screen.naf) == 5


def test_split_screen_window_size_is_flagged_as_estimated():
    screen = parse((FIXTURES / "uiautomator" / "UltraNavbar_split.xml").read_bytes())
    assert (screen.width, screen.height, screen.size_estimated) == (2000, 1128, True)
    assert any("estimated" in w for w in screen.warnings)
    sized = parse((FIXTURES / "uiautomator" / "UltraNavbar_split.xml").read_bytes(), screen_size=(2000, 1200))
    assert (sized.width, sized.height, sized.size_estimated) == (2000, 1200, False)


def test_two_window_dump():
    screen = parse((FIXTURES / "uiautomator" / "visiontest_hierarchy.xml").read_bytes())
    roots = [o for o in screen.objects if o.parent_index == -1]
    assert [(o.index, o.android_package, _box(o)) for o in roots] == [
        (0, "com.android.systemui", (0, 0, 1080, 132)),
        (27, "de.vorwerk.homee.homee", (0, 0, 1080, 2400)),
    ]
    assert (screen.width, screen.height) == (1080, 2400)
    assert roots[0].dom_position.post_order_id == 26  # the whole first window finishes first
    login = _find(screen.objects, content_desc="Log In")
    assert login.type == T.BUTTON and login.name == "Log In"
    assert _box(login) == (42, 1584, 1038, 1710)
    assert login.grid_location == G.BOTTOM_CENTER  # centre (540, 1647)
    assert login.is_actionable and login.visible


def test_old_api_dump_without_resource_id_and_chinese_text():
    screen = parse((FIXTURES / "uiautomator" / "avc_mocks_UIAUTOMATOR_DUMP_API17_CHINESE.xml").read_bytes())
    assert all(o.resource_id == "" for o in screen.objects)
    charging = _find(screen.objects, text="正在充电，50%")
    assert charging.name == "正在充电，50%" and charging.type == T.TEXTVIEW
    assert _box(charging) == (136, 670, 663, 699)
    assert charging.grid_location == G.CENTER  # centre (399.5, 684.5) of 800x1216


def test_zero_height_divider_keeps_its_box_and_gets_no_grid():
    screen = parse((FIXTURES / "uiautomator" / "keydroidx_ui_menu.xml").read_bytes())
    assert (screen.width, screen.height) == (240, 320)
    divider = _find(screen.objects, resource_id="io.github.cctyl.nokia.debug:id/shortcutDivider")
    assert _box(divider) == (6, 87, 226, 87)
    assert divider.grid_location == G.UNKNOWN_LOCATION and not divider.is_actionable
    assert screen.warnings == ["1 object(s) with inverted or zero-size bounds: grid UNKNOWN_LOCATION"]


def test_rico_webview_screen_and_rescale_to_its_screenshot():
    screen = parse((FIXTURES / "rico" / "336.json").read_bytes())
    assert (screen.format, screen.width, screen.height) == ("rico", 1440, 2560)
    decor = screen.objects[0]
    assert decor.android_class == "com.android.internal.policy.PhoneWindow$DecorView"
    assert decor.type == T.FRAMELAYOUT  # from its ancestors chain
    webview = _find(screen.objects, resource_id="com.riversoft.android.mysword:id/webview")
    assert webview.type == T.WEBVIEW and webview.grid_location == G.CENTER
    assert _box(webview) == (0, 280, 1440, 2224)
    assert webview.scrollable and webview.is_actionable
    page_up = _find(screen.objects, content_desc="Page up")
    assert page_up.name == "Page up" and page_up.type == T.IMAGEBUTTON
    assert page_up.grid_location == G.BOTTOM_RIGHT
    menu_item = _find(screen.objects, resource_id="com.riversoft.android.mysword:id/print")
    assert menu_item.android_class == "com.android.internal.view.menu.ActionMenuItemView"
    assert menu_item.type == T.TEXTVIEW  # nothing by name: android.widget.TextView from `ancestors`
    assert object_at(screen.objects, 1300, 1950) == page_up.index  # deeper than the WebView under it

    small = rescale(screen, 540, 960)
    assert small.scale == (0.375, 0.375)
    assert (small.width, small.height) == (540, 960)
    assert _box(small.objects[webview.index]) == (0, 105, 540, 834)
    assert [o.id for o in small.objects] == [o.id for o in screen.objects]
    assert _box(screen.objects[webview.index]) == (0, 280, 1440, 2224), "rescale returns a copy"


def test_rico_inverted_boxes_are_kept_raw():
    screen = parse((FIXTURES / "rico" / "3360.json").read_bytes())
    inverted = [o for o in screen.objects if o.bbox.right < o.bbox.left or o.bbox.bottom < o.bbox.top]
    assert len(inverted) == 41  # counted in the JSON: 27 with right < left, 14 more with bottom < top
    assert sum(o.bbox.right == -55 for o in inverted) == 22  # e.g. [0, 2002, -55, 2170], kept as is
    assert all(o.grid_location == G.UNKNOWN_LOCATION and not o.is_actionable for o in inverted)
    assert any(w.startswith("110 object(s) with inverted or zero-size bounds") for w in screen.warnings)


def test_droidbot_state_objects():
    screen = parse((FIXTURES / "droidbot" / "yelp" / "states" / "state_2017-08-11_202329.json").read_bytes())
    assert (screen.format, screen.width, screen.height) == ("droidbot", 1440, 2560)
    deny = _find(screen.objects, resource_id="com.yelp.android:id/deny_button")
    assert (deny.name, deny.text, deny.type) == ("No, not now", "No, not now", T.BUTTON)
    assert _box(deny) == (53, 2150, 702, 2339)
    assert deny.grid_location == G.BOTTOM_LEFT and deny.is_actionable
    anchor = _find(screen.objects, resource_id="com.yelp.android:id/anchor")
    assert _box(anchor) == (720, 1238, 720, 1238) and anchor.grid_location == G.UNKNOWN_LOCATION
    assert not anchor.visible


def test_droidbot_dialog_only_state_has_an_estimated_size():
    path = FIXTURES / "droidbot" / "yelp" / "states" / "state_2017-08-11_202345.json"
    screen = parse(path.read_bytes())
    assert (screen.width, screen.height, screen.size_estimated) == (1404, 1441, True)
    sized = parse(path.read_bytes(), screen_size=(1440, 2560))
    message = _find(sized.objects, resource_id="android:id/message")
    assert message.text == "Signing up…"
    assert message.grid_location == G.CENTER  # centre (846, 1238) of 1440x2560


def test_uiautomator_module_and_detected_parse_agree():
    data = (FIXTURES / "uiautomator" / "banjen_ui_hierarchy.xml").read_bytes()
    direct = uiautomator.parse(data)
    detected = parse(data)
    assert [o.SerializeToString() for o in direct.objects] == [
        o.SerializeToString() for o in detected.objects
    ]

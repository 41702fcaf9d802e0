"""The uiautomator parser's fast paths give the same objects as its general ones.

The collector fetches a node's attributes in one call when the node has the same attribute names as the first
node, and `bounds.from_strings` decodes a dump's boxes in one pass when all are canonical; everything else
takes the general path. Each test rewrites a real fixture (with lxml, not with the parser) so that some nodes
leave the fast path, and checks the objects against the untouched dump.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

from pipelines.hierarchy import parse
from pipelines.hierarchy.bounds import from_string, from_strings, from_strings_sized
from tests.conftest import FIXTURES

XML_FILES = sorted((FIXTURES / "uiautomator").glob("*.xml"))


def _objects(data: bytes) -> list[bytes]:
    return [o.SerializeToString() for o in parse(data, fmt="uiautomator").objects]


def _rewrite(path: Path, edit) -> bytes:
    """The dump with `edit(index, element)` applied to every <node> in document order, re-serialized."""
    root = etree.parse(str(path)).getroot()
    for index, element in enumerate(root.iter("node")):
        edit(index, element)
    return etree.tostring(root, encoding="utf-8")


def _set_first(element: etree._Element, name: str, value: str) -> None:
    """Put attribute `name` first (attribute order is what the fast path keys on)."""
    items = [(name, value), *((k, v) for k, v in element.attrib.items() if k != name)]
    element.attrib.clear()
    for k, v in items:
        element.set(k, v)


@pytest.mark.parametrize("path", XML_FILES, ids=lambda p: p.name)
def test_attribute_order_and_an_unusual_first_node_change_nothing(path: Path) -> None:
    expected = _objects(path.read_bytes())

    def reverse(_: int, element: etree._Element) -> None:
        items = list(element.attrib.items())[::-1]
        element.attrib.clear()
        for k, v in items:
            element.set(k, v)

    assert _objects(_rewrite(path, reverse)) == expected
    # A first node with an attribute no other node has: every other node takes the general path.
    assert _objects(_rewrite(path, lambda i, e: e.set("drawing-order", "7") if i == 0 else None)) == expected


@pytest.mark.parametrize("path", XML_FILES, ids=lambda p: p.name)
def test_optional_attributes_on_some_nodes_only(path: Path) -> None:
    plain = parse(path.read_bytes(), fmt="uiautomator")
    n = len(plain.objects)
    last, middle = n - 1, n // 2

    def edit(i: int, element: etree._Element) -> None:
        if i == last:
            element.set("hint", "Search here")
        if i == middle:
            element.set("visible-to-user", "false")
        if i == 0:
            _set_first(element, "NAF", "true")

    screen = parse(_rewrite(path, edit), fmt="uiautomator")
    assert len(screen.objects) == n
    assert screen.objects[last].text_hint == "Search here"
    assert not screen.objects[middle].visible and not screen.objects[middle].is_actionable
    assert 0 in screen.naf and set(screen.naf) - {0} == set(plain.naf) - {0}
    for i, (got, want) in enumerate(zip(screen.objects, plain.objects, strict=True)):
        if i not in (last, middle):
            assert got == want, f"object {i} changed"


@pytest.mark.parametrize("path", XML_FILES, ids=lambda p: p.name)
def test_non_canonical_bounds_give_the_same_boxes(path: Path) -> None:
    expected = _objects(path.read_bytes())

    def edit(i: int, element: etree._Element) -> None:
        # "[0,12]" -> "[-0, 012]": spaces, leading zeros and a negative zero read as the same box
        if i % 3 == 0:
            left, rest = element.get("bounds")[1:].split(",", 1)
            top, rest = rest.split("]", 1)
            element.set("bounds", f"[{'-0' if left == '0' else left}, 0{top}]{rest}")

    assert _objects(_rewrite(path, edit)) == expected


def test_from_strings_matches_from_string_one_by_one() -> None:
    texts = [
        "[0,0][1080,1920]", "[-5,-0][10,20]", "[007,1][2,3]", "[ 1,2][3,4]", "[1,2][3,4.5]", "[1,2,3][4]",
        "[1,2][3,4]|[5,6][7,8]", "[1,2]", "[]", "[1,2][3,4]x", "[١,2][3,4]", "[1_0,2][3,4]",
        "[9" + "9" * 5000 + ",2][3,4]",
    ]  # fmt: skip
    for text in texts:
        for batch in ([text], ["[0,0][1,1]", text, "[2,2][3,3]"]):
            boxes, box_texts = from_strings(batch)
            want = [from_string(t) for t in batch]
            as_tuples = [None if b is None else tuple(b) for b in boxes]
            assert as_tuples == [None if b is None else tuple(b) for b in want]
            if box_texts is not None:
                assert box_texts == [",".join(map(str, b)) for b in want], batch
    boxes, box_texts = from_strings(["[0,0][1080,1920]", "[-3,4][5,66]"])
    assert [tuple(b) for b in boxes] == [(0, 0, 1080, 1920), (-3, 4, 5, 66)]
    assert box_texts == ["0,0,1080,1920", "-3,4,5,66"]
    assert from_strings(["[0,0][1,1]", None, ""])[0][1:] == [None, None]


@pytest.mark.parametrize(
    ("texts", "small"),
    [
        (["[0,0][1080,1920]", "[9999,0][0,9999]"], True),
        (["[0,0][1080,1920]", "[10000,0][0,1]"], False),  # five digits
        (["[0,0][1080,1920]", "[-1,0][0,1]"], False),  # a sign
        (["[0,0][1080,1920]", "[0007,0][0,1]"], False),  # a leading zero (read one by one)
        (["[0,0][1080,1920]", ""], False),  # a missing box
        ([], False),
    ],
)
def test_small_boxes_are_only_plain_four_digit_edges(texts: list[str], small: bool) -> None:
    """Screens whose edges are all in 0..9999 get their boxes from code tables (`hierarchy.positions`); the
    flag saying so must never be set for any other screen, and the boxes are `from_strings`' either way."""
    boxes, box_texts, got = from_strings_sized(texts)
    assert got is small
    assert (boxes, box_texts) == from_strings(texts)


@pytest.mark.parametrize("path", XML_FILES, ids=lambda p: p.name)
def test_a_flag_the_first_node_lacks_still_counts(path: Path) -> None:
    """Templates are looked up by the attributes the first node has; a later node setting one the first node
    lacks (here visible-to-user="false", and clickable="true" on another) must not get the default's."""

    def strip(_: int, element: etree._Element) -> None:
        element.attrib.pop("visible-to-user", None)
        element.attrib.pop("clickable", None)

    plain = parse(_rewrite(path, strip), fmt="uiautomator").objects
    hidden, pressable = len(plain) - 1, len(plain) // 2

    def edit(index: int, element: etree._Element) -> None:
        strip(index, element)
        if index == hidden:
            element.set("visible-to-user", "false")
        if index == pressable:
            element.set("clickable", "true")

    edited = parse(_rewrite(path, edit), fmt="uiautomator").objects
    assert not edited[hidden].visible and not edited[hidden].is_actionable
    assert plain[hidden].visible
    assert edited[pressable].clickable and not plain[pressable].clickable
    assert edited[pressable].is_actionable == bool(plain[pressable].grid_location and plain[pressable].visible
                                                   and plain[pressable].enabled)  # fmt: skip
    for i, (a, b) in enumerate(zip(plain, edited, strict=True)):
        if i not in (hidden, pressable):
            assert a == b


def test_positions_of_a_screen_of_20000_views() -> None:
    """Index, parent_index and dom_position are parsed from padded varints (`hierarchy.positions`), whose
    tables grow with the screens seen (past 16384, where three-byte varints are needed for the codes' upper
    bytes): a screen of ~20,000 views (a real dump's windows repeated) gets the same positions as the dump,
    shifted by each copy's offset."""
    path = FIXTURES / "uiautomator" / "UltraNavbar_uidump.xml"
    one = parse(path.read_bytes(), fmt="uiautomator").objects
    root = etree.fromstring(path.read_bytes())
    windows = [etree.tostring(w) for w in root]
    copies = 20_000 // len(one) + 1
    big = b"<hierarchy rotation=\"0\">" + b"".join(windows) * copies + b"</hierarchy>"
    objects = parse(big, fmt="uiautomator").objects
    assert len(objects) == copies * len(one) > 20_000
    for k, o in enumerate(objects):
        ref = one[k % len(one)]
        offset = k - k % len(one)
        assert o.index == o.dom_position.pre_order_id == k
        assert o.parent_index == (-1 if ref.parent_index == -1 else ref.parent_index + offset)
        assert o.dom_position.depth == ref.dom_position.depth
        assert o.dom_position.post_order_id == ref.dom_position.post_order_id + offset
        assert (o.bbox, o.grid_location, o.is_leaf, o.android_class) == (
            ref.bbox, ref.grid_location, ref.is_leaf, ref.android_class
        )


@pytest.mark.parametrize(
    ("bounds", "expected"),
    [
        ("[-5,10][300,-20]", (-5, 10, 300, -20)),  # negative edges
        ("[0,0][20000,40000]", (0, 0, 20000, 40000)),  # far off screen
        ("[0,0][3000000000,1]", None),  # beyond int32: no usable box
    ],
)
def test_unusual_boxes_are_kept_exactly(bounds: str, expected: tuple | None) -> None:
    """A negative, far off-screen or beyond-int32 box is kept as written (or left out when it does not fit
    the proto), and every other object stays as it was (the boxes fill a bbox the template already holds)."""
    path = FIXTURES / "uiautomator" / "keydroidx_ui_menu.xml"
    plain = parse(path.read_bytes(), fmt="uiautomator").objects
    middle = len(plain) // 2
    edited = parse(_rewrite(path, lambda i, e: e.set("bounds", bounds) if i == middle else None), fmt="uiautomator")
    got = edited.objects[middle]
    if expected is None:
        assert not got.HasField("bbox")
    else:
        assert (got.bbox.left, got.bbox.top, got.bbox.right, got.bbox.bottom) == expected
    for i, (o, want) in enumerate(zip(edited.objects, plain, strict=True)):
        if i != middle and want.parent_index != middle:  # (a child's id hashes its parent's)
            assert (o.bbox, o.grid_location, o.is_actionable, o.dom_position) == (
                want.bbox, want.grid_location, want.is_actionable, want.dom_position
            ), f"object {i} changed"


@pytest.mark.parametrize("path", XML_FILES, ids=lambda p: p.name)
def test_naf_on_nodes_after_the_first(path: Path) -> None:
    """A node with the first node's names plus NAF takes the one-fetch row; NAF="true" marks it, NAF="false"
    does not, and NAF with another extra attribute still reads that attribute."""
    plain = parse(path.read_bytes(), fmt="uiautomator")
    n = len(plain.objects)
    marked, unmarked, hinted = n - 1, n // 2, n // 3

    def edit(i: int, element: etree._Element) -> None:
        if i in (marked, hinted):
            element.set("NAF", "true")
        if i == unmarked:
            element.set("NAF", "false")
        if i == hinted:
            element.set("hint", "Type here")

    screen = parse(_rewrite(path, edit), fmt="uiautomator")
    assert set(screen.naf) == (set(plain.naf) - {unmarked}) | {marked, hinted}
    assert screen.objects[hinted].text_hint == "Type here"
    for i, (got, want) in enumerate(zip(screen.objects, plain.objects, strict=True)):
        if i != hinted:
            assert got == want, f"object {i} changed"


def test_a_later_node_without_the_first_nodes_visible_to_user_is_shown() -> None:
    """The first node states visible-to-user and a later one does not (hand-edited or merged dumps): the
    later node is shown, as when it says "true", instead of the template key failing on the missing value."""
    path = FIXTURES / "uiautomator" / "visiontest_hierarchy.xml"
    assert 'visible-to-user="' in path.read_text(encoding="utf-8").split("<node", 2)[1]
    n = len(parse(path.read_bytes(), fmt="uiautomator").objects)
    middle = n // 2

    def shown(i: int, element: etree._Element) -> None:
        if i == middle:
            element.set("visible-to-user", "true")

    def unstated(i: int, element: etree._Element) -> None:
        if i == middle:
            del element.attrib["visible-to-user"]

    expected = _objects(_rewrite(path, shown))
    assert _objects(_rewrite(path, unstated)) == expected

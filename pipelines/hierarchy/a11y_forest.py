"""AndroidEnv accessibility forests (`android_env.AndroidAccessibilityForest`, as saved by AndroidEnv,
AndroidWorld and released in AndroidControl) -> `Screen`.

A forest holds windows; each window a tree of nodes linked by `unique_id` / `child_ids`. Every window becomes a
window root (depth 0, `sibling` = window number) followed by its nodes in pre-order, so DOM positions, ids and
the other computed fields come from `objects.build_screen` exactly as for the other formats. What the Object
proto cannot hold about a window (type, layer, focus, title) goes into `Screen.windows` (`WindowInfo`).
Mapping documented in schemas/objects.md.
"""

from __future__ import annotations

from android_env.proto.a11y import android_accessibility_forest_pb2, android_accessibility_window_info_pb2
from google.protobuf import json_format, message, text_format

from pipelines import protowire
from protos.stepmark import ui_episode_pb2

from .bounds import Box
from .errors import HierarchyError
from .objects import (
    INT32_MAX,
    MAX_DEPTH,
    MAX_OBJECTS,
    RawNode,
    Screen,
    build_screen,
    check_size,
    raw_node,
    resolve_screen_size,
    too_large,
)

FORMAT = "a11y_forest"
Forest = android_accessibility_forest_pb2.AndroidAccessibilityForest
_WINDOW_TYPES = android_accessibility_window_info_pb2.AndroidAccessibilityWindowInfo.WindowType

#: AccessibilityNodeInfo action ids that mean "a user acts on this node": click, long click, scroll
#: forward/backward, expand, collapse, set text (AccessibilityNodeInfo.ACTION_*), and the standard actions
#: scroll up/left/down/right, set progress (sliders) and page up/down/left/right (android.R.id.accessibilityAction*).
INPUT_ACTIONS = frozenset(
    {16, 32, 4096, 8192, 262144, 524288, 2097152}
    | {16908344, 16908345, 16908346, 16908347, 16908349, 16908358, 16908359, 16908360, 16908361}
)


def parse(data: bytes, *, drop_invisible: bool = False, screen_size: tuple[int, int] | None = None) -> Screen:
    """A `Screen` from a binary-serialized forest. Raises HierarchyError (`empty`, `malformed`, `too_large`,
    `too_deep`)."""
    check_size(data)
    if not data:
        raise HierarchyError("empty", "the accessibility forest is empty (0 bytes)")
    check_counts(bytes(data))
    forest = Forest()
    try:
        forest.ParseFromString(bytes(data))
    except message.DecodeError as exc:
        raise HierarchyError(
            "malformed",
            f"not a serialized AndroidAccessibilityForest (truncated, corrupt or not UTF-8): {exc}",
        ) from None
    return from_forest(forest, drop_invisible=drop_invisible, screen_size=screen_size)


#: Field numbers walked by `check_counts`: Forest.windows, Window.tree, Tree.nodes, Node.child_ids,
#: Node.actions, Node.clickable_spans.
_WINDOWS, _TREE, _NODES, _CHILD_IDS, _ACTIONS, _SPANS = 1, 11, 1, 25, 24, 26
#: Sub-messages of all nodes (actions, clickable spans): each costs the parser far more than its 2 wire bytes.
MAX_NODE_PARTS = 20 * MAX_OBJECTS
_HIGH = bytes(range(128, 256))


def check_counts(data: bytes) -> None:
    """Count nodes, child links and node sub-messages on the wire before the protobuf parser allocates them
    (an empty node is 2 bytes on the wire and hundreds in memory; a packed child list 1 byte per id and 8 in
    memory): HierarchyError `too_large` over MAX_OBJECTS / MAX_LINKS / MAX_NODE_PARTS. Bytes that are not
    wire format are left to the parser (`malformed`)."""
    nodes = links = parts = 0
    try:
        for number, wire, start, end in protowire.fields(data):
            if number != _WINDOWS or wire != 2:
                continue
            for w_number, w_wire, t_start, t_end in protowire.fields(data, start, end):
                if w_number != _TREE or w_wire != 2:
                    continue
                for t_number, t_wire, n_start, n_end in protowire.fields(data, t_start, t_end):
                    if t_number != _NODES or t_wire != 2:
                        continue
                    nodes += 1
                    if nodes > MAX_OBJECTS:
                        raise too_large()
                    for f_number, f_wire, f_start, f_end in protowire.fields(data, n_start, n_end):
                        if f_number == _CHILD_IDS:  # packed: one id per byte below 0x80; unpacked: one
                            chunk = data[f_start:f_end]
                            links += len(chunk.translate(None, _HIGH)) if f_wire == 2 else 1
                        elif f_number in (_ACTIONS, _SPANS):
                            parts += 1
                    if links > MAX_LINKS or parts > MAX_NODE_PARTS:
                        what = f"{links} child links" if links > MAX_LINKS else f"{parts} node actions/spans"
                        raise HierarchyError("too_large", f"the forest lists more than {what}; at most "
                                             f"{MAX_LINKS} links and {MAX_NODE_PARTS} actions/spans are read")  # fmt: skip
    except ValueError:
        return


def parse_text(
    data: bytes, *, drop_invisible: bool = False, screen_size: tuple[int, int] | None = None
) -> Screen:
    """A `Screen` from a forest in protobuf text format (`.textproto`)."""
    check_size(data)
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HierarchyError("malformed", f"forest text format is not UTF-8 ({exc})") from None
    if not text.strip():
        raise HierarchyError("empty", "the accessibility forest text is empty")
    # Upper bounds of what the parser would build, counted before it does: every node is written `nodes`, every
    # child link `child_ids` (the words may also occur inside strings: the counts only overestimate).
    nodes, links = data.count(b"nodes"), data.count(b"child_ids")
    if nodes > MAX_OBJECTS or links > MAX_LINKS:
        raise HierarchyError("too_large", f"the forest text names {nodes} nodes and {links} child links; at most "
                             f"{MAX_OBJECTS} and {MAX_LINKS} are read")  # fmt: skip
    forest = Forest()
    try:
        text_format.Parse(text, forest)
    except (text_format.ParseError, RecursionError) as exc:
        raise HierarchyError(
            "malformed", f"not an AndroidAccessibilityForest in text format: {exc}"
        ) from None
    return from_forest(forest, drop_invisible=drop_invisible, screen_size=screen_size)


def to_json(data: bytes, *, text: bool = False) -> bytes:
    """The forest (binary, or protobuf text format when `text`) as canonical protobuf JSON (UTF-8): what
    `Observation.json` holds for a forest step, so a reader of that field gets JSON whatever the source was."""
    forest = Forest()
    if text:
        text_format.Parse(bytes(data).decode("utf-8"), forest)
    else:
        forest.ParseFromString(bytes(data))
    return json_format.MessageToJson(forest, indent=None, ensure_ascii=False).encode("utf-8")


def _box(rect) -> Box | None:
    values = (rect.left, rect.top, rect.right, rect.bottom)
    return Box(*values) if all(-INT32_MAX <= v <= INT32_MAX for v in values) else None


def window_info(window, first: int, count: int) -> ui_episode_pb2.WindowInfo:
    type_name = _WINDOW_TYPES.Name(window.window_type) if window.window_type in _WINDOW_TYPES.values() else ""
    return ui_episode_pb2.WindowInfo(
        id=window.id,
        type=type_name.removeprefix("TYPE_") or str(window.window_type),
        layer=window.layer,
        title=window.title,
        focused=window.is_focused,
        active=window.is_active,
        accessibility_focused=window.is_accessibility_focused,
        picture_in_picture=window.is_in_picture_in_picture_mode,
        display_id=window.display_id,
        first_object=first,
        num_objects=count,
    )


def _raw(node, parent: int, depth: int, sibling: int) -> RawNode:
    """The format-neutral node; `editable` is the source's statement that the node takes input: its
    `is_editable` flag or an input action (INPUT_ACTIONS) in its action list."""
    takes_input = node.is_editable or any(a.id in INPUT_ACTIONS for a in node.actions)
    return raw_node(
        (
            parent,
            depth,
            sibling,
            node.class_name,
            node.package_name,
            node.text,
            node.content_description,
            node.view_id_resource_name,
            node.hint_text,
            _box(node.bounds_in_screen) if node.HasField("bounds_in_screen") else None,
            (
                node.is_clickable,
                node.is_visible_to_user,
                node.is_enabled,
                node.is_focusable,
                node.is_focused,
                node.is_scrollable,
                node.is_long_clickable,
                node.is_selected,
                node.is_checkable,
                node.is_checked,
            ),
            takes_input,
            (),
            False,
        )
    )


#: Child links (`child_ids` entries) read from one forest: twice the node cap leaves room for a few repeats.
MAX_LINKS = 2 * MAX_OBJECTS


def _window_roots(nodes) -> list[int]:
    """Positions of the nodes no other node lists as a child, in forest order."""
    children = {c for n in nodes for c in n.child_ids}
    return [i for i, n in enumerate(nodes) if n.unique_id not in children]


def from_forest(
    forest, *, drop_invisible: bool = False, screen_size: tuple[int, int] | None = None
) -> Screen:
    """Objects of every window, windows in forest order, each window's nodes in pre-order from its root(s).

    A window whose nodes have several roots (or nodes no root reaches, e.g. a child cycle) keeps every root
    and says so in a warning; a node listed twice as a child is placed once.
    """
    if sum(len(w.tree.nodes) for w in forest.windows) > MAX_OBJECTS:
        raise too_large()
    # Counted before anything is built from them: a tree has fewer links than nodes, so more than MAX_LINKS
    # can only be repeats (one child id listed 40 million times in a 40 MB file) or links to nothing.
    links = sum(len(n.child_ids) for w in forest.windows for n in w.tree.nodes)
    if links > MAX_LINKS:
        raise HierarchyError(
            "too_large", f"the forest lists {links} child links; at most {MAX_LINKS} are read ({MAX_OBJECTS} nodes)"
        )
    warnings: list[str] = []
    out: list[RawNode] = []
    windows: list[ui_episode_pb2.WindowInfo] = []
    window_boxes: list[Box | None] = []
    dropped = extra_roots = bad_links = duplicates = 0
    for number, window in enumerate(forest.windows):
        first = len(out)
        nodes = window.tree.nodes
        window_boxes.append(_box(window.bounds_in_screen) if window.HasField("bounds_in_screen") else None)
        by_id: dict[int, int] = {}
        for i, n in enumerate(nodes):
            if n.unique_id in by_id:
                duplicates += 1
            else:
                by_id[n.unique_id] = i
        roots = _window_roots(nodes)
        is_root = set(roots)
        # Nodes no root reaches (a child cycle) are walked as extra roots after the real ones.
        extra_roots += max(len(roots) - 1, 0)
        placed: set[int] = set()
        for start in [*roots, *range(len(nodes))]:
            if start in placed:
                continue
            if start not in is_root:
                extra_roots += 1
            # (node position, parent index or -1 for a root / -2 inside a dropped subtree, depth, sibling)
            stack = [(start, -1, 0, number)]
            while stack:
                pos, parent, depth, sibling = stack.pop()
                if pos in placed:
                    bad_links += 1
                    continue
                placed.add(pos)
                node = nodes[pos]
                if parent == -2 or (drop_invisible and not node.is_visible_to_user):
                    dropped += 1
                    stack.extend((by_id[c], -2, depth + 1, 0) for c in node.child_ids if c in by_id)
                    continue
                if depth > MAX_DEPTH:
                    raise HierarchyError("too_deep", f"forest nodes nested deeper than {MAX_DEPTH} levels")
                out.append(_raw(node, parent, depth, sibling))
                index = len(out) - 1
                kids = node.child_ids
                for k in range(len(kids) - 1, -1, -1):
                    child = by_id.get(kids[k])
                    if child is None:
                        bad_links += 1
                    else:
                        stack.append((child, index, depth + 1, k))
        windows.append(window_info(window, first, len(out) - first))
    if duplicates:
        warnings.append(
            f"{duplicates} node(s) repeating a unique_id of their window: the first one is linked"
        )
    if extra_roots:
        warnings.append(f"{extra_roots} extra root(s) (nodes no window root reaches) kept at depth 0")
    if bad_links:
        warnings.append(f"{bad_links} child link(s) to missing or already placed nodes ignored")
    if dropped:
        warnings.append(f"dropped {dropped} node(s): invisible ones and their subtrees")
    width, height, estimated, from_windows = resolve_screen_size(screen_size, None, window_boxes, warnings)
    screen = build_screen(out, width, height, fmt=FORMAT, warnings=warnings, size_estimated=estimated,
                          size_from_windows=from_windows)  # fmt: skip
    screen.windows = windows
    return screen

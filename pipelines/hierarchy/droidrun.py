"""DroidRun / Mobilerun portal state JSON (`a11y_tree` of nested nodes plus `phone_state`) -> `Screen`.

The portal writes two forms (droidrun-portal `JsonBuilders.elementNodeToJson`, `AccessibilityTreeBuilder`):
  * simple (`/state`): `a11y_tree` is a list of element nodes `{index, resourceId, className, text,
    bounds: "l, t, r, b", children}`: the visible elements only, no flags, no package;
  * full (`/state_full`): `a11y_tree` is one root node `{resourceId, className, packageName, text,
    contentDescription, hint, boundsInScreen: {left, top, right, bottom}, isClickable, isVisibleToUser, ...,
    children}`, beside `device_context.screen_bounds {width, height}`.
Both have `phone_state {currentApp, packageName, activityName, keyboardVisible, isEditable, focusedElement}`.
Field mapping: schemas/layouts.md, section (g). The walk is iterative (an explicit stack), bounded by
MAX_DEPTH and MAX_OBJECTS.
"""

from __future__ import annotations

from .bounds import Box, parse_bounds
from .errors import HierarchyError
from .jsonio import with_json_document
from .objects import (
    MAX_DEPTH,
    MAX_OBJECTS,
    RawNode,
    Screen,
    build_screen,
    raw_node,
    resolve_screen_size,
    stated_size,
    too_large,
)

FORMAT = "droidrun"

#: Flag keys of the full form, in RawNode.flags order; the default is what a node of the simple form (which
#: lists visible elements only and states no flags) is taken to be.
_FLAGS = (
    ("isClickable", False),
    ("isVisibleToUser", True),
    ("isEnabled", True),
    ("isFocusable", False),
    ("isFocused", False),
    ("isScrollable", False),
    ("isLongClickable", False),
    ("isSelected", False),
    ("isCheckable", False),
    ("isChecked", False),
)


def _text(node: dict, key: str) -> str:
    value = node.get(key)
    return value if type(value) is str else ""


def _size(doc: dict) -> tuple[int, int] | None:
    """`device_context.screen_bounds` (full form), else `display_metrics.widthPixels/heightPixels`."""
    context = doc.get("device_context")
    if not isinstance(context, dict):
        return None
    for key, w_key, h_key in (("screen_bounds", "width", "height"), ("display_metrics", "widthPixels", "heightPixels")):
        block = context.get(key)
        size = stated_size(block.get(w_key), block.get(h_key)) if isinstance(block, dict) else None
        if size is not None:
            return size
    return None


def package_of(doc: object) -> str:
    """`phone_state.packageName`: the app in the foreground ("" when absent)."""
    state = doc.get("phone_state") if isinstance(doc, dict) else None
    return _text(state, "packageName") if isinstance(state, dict) else ""


def parse(
    data: bytes,
    *,
    drop_invisible: bool = False,
    screen_size: tuple[int, int] | None = None,
) -> Screen:
    """Objects of a portal state in pre-order; `Screen.width/height`: `screen_size` when given (the
    screenshot's), else `device_context.screen_bounds`, else the window roots' extent."""
    return with_json_document(
        bytes(data),
        lambda doc, warnings: from_document(
            doc, drop_invisible=drop_invisible, screen_size=screen_size, warnings=warnings
        ),
    )


def from_document(
    doc: object,
    *,
    drop_invisible: bool = False,
    screen_size: tuple[int, int] | None = None,
    warnings: list[str] | None = None,
) -> Screen:
    """Same as `parse`, from the already-decoded JSON document."""
    tree = doc.get("a11y_tree") if isinstance(doc, dict) else None
    if isinstance(tree, dict):
        roots = [tree]
    elif isinstance(tree, list):
        roots = tree
    else:
        raise HierarchyError("malformed", "DroidRun state JSON without an 'a11y_tree' list or object")
    warnings = list(warnings or ())
    foreground = package_of(doc)
    nodes: list[RawNode] = []
    root_boxes: list[Box | None] = []
    dropped = bad = 0
    # (node, parent index or -1 for a root, depth, position among siblings)
    stack: list[tuple[object, int, int, int]] = [(roots[i], -1, 0, i) for i in range(len(roots) - 1, -1, -1)]
    while stack:
        node, parent, depth, sibling = stack.pop()
        if not isinstance(node, dict):
            bad += 1
            continue
        if depth > MAX_DEPTH:
            raise HierarchyError("too_deep", f"DroidRun a11y_tree nested deeper than {MAX_DEPTH} levels")
        if len(nodes) >= MAX_OBJECTS:
            raise too_large()
        flags = tuple(node.get(key, default) is True if not default else node.get(key) is not False
                      for key, default in _FLAGS)  # fmt: skip
        if drop_invisible and not flags[1]:
            dropped += 1
            continue  # with its subtree: its children are never pushed
        raw_bounds = node.get("boundsInScreen", node.get("bounds"))
        box = parse_bounds(raw_bounds) if raw_bounds is not None else None
        if raw_bounds is not None and box is None:
            bad += 1
        if parent < 0:
            root_boxes.append(box)
        editable = node.get("isEditable")
        index = len(nodes)
        nodes.append(
            raw_node(
                (
                    parent,
                    depth,
                    sibling,
                    _text(node, "className"),
                    _text(node, "packageName") or foreground,
                    _text(node, "text"),
                    _text(node, "contentDescription"),
                    _text(node, "resourceId"),
                    _text(node, "hint"),
                    box,
                    flags,
                    editable if type(editable) is bool else None,
                    (),
                    False,
                )
            )
        )
        children = node.get("children")
        if isinstance(children, list):
            if len(children) > MAX_OBJECTS:
                raise too_large()
            for position in range(len(children) - 1, -1, -1):
                stack.append((children[position], index, depth + 1, position))
        elif children is not None:
            bad += 1
    if bad:
        warnings.append(f"{bad} node(s) or bounds that are not what the portal writes ignored")
    if dropped:
        warnings.append(f"dropped {dropped} node(s): invisible ones and their subtrees")
    width, height, estimated, from_windows = resolve_screen_size(screen_size, _size(doc), root_boxes, warnings)
    screen = build_screen(nodes, width, height, fmt=FORMAT, warnings=warnings, size_estimated=estimated,
                          size_from_windows=from_windows)  # fmt: skip
    screen.foreground_package = foreground
    return screen

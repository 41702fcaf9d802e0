"""DroidBot state JSON (flat `views` list linked by `temp_id`/`parent`/`children`) -> `Screen`."""

from __future__ import annotations

from operator import itemgetter

from .bounds import Box, from_pairs
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

FORMAT = "droidbot"

# The keys of a DroidBot view that become Object fields, with the value assumed when one is missing.
_VIEW_KEYS = (
    ("class", None),
    ("package", None),
    ("text", None),
    ("content_description", None),
    ("resource_id", None),
    ("bounds", None),
    ("children", None),
    ("editable", None),
    ("clickable", False),
    ("visible", True),
    ("enabled", True),
    ("focusable", False),
    ("focused", False),
    ("scrollable", False),
    ("long_clickable", False),
    ("selected", False),
    ("checkable", False),
    ("checked", False),
)
_VIEW = itemgetter(*(key for key, _ in _VIEW_KEYS))


def parse(
    data: bytes,
    *,
    drop_invisible: bool = False,
    screen_size: tuple[int, int] | None = None,
) -> Screen:
    """Objects of a DroidBot state in pre-order; see `schemas/objects.md` for every field.

    `Screen.width/height`: `screen_size` when given (the screenshot's size: DroidBot captures the native
    resolution), else top-level `width`/`height` if the state has them, else the window roots' extent
    (with a warning when no root starts at the origin, e.g. a state holding only a dialog).
    """
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
    views = doc.get("views") if isinstance(doc, dict) else None
    if not isinstance(views, list):
        raise HierarchyError("malformed", "DroidBot state JSON without a 'views' list")
    if len(views) > MAX_OBJECTS:
        raise too_large()
    warnings = list(warnings or ())
    by_id: dict[int, dict] = {}
    for position, view in enumerate(views):
        if not isinstance(view, dict):
            raise HierarchyError("malformed", f"views[{position}] is not an object")
        temp_id = view.get("temp_id", position)
        if type(temp_id) is not int or temp_id in by_id:
            raise HierarchyError("malformed", f"views[{position}] has a missing or repeated temp_id")
        by_id[temp_id] = view
    parents = [v.get("parent", -1) for v in views]
    # A parent that is not a known temp_id (missing, -1, null, or not even an integer) makes a window root.
    roots = [v for v, p in zip(views, parents, strict=True) if type(p) is not int or p not in by_id]
    orphans = sum(1 for p in parents if p not in (-1, None) and (type(p) is not int or p not in by_id))
    if orphans:
        warnings.append(f"{orphans} view(s) whose parent is missing treated as window roots")
    if views and not roots:
        raise HierarchyError("malformed", "DroidBot views form a cycle: no view without a parent")

    nodes: list[RawNode] = []
    seen: set[int] = set()
    dropped = bad_links = 0
    root_boxes: list[Box | None] = []
    # (view, parent index or -1 for a root or -2 inside a dropped subtree, depth, position among siblings)
    stack: list[tuple[dict, int, int, int]] = [(roots[i], -1, 0, i) for i in range(len(roots) - 1, -1, -1)]
    pop, push, add_seen, lookup = stack.pop, stack.append, seen.add, by_id.get
    while stack:
        view, p, depth, sibling = pop()
        get = view.get
        temp_id = get("temp_id")
        if temp_id in seen:
            bad_links += 1
            continue
        add_seen(temp_id)
        try:  # every key a DroidBot view has, fetched in one C call
            values = _VIEW(view)
        except KeyError:
            values = tuple(get(key, default) for key, default in _VIEW_KEYS)
        (
            android_class,
            package,
            text,
            content_desc,
            resource_id,
            bounds,
            children,
            editable,
            clickable,
            visible,
            enabled,
            focusable,
            focused,
            scrollable,
            long_clickable,
            selected,
            checkable,
            checked,
        ) = values
        visible = visible is not False
        if children is None:
            children = ()
        elif type(children) is not list:
            bad_links += 1
            children = ()
        if p == -2 or (drop_invisible and not visible):
            # Dropped with its whole subtree; walk the subtree anyway so it is counted, not "unreachable".
            dropped += 1
            for child_id in children:
                child = lookup(child_id) if type(child_id) is int else None
                if child is not None:
                    push((child, -2, depth + 1, 0))
            continue
        if depth > MAX_DEPTH:
            raise HierarchyError("too_deep", f"DroidBot views nested deeper than {MAX_DEPTH} levels")
        box = from_pairs(bounds)
        if p < 0:
            root_boxes.append(box)
        index = len(nodes)
        nodes.append(
            raw_node(
                (
                    p,
                    depth,
                    sibling,
                    android_class if type(android_class) is str else "",
                    package if type(package) is str else "",
                    text if type(text) is str else "",
                    content_desc if type(content_desc) is str else "",
                    resource_id if type(resource_id) is str else "",
                    "",
                    box,
                    (
                        clickable is True,
                        visible,
                        enabled is not False,
                        focusable is True,
                        focused is True,
                        scrollable is True,
                        long_clickable is True,
                        selected is True,
                        checkable is True,
                        checked is True,
                    ),
                    editable if type(editable) is bool else None,
                    (),
                    False,
                )
            )
        )
        for position in range(len(children) - 1, -1, -1):
            child_id = children[position]
            child = lookup(child_id) if type(child_id) is int else None
            if child is None:
                bad_links += 1
                continue
            push((child, index, depth + 1, position))
    unreachable = len(views) - len(seen)
    if unreachable:
        warnings.append(f"{unreachable} view(s) unreachable from any root (a parent/children cycle) left out")
    if bad_links:
        warnings.append(f"{bad_links} child link(s) to missing or already placed views ignored")
    if dropped:
        warnings.append(f"dropped {dropped} view(s): invisible ones and their subtrees")

    stated = stated_size(doc.get("width"), doc.get("height"))
    width, height, estimated, from_windows = resolve_screen_size(screen_size, stated, root_boxes, warnings)
    screen = build_screen(nodes, width, height, fmt=FORMAT, warnings=warnings, size_estimated=estimated,
                          size_from_windows=from_windows)  # fmt: skip
    activity = doc.get("foreground_activity")  # "com.yelp.android/.ui.ActivityHome"
    if type(activity) is str and "/" in activity:
        screen.foreground_package = activity.split("/", 1)[0].strip()
    return screen

"""Rico view hierarchy JSON (`activity.root`, nested `children`) -> `Screen`.

Rico boxes live in the 1440x2560 space of the capture device whatever the size of the screenshot (540x960 or
1080x1920): `Screen.width/height` are that space and the converter maps boxes to the image with
`objects.rescale`, which records the factors in `Screen.scale`.
"""

from __future__ import annotations

from operator import itemgetter

from .bounds import from_ltrb
from .errors import HierarchyError
from .jsonio import with_json_document
from .objects import MAX_DEPTH, MAX_OBJECTS, RawNode, Screen, build_screen, raw_node, too_large

FORMAT = "rico"
RICO_WIDTH = 1440
RICO_HEIGHT = 2560


# Keys present on every node of a Rico capture, with the value assumed when one is missing anyway.
_ALWAYS_KEYS = (
    ("class", None),
    ("bounds", None),
    ("ancestors", None),
    ("content-desc", None),
    ("visible-to-user", True),
    ("visibility", "visible"),
    ("clickable", False),
    ("enabled", True),
    ("focusable", False),
    ("focused", False),
    ("scrollable-vertical", False),
    ("scrollable-horizontal", False),
    ("long-clickable", False),
    ("selected", False),
)
_ALWAYS = itemgetter(*(key for key, _ in _ALWAYS_KEYS))
_NO_DESC = [None]
_ANCESTORS: dict[tuple[str, ...], tuple[str, ...]] = {}


def _content_desc(value: object) -> str:
    """Rico stores content-desc as a list (usually `[null]`): non-null entries joined by one space."""
    if isinstance(value, list):
        return " ".join(v for v in value if isinstance(v, str) and v)
    return value if isinstance(value, str) else ""


def _ancestors(value: object) -> tuple[str, ...]:
    """The ancestors list as a tuple of class names (interned: screens repeat the same few chains)."""
    if type(value) is not list:
        return ()
    chain = tuple(value)
    try:
        known = _ANCESTORS.get(chain)
    except TypeError:  # unhashable entries (lists, objects): not class names, so not worth caching
        return tuple(a for a in chain if isinstance(a, str))
    if known is None:
        known = tuple(a for a in chain if isinstance(a, str))
        if len(_ANCESTORS) < 16384:
            _ANCESTORS[chain] = known
    return known


def parse(data: bytes, *, drop_invisible: bool = False) -> Screen:
    """Objects of a Rico hierarchy in pre-order; see `schemas/objects.md` for every field."""
    return with_json_document(
        bytes(data),
        lambda doc, warnings: from_document(doc, drop_invisible=drop_invisible, warnings=warnings),
    )


def from_document(doc: object, *, drop_invisible: bool = False, warnings: list[str] | None = None) -> Screen:
    """Same as `parse`, from the already-decoded JSON document."""
    activity = doc.get("activity") if isinstance(doc, dict) else None
    root = activity.get("root") if isinstance(activity, dict) else None
    if not isinstance(root, dict):
        raise HierarchyError("malformed", "Rico JSON without an object at activity.root")
    warnings = list(warnings or ())
    nodes: list[RawNode] = []
    not_nodes = dropped = 0
    stack: list[tuple[object, int, int, int]] = [(root, -1, 0, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        node, p, depth, sibling = pop()
        if type(node) is not dict:
            not_nodes += 1
            continue
        get = node.get
        try:  # the keys every Rico node has, fetched in one C call
            values = _ALWAYS(node)
        except KeyError:
            values = tuple(get(key, default) for key, default in _ALWAYS_KEYS)
        (
            android_class,
            bounds,
            ancestors,
            content_desc,
            shown,
            visibility,
            clickable,
            enabled,
            focusable,
            focused,
            scroll_vertical,
            scroll_horizontal,
            long_clickable,
            selected,
        ) = values
        visible = shown is not False and visibility == "visible"
        if drop_invisible and not visible:
            dropped += 1
            continue
        if depth > MAX_DEPTH:
            raise HierarchyError("too_deep", f"Rico hierarchy nested deeper than {MAX_DEPTH} levels")
        package = get("package")
        text = get("text")
        resource_id = get("resource-id")
        hint = get("text-hint")
        index = len(nodes)
        if index >= MAX_OBJECTS:
            raise too_large()
        nodes.append(
            raw_node(
                (
                    p,
                    depth,
                    sibling,
                    android_class if type(android_class) is str else "",
                    package if type(package) is str else "",
                    text if type(text) is str else "",
                    _content_desc(content_desc) if content_desc != _NO_DESC else "",
                    resource_id if type(resource_id) is str else "",
                    hint if type(hint) is str else "",
                    from_ltrb(bounds),
                    (
                        clickable is True,
                        visible,
                        enabled is not False,
                        focusable is True,
                        focused is True,
                        scroll_vertical is True or scroll_horizontal is True,
                        long_clickable is True,
                        selected is True,
                        get("checkable") is True,
                        get("checked") is True,
                    ),
                    None,
                    _ancestors(ancestors),
                    False,
                )
            )
        )
        children = get("children")
        if children:
            if type(children) is list:
                for position in range(len(children) - 1, -1, -1):
                    push((children[position], index, depth + 1, position))
            else:
                not_nodes += 1
    if not_nodes:
        warnings.append(f"skipped {not_nodes} child entr(ies) that are not node objects (e.g. null)")
    if dropped:
        warnings.append(f"dropped {dropped} invisible node(s) with their subtrees")
    width, height = RICO_WIDTH, RICO_HEIGHT
    box = nodes[0].box if nodes else None  # None: drop_invisible dropped the root itself
    if box is not None and box.right > RICO_WIDTH and box.right >= box.bottom:
        width, height = RICO_HEIGHT, RICO_WIDTH
        warnings.append("landscape Rico screen: coordinate space 2560x1440")
    return build_screen(nodes, width, height, fmt=FORMAT, warnings=warnings)

"""Rico view hierarchy JSON (`activity.root`, nested `children`) -> `Screen`.

Rico boxes live in the 1440x2560 space of the capture device whatever the size of the screenshot (540x960 or
1080x1920): `Screen.width/height` are that space and the converter maps boxes to the image with
`objects.rescale`, which records the factors in `Screen.scale`.
"""

from __future__ import annotations

from .bounds import from_ltrb
from .errors import HierarchyError
from .jsonio import with_json_document
from .objects import MAX_DEPTH, RawNode, Screen, build_screen, raw_node

FORMAT = "rico"
RICO_WIDTH = 1440
RICO_HEIGHT = 2560


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
    known = _ANCESTORS.get(chain)
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
        visible = get("visible-to-user", True) is not False and get("visibility", "visible") == "visible"
        if drop_invisible and not visible:
            dropped += 1
            continue
        if depth > MAX_DEPTH:
            raise HierarchyError("too_deep", f"Rico hierarchy nested deeper than {MAX_DEPTH} levels")
        ancestors = get("ancestors")
        android_class = get("class")
        package = get("package")
        text = get("text")
        content_desc = get("content-desc")
        resource_id = get("resource-id")
        hint = get("text-hint")
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
                    _content_desc(content_desc) if content_desc != _NO_DESC else "",
                    resource_id if type(resource_id) is str else "",
                    hint if type(hint) is str else "",
                    from_ltrb(get("bounds")),
                    (
                        get("clickable") is True,
                        visible,
                        get("enabled", True) is not False,
                        get("focusable") is True,
                        get("focused") is True,
                        get("scrollable-vertical") is True or get("scrollable-horizontal") is True,
                        get("long-clickable") is True,
                        get("selected") is True,
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
    box = nodes[0].box
    if box is not None and box.right > RICO_WIDTH and box.right >= box.bottom:
        width, height = RICO_HEIGHT, RICO_WIDTH
        warnings.append("landscape Rico screen: coordinate space 2560x1440")
    return build_screen(nodes, width, height, fmt=FORMAT, warnings=warnings)

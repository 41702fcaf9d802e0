"""What every hierarchy format shares: the format-neutral node, the computed fields, and `Screen`.

Format parsers (`uiautomator`, `rico`, `droidbot`) only read their syntax into `RawNode`s, in pre-order with
parent links; `build_screen` computes everything else once, the same way for all formats (definitions in
`schemas/objects.md`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import compress
from operator import add, itemgetter, sub
from typing import NamedTuple

from pipelines.protowire import varint as _varint
from protos.llm4mobile import episode_pb2

from . import positions
from .bounds import Box
from .classes import EDITABLE_TYPES, classify
from .errors import HierarchyError

G = episode_pb2.GridLocation
UNKNOWN_LOCATION = G.UNKNOWN_LOCATION

#: Deepest node level (0 = window root) any parser accepts; deeper input fails with reason `too_deep`.
#: libxml2 (with XML_PARSE_HUGE) refuses element depth 2048, and a dump spends one level on <hierarchy>.
MAX_DEPTH = 2000
INT32_MAX = 2**31 - 1
#: Most objects and bytes one screen may have (reason `too_large`). Real screens hold hundreds to a few
#: thousand views and dumps are well under 10 MB; each object costs about 2 KB of memory while it is built, so
#: these bounds keep one hostile or corrupt file from exhausting a worker's memory.
MAX_OBJECTS = 100_000
MAX_BYTES = 64 * 2**20


def too_large() -> HierarchyError:
    return HierarchyError("too_large", f"more than {MAX_OBJECTS} views in one screen")


def check_size(data: bytes) -> None:
    """`too_large` for hierarchy files beyond MAX_BYTES, before any parsing."""
    if len(data) > MAX_BYTES:
        raise HierarchyError("too_large", f"{len(data)} bytes; a hierarchy may have at most {MAX_BYTES}")


_Object = episode_pb2.Object
_ID_HASH = hashlib.blake2b(digest_size=8)
_Observation = episode_pb2.Observation
_OBJECTS_TAG = b"\x0a"  # Observation.objects: field 1, length-delimited


class RawNode(NamedTuple):
    """One view as a parser read it, before any computed field. Strings are "" when the source has none.

    A tuple so that parsers can build millions of them cheaply (`raw_node(values)`) and `build_screen` can
    unpack one in a single step.
    """

    parent: int  # index of the parent in the node list, -1 for a window root
    depth: int  # 0 for a window root
    sibling: int  # position among the parent's children in the source (window number for roots)
    android_class: str
    package: str
    text: str
    content_desc: str
    resource_id: str
    hint: str
    box: Box | None
    # (clickable, visible, enabled, focusable, focused, scrollable, long_clickable, selected, checkable,
    #  checked): the order of the Object fields.
    flags: tuple[bool, ...]
    editable: bool | None = None  # None: decided from the type (EditText and subclasses)
    ancestors: tuple[str, ...] = ()  # Rico super-classes, nearest first
    naf: bool = False  # uiautomator NAF="true": actionable but not accessibility-friendly (no label)


#: Builds a RawNode from a tuple of all 14 values without the keyword-argument machinery (hot path).
raw_node: Callable[[tuple], RawNode] = partial(tuple.__new__, RawNode)


FLAG_NAMES = (
    "clickable", "visible", "enabled", "focusable", "focused", "scrollable", "long_clickable", "selected",
    "checkable", "checked",
)  # fmt: skip
_CLICKABLE, _VISIBLE, _ENABLED, _FOCUSABLE, _SCROLLABLE, _LONG, _CHECKABLE = 0, 1, 2, 3, 5, 6, 8
_SEEKBAR = episode_pb2.ObjectType.SEEKBAR


@dataclass
class Screen:
    """The objects of one screen, in pre-order, in the hierarchy's coordinate space `width` x `height`."""

    objects: list[episode_pb2.Object]
    width: int
    height: int
    rotation: int = 0
    format: str = ""
    warnings: list[str] = field(default_factory=list)
    #: Indices of uiautomator NAF nodes (not accessibility friendly); the Object proto has no field for it.
    naf: list[int] = field(default_factory=list)
    #: (sx, sy) applied by `rescale` to reach this coordinate space from the parsed one; (1, 1) when parsed.
    scale: tuple[float, float] = (1.0, 1.0)
    #: True when width/height are a guess from window bounds that do not start at the origin (e.g. a state
    #: holding only a dialog): a caller that knows the real size (the screenshot's) should prefer it.
    size_estimated: bool = False
    #: True when width/height are the window roots' extent (the dump states no size and no caller gave one):
    #: a dialog's or a short window's extent may be less than the display (`pipelines/display_size.py`).
    size_from_windows: bool = False
    #: Accessibility-forest windows (`ui_episode_pb2.WindowInfo`), in forest order; empty for other formats.
    windows: list = field(default_factory=list)
    #: The app in the foreground when the screen was captured, when the dump says so (DroidBot's
    #: `foreground_activity`, DroidRun's `phone_state.packageName`); "" otherwise. Used to name the app an
    #: episode tested (schemas/ui_episode.md, `app_package`).
    foreground_package: str = ""


def grid_location(box: Box | None, width: int, height: int) -> int:
    """3x3 cell (1-9, row-major from TOP_LEFT) holding the box centre; UNKNOWN_LOCATION if invalid/off-screen.

    Exact integer arithmetic: column = floor(3 * (left + right) / (2 * width)), same for rows, and the centre
    must satisfy 0 <= centre < size on both axes.
    """
    if box is None or width <= 0 or height <= 0:
        return UNKNOWN_LOCATION
    left, top, right, bottom = box
    if right <= left or bottom <= top:
        return UNKNOWN_LOCATION
    sx = left + right
    sy = top + bottom
    if sx < 0 or sy < 0 or sx >= 2 * width or sy >= 2 * height:
        return UNKNOWN_LOCATION
    return 1 + (3 * sy // (2 * height)) * 3 + 3 * sx // (2 * width)


def readable_name(text: str, content_desc: str, resource_id: str, hint: str) -> str:
    """First non-empty of text, content-desc, hint, resource-id entry name; whitespace collapsed."""
    for value in (text, content_desc, hint):
        if value:
            collapsed = " ".join(value.split())
            if collapsed:
                return collapsed
    if resource_id:
        return resource_id.rsplit("/", 1)[-1]
    return ""


def object_id(parent_id: str, sibling: int, android_class: str, box: Box | None) -> str:
    """Stable id: 16 hex digits of BLAKE2b-64 over "<parent id>/<sibling>|<class>|<l>,<t>,<r>,<b>".

    The parent's id chains the whole DOM path from the window root, so the id survives re-parsing, dropping
    invisible nodes and rescaling (boxes in the hierarchy's own coordinates are hashed). `build_screen`
    inlines this computation; this function is its reference.
    """
    where = "" if box is None else f"{box[0]},{box[1]},{box[2]},{box[3]}"
    key = f"{parent_id}/{sibling}|{android_class}|{where}"
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


_TemplateKey = tuple[str, str, tuple[str, ...], tuple[bool, ...]]


class Template(NamedTuple):
    """What every node with the same class, package, ancestors and flags shares: its serialized Object fields,
    framed as one entry of `Observation.objects` whose length counts the node's position and box fields too
    (`positions.suffixes` appends them; parsing a screen's templates as one Observation is far
    cheaper than setting the fields one by one), is_actionable when the source says nothing of editability /
    says editable / says not editable, and the flags it was made from."""

    entry: bytes
    acts: bool
    acts_editable: bool
    acts_not_editable: bool
    flags: tuple[bool, ...]


# Templates by key, shared by all screens of the process (bounded, cleared when full).
_TEMPLATES: dict[_TemplateKey, Template] = {}
_TEMPLATES_MAX = 16384


def template(key: _TemplateKey) -> Template:
    """The `Template` of (class, package, ancestors, flags)."""
    found = _TEMPLATES.get(key)
    return found if found is not None else _template(key)


def _template(key: _TemplateKey) -> Template:
    android_class, package, ancestors, flags = key
    object_type, multi = classify(android_class, ancestors)
    proto = _Object(
        android_class=android_class,
        android_package=package,
        type=object_type,
        multi_types=multi,
        **dict(zip(FLAG_NAMES, flags, strict=True)),
    )
    usable = flags[_VISIBLE] and flags[_ENABLED]
    # A slider (SeekBar and its subclasses, e.g. RatingBar) takes input by dragging, not by a click flag: it
    # acts when it can take focus.
    slider = (object_type == _SEEKBAR or _SEEKBAR in multi) and flags[_FOCUSABLE]
    acts = flags[_CLICKABLE] or flags[_LONG] or flags[_CHECKABLE] or flags[_SCROLLABLE] or slider
    type_editable = object_type in EDITABLE_TYPES or any(t in EDITABLE_TYPES for t in multi)
    serialized = proto.SerializeToString()
    entry = Template(
        # Framed with room for the node's position and box fields, which `build_columns` appends.
        _OBJECTS_TAG + _varint(len(serialized) + positions.SUFFIX_LENGTH) + serialized,
        usable and (acts or type_editable),  # the source has no editable flag: decided by the type
        usable,  # the source says editable
        usable and acts,  # the source says not editable
        tuple(flags),
    )
    if len(_TEMPLATES) >= _TEMPLATES_MAX:
        _TEMPLATES.clear()
    _TEMPLATES[key] = entry
    return entry


class RawColumns(NamedTuple):
    """The `RawNode` fields of all nodes of a screen, one sequence per field (same names and order).

    Parsers that read a screen column by column (uiautomator) hand these to `build_columns` directly;
    `build_screen` transposes its rows into them.
    """

    parent: Sequence[int]
    depth: Sequence[int]
    sibling: Sequence[int]
    android_class: Sequence[str]
    package: Sequence[str]
    text: Sequence[str]
    content_desc: Sequence[str]
    resource_id: Sequence[str]
    hint: Sequence[str]
    box: Sequence[Sequence[int] | None]  # (left, top, right, bottom): `Box`es, or lists (bounds.from_strings)
    flags: Sequence[tuple[bool, ...]]
    editable: Sequence[bool | None]
    ancestors: Sequence[tuple[str, ...]]
    naf: Sequence[bool]


#: RawColumns from an iterable of its 14 sequences without NamedTuple's Python-level __new__.
new_columns: Callable[..., RawColumns] = partial(tuple.__new__, RawColumns)


def build_screen(
    nodes: Sequence[RawNode],
    width: int,
    height: int,
    *,
    rotation: int = 0,
    fmt: str = "",
    warnings: list[str] | None = None,
    size_estimated: bool = False,
    size_from_windows: bool = False,
) -> Screen:
    """Objects with every computed field from pre-ordered nodes (parents before children)."""
    columns = new_columns(zip(*nodes, strict=True) if nodes else [()] * len(RawColumns._fields))
    return build_columns(
        columns,
        width,
        height,
        rotation=rotation,
        fmt=fmt,
        warnings=warnings,
        size_estimated=size_estimated,
        size_from_windows=size_from_windows,
    )


def build_columns(
    columns: RawColumns,
    width: int,
    height: int,
    *,
    rotation: int = 0,
    fmt: str = "",
    warnings: list[str] | None = None,
    size_estimated: bool = False,
    size_from_windows: bool = False,
    box_texts: Sequence[str] | None = None,
    templates: Sequence[Template] | None = None,
    small_boxes: bool = False,
) -> Screen:
    """`build_screen` from columns. `box_texts`, when the parser has them, are the boxes exactly as
    `"{left},{top},{right},{bottom}"` formats them (they go into the ids), saving that formatting;
    `templates`, when the parser has them (see `template`), are the nodes' templates, saving their lookup;
    `small_boxes` says every box is there with its edges in 0..bounds.SMALL_EDGES-1
    (`bounds.from_strings_sized` vouches for that), so the boxes are parsed with the positions instead of set
    field by field."""
    warnings = list(warnings or ())
    parents, depths, siblings, classes, packages, texts, descs, resource_ids, hints, boxes, flags = (
        columns[:11]
    )
    n = len(parents)
    # Subtree sizes, leaves first (a leaf's is 1); a window root's parent -1 lands in the extra last slot.
    size = [1] * (n + 1)
    for i in range(n - 1, -1, -1):
        size[parents[i]] += size[i]

    # Everything per node that is not a proto field is prepared column by column.
    if box_texts is None:  # how the id key writes a box ("" for none)
        box_texts = ["" if b is None else f"{b[0]},{b[1]},{b[2]},{b[3]}" for b in boxes]
    if templates is not None:
        cached: Sequence[Template] = templates
    else:
        cached = list(map(_TEMPLATES.get, zip(classes, packages, columns.ancestors, flags, strict=True)))
        if None in cached:
            template_keys = zip(classes, packages, columns.ancestors, flags, strict=True)
            cached = [entry or _template(key) for entry, key in zip(cached, template_keys, strict=True)]
    # post-order id = pre-order id - depth + subtree size - 1
    post_orders = list(map(sub, map(add, range(-1, n - 1), size), depths))
    entries = map(itemgetter(0), cached)
    serialized = positions.suffixes(entries, parents, depths, post_orders, boxes if small_boxes else None)
    protos = list(_Observation.FromString(serialized).objects)

    ids: list[str] = [""] * (n + 1)  # ids[-1]: the "" parent id of window roots
    new_hash = _ID_HASH.copy  # copying a prepared BLAKE2b-64 state is cheaper than constructing one
    missing = invalid = off_screen = outside = 0
    w2, h2 = 2 * width, 2 * height
    i = -1
    rows = zip(
        protos, parents, siblings, classes, box_texts, size, boxes, texts, descs, resource_ids, hints, cached,
        columns.editable, strict=False,  # size has an extra last slot
    )  # fmt: skip
    for o, p, sibling, android_class, box_text, subtree, box, text, desc, rid, hint, entry, editable in rows:
        i += 1
        parent_id = ids[p]
        hasher = new_hash()
        hasher.update(f"{parent_id}/{sibling}|{android_class}|{box_text}".encode())
        ids[i] = o.id = hasher.hexdigest()
        if parent_id:
            o.parent_id = parent_id
        elif p < 0:  # a window root: its parent_index was parsed as 0 (see `positions`)
            o.parent_index = p
        if text:
            o.text = text
        if desc:
            o.content_desc = desc
        if rid:
            o.resource_id = rid
        if hint:
            o.text_hint = hint
        name = text or desc or hint
        if name:
            name = " ".join(name.split()) or readable_name(text, desc, rid, hint)
        elif rid:
            name = rid.rsplit("/", 1)[-1]
        if name:
            o.name = name
        grid = UNKNOWN_LOCATION
        if box is not None and not small_boxes:  # fill the all-zero bbox parsed with the positions
            b = o.bbox
            try:
                b.left, b.top, b.right, b.bottom = box
            except ValueError:  # a coordinate outside int32: no usable box
                box = None
        if box is None:
            o.ClearField("bbox")
            missing += 1
        else:
            left, top, right, bottom = box
            if right <= left or bottom <= top:
                invalid += 1
            else:
                sx = left + right
                sy = top + bottom
                if sx < 0 or sy < 0 or sx >= w2 or sy >= h2:
                    off_screen += 1
                else:
                    grid = 1 + (3 * sy // h2) * 3 + 3 * sx // w2
                    o.grid_location = grid
                    if left < 0 or top < 0 or right > width or bottom > height:
                        outside += 1
        if subtree == 1:
            o.is_leaf = True
        if grid:
            if entry[1] if editable is None else (entry[2] if editable else entry[3]):
                o.is_actionable = True
    if missing:
        warnings.append(
            f"{missing} object(s) without usable bounds (missing, unparseable or beyond int32): "
            "bbox unset, grid UNKNOWN_LOCATION"
        )
    if invalid:
        warnings.append(f"{invalid} object(s) with inverted or zero-size bounds: grid UNKNOWN_LOCATION")
    if off_screen:
        warnings.append(f"{off_screen} object(s) with the box centre off-screen: grid UNKNOWN_LOCATION")
    if outside:
        warnings.append(f"{outside} object(s) partly outside the {width}x{height} screen (boxes kept as is)")
    naf = list(compress(range(n), columns.naf)) if True in columns.naf else []
    return Screen(
        protos, width, height, rotation, fmt, warnings, naf, (1.0, 1.0), size_estimated, size_from_windows
    )


def window_size(boxes: Sequence[Sequence[int] | None]) -> tuple[int, int]:
    """Screen size from the window roots' boxes: the largest right and bottom edges (0 when none).

    Boxes with an edge beyond int32 (unusable in the protos) are ignored."""
    width = height = 0
    for b in boxes:
        if b is not None and max(b) < INT32_MAX and min(b) > -INT32_MAX:
            width = max(width, b[2])
            height = max(height, b[3])
    return width, height


def screen_size_from_windows(
    boxes: Sequence[Sequence[int] | None], warnings: list[str]
) -> tuple[int, int, bool]:
    """Screen size for a dump that does not state it: `window_size` of the window roots, flagged as estimated
    (with a warning) when no window starts at the origin (a dialog-only state), so the caller may prefer the
    screenshot's size."""
    width, height = window_size(boxes)
    # Estimated when no window starts at the origin on either axis (lefts all > 0, or tops all > 0).
    present = False
    lefts_positive = tops_positive = True
    for b in boxes:  # (a loop: screens have one to a few windows, and generators cost more than that)
        if b is not None:
            present = True
            lefts_positive = lefts_positive and b[0] > 0
            tops_positive = tops_positive and b[1] > 0
    estimated = present and (lefts_positive or tops_positive)
    if estimated:
        warnings.append(estimated_warning(width, height))
    return width, height, estimated


def estimated_warning(width: int, height: int) -> str:
    """The warning of a screen size guessed from windows that do not start at the origin."""
    return f"screen size {width}x{height} estimated from windows that do not start at the origin"


def stated_size(width: object, height: object) -> tuple[int, int] | None:
    """The screen size a dump states, when both are positive integers that fit the protos' int32 (not bools);
    None otherwise, so that `resolve_screen_size` falls back to the windows' extent."""
    if type(width) is int and type(height) is int and 0 < width <= INT32_MAX and 0 < height <= INT32_MAX:
        return width, height
    return None


def resolve_screen_size(
    screen_size: tuple[int, int] | None,
    stated: tuple[int, int] | None,
    window_boxes: Sequence[Sequence[int] | None],
    warnings: list[str],
) -> tuple[int, int, bool, bool]:
    """(width, height, estimated, from_windows) of a screen, in every format's order of trust: the size the
    caller passed, else the size the dump states (`stated`, None when it states none), else the windows'
    extent (`screen_size_from_windows`; `from_windows` True). An unknown size is named in `warnings`."""
    estimated = from_windows = False
    if screen_size is not None:
        width, height = screen_size
    elif stated is not None:
        width, height = stated
    else:
        width, height, estimated = screen_size_from_windows(window_boxes, warnings)
        from_windows = True
    if width <= 0 or height <= 0:
        warnings.append("screen size unknown (no window bounds): every grid location is UNKNOWN_LOCATION")
    return width, height, estimated, from_windows


def _scale(value: int, new: int, old: int) -> int:
    # round(value * new / old), half away from zero, in exact integer arithmetic.
    num = value * new
    if num >= 0:
        return (2 * num + old) // (2 * old)
    return -((-2 * num + old) // (2 * old))


def rescale(screen: Screen, width: int, height: int) -> Screen:
    """A copy of `screen` with boxes mapped to a `width` x `height` image and grid locations recomputed.

    Each coordinate c becomes round(c * width / screen.width) (x) or round(c * height / screen.height) (y),
    half away from zero; nothing is clamped. Grid locations come from the source boxes in the source space
    (the exact cell of the scaled box), not from the rounded boxes. `Screen.scale` records the factors applied (composed with any
    earlier rescale). Warnings are carried over with one line naming the mapping.
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"cannot rescale to {width}x{height}")
    if screen.width <= 0 or screen.height <= 0:
        raise ValueError(f"cannot rescale a screen of unknown size {screen.width}x{screen.height}")
    old_w, old_h = screen.width, screen.height
    objects = []
    overflow = 0
    for src in screen.objects:
        o = _Object()
        o.CopyFrom(src)
        if src.HasField("bbox"):
            sb = src.bbox
            box = Box(
                _scale(sb.left, width, old_w),
                _scale(sb.top, height, old_h),
                _scale(sb.right, width, old_w),
                _scale(sb.bottom, height, old_h),
            )
            if max(box) > INT32_MAX or min(box) < -INT32_MAX - 1:  # scaled up beyond the proto's int32
                overflow += 1
                o.ClearField("bbox")
                o.grid_location = UNKNOWN_LOCATION
                o.is_actionable = False
            else:
                b = o.bbox
                b.left, b.top, b.right, b.bottom = box
                # From the source coordinates, exactly: scaling keeps the centre's cell, rounding may not.
                o.grid_location = grid_location(Box(sb.left, sb.top, sb.right, sb.bottom), old_w, old_h)
        objects.append(o)
    sx, sy = screen.scale
    warnings = list(screen.warnings)
    if overflow:
        warnings.append(f"{overflow} object(s) whose rescaled box does not fit int32: bbox unset")
    if (old_w, old_h) != (width, height):
        warnings.append(f"boxes rescaled from {old_w}x{old_h} to {width}x{height}")
    return Screen(
        objects,
        width,
        height,
        screen.rotation,
        screen.format,
        warnings,
        list(screen.naf),
        (sx * width / old_w, sy * height / old_h),
        screen.size_estimated,
        screen.size_from_windows,
        list(screen.windows),
        screen.foreground_package,
    )


def object_at(objects: Sequence[episode_pb2.Object], x: int, y: int) -> int | None:
    """Index of the deepest visible object whose box contains (x, y); None when no object does.

    Containment is left <= x < right and top <= y < bottom. Among equally deep objects the later one in
    pre-order wins (it is drawn on top). Objects without a valid box never match.
    """
    best: int | None = None
    best_depth = -1
    for o in objects:
        if not o.visible:
            continue
        b = o.bbox
        if b.left <= x < b.right and b.top <= y < b.bottom:
            depth = o.dom_position.depth
            if depth >= best_depth:
                best_depth = depth
                best = o.index
    return best

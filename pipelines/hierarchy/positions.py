"""The per-node integer fields of an `Object` (index, parent_index, dom_position, bbox) as wire-format bytes.

`objects.build_columns` appends these to each node's template bytes and parses a whole screen at once: setting
the nine fields and fetching two sub-messages from Python costs several times more than parsing them. Every
number is written as a varint padded to a fixed width (a varint may carry extra 0x80-continued bytes; every
protobuf parser reads it as the same number, and serializing writes it minimally again), so every node's
suffix has the same length, `SUFFIX_LENGTH`, and a template can frame its entry once for all nodes. The codes
are kept in tables indexed by the number, grown on demand, so a screen's suffixes are C-level look-ups and one
join.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import itemgetter

from google.protobuf.descriptor import FieldDescriptor

from pipelines.protowire import varint
from protos.llm4mobile import episode_pb2

_WIDTH = 3  # bytes per padded varint: numbers below 2**21 (MAX_OBJECTS and MAX_DEPTH are far below)
LIMIT = 1 << (7 * _WIDTH)

_OBJECT = episode_pb2.Object.DESCRIPTOR.fields_by_name
_DOM = episode_pb2.DomPosition.DESCRIPTOR.fields_by_name
_BOX = episode_pb2.BoundingBox.DESCRIPTOR.fields_by_name


def _tag(field: FieldDescriptor, wire_type: int = 0) -> bytes:
    """A field's key: its number and wire type (0: varint, 2: length-delimited)."""
    return varint(field.number << 3 | wire_type)


_PARENT_INDEX_TAG = _tag(_OBJECT["parent_index"])
_INDEX_TAG = _tag(_OBJECT["index"])
# dom_position holds three tagged padded varints, bbox four.
_DOM_HEAD = _tag(_OBJECT["dom_position"], 2) + varint(3 * (1 + _WIDTH))
_DEPTH_TAG = _tag(_DOM["depth"])
_PRE_ORDER_TAG = _tag(_DOM["pre_order_id"])
_POST_ORDER_TAG = _tag(_DOM["post_order_id"])
_BOX_HEAD = _tag(_OBJECT["bbox"], 2) + varint(4 * (1 + _WIDTH))
_EDGE_TAGS = tuple(_tag(_BOX[name]) for name in ("left", "top", "right", "bottom"))  # `Box` order

# Tables are kept for numbers below this, which covers objects.MAX_OBJECTS: the lists grow with the largest
# screen seen (about 0.2 KB per view: ~20 MB after a screen of 100,000 views, ~0.4 MB for usual ones), so a
# huge screen pays for its codes once. Anything larger builds its longer tables for itself.
_KEEP = 1 << 17


def _padded(n: int) -> bytes:
    """`n` (0 <= n < LIMIT) as a varint of exactly `_WIDTH` bytes."""
    out = bytearray()
    for _ in range(_WIDTH - 1):
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _code(tags: tuple[bytes, ...], k: int) -> bytes:
    """Each of `tags` followed by the padded varint of `k`."""
    value = _padded(k)
    return value.join(tags) + value


# First bytes of the padded varints: the low 7 bits with the continuation bit.
_LOW = [bytes((low | 0x80,)) for low in range(128)]


def _codes(tags: tuple[bytes, ...], start: int, stop: int) -> list[bytes]:
    """`_code(tags, k)` for k in start..stop-1, a block of 128 numbers (which share their two upper varint
    bytes) at a time: a screen beyond the kept tables builds its own, so this must be quick."""
    codes: list[bytes] = []
    first = start - start % 128
    for base in range(first, stop, 128):
        upper = bytes(((base >> 7) & 0x7F | 0x80, base >> 14))
        codes.extend(value.join(tags) + value for value in [low + upper for low in _LOW])
    return codes[start - first : stop - first]


class _Tables:
    """For each of some tag tuples, the codes of 0, 1, 2, ... (`_codes`), in lists that grow together; each
    list ends with its `lasts` entry when one is given (what a -1 index reads)."""

    def __init__(self, *tag_sets: tuple[bytes, ...], lasts: tuple[bytes | None, ...] = ()) -> None:
        self.tag_sets = tag_sets
        self.lasts = lasts or (None,) * len(tag_sets)
        # (size, lists): one attribute, so that a thread never sees a size with the lists of another.
        self.state: tuple[int, tuple[list[bytes], ...]] = (0, tuple([] for _ in tag_sets))

    def grown(self, n: int) -> tuple[list[bytes], ...]:
        """Lists holding at least the codes of 0..n-1: new ones (threads may be reading the old ones), kept
        when n <= _KEEP."""
        size, lists = self.state
        grown = tuple(
            [*old[:size], *_codes(tags, size, n), *(() if last is None else (last,))]
            for old, tags, last in zip(lists, self.tag_sets, self.lasts, strict=True)
        )
        if n <= _KEEP:
            self.state = (n, grown)
        return grown


# Per node number: parent_index (a window root's -1 does not fit the fixed width, so roots read a 0 at the
# list's end and `build_columns` sets their parent_index itself: assigning a field replaces the parsed value);
# depth, after the dom_position header; post_order_id; pre_order_id (which ends dom_position), then
# Object.index, the same number.
_NODES = _Tables(
    (_PARENT_INDEX_TAG,),
    (_DOM_HEAD + _DEPTH_TAG,),
    (_POST_ORDER_TAG,),
    (_PRE_ORDER_TAG, _INDEX_TAG),
    lasts=(_PARENT_INDEX_TAG + _padded(0), None, None, None),
)
# Per coordinate: the four box edges, the bbox header before the left one. Used for screens whose edges are
# all in 0..bounds.SMALL_EDGES-1 (as the caller vouches); other screens get an all-zero box for each node,
# which `build_columns` sets (or clears) itself.
_EDGES = _Tables((_BOX_HEAD + _EDGE_TAGS[0],), *((tag,) for tag in _EDGE_TAGS[1:]))
_ZERO_BOX = b"".join(_code(tags, 0) for tags in _EDGES.tag_sets)
#: Bytes every node's suffix adds to its template's serialized Object.
SUFFIX_LENGTH = sum(len(_code(tags, 0)) for tags in _NODES.tag_sets) + len(_ZERO_BOX)


def _pick(codes: list[bytes], numbers: Sequence[int]) -> Sequence[bytes]:
    """`codes[k]` for each k of `numbers`, in one C call when there are several."""
    return itemgetter(*numbers)(codes) if len(numbers) > 1 else list(map(codes.__getitem__, numbers))


def _box_codes(boxes: Sequence[Sequence[int]]) -> list[Sequence[bytes]]:
    """The left, top, right and bottom codes of every box (every edge in 0..bounds.SMALL_EDGES-1)."""
    edges = list(zip(*boxes, strict=True))
    _, codes = _EDGES.state
    try:
        return list(map(_pick, codes, edges))
    except IndexError:  # an edge beyond the codes made so far
        return list(map(_pick, _EDGES.grown(max(map(max, edges)) + 1), edges))


def suffixes(
    entries: Iterable[bytes],
    parents: Sequence[int],
    depths: Sequence[int],
    post_orders: Sequence[int],
    small_boxes: Sequence[Sequence[int]] | None = None,
) -> bytes:
    """`entries` (one framed template per node, in pre-order) each followed by its node's parent_index (0 for
    a window root), dom_position, index and bbox, joined. The bbox is `small_boxes`' when given (every edge in
    0..bounds.SMALL_EDGES-1), else all zero."""
    n = len(parents)  # (in a tree, every depth is below the node count)
    if n >= LIMIT:
        raise ValueError(f"{n} nodes: positions are written for fewer than {LIMIT}")
    size, (parent_codes, depth_codes, post_codes, index_codes) = _NODES.state
    if n > size:
        parent_codes, depth_codes, post_codes, index_codes = _NODES.grown(n)
    columns = [
        entries,
        _pick(parent_codes, parents),  # -1 reads the root's code at the end
        _pick(depth_codes, depths),
        _pick(post_codes, post_orders),
        index_codes[:n],
        *(_box_codes(small_boxes) if small_boxes is not None else [[_ZERO_BOX] * n]),
    ]
    # Interleaved by slice assignment (C-level copies, no tuple per node), then joined.
    width = len(columns)
    parts: list[Iterable[bytes]] = [b""] * (width * n)
    for j, column in enumerate(columns):
        parts[j::width] = column  # type: ignore[assignment]
    return b"".join(parts)  # type: ignore[arg-type]

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
from itertools import chain, repeat

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
_DEPTH_TAG, _PRE_ORDER_TAG, _POST_ORDER_TAG = (_tag(_DOM[n]) for n in ("depth", "pre_order_id", "post_order_id"))
_BOX_HEAD = _tag(_OBJECT["bbox"], 2) + varint(4 * (1 + _WIDTH))
_EDGE_TAGS = tuple(_tag(_BOX[name]) for name in ("left", "top", "right", "bottom"))  # `Box` order

# Tables are kept for numbers below this (a few MB); a larger screen builds its longer tables for itself.
_KEEP = 16384


def _padded(n: int) -> bytes:
    """`n` (0 <= n < LIMIT) as a varint of exactly `_WIDTH` bytes."""
    out = bytearray()
    for _ in range(_WIDTH - 1):
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Codes:
    """Each of `tags` followed by the padded varint of k, for k = 0, 1, 2, ...; the last entry is `last` when
    given (so that a -1 index reads it)."""

    def __init__(self, *tags: bytes, last: bytes | None = None) -> None:
        self.tags, self.last = tags, last
        self.table: list[bytes] = [] if last is None else [last]

    def code(self, k: int) -> bytes:
        value = _padded(k)
        return b"".join(tag + value for tag in self.tags)

    def upto(self, n: int) -> list[bytes]:
        """A table holding at least the codes of 0..n-1 (and `last` at its end). A longer table is a new list
        (threads may be reading the old one)."""
        table = self.table
        extra = () if self.last is None else (self.last,)
        have = len(table) - len(extra)
        if have >= n:
            return table
        table = [*table[:have], *map(self.code, range(have, n)), *extra]
        if n <= _KEEP:
            self.table = table
        return table


# Parent indices: a window root's -1 does not fit the fixed width, so roots read a 0 (the table's last
# entry) and `build_columns` sets their parent_index itself (assigning a field replaces the parsed value).
_PARENTS = _Codes(_PARENT_INDEX_TAG, last=_PARENT_INDEX_TAG + _padded(0))
_DEPTHS = _Codes(_DOM_HEAD + _DEPTH_TAG)  # the dom_position header, then depth
_POST_ORDERS = _Codes(_POST_ORDER_TAG)
# pre_order_id k (the last field of dom_position), then Object.index k: the same number.
_INDICES = _Codes(_PRE_ORDER_TAG, _INDEX_TAG)
# Box edges: the bbox header comes with the left edge. Boxes go through these codes only when every edge of
# the screen is in 0.._KEEP-1 (the usual case); otherwise every node gets the all-zero box and `build_columns`
# sets (or clears) each box itself.
_LEFTS = _Codes(_BOX_HEAD + _EDGE_TAGS[0])
_TOPS, _RIGHTS, _BOTTOMS = (_Codes(tag) for tag in _EDGE_TAGS[1:])
_ZERO_BOX = b"".join(codes.code(0) for codes in (_LEFTS, _TOPS, _RIGHTS, _BOTTOMS))
#: Bytes every node's suffix adds to its template's serialized Object.
SUFFIX_LENGTH = sum(len(codes.code(0)) for codes in (_PARENTS, _DEPTHS, _POST_ORDERS, _INDICES)) + len(
    _ZERO_BOX
)


def _box_codes(boxes: Sequence[Sequence[int] | None]) -> list[Iterable[bytes]] | None:
    """The four edge codes of every box, or None when a box is missing or an edge is outside 0.._KEEP-1."""
    if not boxes or None in boxes:
        return None
    edges = list(zip(*boxes, strict=True))
    if len(edges) != 4:
        return None
    largest = max(map(max, edges))
    if largest >= _KEEP or min(map(min, edges)) < 0:
        return None
    return [map(codes.upto(largest + 1).__getitem__, edge) for codes, edge in zip(_EDGE_CODES, edges, strict=True)]


_EDGE_CODES = (_LEFTS, _TOPS, _RIGHTS, _BOTTOMS)


def suffixes(
    entries: Iterable[bytes],
    parents: Sequence[int],
    depths: Sequence[int],
    post_orders: Sequence[int],
    boxes: Sequence[Sequence[int] | None],
) -> tuple[bytes, bool]:
    """`entries` (one framed template per node, in pre-order) each followed by its node's index,
    parent_index (0 for a window root), dom_position and bbox, joined; and whether the boxes are the nodes'
    (else every bbox is all zero, for the caller to set)."""
    n = len(parents)
    deepest = max(depths, default=0)
    if n >= LIMIT or deepest >= LIMIT:
        raise ValueError(f"{n} nodes {deepest} deep: positions are written below {LIMIT}")
    parent_codes = _PARENTS.upto(n)
    depth_codes = _DEPTHS.upto(deepest + 1)
    post_codes = _POST_ORDERS.upto(n)
    box_codes = _box_codes(boxes)
    joined = b"".join(
        chain.from_iterable(
            zip(
                entries,
                map(parent_codes.__getitem__, parents),
                map(depth_codes.__getitem__, depths),
                map(post_codes.__getitem__, post_orders),
                _INDICES.upto(n),
                *(box_codes or [repeat(_ZERO_BOX)]),
                strict=False,  # the tables are longer than the n entries
            )
        )
    )
    return joined, box_codes is not None

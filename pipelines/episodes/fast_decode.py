"""envlogger's step decoding straight from the wire bytes: `decode(raw)` == `codec.decode(Data.FromString(raw))`.

envlogger's codec walks the parsed message in Python: every nested value is a upb wrapper object, and every
leaf tries a dozen value fields in turn. A Procgen record costs ~50 us that way, most of a read. This reads the
serialized `Data` directly, one pass over the bytes, and builds the same values (types, dtypes, shapes, dict
key order) with numpy straight from the payloads.

It takes the layout protobuf serializers write: each field once, in field-number order, packed numeric
values, one kind of value per leaf, no unknown fields. Anything else (and any damage) goes to the codec over
upb, which gives the answer or the error it always gave. Pinned to envlogger 1.2's codec
(tests/pipelines/episodes/test_fast_decode.py compares them on real records of every environment family and
on generated values of every leaf type).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from envlogger.converters import codec
from envlogger.proto import storage_pb2

from pipelines.episodes import decode_plans

_SCALAR_DIM = codec._SCALAR_DIM_SIZE  # noqa: SLF001 - the codec's reserved "this is a scalar" shape
_U64 = 1 << 64
_I64_MIN = 1 << 63
# Longer varint-packed payloads go to upb for that leaf: its C loop beats a Python one.
_MAX_PY_VARINTS = 1024
# Containers nested deeper go to the codec: upb refuses messages nested past 100 (a dict level is 3 of them),
# and the walk must not read what the codec's parser refuses.
_MAX_DEPTH = 20


class _Irregular(Exception):
    """Bytes outside the short path's layout: the codec over upb decides."""


class _LongVarints(Exception):
    """A leaf of many varint-packed numbers: upb parses that leaf."""


# What bytes that are not a plan's layout (or are damaged) raise in a plan or the walk.
_MISSES = (_Irregular, IndexError, ValueError, TypeError, struct.error, OverflowError)
_MAX_PLANS = 4  # an episode's first, middle and last records, and one more
# The plans of the layouts seen last, most recent first; compiling waits after a plan that never served
# (records whose layout changes every time, e.g. shapes that vary, must not pay a compile each).
_plans: list[Callable[[bytes], Any]] = []
_compile = {"wait": 0, "backoff": 1, "fresh": False}
_plans_lock = threading.Lock()  # readers in several threads (Beam, Dask) share the plans


def decode(raw: bytes) -> Any:
    """The value envlogger's codec decodes from the serialized `Data` `raw`: by the plan of its layout when
    there is one (`decode_plans`), else by the walk over its bytes, else by the codec."""
    for i, plan in enumerate(_plans):
        try:
            value = plan(raw)
        except _MISSES:
            continue
        if i or _compile["fresh"]:
            with _plans_lock:
                if plan in _plans:
                    _plans.remove(plan)
                    _plans.insert(0, plan)
                _compile.update(fresh=False, backoff=1)
        return value
    try:
        value = _data(raw, 0, len(raw))
    except _MISSES:
        return codec.decode(storage_pb2.Data.FromString(raw))
    with _plans_lock:
        _learn(raw)
    return value


def _learn(raw: bytes) -> None:
    """Compiles a plan for `raw`'s layout, unless the last one compiled has not served yet."""
    state = _compile
    if state["wait"] > 0:
        state["wait"] -= 1
        return
    if state["fresh"]:  # the previous plan never served: wait twice as long before the next
        state["backoff"] = min(state["backoff"] * 2, 1024)
        state["wait"] = state["backoff"]
        state["fresh"] = False
        return
    try:
        plan = decode_plans.compile_plan(raw, _WALK)
    except (decode_plans.NoPlan, *_MISSES):
        state["wait"] = state["backoff"] = min(state["backoff"] * 2, 1024)
        return
    _plans.insert(0, plan)
    del _plans[_MAX_PLANS:]
    state["fresh"] = True


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if shift == 63 and b > 1:  # beyond 64 bits: upb keeps the low 64 (a bool of 2**64 is False)
                raise _Irregular
            return result, pos
        shift += 7
        if shift > 63:
            raise _Irregular


def _field(buf: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(tag byte, payload start, payload end) of the length-delimited field at `pos`."""
    tag = buf[pos]
    if tag & 0x87 != 0x02:  # one-byte tags of length-delimited fields only
        raise _Irregular
    size, start = _varint(buf, pos + 1)
    stop = start + size
    if stop > end:
        raise _Irregular
    return tag, start, stop


def _data(buf: bytes, pos: int, end: int, depth: int = 0) -> Any:
    if pos == end:
        return None
    if depth > _MAX_DEPTH:
        raise _Irregular
    tag, start, stop = _field(buf, pos, end)
    if stop != end:  # one field (several oneof members or unknown fields: upb's rules)
        raise _Irregular
    if tag == 0x0A:
        return _datum(buf, start, stop)
    if tag == 0x1A:
        return tuple(_items(buf, start, stop, depth + 1))
    if tag == 0x12:
        return _items(buf, start, stop, depth + 1)
    if tag == 0x22:
        return _dict(buf, start, stop, depth + 1)
    raise _Irregular


def _items(buf: bytes, pos: int, end: int, depth: int = 0) -> list[Any]:
    """The `values` of an Array or Tuple."""
    out = []
    while pos < end:
        tag, start, pos = _field(buf, pos, end)
        if tag != 0x0A:
            raise _Irregular
        out.append(_data(buf, start, pos, depth))
    return out


def _dict(buf: bytes, pos: int, end: int, depth: int) -> dict[Any, Any]:
    """`values` (the str keys) then `kvs` (other keys, in their order), as the codec merges them.

    The str keys come in sorted order. The codec gives upb's map order, which is its hash table's, neither
    the written order nor stable across key sets; a dict's order carries no meaning in these records."""
    out: dict[str, Any] = {}
    pairs: dict[Any, Any] | None = None
    while pos < end:
        tag, start, pos = _field(buf, pos, end)
        if tag == 0x0A and pairs is None:
            key, value = _entry(buf, start, pos, depth)
            if key in out:  # a repeated map key: upb keeps the last
                raise _Irregular
            out[key] = value
        elif tag == 0x12 and pairs is None:
            pairs = {}
            for pair in _items(buf, start, pos, depth):
                if type(pair) is not tuple or len(pair) != 2:
                    raise _Irregular
                pairs[pair[0]] = pair[1]
        else:
            raise _Irregular
    if len(out) > 1:
        out = {k: out[k] for k in sorted(out)}
    if pairs:
        out.update(pairs)
    return out


def _entry(buf: bytes, pos: int, end: int, depth: int) -> tuple[str, Any]:
    key, value = "", None
    if pos < end and buf[pos] == 0x0A:
        _, start, pos = _field(buf, pos, end)
        key = buf[start:pos].decode("utf-8")
    if pos < end:
        tag, start, pos = _field(buf, pos, end)
        if tag != 0x12 or pos != end:
            raise _Irregular
        value = _data(buf, start, pos, depth)
    return key, value


def _signed(n: int) -> int:
    return n - _U64 if n >= _I64_MIN else n


def _varints(buf: bytes, pos: int, end: int) -> list[int]:
    out = []
    while pos < end:
        n, pos = _varint(buf, pos)
        out.append(n)
    if pos != end:
        raise _Irregular
    return out


# Numeric value fields, by tag byte of their packed encoding: (numpy type, little-endian buffer dtype or None
# for varints, whether varints are signed). The order the codec tries them in does not matter here: a leaf
# with more than one kind of value is irregular.
_NUMERIC: dict[int, tuple[Any, str | None, bool]] = {
    0x0A: (np.float32, "<f4", False),
    0x12: (np.float64, "<f8", False),
    0x1A: (np.int32, None, True),
    0x22: (np.int64, None, True),
    0x2A: (np.uint32, None, False),
    0x32: (np.uint64, None, False),
    0x3A: (bool, None, False),
}
# Values packed in big-endian bytes: (numpy type, buffer dtype, scalar struct).
_PACKED: dict[int, tuple[Any, str, struct.Struct]] = {
    0x7A: (np.float32, ">f4", struct.Struct(">f")),
    0x5A: (np.int8, ">i1", struct.Struct(">b")),
    0x62: (np.int16, ">i2", struct.Struct(">h")),
    0x6A: (np.uint8, ">u1", struct.Struct(">B")),
    0x72: (np.uint16, ">u2", struct.Struct(">H")),
}
_STRING, _BYTES, _BIGINT = 0x42, 0x4A, 0x52
# 32-bit varint fields: upb keeps the low 32 bits of a longer varint; numpy would only warn and wrap.
_BOUNDS_32: dict[Any, tuple[int, int]] = {np.int32: (-(2**31), 2**31 - 1), np.uint32: (0, 2**32 - 1)}


def _shape(buf: bytes, pos: int, end: int) -> list[int]:
    dims = []
    while pos < end:
        tag, start, pos = _field(buf, pos, end)
        if tag != 0x12:
            raise _Irregular
        size = 0
        if start < pos:
            if buf[start] != 0x08:
                raise _Irregular
            size, after = _varint(buf, start + 1)
            if after != pos:
                raise _Irregular
            size = _signed(size)
        dims.append(size)
    return dims


# Small leaves that decode to immutable values (numpy scalars, str, bytes, int, bool), by their bytes: step
# types, discounts, actions and rewards repeat from step to step.
_leaf_cache: dict[bytes, Any] = {}
_CACHED_SIZE = 48
_IMMUTABLE = (np.generic, str, bytes, int, float, type(None))


def _datum(buf: bytes, pos: int, end: int) -> Any:
    if end - pos <= _CACHED_SIZE:
        key = buf[pos:end]
        hit = _leaf_cache.get(key, _leaf_cache)
        if hit is not _leaf_cache:
            return hit
        value = _leaf(buf, pos, end)
        if isinstance(value, _IMMUTABLE) and not isinstance(value, np.ndarray) and len(_leaf_cache) < 4096:
            _leaf_cache[key] = value
        return value
    try:
        return _leaf(buf, pos, end)
    except _LongVarints:
        return codec.decode_datum(storage_pb2.Datum.FromString(buf[pos:end]))


def _leaf(buf: bytes, pos: int, end: int) -> Any:
    shape: list[int] = []
    if pos < end and buf[pos] == 0x0A:
        _, start, pos = _field(buf, pos, end)
        shape = _shape(buf, start, pos)
    if pos == end:
        return None  # no values: the codec's None, whatever the shape
    tag, start, stop = _field(buf, pos, end)
    if tag != 0x12 or stop != end:
        raise _Irregular
    return _values(buf, start, stop, shape)


def _values(buf: bytes, pos: int, end: int, shape: list[int]) -> Any:
    if pos == end:
        return None
    scalar = len(shape) == 1 and shape[0] == _SCALAR_DIM
    tag, start, stop = _field(buf, pos, end)
    numeric = _NUMERIC.get(tag)
    if numeric is not None:
        if stop != end or start == stop:
            raise _Irregular
        kind, little, signed = numeric
        if little is not None:
            array = np.frombuffer(buf, little, (stop - start) // np.dtype(little).itemsize, start)
            if (stop - start) % array.itemsize:
                raise _Irregular
            if scalar:
                return kind(array[0])
            return array.astype(kind).reshape(shape)
        if stop - start > _MAX_PY_VARINTS:
            raise _LongVarints
        ints = _varints(buf, start, stop)
        if signed:
            ints = [_signed(n) for n in ints]
        bounds = _BOUNDS_32.get(kind)
        if bounds is not None and (min(ints) < bounds[0] or max(ints) > bounds[1]):
            raise _Irregular
        if scalar:
            return kind(ints[0])
        return np.array(ints, dtype=kind).reshape(shape)
    packed = _PACKED.get(tag)
    if packed is not None:
        if stop != end:
            raise _Irregular
        kind, big, unpack = packed
        if scalar:
            return kind(unpack.unpack(buf[start:stop])[0])
        size = np.dtype(big).itemsize
        if (stop - start) % size:
            raise _Irregular
        return np.frombuffer(buf, big, (stop - start) // size, start).astype(kind).reshape(shape)
    if tag not in (_STRING, _BYTES, _BIGINT):
        raise _Irregular
    items = [buf[start:stop]]
    while stop < end:
        more, start, stop = _field(buf, stop, end)
        if more != tag:
            raise _Irregular
        items.append(buf[start:stop])
    if tag == _STRING:
        texts = [b.decode("utf-8") for b in items]
        return texts[0] if scalar else np.reshape(np.array(texts, dtype=object), shape)
    if tag == _BYTES:
        return items[0] if scalar else np.reshape(np.array(items, dtype=object), shape)
    if not scalar:
        raise _Irregular  # the codec refuses arrays of big ints (TypeError)
    return int.from_bytes(items[0], byteorder="big", signed=True)


_WALK = decode_plans.Walk(
    irregular=_Irregular,
    field=_field,
    varint=_varint,
    shape=_shape,
    leaf=_datum,
    items=_items,
    max_depth=_MAX_DEPTH,
    scalar_dim=_SCALAR_DIM,
    numeric=_NUMERIC,
    packed=_PACKED,
    text_tags=(_STRING, _BYTES, _BIGINT),
)

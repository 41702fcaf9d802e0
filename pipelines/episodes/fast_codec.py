"""envlogger's step encoding without the copies: the same `storage_pb2.Data`, built in place.

`envlogger.converters.codec.encode` builds every nested value as its own message and `CopyFrom`s it into
its parent, so a 64x64x3 observation's bytes are copied once per nesting level, and every scalar goes
through `np.result_type`. This encoder fills the parent message directly and takes the common scalar
types (str, bytes, bool, Python float) on a short path; everything else uses codec's own leaf functions.
The result is the same message (tests/pipelines/episodes/test_fast_codec.py compares them on real
records of every environment family); `codec.decode` reads it. Pinned to envlogger 1.2's codec.
"""

from __future__ import annotations

import struct
from typing import Any

import dm_env
import numpy as np
from envlogger.converters import codec
from envlogger.proto import storage_pb2

from pipelines.protowire import varint as _varint

_SCALAR_DIM_SIZE = codec._SCALAR_DIM_SIZE  # noqa: SLF001 - same reserved value as the codec
_DOUBLE = struct.Struct("<d")


def encode(value: Any) -> storage_pb2.Data:
    out = storage_pb2.Data()
    fill(out, value)
    return out


def fill(out: storage_pb2.Data, value: Any) -> None:
    """Writes `value` into the empty message `out` exactly as `codec.encode(value)` would build it."""
    if value is None:
        return
    if isinstance(value, tuple):
        values = out.tuple.values
        for x in value:
            fill(values.add(), x)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str):
                fill(out.dict.values[k], v)
            else:
                t = out.dict.kvs.values.add().tuple
                fill(t.values.add(), k)
                fill(t.values.add(), v)
        return
    if isinstance(value, list):
        first_type = None
        values = out.array.values
        for index, x in enumerate(value):
            if first_type is None:
                first_type = type(x)
            elif not isinstance(x, first_type):
                raise TypeError(
                    f"lists must be homogeneous: element {index} is {type(x).__name__}, "
                    f"the first is {first_type.__name__}"
                )
            fill(values.add(), x)
        return
    datum = out.datum
    if isinstance(value, np.ndarray):
        dims = datum.shape.dim
        for d in value.shape:
            if d > 0:
                dims.add().size = d
        if value.dtype == np.uint8:  # images: codec tries eight dtypes with issubdtype before this one
            datum.values.uint8_values = value.tobytes()
        else:
            codec._set_datum_values_from_array(value, datum.values)  # noqa: SLF001
        return
    if isinstance(value, str):
        datum.shape.dim.add().size = _SCALAR_DIM_SIZE
        datum.values.string_values.append(value)
    elif isinstance(value, bytes):
        datum.shape.dim.add().size = _SCALAR_DIM_SIZE
        datum.values.bytes_values.append(value)
    elif isinstance(value, bool | np.bool_):
        datum.shape.dim.add().size = _SCALAR_DIM_SIZE
        datum.values.bool_values.append(bool(value))
    elif type(value) is float:
        datum.shape.dim.add().size = _SCALAR_DIM_SIZE
        datum.values.double_values.append(value)
    else:
        codec._set_datum_values_from_scalar(value, datum)  # noqa: SLF001


# ----- straight to wire bytes ------------------------------------------------------------------------
# `serialize(value)` gives the bytes of `encode(value).SerializeToString()` without building the message
# (~5x cheaper for a step record: no per-field Python->upb calls). Field numbers of envlogger 1.2's
# storage.proto: Data{datum=1, array=2, tuple=3, dict=4}; Array/Tuple{values=1}; Dict{values=1 (map
# entries {key=1, value=2}), kvs=2}; Datum{shape=1, values=2}; Shape{dim=2}; Dim{size=1}; Values{
# double_values=2, int64_values=4, bool_values=7, string_values=8, bytes_values=9, bigint_values=10,
# uint8_values=13} (repeated scalars packed, proto3). Values without a short path here (other numpy
# dtypes and scalars, non-str dict keys) are encoded by `encode` and embedded, so every value works.

_TAG_DATUM, _TAG_ARRAY, _TAG_TUPLE, _TAG_DICT = b"\x0a", b"\x12", b"\x1a", b"\x22"
_TAG_VALUES_ITEM = b"\x0a"  # Array.values, Tuple.values, Dict.values (map entry), Entry.key all field 1
_TAG_ENTRY_VALUE = b"\x12"
def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


# Shape {dim {size: -438}} of every scalar datum, as Datum field 1.
_SCALAR_SHAPE = _field(b"\x0a", _field(b"\x12", b"\x08" + _varint(_SCALAR_DIM_SIZE)))


def _scalar_datum(values: bytes) -> bytes:
    """A Data holding a scalar datum whose Values message is `values` (already serialized)."""
    return _field(_TAG_DATUM, _SCALAR_SHAPE + _field(b"\x12", values))


def serialize(value: Any) -> bytes:
    """`encode(value).SerializeToString()`, built directly (tests check they parse to equal messages)."""
    out: list[bytes] = []
    _emit(value, out)
    return b"".join(out)


# Serialized scalars repeat from step to step (step type, discount, most rewards, actions, short strings):
# they are kept here, keyed by type and value (floats by their bytes, so -0.0 and 0.0 stay apart).
_CACHE_LIMIT = 4096
_scalars: dict[tuple[type, Any], bytes] = {}
_dict_keys: dict[str, bytes] = {}
_array_heads: dict[tuple[int, ...], bytes] = {}  # uint8 arrays: everything before the pixels, by shape
_SCALAR_TYPES = frozenset({float, str, bool, int, np.int64, np.bool_, dm_env.StepType})
_TRUE = _scalar_datum(b"\x3a\x01\x01")
_FALSE = _scalar_datum(b"\x3a\x01\x00")


def _scalar(value: Any) -> bytes | None:
    """The serialized Data of a scalar with a short path (None: not one of those types)."""
    kind = type(value)
    if kind is float:
        key: Any = _DOUBLE.pack(value)
        hit = _scalars.get((kind, key))
        if hit is None:
            hit = _scalar_datum(b"\x12\x08" + key)
    elif kind is str:
        key = value
        hit = _scalars.get((kind, key))
        if hit is None:
            hit = _scalar_datum(_field(b"\x42", value.encode("utf-8")))
    elif kind is np.int64:
        key = int(value)
        hit = _scalars.get((kind, key))
        if hit is None:
            hit = _scalar_datum(_field(b"\x22", _varint(key)))
    elif isinstance(value, bool | np.bool_):
        return _TRUE if value else _FALSE
    elif isinstance(value, int):  # Python ints (and IntEnums such as dm_env.StepType): signed big-endian
        key = int(value)
        hit = _scalars.get((int, key))
        kind = int
        if hit is None:
            hit = _scalar_datum(_field(b"\x52", codec._python_int_to_bytes(key)))  # noqa: SLF001
    else:
        return None
    if len(_scalars) < _CACHE_LIMIT and (kind is not str or len(value) <= 64):
        _scalars[(kind, key)] = hit
    return hit


def _dict_key(k: str) -> bytes:
    hit = _dict_keys.get(k)
    if hit is None:
        hit = _field(_TAG_VALUES_ITEM, k.encode("utf-8"))
        if len(_dict_keys) < _CACHE_LIMIT:
            _dict_keys[k] = hit
    return hit


def _emit(value: Any, out: list[bytes]) -> int:
    """Appends the serialized Data of `value` to `out`; returns its size in bytes."""
    if type(value) in _SCALAR_TYPES:  # most values of a step record: checked first
        scalar = _scalar(value)
        out.append(scalar)
        return len(scalar)
    if value is None:
        return 0
    if isinstance(value, tuple):
        return _container(_TAG_TUPLE, value, out) if value else 0
    if isinstance(value, dict):
        if not value:
            return 0
        if not all(isinstance(k, str) for k in value):
            return _append(encode(value).SerializeToString(), out)
        body: list[bytes] = []
        size = 0
        for k, v in value.items():
            key = _dict_key(k)
            item: list[bytes] = []
            n = _emit(v, item)
            entry = len(key) + 1 + len(_varint(n)) + n
            head = _TAG_VALUES_ITEM + _varint(entry) + key + _TAG_ENTRY_VALUE + _varint(n)
            body.append(head)
            body.extend(item)
            size += len(head) + n
        return _wrap(_TAG_DICT, body, size, out)
    if isinstance(value, list):
        if not value:
            return 0
        first_type = type(value[0])
        for index, x in enumerate(value):
            if not isinstance(x, first_type):
                raise TypeError(
                    f"lists must be homogeneous: element {index} is {type(x).__name__}, "
                    f"the first is {first_type.__name__}"
                )
        return _container(_TAG_ARRAY, value, out)
    if isinstance(value, np.ndarray):
        if value.dtype != np.uint8 or value.size == 0:
            return _append(encode(value).SerializeToString(), out)
        data = value.tobytes()
        head = _array_heads.get(value.shape)
        if head is None:
            dims = b"".join(_field(b"\x12", b"\x08" + _varint(d)) for d in value.shape if d > 0)
            values_head = b"\x6a" + _varint(len(data))
            values_size = len(values_head) + len(data)
            datum_head = _field(b"\x0a", dims) + b"\x12" + _varint(values_size)
            datum_size = len(datum_head) + values_size
            head = _TAG_DATUM + _varint(datum_size) + datum_head + values_head
            if len(_array_heads) < _CACHE_LIMIT:
                _array_heads[value.shape] = head
        out.append(head)
        out.append(data)
        return len(head) + len(data)
    if isinstance(value, bytes):
        values_head = b"\x4a" + _varint(len(value))
        values = len(values_head) + len(value)
        datum = _SCALAR_SHAPE + b"\x12" + _varint(values) + values_head
        head = _TAG_DATUM + _varint(len(datum) + len(value)) + datum
        out.append(head)
        out.append(value)
        return len(head) + len(value)
    scalar = _scalar(value)
    if scalar is not None:
        out.append(scalar)
        return len(scalar)
    return _append(encode(value).SerializeToString(), out)


def _append(data: bytes, out: list[bytes]) -> int:
    out.append(data)
    return len(data)


def _container(tag: bytes, items: Any, out: list[bytes]) -> int:
    body: list[bytes] = []
    size = 0
    for x in items:
        item: list[bytes] = []
        n = _emit(x, item)
        head = _TAG_VALUES_ITEM + _varint(n)
        body.append(head)
        body.extend(item)
        size += len(head) + n
    return _wrap(tag, body, size, out)


def _wrap(tag: bytes, body: list[bytes], size: int, out: list[bytes]) -> int:
    head = tag + _varint(size)
    out.append(head)
    out.extend(body)
    return len(head) + size

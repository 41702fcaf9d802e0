"""envlogger's step encoding without the copies: the same `storage_pb2.Data`, built in place.

`envlogger.converters.codec.encode` builds every nested value as its own message and `CopyFrom`s it into
its parent, so a 64x64x3 observation's bytes are copied once per nesting level, and every scalar goes
through `np.result_type`. This encoder fills the parent message directly and takes the common scalar
types (str, bytes, bool, Python float) on a short path; everything else uses codec's own leaf functions.
The result is the same message (tests/pipelines/episodes/test_fast_codec.py compares them on real
records of every environment family); `codec.decode` reads it. Pinned to envlogger 1.2's codec.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from envlogger.converters import codec
from envlogger.proto import storage_pb2

_SCALAR_DIM_SIZE = codec._SCALAR_DIM_SIZE  # noqa: SLF001 - same reserved value as the codec


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

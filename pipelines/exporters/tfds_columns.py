"""One episode's steps as TFDS encodes and serializes them, column by column instead of step by step.

TFDS encodes every field of every step with several Python calls, then, serializing, walks every step
field again item by item (`example_serializer._fill_ragged_attribute`: an `np.asanyarray`, a shape check and a
string check per item) only to stack the items back into the column they came from. Together that was about
half of a Procgen TFDS export's own cost. Here:
- `encode_steps` gives scalar numeric and boolean step fields as one numpy column each (`_columns`);
- `tf_example` builds the `tf.train.Example` as TFDS's `ExampleSerializer.get_tf_example` does, but takes a
  column that is already what TFDS's extraction would produce (a numpy column of the field's dtype and shape,
  or scalar strings) as it is, and flattens sequences of strings (`keys`) in one pass.
Anything else takes TFDS's own functions, and any error is raised by TFDS's own serializer (with its message
naming the feature). The bytes are TFDS's (`tests/pipelines/export/test_export_tfds.py` compares them).
Imported only by `tfds_writer`, after its `quiet_tensorflow()`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow_datasets as tfds
from tensorflow_datasets.core import example_serializer, utils
from tensorflow_datasets.core.features import feature as feature_lib
from tensorflow_datasets.core.utils import dtype_utils
from tensorflow_datasets.proto import tf_example_pb2, tf_feature_pb2

_STRINGS = (bytes, str)


def _scalar_column(feature: Any) -> bool:
    """A scalar numeric/bool `Tensor` stored as itself: TFDS encodes each step's value as `np.array(v, dtype)`,
    so one `np.asarray` of the steps' values is the same column."""
    return (
        type(feature) is tfds.features.Tensor
        and feature.shape == ()
        and not feature._encoded_to_bytes  # noqa: SLF001
        and feature.np_dtype == feature._serialized_dtype  # noqa: SLF001
        and feature.np_dtype.kind in "biuf"
    )


def _columns(feature: Any, values: list[Any]) -> Any:
    """What TFDS's `Dataset.encode_example` gives for one step field over all steps (a list of each step's
    encoded value, nested like the feature), but scalar numeric and boolean fields as one numpy column:
    TFDS encodes every field of every step with several Python calls (~30 us a Procgen step). Anything TFDS
    would check differently (a numpy array of another dtype, missing or extra keys) takes TFDS's own path."""
    if isinstance(feature, tfds.features.FeaturesDict) and type(feature) is tfds.features.FeaturesDict:
        keys = set(feature.keys())
        if all(isinstance(v, dict) and v.keys() == keys for v in values):
            return {k: _columns(feature[k], [v[k] for v in values]) for k in feature.keys()}
    elif _scalar_column(feature):
        dtype = feature.np_dtype
        if not any(isinstance(v, np.ndarray | str) and (isinstance(v, str) or v.dtype != dtype) for v in values):
            return np.asarray(values, dtype=dtype)
    return [feature.encode_example(v) for v in values]


def encode_steps(dataset_feature: Any, steps: list[dict[str, Any]]) -> Any:
    """`dataset_feature.encode_example(steps)` (a `tfds.features.Dataset` of the step features), column by
    column: the same serialized example (tests compare the bytes), ~3x cheaper."""
    if not steps:
        return dataset_feature.encode_example(steps)
    return _columns(dataset_feature.feature, steps)


def _string_items(values: Any) -> list[Any] | None:
    """The scalar strings in `values` (bytes/str, or 0-d object arrays holding one), or None when any item is
    something else (TFDS's own path then checks and reports it)."""
    items = [v.item() if type(v) is np.ndarray and v.shape == () and v.dtype == object else v for v in values]
    return items if all(type(x) in _STRINGS for x in items) else None


def _item_of(value: Any, dtype: Any, shape: tuple[int, ...]) -> bool:
    """An array TFDS would take as one item as it is (`np.asanyarray(value, dtype)` returns it unchanged)."""
    return type(value) is np.ndarray and value.dtype == dtype and value.shape == shape


def _listlike(value: Any) -> bool:
    """A list, or a 1-d object array (how TFDS encodes a sequence of strings)."""
    return type(value) is list or (type(value) is np.ndarray and value.ndim == 1 and value.dtype == object)


def _object_column(items: list[Any]) -> np.ndarray:
    column = np.empty(len(items), dtype=object)
    column[:] = items
    return column


def _ragged_fields(data: Any, info: Any) -> Any:
    """`example_serializer._add_ragged_fields(data, info)` (a `(data, info)` pair, or for a sequence of
    sequences a dict of the flat values and row lengths), without its per-item walk where the result is known:
    - a sequence field (`sequence_rank` 1) given as a numpy column of its dtype and item shape, as a list of
      arrays of that dtype and shape, or as scalar strings: TFDS would stack exactly that column;
    - a sequence of sequences of scalar strings (`keys`): the flat strings and each step's count.
    """
    rank = info.sequence_rank
    if rank == 1 and info.shape[0] is None:
        dtype = info.np_dtype
        shape = tuple(info.shape[1:])
        if type(data) is np.ndarray and data.ndim >= 1 and not dtype_utils.is_string(dtype):
            if data.dtype == dtype and data.shape[1:] == shape:
                return data, info
        elif type(data) is list and data and all(_item_of(x, dtype, shape) for x in data):
            return np.stack(data), info
        elif _listlike(data) and dtype == np.object_ and info.shape[1:] == ():
            items = _string_items(data)
            if items is not None:
                return (_object_column(items) if items else _empty(info)), info
    elif rank == 2 and info.shape[:2] == (None, None) and info.shape[2:] == () and info.np_dtype == np.object_:
        if _listlike(data) and all(_listlike(row) for row in data):
            rows = [_string_items(row) for row in data]
            if all(row is not None for row in rows):
                flat = [x for row in rows for x in row]
                lengths = [len(row) for row in rows]
                return {
                    "ragged_row_lengths_0": (lengths, feature_lib.TensorInfo(shape=(None,), dtype=np.int64)),
                    "ragged_flat_values": (
                        _object_column(flat) if flat else _empty(info),
                        feature_lib.TensorInfo(shape=(None,), dtype=info.dtype),
                    ),
                }
    return example_serializer._add_ragged_fields(data, info)  # noqa: SLF001


def _empty(info: Any) -> np.ndarray:
    """TFDS's flat values of a sequence without any item."""
    return np.empty(shape=(0,) + tuple(info.shape[info.sequence_rank :]), dtype=info.np_dtype)


def _tf_feature(item: Any, info: Any) -> tf_feature_pb2.Feature:
    """`example_serializer._item_to_tf_feature(item, info)`; a column of bytes (a sequence of byte strings: the
    recorded arrays of `Encoding.BYTES` tensors, one per step) straight into a `BytesList`, without TFDS's
    object-array round trip and its per-item checks (~40% of a Procgen episode's serialization once the
    observations are exported as recorded)."""
    if (
        type(item) is np.ndarray
        and item.dtype == object
        and item.ndim == 1
        and tuple(info.shape) == (None,)
        and info.np_dtype == np.object_
    ):
        values = item.tolist()
        if all(type(v) is bytes for v in values):
            return tf_feature_pb2.Feature(bytes_list=tf_feature_pb2.BytesList(value=values))
    return example_serializer._item_to_tf_feature(item, info)  # noqa: SLF001


def tf_example(serializer: Any, example: dict[str, Any]) -> tf_example_pb2.Example:
    """`serializer.get_tf_example(example)` (an `example_serializer.ExampleSerializer`), the same message."""
    specs = serializer._flat_example_specs  # noqa: SLF001
    try:
        flat = utils.flatten_nest_dict(example)
        fields = utils.flatten_nest_dict({k: _ragged_fields(flat[k], info) for k, info in specs.items()})
        features = {
            k: _tf_feature(item, info)
            for k, (item, info) in fields.items()
            if not (item is None and isinstance(info, feature_lib.TensorInfo) and info.optional)
        }
    except Exception:  # noqa: BLE001 - TFDS's own serializer raises its error, naming the feature
        return serializer.get_tf_example(example)
    return tf_example_pb2.Example(features=tf_feature_pb2.Features(feature=features))

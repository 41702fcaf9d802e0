"""envlogger's `Data` messages as wire bytes, built directly from Python/numpy values (the export's records).

envlogger's codec builds a message per value and serializes it; this writes the same bytes (dicts in sorted key
order, empty containers kept) without the intermediate messages, with the pieces that repeat from step to step
(dict keys and their order, flags, step types, small statistics dicts) memoized. `codec.decode` reads the
result unchanged (tests/pipelines/export/test_export_envlogger.py).

`serialize` goes through a plan generated per value structure (every step of an episode has the same one):
~3.5x faster on Procgen and NetHack records (bench/bench_serialize.py); `serialize_generic` is the reference
path and the fallback, and they give the same bytes (tests/pipelines/export/test_envlogger_plans.py).
"""

from __future__ import annotations

import struct
from typing import Any

import dm_env
import numpy as np
from envlogger.proto import storage_pb2

from pipelines.episodes import fast_codec
from pipelines.protowire import varint as _varint

# The serialized Data of a str dict key (with its `values` entry head), by key: the same few keys on every step.
_key_items: dict[str, bytes] = {}


def _item(data: bytes) -> bytes:
    """One `values` entry (field 1, length-delimited) of an Array, Tuple or kvs Tuple."""
    return b"\x0a" + _varint(len(data)) + data


def _key_item(key: Any) -> bytes:
    if type(key) is not str:
        return _item(fast_codec.serialize(key))
    hit = _key_items.get(key)
    if hit is None:
        hit = _item(fast_codec.serialize(key))
        if len(_key_items) < 4096:
            _key_items[key] = hit
    return hit


def _entry_head(key_item: bytes | None, size: int) -> bytes:
    """What precedes a child's `size` bytes of Data in its container: a `values` item head, or (dict) the head
    of one `Dict.kvs` pair, a Data holding a Tuple (field 3) of the key's and the value's Data."""
    if key_item is None:
        return b"\x0a" + _varint(size)
    value_head = b"\x0a" + _varint(size)
    pair_size = len(key_item) + len(value_head) + size
    pair_head = b"\x1a" + _varint(pair_size) + key_item + value_head
    return b"\x0a" + _varint(len(pair_head) + size) + pair_head


def _leaf_entry(key_item: bytes | None, value: Any) -> bytes:
    """A leaf's entry in its container: its head, then its Data."""
    leaf = fast_codec.serialize(value)
    return _entry_head(key_item, len(leaf)) + leaf


def _container_entry(key_item: bytes | None, value: list[Any] | tuple[Any, ...] | dict[Any, Any]) -> bytes:
    """A container's entry in its parent: its head, then its Data."""
    data = _serialize_container(value)
    return _entry_head(key_item, len(data)) + data


# Entries of scalar leaves (head + serialized Data), by (key, type, value): the same flags, step types,
# discounts and short strings on most steps. Floats by their bytes, so -0.0 and 0.0 stay apart.
_SCALAR_TYPES = frozenset({bool, np.bool_, int, np.int64, str, float, dm_env.StepType})
_scalar_entries: dict[tuple[bytes | None, type, Any], bytes] = {}
_DOUBLE = struct.Struct("<d")


def _scalar_entry(key_item: bytes | None, value: Any) -> bytes | None:
    kind = type(value)
    if kind is str and len(value) > 64:
        return None
    memo = (key_item, kind, _DOUBLE.pack(value) if kind is float else value)
    hit = _scalar_entries.get(memo)
    if hit is None:
        hit = _leaf_entry(key_item, value)
        if len(_scalar_entries) < 16384:
            _scalar_entries[memo] = hit
    return hit


# A dict's (key entry, key) pairs in reverse sorted order, by its keys as they come (str keys only): the same
# few dicts (observation, custom data, info, statistics) on every step.
_dict_orders: dict[tuple[str, ...], list[tuple[bytes, str]]] = {}


def _dict_order(value: dict[Any, Any]) -> list[tuple[bytes, Any]]:
    keys = tuple(value)
    hit = _dict_orders.get(keys)
    if hit is not None and all(type(k) is str for k in keys):
        return hit
    order = [(_key_item(k), k) for k in sorted(value, key=str, reverse=True)]
    if hit is None and len(_dict_orders) < 4096 and all(type(k) is str for k in keys):
        _dict_orders[keys] = order
    return order


# Entries of small containers holding only scalar leaves (the episode statistics, empty key lists), by key,
# container type and (str key or index, type, value) of each item: the same few on most steps.
_flat_entries: dict[tuple[Any, ...], bytes] = {}
_FLAT_MAX = 8


def _flat_entry(key_item: bytes | None, value: Any) -> bytes | None:
    if len(value) > _FLAT_MAX:
        return None
    items: list[Any] = [key_item, type(value)]
    is_dict = isinstance(value, dict)
    for k, v in value.items() if is_dict else enumerate(value):
        kind = type(v)
        if kind not in _SCALAR_TYPES or (is_dict and type(k) is not str) or (kind is str and len(v) > 64):
            return None
        items.append((k, kind, _DOUBLE.pack(v) if kind is float else v))
    memo = tuple(items)
    hit = _flat_entries.get(memo)
    if hit is None:
        hit = _container_entry(key_item, value)
        if len(_flat_entries) < 16384:
            _flat_entries[memo] = hit
    return hit


class _Frame:
    """An open container: children still to write (last first), the parts written and their size, and the
    key it has in its parent. Data fields: array=2 (0x12), tuple=3 (0x1a), dict=4 (0x22)."""

    __slots__ = ("key_item", "parts", "size", "tag", "todo")

    def __init__(self, value: Any, key_item: bytes | None) -> None:
        if isinstance(value, dict):
            self.tag = b"\x22"
            self.todo = [(item, value[k]) for item, k in _dict_order(value)]
        else:
            self.tag = b"\x12" if isinstance(value, list) else b"\x1a"
            self.todo = [(None, x) for x in reversed(value)]
        self.parts: list[bytes] = []
        self.size = 0
        self.key_item = key_item

    def add(self, key_item: bytes | None, parts: list[bytes], size: int) -> None:
        head = _entry_head(key_item, size)
        self.parts.append(head)
        self.parts.extend(parts)
        self.size += len(head) + size

    def close(self) -> tuple[list[bytes], int]:
        """The container's own Data as parts (the children's bytes are joined once, at the very end)."""
        size = self.size
        if self.tag == b"\x22" and size:  # Dict{kvs=2}: one message whose `values` are the pairs
            kvs = b"\x12" + _varint(size)
            head = self.tag + _varint(len(kvs) + size) + kvs
        else:
            head = self.tag + _varint(size)
        return [head, *self.parts], len(head) + size


def serialize_generic(value: Any) -> bytes:
    """The wire bytes of envlogger's `Data` for `value`, as `codec.encode` would build it, except:
    - dicts are written as key/value pairs (`Dict.kvs`) in sorted key order: the codec uses a proto map,
      whose serialized order varies from run to run, so equal exports would differ byte for byte;
    - empty lists, tuples and dicts are written as empty messages, which read back as [] / () / {} (the
      codec writes nothing for them, which reads back as None).
    Leaves go through the episode writers' `fast_codec.serialize` (the codec's encoding, without copies);
    `codec.decode` reads the result unchanged. Iterative: an explicit stack of open containers, whose parts
    are joined once at the end (a frame's pixels are copied once, not once per nesting level)."""
    if not isinstance(value, list | tuple | dict):
        return fast_codec.serialize(value)
    return _serialize_container(value)


def _serialize_container(value: list[Any] | tuple[Any, ...] | dict[Any, Any]) -> bytes:
    stack = [_Frame(value, None)]
    while True:
        frame = stack[-1]
        todo = frame.todo
        while todo:
            key_item, child = todo.pop()
            if isinstance(child, list | tuple | dict):
                entry = _flat_entry(key_item, child)
                if entry is None:
                    stack.append(_Frame(child, key_item))
                    break
                frame.parts.append(entry)
                frame.size += len(entry)
                continue
            entry = _scalar_entry(key_item, child) if type(child) in _SCALAR_TYPES else None
            if entry is None:
                entry = _leaf_entry(key_item, child)
            frame.parts.append(entry)
            frame.size += len(entry)
        else:
            stack.pop()
            parts, size = frame.close()
            if not stack:
                return b"".join(parts)
            stack[-1].add(frame.key_item, parts, size)


# ----- per-structure plans ---------------------------------------------------------------------------------
# Every step of an episode has the same structure (container types, dict keys, leaf types); only leaf values
# change. A plan is a function generated once per structure: it checks the structure as it reads the leaves
# (returning None at the first difference), encodes the leaves as the generic path does (same memo tables),
# and writes the static bytes and the nested length prefixes directly, without frames, key sorting or type
# dispatch. Lists (whose length varies), empty and non-str-keyed containers and very deep or wide ones are
# one "child" of the plan, written by the generic path. A structure gets a plan the second time it is seen
# (one-off structures, such as a first step without an action, never pay for one).

_PLAN_DEPTH = 8  # containers deeper than this are written by the generic path (bounded code generation)
_PLAN_WIDTH = 64  # as are containers with more children than this
_PLANS_MAX = 8


def _child_entry(key_item: bytes | None, value: Any) -> bytes:
    """A container's entry, as the generic path writes it."""
    entry = _flat_entry(key_item, value)
    return entry if entry is not None else _container_entry(key_item, value)


# Array dtypes (numpy's dtype.str without the byte order) whose elements the codec writes as one big-endian
# bytes field, and the cast it uses (envlogger 1.2's codec._set_datum_values_from_array).
_ARRAY_CASTS = {"u1": ">B", "i1": ">b", "i2": ">h", "u2": ">H", "f4": ">f"}
_POSITION_MEMO = 256  # entries per memo of one plan position (scalar values, head bytes by size)


def _scalar_memo(key_item: bytes | None, memo: dict[Any, bytes], floats: bool) -> Any:
    """The miss path of a plan's scalar position (one leaf type, checked): the entry as the generic path writes
    it, kept by value (floats by their bytes, so -0.0 and 0.0 stay apart). A long str (a step's info JSON,
    new on every step), which `_scalar_entry` does not keep, is the head for its UTF-8 length, kept by length,
    then its bytes (the generic path's ten calls cost ~5 us a step)."""
    heads: dict[int, bytes] = {}
    long_str = _length_head_memo(key_item, heads)

    def miss(value: Any) -> bytes:
        entry = _scalar_entry(key_item, value)
        if entry is None:  # a long str
            data = value.encode("utf-8")
            head = heads.get(len(data))
            if head is None:
                head = long_str(value, data)
            return head + data if head is not None else _leaf_entry(key_item, value)
        if len(memo) < _POSITION_MEMO:
            memo[_DOUBLE.pack(value) if floats else value] = entry
        return entry

    return miss


def _head_memo(key_item: bytes | None, tag: bytes | None, root: bool, memo: dict[int, bytes]) -> Any:
    """The miss path of a plan's head: everything before a child's body of `size` bytes (its entry head in the
    parent, then, for a container, its own Data head), kept by size."""

    def miss(size: int) -> bytes:
        if tag is None:
            own = b""
        elif tag == b"\x22":  # Dict{kvs=2}: one message whose `values` are the pairs (never empty here)
            kvs = b"\x12" + _varint(size)
            own = tag + _varint(len(kvs) + size) + kvs
        else:
            own = tag + _varint(size)
        head = own if root else _entry_head(key_item, len(own) + size) + own
        if len(memo) < _POSITION_MEMO:
            memo[size] = head
        return head

    return miss


def _length_head_memo(key_item: bytes | None, memo: dict[int, bytes]) -> Any:
    """The miss path of a leaf written as a head, then its payload's bytes as they are (a bytes leaf: the bytes;
    a str leaf: their UTF-8): its entry up to the payload (None if the entry does not end with it), kept by the
    payload's length."""

    def miss(value: Any, payload: bytes) -> bytes | None:
        entry = _leaf_entry(key_item, value)
        if not entry.endswith(payload):
            return None
        head = entry[: len(entry) - len(payload)]
        if len(memo) < _POSITION_MEMO:
            memo[len(payload)] = head
        return head

    return miss


class _PlanSource:
    """The source of one plan, built by walking one value; `key` (source and types) names its structure."""

    def __init__(self, value: Any) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {"CE": _child_entry, "FS": fast_codec.serialize, "P": _DOUBLE.pack}
        self.types: list[type] = []
        self.memos: list[tuple[str, Any]] = []  # (name, factory of the memo and its miss function)
        self.count = 0
        self.plannable = True
        parts, _ = self._node("v", None, value, 0)
        self.lines.append(f"return b''.join(({', '.join(parts)},))")
        self.key = ("\n".join(self.lines), tuple(self.types))

    def _new(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def _const(self, value: Any) -> str:
        name = self._new("K")
        self.names[name] = value
        return name

    def _memo(self, make: Any) -> str:
        """A memo (`M<n>`, fresh for every compiled plan) and its miss function (`F<n>`)."""
        name = self._new("")
        self.memos.append((name, make))
        return name

    def _array_leaf(self, var: str, key_item: bytes | None, value: Any) -> tuple[list[str], str] | None:
        """A non-empty array whose Datum holds its elements as one bytes field (uint8, int8, int16, uint16,
        float32: the codec's big-endian buffers): for one dtype and shape, everything before those bytes is the
        same on every step, taken from this value's own encoding (and checked to end with them)."""
        if type(value) is not np.ndarray or value.size == 0 or value.dtype.str[1:] not in _ARRAY_CASTS:
            return None
        cast = _ARRAY_CASTS[value.dtype.str[1:]]
        payload = value.astype(cast).tobytes()
        entry = _leaf_entry(key_item, value)
        if not entry.endswith(payload):
            return None
        static, data = self._const(entry[: len(entry) - len(payload)]), self._new("d")
        dtype, shape, size = self._const(value.dtype), self._const(value.shape), self._new("n")
        add = self.lines.append
        add(f"if {var}.dtype != {dtype} or {var}.shape != {shape}: return None")
        add(f"{data} = {var}.astype({cast!r}, copy=False).tobytes()")
        add(f"{size} = {len(entry)}")
        return [static, data], size

    def _node(self, var: str, key_item: bytes | None, value: Any, depth: int) -> tuple[list[str], str]:
        """Emits the checks and the encoding of `value` (held in `var`), whose entry head uses `key_item` (None:
        the root, which has none); returns the names of its parts in order and of its size."""
        add = self.lines.append
        self.types.append(type(value))
        kind = self._const(type(value))
        size = self._new("n")
        container = isinstance(value, list | tuple | dict)
        if container and (
            isinstance(value, list)
            or not value
            or depth >= _PLAN_DEPTH
            or len(value) > _PLAN_WIDTH
            or (
                isinstance(value, dict)
                and (type(value) is not dict or not all(type(k) is str for k in value))
            )
        ):  # dict subclasses (defaultdict) may answer for keys they do not hold: written generically
            if depth == 0:  # the root has no entry head: no plan, the generic path writes it
                self.plannable = False
            key = self._const(key_item)
            entry = self._new("e")
            add(f"if type({var}) is not {kind}: return None")
            add(f"{entry} = CE({key}, {var})")
            add(f"{size} = len({entry})")
            return [entry], size
        if not container:
            add(f"if type({var}) is not {kind}: return None")
            if type(value) in _SCALAR_TYPES:
                floats = type(value) is float
                memo = self._memo(lambda m, k=key_item, f=floats: _scalar_memo(k, m, f))
                entry = self._new("e")
                add(f"{entry} = M{memo}.get(P({var}))" if floats else f"{entry} = M{memo}.get({var})")
                add(f"if {entry} is None: {entry} = F{memo}({var})")
                add(f"{size} = len({entry})")
                return [entry], size
            array = self._array_leaf(var, key_item, value)
            if array is not None:
                return array
            if type(value) is bytes:  # a frame's JPEG: its head by length, its bytes as they are (no copy)
                memo = self._memo(lambda m, k=key_item: _length_head_memo(k, m))
                head = self._new("h")
                add(f"{head} = M{memo}.get(len({var}))")
                add(f"if {head} is None: {head} = F{memo}({var}, {var})")
                add(f"if {head} is None: return None")
                add(f"{size} = len({head}) + len({var})")
                return [head, var], size
            memo = self._memo(lambda m, k=key_item: _head_memo(k, None, False, m))
            data, head = self._new("d"), self._new("h")
            add(f"{data} = FS({var})")
            add(f"{head} = M{memo}.get(len({data}))")
            add(f"if {head} is None: {head} = F{memo}(len({data}))")
            add(f"{size} = len({head}) + len({data})")
            return [head, data], size
        is_dict = isinstance(value, dict)
        add(f"if type({var}) is not {kind} or len({var}) != {len(value)}: return None")
        children: list[tuple[str, bytes | None, Any]] = []
        if is_dict:
            for k in sorted(value):
                child = self._new("x")
                add(f"{child} = {var}[{k!r}]")
                children.append((child, _key_item(k), value[k]))
        else:
            names = [self._new("x") for _ in value]
            add(f"{', '.join(names)}, = {var}")
            children = [(n, None, x) for n, x in zip(names, value, strict=True)]
        parts: list[str] = []
        sizes: list[str] = []
        for child, child_key, child_value in children:
            child_parts, child_size = self._node(child, child_key, child_value, depth + 1)
            parts += child_parts
            sizes.append(child_size)
        tag = b"\x22" if is_dict else b"\x12" if isinstance(value, list) else b"\x1a"
        root = depth == 0
        memo = self._memo(lambda m, k=key_item, t=tag, r=root: _head_memo(k, t, r, m))
        body, head = self._new("s"), self._new("h")
        add(f"{body} = {' + '.join(sizes)}")
        add(f"{head} = M{memo}.get({body})")
        add(f"if {head} is None: {head} = F{memo}({body})")
        add(f"{size} = len({head}) + {body}")
        return [head, *parts], size

    def compile(self) -> Any:
        names = dict(self.names)
        for name, make in self.memos:
            memo: dict[Any, bytes] = {}
            names[f"M{name}"], names[f"F{name}"] = memo, make(memo)
        body = "\n        ".join(self.lines)
        source = f"def plan(v):\n    try:\n        {body}\n    except KeyError:\n        return None\n"
        exec(compile(source, "<envlogger_data plan>", "exec"), names)  # noqa: S102 - our own generated code
        return names["plan"]


_plans: list[Any] = []  # most recently used first; replaced, never changed in place (threads read it)
_seen: dict[tuple[str, tuple[type, ...]], int] = {}  # structures seen without a plan, by key: how often
_REFUSED = -(1 << 62)


def serialize(value: Any) -> bytes:
    """`serialize_generic(value)`, byte for byte, through the plan of the value's structure when it has one."""
    global _plans
    plans = _plans
    for index, plan in enumerate(plans):
        out = plan(value)
        if out is not None:
            if index:
                _plans = [plan, *(p for p in plans if p is not plan)]
            return out
    if not isinstance(value, tuple | dict) or not value:
        return serialize_generic(value)
    source = _PlanSource(value)
    if not source.plannable:
        return serialize_generic(value)
    seen = _seen.get(source.key, 0) + 1
    if seen < 2:
        if len(_seen) >= 4096:
            _seen.clear()
        _seen[source.key] = seen
        return serialize_generic(value)
    plan = source.compile()
    out = plan(value)
    if out is None:  # a plan that refuses its own structure: never compiled again (no compile per step)
        _seen[source.key] = _REFUSED
        return serialize_generic(value)
    _seen.pop(source.key, None)
    _plans = [plan, *_plans][:_PLANS_MAX]
    return out


def encode(value: Any) -> storage_pb2.Data:
    """`serialize` as a message."""
    return storage_pb2.Data.FromString(serialize(value))

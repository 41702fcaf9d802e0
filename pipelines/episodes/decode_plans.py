"""Decoders generated for one record layout: every step of an episode is written the same way.

`fast_decode`'s walk costs a function call per field (~45 a Procgen record). Records of one episode differ
only in their payloads and lengths, so a plan compiled from one record reads the next in straight-line code:
each tag, static shape and dict key is checked where it stands, each length is read, each leaf is built as
the walk builds it. A record that differs anywhere raises `Irregular` and goes to the walk.

Generated source holds only names, small integers and dtype strings: the sample's bytes (shapes, keys) are
bound as constants, never spelled into the code.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Walk:
    """What the compiler needs from the decoder it specialises (passed in: no import cycle)."""

    irregular: type[Exception]
    field: Callable[[bytes, int, int], tuple[int, int, int]]  # (tag, start, stop) of a length-delimited field
    varint: Callable[[bytes, int], tuple[int, int]]
    shape: Callable[[bytes, int, int], list[int]]
    leaf: Callable[[bytes, int, int], Any]  # a whole Datum's value: the walk's own path
    items: Callable[[bytes, int, int, int], list[Any]]  # a list's values at a depth: the walk's own path
    max_depth: int  # containers the walk reads nested; deeper ones go to the codec
    scalar_dim: int
    numeric: dict[int, tuple[Any, str | None, bool]]
    packed: dict[int, tuple[Any, str, Any]]
    text_tags: tuple[int, int, int]  # string, bytes, bigint


_STRUCT = {"<f4": "<f", "<f8": "<d", ">f4": ">f", ">i1": ">b", ">i2": ">h", ">u1": ">B", ">u2": ">H"}


# string, bytes, big int scalars
_TEXT_BUILDS = ("b[p:{e}].decode('utf-8')", "b[p:{e}]", "int.from_bytes(b[p:{e}], 'big', signed=True)")
# 32-bit varints, whose range the walk checks (upb keeps the low 32 bits of a longer one): the walk builds them.
_RANGE_CHECKED = (np.int32, np.uint32)


# Containers nested deeper than this get no plan (the walk reads them): Python compiles at most 20 nested
# blocks, and each dict level opens one.
_MAX_PLAN_DEPTH = 16


class NoPlan(Exception):
    """The sample's layout is one plans do not cover (the walk decodes it)."""


@dataclass
class _Source:
    walk: Walk
    buf: bytes
    lines: list[str] = field(default_factory=list)
    names: dict[str, Any] = field(default_factory=dict)
    count: int = 0
    indent: str = "    "
    depth: int = 0  # containers open around the Data being compiled

    def emit(self, *statements: str) -> None:
        for statement in statements:
            self.lines.extend(self.indent + line for line in statement.split("\n"))

    def new(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, value: Any) -> str:
        name = self.new("k")
        self.names[name] = value
        return name

    def header(self, tag: int, stop: str) -> str:
        """Code reading the length-delimited field with one-byte `tag` at `p`, which must end by `stop`;
        leaves `p` at its payload and returns the name of its end."""
        end = self.new("e")
        self.emit(
            f"if b[p] != {tag}: raise I",
            "n = b[p + 1]",
            "if n < 128: p += 2",
            "elif b[p + 2] < 128:",
            "    n = n - 128 + (b[p + 2] << 7)",
            "    p += 3",
            "else: n, p = V(b, p + 1)",
            f"{end} = p + n",
        )
        return end

    def data(self, pos: int, end: int, stop: str) -> str:
        """Code for the `Data` at [pos, end) of the sample, ending at `stop` in a record: returns the name of
        its value."""
        value = self.new("v")
        if self.depth > min(_MAX_PLAN_DEPTH, self.walk.max_depth):
            raise NoPlan  # each dict level is a `while` block, and Python compiles at most 20 nested
        if pos == end:
            self.emit(f"if p != {stop}: raise I", f"{value} = None")
            return value
        tag, start, field_end = self.walk.field(self.buf, pos, end)
        if field_end != end:
            raise NoPlan
        fixed = self.fixed_leaf(start, field_end) if tag == 0x0A else None
        if fixed is not None:  # every byte but the payload is the sample's: one check
            payload, build = fixed
            self.emit(
                f"if {stop} - p != {end - pos} or not b.startswith({self.const(self.buf[pos:payload])}, p): raise I",
                f"{value} = {build.format(at=f'p + {payload - pos}')}",
                f"p = {stop}",
            )
            return value
        inner = self.header(tag, stop)
        self.emit(f"if {inner} != {stop}: raise I")
        self.depth += 1
        if tag == 0x12:  # a list: its length varies from record to record (keys pressed): the walk reads it
            self.emit(f"{value} = ITEMS(b, p, {inner}, {self.depth})", f"p = {inner}")
        elif tag == 0x1A:  # a tuple: a fixed structure
            items = []
            while start < field_end:
                item_tag, item_start, start = self.walk.field(self.buf, start, field_end)
                if item_tag != 0x0A:
                    raise NoPlan
                item_end = self.header(0x0A, inner)
                items.append(self.data(item_start, start, item_end))
            self.emit(f"if p != {inner}: raise I")
            joined = "".join(f"{v}, " for v in items)
            self.emit(f"{value} = ({joined})")
        elif tag == 0x22:
            self.dict(start, field_end, inner, value)
        elif tag == 0x0A:
            self.datum(start, field_end, inner, value)
        else:
            raise NoPlan
        self.depth -= 1
        return value

    def dict(self, pos: int, end: int, stop: str, value: str) -> None:
        """A dict of str keys (the map part only). The writer's map order changes from record to record, so
        entries are read in any order, dispatched by their key bytes; each key once, all of them there."""
        entries: dict[bytes, tuple[str, int, int]] = {}  # key field bytes -> (key, value start, value end)
        while pos < end:
            tag, start, pos = self.walk.field(self.buf, pos, end)
            if tag != 0x0A or start == pos or self.buf[start] != 0x0A:
                raise NoPlan  # a kvs part, or an entry without its key
            _, key_start, key_end = self.walk.field(self.buf, start, pos)
            key_field = self.buf[start:key_end]
            if key_field in entries or key_end == pos or key_end - key_start >= 128:
                raise NoPlan  # a repeated key, an entry without its value, a long key
            _, value_start, value_end = self.walk.field(self.buf, key_end, pos)
            if value_end != pos:
                raise NoPlan
            entries[key_field] = (self.buf[key_start:key_end].decode("utf-8"), value_start, value_end)
        seen = self.new("s")
        names = {key_field: self.new("v") for key_field in entries}
        self.emit(f"{seen} = 0", f"while p < {stop}:")
        outer = self.indent
        self.indent += "    "
        entry_end = self.header(0x0A, stop)
        key = self.new("k")
        self.emit(
            "if b[p] != 10: raise I",
            "n = b[p + 1]",
            f"{key} = b[p:p + 2 + n]",
            "p += 2 + n",
        )
        for i, (key_field, (_, value_start, value_end)) in enumerate(entries.items()):
            self.emit(f"{'if' if i == 0 else 'elif'} {key} == {self.const(key_field)}:")
            branch = self.indent
            self.indent += "    "
            self.emit(f"if {seen} & {1 << i}: raise I", f"{seen} |= {1 << i}")
            value_stop = self.header(0x12, entry_end)
            self.emit(f"if {value_stop} != {entry_end}: raise I")
            child = self.data(value_start, value_end, value_stop)
            self.emit(f"{names[key_field]} = {child}")
            self.indent = branch
        self.emit("else: raise I")
        self.indent = outer
        self.emit(f"if {seen} != {(1 << len(entries)) - 1} or p != {stop}: raise I")
        ordered = sorted(entries.items(), key=lambda item: item[1][0])
        joined = ", ".join(f"{self.const(k)}: {names[kf]}" for kf, (k, _, _) in ordered)
        self.emit(f"{value} = {{{joined}}}")

    def datum(self, pos: int, end: int, stop: str, value: str) -> None:
        """A leaf: the shape must be the sample's, byte for byte; the common leaves are built inline, the rest
        by the walk's own leaf function."""
        buf = self.buf
        begin = pos
        shape, pos = self.leaf_shape(pos, end)
        inline = self.inline_leaf(pos, end, shape)
        if inline is None:
            self.emit(f"{value} = LEAF(b, p, {stop})", f"p = {stop}")
            return
        if pos > begin:
            self.emit(f"if not b.startswith({self.const(buf[begin:pos])}, p): raise I", f"p += {pos - begin}")
        tag, build = inline
        if tag is None:
            self.emit(f"if p != {stop}: raise I", f"{value} = None")
            return
        values_end = self.header(0x12, stop)
        payload_end = self.header(tag, values_end)
        self.emit(f"if {payload_end} != {values_end}: raise I", build.format(v=value, e=payload_end))

    def leaf_shape(self, pos: int, end: int) -> tuple[list[int], int]:
        """The shape of the Datum at [pos, end) of the sample ([] without one) and where its values start."""
        if pos < end and self.buf[pos] == 0x0A:
            _, start, after = self.walk.field(self.buf, pos, end)
            return self.walk.shape(self.buf, start, after), after
        return [], pos

    def fixed_leaf(self, pos: int, end: int) -> tuple[int, str] | None:
        """For a Datum at [pos, end) of fixed-width numbers of a fixed shape (rewards, discounts, image
        arrays), whose every length is then the same in each record: (where its payload starts, the expression
        building it from `{at}`); None for any other leaf."""
        walk, buf = self.walk, self.buf
        shape, pos = self.leaf_shape(pos, end)
        if pos == end:
            return None
        _, start, stop = walk.field(buf, pos, end)
        if stop != end or start == stop or buf[start] & 7 != 2:
            return None
        tag, payload, payload_end = walk.field(buf, start, stop)
        numeric, packed = walk.numeric.get(tag), walk.packed.get(tag)
        if payload_end != stop or (numeric is None or numeric[1] is None) and packed is None:
            return None
        kind, dtype = (
            (numeric[0], numeric[1]) if numeric is not None and numeric[1] is not None else packed[:2]
        )
        scalar = len(shape) == 1 and shape[0] == walk.scalar_dim
        if not scalar and (not shape or any(d < 0 for d in shape)):
            return None
        count = 1 if scalar else math.prod(shape)
        if payload_end - payload != count * np.dtype(dtype).itemsize:
            return None
        if scalar:
            unpack = struct.Struct(_STRUCT[dtype]).unpack_from
            return payload, f"{self.const(kind)}({self.const(unpack)}(b, {{at}})[0])"
        read = f"FB(b, {dtype!r}, {count}, {{at}})"
        return payload, f"{read}.astype({self.const(kind)}).reshape({self.const(tuple(shape))})"

    def inline_leaf(self, pos: int, end: int, shape: list[int]) -> tuple[int | None, str] | None:
        """(the one value field's tag, the statements building the leaf from its payload: `{v}` the value's
        name, `{e}` the payload's end, `p` its start); (None, "") for a leaf without values; None for a leaf
        the walk builds. Fixed-width numbers never get here: `fixed_leaf` takes every one a plan can build."""
        walk, buf = self.walk, self.buf
        if pos == end:
            return None, ""
        scalar = len(shape) == 1 and shape[0] == walk.scalar_dim
        _, start, stop = walk.field(buf, pos, end)
        if not scalar or stop != end or start == stop or buf[start] & 7 != 2:
            return None
        tag, _, payload_end = walk.field(buf, start, stop)
        if payload_end != stop:
            return None  # more than one value field
        numeric = walk.numeric.get(tag)
        if numeric is not None and numeric[1] is None and numeric[0] not in _RANGE_CHECKED:  # a varint
            kind = self.const(numeric[0])
            signed = "n - U if n >= H else n" if numeric[2] else "n"
            return tag, f"n, q = V(b, p)\nif q != {{e}}: raise I\n{{v}} = {kind}({signed})\np = {{e}}"
        if tag in walk.text_tags:
            build = dict(zip(walk.text_tags, _TEXT_BUILDS, strict=True))[tag]
            return tag, "{v} = " + build + "\np = {e}"
        return None


def compile_plan(sample: bytes, walk: Walk) -> Callable[[bytes], Any]:
    """A decoder for records laid out as `sample`; raises `NoPlan` for layouts it does not cover."""
    src = _Source(walk, sample)
    src.emit("p = 0", "E = len(b)")
    top = src.data(0, len(sample), "E")
    src.emit("if p != E: raise I")
    body = "\n".join(src.lines)
    code = f"def plan(b):\n{body}\n    return {top}\n"
    names = dict(src.names)
    names.update(
        I=walk.irregular,
        V=walk.varint,
        LEAF=walk.leaf,
        ITEMS=walk.items,
        FB=np.frombuffer,
        U=1 << 64,
        H=1 << 63,
    )
    exec(compile(code, "<fast_decode plan>", "exec"), names)  # noqa: S102 - names and literals we wrote
    return names["plan"]

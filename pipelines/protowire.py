"""Protobuf wire-format pieces for the writers that assemble serialized messages by hand (episode records,
envlogger steps, Riegeli chunks, hierarchy object templates), where building messages would cost too much, and
for the readers that look at a message's fields before (or instead of) parsing it (counts checked before the
parser allocates, a record's id read without decoding its screenshots)."""

from __future__ import annotations

from collections.abc import Iterator

_SMALL = [bytes([n]) for n in range(128)]


def varint(n: int) -> bytes:
    """Base-128 varint of `n`; a negative `n` as its 64-bit two's complement (protobuf's int32/int64)."""
    if 0 <= n < 128:
        return _SMALL[n]
    if 0 < n < 16384:
        return bytes((n & 0x7F | 0x80, n >> 7))
    if 0 < n < 2097152:
        return bytes((n & 0x7F | 0x80, (n >> 7) & 0x7F | 0x80, n >> 14))
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(data: bytes, pos: int, end: int | None = None) -> tuple[int, int]:
    """(value, position after it) of the varint at `pos`; ValueError when it runs past `end` or 10 bytes."""
    end = len(data) if end is None else end
    value = shift = 0
    while pos < end and shift < 70:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise ValueError("truncated varint")


def fields(data: bytes, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, payload start, payload end) of each field of the message in data[start:end];
    scalars are skipped and length-delimited values delimited, nothing is decoded. ValueError when the bytes
    are not protobuf wire format."""
    end = len(data) if end is None else end
    pos = start
    while pos < end:
        key, pos = read_varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, after = read_varint(data, pos, end)
        elif wire == 1:
            after = pos + 8
        elif wire == 2:
            length, pos = read_varint(data, pos, end)
            after = pos + length
        elif wire == 5:
            after = pos + 4
        else:
            raise ValueError(f"wire type {wire} of field {number}")
        if after > end or number == 0:
            raise ValueError(f"field {number} runs past its message")
        yield number, wire, pos, after
        pos = after

"""Protobuf wire-format pieces for the writers that assemble serialized messages by hand (episode records,
envlogger steps, Riegeli chunks, hierarchy object templates), where building messages would cost too much."""

from __future__ import annotations

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

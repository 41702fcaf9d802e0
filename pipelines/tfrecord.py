"""TFRecord framing without TensorFlow: `uint64 length | masked crc32c(length) | data | masked crc32c(data)`,
little-endian. Used to write shards record by record and to read one record back by its byte offset."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

import google_crc32c

from pipelines.errors import StepmarkError

_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
HEADER_SIZE = _LENGTH.size + _CRC.size  # 12
FOOTER_SIZE = _CRC.size  # 4
#: Largest record accepted when reading: protobuf messages (one serialized UiEpisode per record) stop at 2 GiB.
MAX_RECORD = 2**31 - 1


class TFRecordError(StepmarkError):
    """A shard that is not valid TFRecord (truncated, corrupted, or not a TFRecord file at all)."""


def masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def encode(data: bytes) -> bytes:
    """One framed record."""
    length = _LENGTH.pack(len(data))
    return b"".join((length, _CRC.pack(masked_crc(length)), data, _CRC.pack(masked_crc(data))))


def read_at(f: BinaryIO, offset: int, *, name: str = "shard") -> tuple[bytes, int]:
    """(record data, offset of the next record) for the record starting at `offset`; checks both CRCs."""
    f.seek(offset)
    header = f.read(HEADER_SIZE)
    if len(header) < HEADER_SIZE:
        raise TFRecordError(f"{name}: no record at byte {offset} (file ends after {len(header)} bytes)")
    length_bytes = header[: _LENGTH.size]
    (length,) = _LENGTH.unpack(length_bytes)
    (length_crc,) = _CRC.unpack(header[_LENGTH.size :])
    if length_crc != masked_crc(length_bytes):
        raise TFRecordError(
            f"{name}: byte {offset} is not the start of a TFRecord record (length CRC mismatch)"
        )
    if length > MAX_RECORD:  # a valid length CRC but no protobuf is this large: refuse before allocating it
        raise TFRecordError(f"{name}: record at byte {offset} claims {length} bytes (at most {MAX_RECORD})")
    data = f.read(length)
    footer = f.read(FOOTER_SIZE)
    if len(data) < length or len(footer) < FOOTER_SIZE:
        raise TFRecordError(f"{name}: record at byte {offset} is truncated ({len(data)} of {length} bytes)")
    if _CRC.unpack(footer)[0] != masked_crc(data):
        raise TFRecordError(f"{name}: record at byte {offset} is corrupted (data CRC mismatch)")
    return data, offset + HEADER_SIZE + length + FOOTER_SIZE


def iter_records(f: BinaryIO, *, name: str = "shard") -> Iterator[tuple[int, bytes]]:
    """(offset, data) for every record, in file order."""
    offset = 0
    while True:
        f.seek(offset)
        if not f.read(1):
            return
        data, next_offset = read_at(f, offset, name=name)
        yield offset, data
        offset = next_offset


#: Largest input record read from a sequential stream: AndroidControl episodes with every PNG are tens of MB;
#: a larger length claim is a corrupt header (or a hostile file) and is refused before anything is allocated.
MAX_STREAM_RECORD = 256 << 20
_CHUNK = 16 << 20


def _read_exactly(f: BinaryIO, n: int) -> bytes:
    """Up to n bytes, in chunks, so a corrupt length never allocates more than the stream really holds."""
    if n <= _CHUNK:
        return f.read(n)
    parts, left = [], n
    while left:
        part = f.read(min(left, _CHUNK))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def iter_stream(
    f: BinaryIO, *, name: str = "file", max_record: int = MAX_STREAM_RECORD
) -> Iterator[tuple[int, bytes | TFRecordError]]:
    """(offset, data) for every record of a stream read front to back (a gzip-decompressed file cannot
    seek). A record whose data CRC fails comes as (offset, TFRecordError) and reading goes on (its length
    was verified); a bad length header, an oversized or a truncated record raises TFRecordError, since
    nothing after it can be framed."""
    offset = 0
    while True:
        header = f.read(HEADER_SIZE)
        if not header:
            return
        if len(header) < HEADER_SIZE:
            raise TFRecordError(f"{name}: truncated record header at byte {offset} ({len(header)} bytes)")
        length_bytes = header[: _LENGTH.size]
        (length,) = _LENGTH.unpack(length_bytes)
        if _CRC.unpack(header[_LENGTH.size :])[0] != masked_crc(length_bytes):
            raise TFRecordError(f"{name}: byte {offset} is not the start of a TFRecord record (length CRC)")
        if length > max_record:
            raise TFRecordError(
                f"{name}: record at byte {offset} claims {length} bytes (at most {max_record})"
            )
        data = _read_exactly(f, length)
        footer = f.read(FOOTER_SIZE)
        if len(data) < length or len(footer) < FOOTER_SIZE:
            raise TFRecordError(
                f"{name}: record at byte {offset} is truncated ({len(data)} of {length} bytes)"
            )
        if _CRC.unpack(footer)[0] != masked_crc(data):
            yield offset, TFRecordError(f"{name}: record at byte {offset} is corrupted (data CRC mismatch)")
        else:
            yield offset, data
        offset += HEADER_SIZE + length + FOOTER_SIZE

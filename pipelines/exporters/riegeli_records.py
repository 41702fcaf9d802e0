"""Riegeli/records files written from records that are already serialized (bytes in, file bytes out).

The subset of the format (google/riegeli `doc/riegeli_records_file_format.md`) that envlogger's shard files
use: the file signature, then simple chunks ('r') of records, uncompressed or zstd-compressed, cut into 64 KiB
blocks by 24-byte block headers. Written as Riegeli's own `RecordWriter` writes them (same chunking rule,
padding, record positions): uncompressed, the files are byte for byte what it writes for the same records
(tests/pipelines/export/test_riegeli_records.py); compressed, only the zstd frames differ.

Why not Riegeli itself: its Python binding is not installable here, and envlogger's C++ writer takes a
message, so our serialized records were parsed and serialized again before being compressed, and it fsyncs
every file it closes. zstd comes from the `zstandard` package (its `compress` holds the GIL here: measured,
two compressing threads take as long as one, so chunks are compressed inline).
Hashes are HighwayHash-64, called through the C symbols envlogger's own extension exports (no Python
package of it exists here); `highway_hash` says why when they cannot be loaded.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Callable
from typing import BinaryIO

from pipelines.errors import StepmarkError
from pipelines.protowire import varint as _varint

BLOCK_SIZE = 1 << 16
BLOCK_HEADER_SIZE = 24
USABLE_BLOCK_SIZE = BLOCK_SIZE - BLOCK_HEADER_SIZE
CHUNK_HEADER_SIZE = 40
CHUNK_SIGNATURE = 0x73  # 's'
CHUNK_SIMPLE = 0x72  # 'r'
COMPRESSION_NONE = b"\x00"
COMPRESSION_ZSTD = b"z"
DEFAULT_CHUNK_SIZE = 1 << 20
# RecordWriter counts each record as its size plus a pointer (8 bytes) when deciding where a chunk ends.
RECORD_OVERHEAD = 8
# The hash key: 'Riegeli/', 'records\n', 'Riegeli/', 'records\n' as little-endian uint64s.
HASH_KEY = struct.unpack("<4Q", b"Riegeli/records\nRiegeli/records\n")
# The first block header of every file (hash of previous_chunk=0, next_chunk=64): checks a loaded hash.
_SIGNATURE_BLOCK_HASH = 0x3F4A880DD170AF83

_U64 = struct.Struct("<Q")
_BLOCK_HEADER_REST = struct.Struct("<QQ")
_CHUNK_HEADER_REST = struct.Struct("<QQQQ")


class HashUnavailable(StepmarkError):
    """HighwayHash could not be loaded from envlogger's extension (another envlogger build)."""


_hash_lock = threading.Lock()
_hash_fn: list[Callable[[bytes], int] | HashUnavailable] = []


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _load_hash() -> Callable[[bytes], int]:
    """HighwayHash64 with Riegeli's key, from envlogger's Riegeli extension (which links highwayhash's C
    bindings: `uint64_t HighwayHash64_<Target>(const uint64_t key[4], const char* bytes, uint64_t size)`).
    The AVX2 / SSE4.1 versions only when the CPU says it has them; checked on a known hash before use."""
    try:
        from envlogger.backends.python import riegeli_dataset_writer

        lib = ctypes.CDLL(riegeli_dataset_writer.__file__)
    except (ImportError, OSError) as exc:
        raise HashUnavailable(f"envlogger's Riegeli extension could not be loaded for HighwayHash ({exc})") from exc
    flags = _cpu_flags()
    targets = [t for t, flag in (("AVX2", "avx2"), ("SSE41", "sse4_1")) if flag in flags] + ["Portable"]
    key = (ctypes.c_uint64 * 4)(*HASH_KEY)
    for target in targets:
        fn = getattr(lib, f"HighwayHash64_{target}", None)
        if fn is None:
            continue
        fn.restype = ctypes.c_uint64
        fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_char_p, ctypes.c_uint64]

        def highway(data: bytes, fn=fn) -> int:  # noqa: ANN001 - bound ctypes function
            return fn(key, data, len(data))

        if highway(_BLOCK_HEADER_REST.pack(0, 64)) == _SIGNATURE_BLOCK_HASH:
            return highway
    raise HashUnavailable(
        f"{riegeli_dataset_writer.__file__}: no HighwayHash64_{{AVX2,SSE41,Portable}} symbol giving Riegeli's hashes"
    )


def highway_hash() -> Callable[[bytes], int]:
    """Riegeli's hash function (loaded once a process); raises `HashUnavailable` saying why not."""
    with _hash_lock:
        if not _hash_fn:
            try:
                _hash_fn.append(_load_hash())
            except HashUnavailable as exc:
                _hash_fn.append(exc)
        loaded = _hash_fn[0]
    if isinstance(loaded, HashUnavailable):
        raise loaded
    return loaded


_compressors = threading.local()


def _compressor(level: int) -> Callable[[bytes], bytes]:
    """zstd at `level`, one compressor per thread and level (a `ZstdCompressor` may not be shared between
    threads; making one costs ~9 us, and every shard opens four writers)."""
    cache: dict[int, Callable[[bytes], bytes]] | None = getattr(_compressors, "by_level", None)
    if cache is None:
        cache = _compressors.by_level = {}
    compress = cache.get(level)
    if compress is None:
        import zstandard

        compress = cache[level] = zstandard.ZstdCompressor(level=level).compress
    return compress


def remaining_in_block(pos: int) -> int:
    return -pos % BLOCK_SIZE


def add_with_overhead(pos: int, size: int) -> int:
    """Where `size` bytes written from `pos` end, counting the block headers they cross."""
    overhead_blocks = (size + (pos + USABLE_BLOCK_SIZE - 1) % BLOCK_SIZE) // USABLE_BLOCK_SIZE
    return pos + size + overhead_blocks * BLOCK_HEADER_SIZE


def round_up_to_possible_chunk_boundary(pos: int) -> int:
    """A chunk never begins inside nor right after a block header."""
    return pos + max(remaining_in_block(pos) - (USABLE_BLOCK_SIZE - 1), 0)


def chunk_end(begin: int, data_size: int, num_records: int) -> int:
    """The spec's formula: the chunk holds its header, data and block headers, and at least as many bytes as
    records (so that `begin + index` names each record), and ends where a chunk may begin."""
    return max(
        add_with_overhead(begin, CHUNK_HEADER_SIZE + data_size),
        round_up_to_possible_chunk_boundary(begin + num_records),
    )


def chunk_header(
    hash_fn: Callable[[bytes], int], data: bytes, chunk_type: int, num_records: int, decoded_size: int
) -> bytes:
    rest = _CHUNK_HEADER_REST.pack(len(data), hash_fn(data), chunk_type | num_records << 8, decoded_size)
    return _U64.pack(hash_fn(rest)) + rest


def simple_chunk_data(records: list[bytes], compress: Callable[[bytes], bytes] | None) -> bytes:
    """A simple chunk's data: compression type, then the record sizes (varints) and the concatenated records,
    each compressed on its own and prefixed with its decompressed size when compressed."""
    sizes = b"".join([_varint(len(r)) for r in records])
    if compress is None:
        return b"".join([COMPRESSION_NONE, _varint(len(sizes)), sizes, *records])
    values = b"".join(records)
    compressed_sizes = _varint(len(sizes)) + compress(sizes)
    return b"".join(
        [COMPRESSION_ZSTD, _varint(len(compressed_sizes)), compressed_sizes, _varint(len(values)), compress(values)]
    )


class RecordsWriter:
    """Writes records (bytes) to a binary file object as a Riegeli/records file.

    `write` returns the record's numeric position (chunk begin + index in the chunk), what envlogger stores in
    its step offsets and episode index. `flush` ends the open chunk (envlogger flushes at the end of each
    episode); `close` ends it too, and leaves closing `dest` to the caller. `compression_level` None writes
    uncompressed chunks; else zstd at that level (Riegeli's `zstd:<level>`)."""

    def __init__(self, dest: BinaryIO, compression_level: int | None = 3, chunk_size: int = DEFAULT_CHUNK_SIZE):
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        self._hash = highway_hash()
        self._dest = dest
        self._chunk_size = chunk_size
        self._compress: Callable[[bytes], bytes] | None = None
        if compression_level is not None:
            self._compress = _compressor(compression_level)
        self._pos = 0
        self._records: list[bytes] = []
        self._open_size = 0
        self._write_chunk(b"", CHUNK_SIGNATURE, 0, 0)

    @property
    def pos(self) -> int:
        """Bytes written so far (the file's size once closed)."""
        return self._pos

    def write(self, record: bytes) -> int:
        size = len(record) + RECORD_OVERHEAD
        if self._open_size and self._open_size + size > self._chunk_size:
            self.flush()
        position = self._pos + len(self._records)
        self._records.append(record)
        self._open_size += size
        return position

    def flush(self) -> None:
        if not self._records:
            return
        records, self._records, self._open_size = self._records, [], 0
        data = simple_chunk_data(records, self._compress)
        self._write_chunk(data, CHUNK_SIMPLE, len(records), sum(map(len, records)))

    def close(self) -> int:
        """Ends the open chunk; returns the file's size."""
        self.flush()
        return self._pos

    def _write_chunk(self, data: bytes, chunk_type: int, num_records: int, decoded_size: int) -> None:
        """Header, data and padding, with a block header at each block boundary they cross; one write."""
        begin = self._pos
        end = chunk_end(begin, len(data), num_records)
        header = chunk_header(self._hash, data, chunk_type, num_records, decoded_size)
        out: list[bytes | memoryview] = []
        pos = begin
        for section in (header, data):
            view = memoryview(section)
            done = 0
            while done < len(view):
                pos = self._block_header_at(pos, begin, end, out)
                n = min(len(view) - done, remaining_in_block(pos))
                out.append(view[done : done + n])
                done += n
                pos += n
        while pos < end:  # padding
            pos = self._block_header_at(pos, begin, end, out)
            n = min(end - pos, remaining_in_block(pos))
            out.append(bytes(n))
            pos += n
        self._dest.write(b"".join(out))
        self._pos = pos

    def _block_header_at(self, pos: int, chunk_begin: int, end: int, out: list[bytes | memoryview]) -> int:
        """Adds a block header when `pos` is a block boundary; returns the position after it."""
        if pos % BLOCK_SIZE:
            return pos
        rest = _BLOCK_HEADER_REST.pack(pos - chunk_begin, end - pos)
        out.append(_U64.pack(self._hash(rest)) + rest)
        return pos + BLOCK_HEADER_SIZE


def writer_available() -> str | None:
    """None when `RecordsWriter` can be used here; else why not."""
    try:
        highway_hash()
    except HashUnavailable as exc:
        return str(exc)
    return None

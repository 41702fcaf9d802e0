"""Image bytes the image-header tests need and real files do not provide."""

from __future__ import annotations

import struct
import zlib


def png_header(width: int, height: int) -> bytes:
    """A PNG signature and a valid IHDR chunk claiming width x height, then nothing (no pixel data)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))

"""Image leaves of exported observations: the one encoder and the one decoder every format and loader shares.

By default an export gives the observation as recorded: TFDS and Parquet keep the raw arrays, Minari (whose
reader decodes every image leaf from encoded bytes) PNG, which decodes to the same array. `--jpeg-frames` is
the lossy opt-in: the frame leaf holds the recorded JPEG bytes, which decode to other pixels than the
environment's observation (Procgen: up to ~100 levels apart). Then every loader must decode with the same
decoder, or the same step gives different arrays in different formats (TensorFlow's default JPEG decoder,
`INTEGER_FAST`, differs from Pillow's by 3-5 levels): `decode_frame` (Pillow) is that decoder, and Minari's
reader uses Pillow too; in a `tf.data` pipeline `tf.io.decode_jpeg(x, channels=3, dct_method="INTEGER_ACCURATE")`
gives the same array (tested). A step without a recorded frame stores its array as PNG (exact).
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np

from pipelines.errors import StepmarkError

#: How TensorFlow decodes the JPEG frames to the same array as `decode_frame` (Pillow, libjpeg's ISLOW DCT).
TF_DCT_METHOD = "INTEGER_ACCURATE"


_PNG_COLOR_TYPES = {(): 0, (3,): 2, (4,): 6}  # channels after H x W -> PNG colour type: grey, RGB, RGBA


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(frame: np.ndarray, path: tuple[str, ...] = ()) -> bytes:
    """A uint8 image array (H x W, H x W x 3 or H x W x 4) as PNG: lossless, `decode_frame` gives the array back.

    Written directly (rows without PNG filters, zlib level 1), not with Pillow: on recorded Procgen frames
    Pillow's encoder (adaptive row filters, level 6) took ~1 ms a 64x64 frame for 2,188 bytes, this ~150 us for
    1,820 bytes (filters suit photographs, not flat-coloured game frames; measured side by side on 200 frames
    under load). It is Minari's cost of exporting the observation as recorded."""
    arr = np.ascontiguousarray(np.asarray(frame, np.uint8))
    channels = tuple(arr.shape[2:]) if arr.ndim >= 2 else None
    if channels not in _PNG_COLOR_TYPES:
        raise StepmarkError(
            f"observation {'/'.join(path)}: a uint8 array of shape {list(arr.shape)} is an image to Minari, but "
            "no image format holds it (channels must be 3 or 4)"
        )
    height, width = arr.shape[:2]
    rows = np.zeros((height, 1 + arr[0].size), np.uint8)  # each row: filter type 0 (none), then its bytes
    rows[:, 1:] = arr.reshape(height, -1)
    header = struct.pack(">IIBBBBB", width, height, 8, _PNG_COLOR_TYPES[channels], 0, 0, 0)
    return b"".join(
        (
            b"\x89PNG\r\n\x1a\n",
            _png_chunk(b"IHDR", header),
            _png_chunk(b"IDAT", zlib.compress(rows.tobytes(), 1)),
            _png_chunk(b"IEND", b""),
        )
    )


def decode_frame(data: bytes) -> np.ndarray:
    """Encoded frame bytes (JPEG or PNG) -> uint8 array, as Minari's reader decodes them (Pillow)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image)

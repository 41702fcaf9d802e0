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

import numpy as np

from pipelines.errors import StepmarkError

#: How TensorFlow decodes the JPEG frames to the same array as `decode_frame` (Pillow, libjpeg's ISLOW DCT).
TF_DCT_METHOD = "INTEGER_ACCURATE"


def encode_png(frame: np.ndarray, path: tuple[str, ...] = ()) -> bytes:
    """A uint8 image array as PNG (lossless: `decode_frame` gives the array back exactly)."""
    from PIL import Image

    arr = np.asarray(frame, np.uint8)
    if arr.ndim == 3 and arr.shape[-1] not in (3, 4):
        raise StepmarkError(
            f"observation {'/'.join(path)}: a uint8 array of shape {list(arr.shape)} is an image to Minari, but "
            "no image format holds it (channels must be 3 or 4)"
        )
    buffer = io.BytesIO()
    Image.fromarray(arr).save(buffer, format="PNG")
    return buffer.getvalue()


def decode_frame(data: bytes) -> np.ndarray:
    """Encoded frame bytes (JPEG or PNG) -> uint8 array, as Minari's reader decodes them (Pillow)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image)

"""Frames to JPEG for the browser and the recorder, at the three `SetQualityRequest` levels.

The levels map to Pillow's named JPEG presets (quantization tables + subsampling tuned for the web), so
"low/medium/high" mean the same thing everywhere frames are encoded.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2

_Quality = client_pb2.SetQualityRequest.Quality
PRESETS: dict[int, str] = {
    _Quality.QUALITY_UNSPECIFIED: "web_medium",
    _Quality.QUALITY_LOW: "web_low",
    _Quality.QUALITY_MEDIUM: "web_medium",
    _Quality.QUALITY_HIGH: "web_high",
}


def as_rgb(frame: np.ndarray) -> np.ndarray:
    """Checks a frame is HxWx3 (or HxW grey, or HxWx4) and returns it as contiguous uint8 RGB."""
    array = np.asarray(frame)
    if array.ndim == 2:
        array = np.repeat(array[:, :, None], 3, axis=2)
    if array.ndim != 3 or array.shape[2] not in (3, 4) or array.shape[0] == 0 or array.shape[1] == 0:
        raise StepmarkError(f"a frame must be HxWx3 RGB, got shape {array.shape}")
    if array.dtype != np.uint8:
        if np.issubdtype(array.dtype, np.floating) and array.size and float(np.nanmax(array)) <= 1.0:
            array = array * 255.0
        array = np.clip(np.nan_to_num(array), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(array[:, :, :3])


def encode_jpeg(frame: np.ndarray, quality: int = _Quality.QUALITY_MEDIUM) -> bytes:
    """JPEG bytes of an RGB frame at a `SetQualityRequest.Quality` level (unspecified -> medium)."""
    preset = PRESETS.get(int(quality))
    if preset is None:
        raise StepmarkError(f"unknown frame quality {quality!r}; expected one of {sorted(PRESETS)}")
    buffer = io.BytesIO()
    Image.fromarray(as_rgb(frame)).save(buffer, format="JPEG", quality=preset)
    return buffer.getvalue()

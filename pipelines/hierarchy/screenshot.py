"""Screenshot format and size from the bytes (never from the file name: DroidBot saves JPEG as .png)."""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from .errors import HierarchyError

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
)
_PIL_FORMATS = {"PNG": "png", "JPEG": "jpeg", "GIF": "gif", "WEBP": "webp"}

#: Largest screenshot file read (reason `too_large`): phone screenshots are 0.1-5 MB; 64 MiB PNGs made a
#: 34-step episode of 2.3 GB that took the converter down.
MAX_SCREENSHOT_BYTES = 32 * 2**20
#: Most pixels a screenshot may claim in its header (reason `too_large`): 6000x6000, above any phone or tablet
#: screen (1440x3200 is 4.6 million). A 12000x12000 image decodes to 576 MB of RGBA: a decompression bomb.
MAX_SCREENSHOT_PIXELS = 36_000_000


@dataclass(frozen=True)
class ImageInfo:
    format: str  # "png", "jpeg", "webp" or "gif"
    width: int
    height: int


def sniff_format(data: bytes) -> str | None:
    """Image format from the magic bytes alone, None when unknown."""
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def image_info(data: bytes) -> ImageInfo:
    """Format and size read from the header (Pillow's `open` does not decode pixels); `bad_screenshot` else."""
    if len(data) > MAX_SCREENSHOT_BYTES:
        raise HierarchyError(
            "too_large", f"screenshot of {len(data)} bytes; at most {MAX_SCREENSHOT_BYTES} are accepted"
        )
    data = bytes(data)
    if not data:
        raise HierarchyError("bad_screenshot", "the screenshot file is empty")
    sniffed = sniff_format(data)
    if sniffed is None:
        raise HierarchyError("bad_screenshot", f"not a PNG/JPEG/WebP/GIF image (starts with {data[:8]!r})")
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            pil_format = image.format
    except Image.DecompressionBombError as exc:  # a header claiming far more pixels than any screen has
        raise HierarchyError("bad_screenshot", f"implausibly large {sniffed} image: {exc}") from None
    except UnidentifiedImageError:  # its message names a BytesIO object: say what it means instead
        raise HierarchyError(
            "bad_screenshot", f"unreadable {sniffed} image: Pillow cannot read its header"
        ) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise HierarchyError("bad_screenshot", f"unreadable {sniffed} image: {exc}") from None
    name = _PIL_FORMATS.get(pil_format or "", sniffed)
    if width <= 0 or height <= 0:
        raise HierarchyError("bad_screenshot", f"{name} image with size {width}x{height}")
    if width * height > MAX_SCREENSHOT_PIXELS:
        raise HierarchyError(
            "too_large",
            f"{name} image of {width}x{height} pixels; at most {MAX_SCREENSHOT_PIXELS} pixels are accepted "
            "(decoding it would take {:.1f} GB)".format(width * height * 4 / 1e9),
        )
    return ImageInfo(name, width, height)

"""File access for trace layouts through Beam's filesystem registry, so INPUT may be local, gs://, s3://, ...

Only `FileSystems` is used here (no `os`/`pathlib`): the same code lists and reads on any Beam filesystem.
"""

from __future__ import annotations

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines.errors import StepmarkError


def strip_slash(path: str) -> str:
    """`path` without trailing separators (but keep a bare scheme root like `gs://b/` usable)."""
    stripped = path.rstrip("/\\")
    return stripped or path


def list_files(root: str) -> list[str]:
    """Every file below `root` (recursively), or `[root]` when root is itself a file."""
    root = strip_slash(root)
    try:
        below = FileSystems.match([FileSystems.join(root, "**")])[0].metadata_list
    except Exception as exc:  # BeamIOError wraps the real cause
        raise StepmarkError(f"{root}: cannot list files ({exc})") from exc
    if below:
        return sorted(m.path for m in below)
    try:
        exact = FileSystems.match([root])[0].metadata_list
    except Exception as exc:
        raise StepmarkError(f"{root}: cannot list files ({exc})") from exc
    if exact:
        return [exact[0].path]
    raise StepmarkError(f"{root}: no such file or folder, or it holds no files")


def read_bytes(path: str) -> bytes:
    """The file's bytes exactly as stored (no decompression guessed from the name)."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def split(path: str) -> tuple[str, str]:
    """(folder, file name)."""
    return FileSystems.split(path)


def join(base: str, *parts: str) -> str:
    return FileSystems.join(base, *parts)


def relative(root: str, path: str) -> str:
    """`path` relative to `root`, with "/" separators ("" when they are the same)."""
    root = strip_slash(root)
    if path == root:
        return ""
    for sep in ("/", "\\"):
        if path.startswith(root + sep):
            return path[len(root) + 1 :].replace("\\", "/")
    return path.replace("\\", "/")


def stem_and_ext(name: str) -> tuple[str, str]:
    """("1234", ".json") for "1234.json"; the extension is lower-cased."""
    dot = name.rfind(".")
    if dot <= 0:
        return name, ""
    return name[:dot], name[dot:].lower()


def display(path: str) -> str:
    """`path` as text that any UTF-8 field can hold. Local file names that are not UTF-8 reach Python with
    surrogate escapes (b"\\xff" -> "\\udcff"), which protos and UTF-8 files refuse: those bytes are written as
    "\\xff". Reading must keep using the original path."""
    if path.isascii():
        return path
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        pass
    try:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that is not an escaped byte
        return path.encode("utf-8", "backslashreplace").decode("utf-8")

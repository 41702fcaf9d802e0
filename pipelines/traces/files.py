"""File access for trace layouts through Beam's filesystem registry, so INPUT may be local, gs://, s3://, ...

Listing and reading go through `FileSystems`, so the same code works on any Beam filesystem. The one exception
is `read_limited` on local paths: it asks the operating system first (`os.stat`, never `open`) so that FIFOs,
devices, sockets, files larger than their limit and symlinks leading out of INPUT are refused before a byte
is read. This module is the one home of bounded reads (hierarchies, screenshots, layout files, study specs).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from pipelines.errors import StepmarkError
from pipelines.hierarchy.errors import HierarchyError
from pipelines.hierarchy.objects import MAX_BYTES
from pipelines.hierarchy.screenshot import MAX_SCREENSHOT_BYTES
from pipelines.storage import NotRegularFile, file_kind, open_regular

IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".webp")


class _LazyFileSystems:
    """Beam's `FileSystems` as `pipelines.storage` configures it, imported on first use: reading a local study
    spec must not pay ~1 s for Beam."""

    def __getattr__(self, name: str):
        from pipelines import storage

        return getattr(storage._filesystems(), name)


FileSystems = _LazyFileSystems()

_CHUNK = 1 << 20


class FileRefused(HierarchyError):
    """A file that is not read at all, or only up to its limit: `too_large`, `not_regular`, `outside_input`.
    A HierarchyError, so the converter dead-letters the step naming the file and the reason."""


@dataclass(frozen=True)
class ReadPolicy:
    """Where reads may lead. `roots`: real (symlink-resolved) local folders a file must lie in once its
    symlinks are followed (None: anywhere); `follow_links` lifts that rule (`--follow-links`)."""

    roots: tuple[str, ...] | None = None
    follow_links: bool = False


#: No symlink rule: what reads outside a conversion use.
ANYWHERE = ReadPolicy()


def input_roots(input_path: str) -> tuple[str, ...] | None:
    """The real folder INPUT stands for (one file: itself and its folder); None off the local disk."""
    if not _is_local(input_path):
        return None
    real = os.path.realpath(input_path)
    if os.path.isdir(real):
        return (real,)
    return (real, os.path.realpath(os.path.dirname(os.path.abspath(input_path))))  # the file and its folder


def limit_for(path: str) -> int:
    """The byte limit of a trace file: screenshots MAX_SCREENSHOT_BYTES, everything else (hierarchies, layout
    files) the hierarchy limit MAX_BYTES."""
    return MAX_SCREENSHOT_BYTES if stem_and_ext(split(path)[1])[1] in IMAGE_EXTS else MAX_BYTES


def _is_local(path: str) -> bool:
    return "://" not in path or FileSystems.get_scheme(path) is None


def _too_large(path: str, size: int | str, limit: int) -> FileRefused:
    return FileRefused(
        "too_large", f"{display(path)}: {size} bytes; at most {limit} are read from such a file"
    )


def check_file(path: str, limit: int, policy: ReadPolicy = ANYWHERE) -> int:
    """The file's size after checking, without opening it, that it is a regular file of at most `limit` bytes
    inside the policy's roots. Raises FileRefused (or OSError: missing, no permission)."""
    if not _is_local(path):
        found = FileSystems.match([path])[0].metadata_list
        if not found:
            raise FileNotFoundError(f"{display(path)}: no such file")
        size = found[0].size_in_bytes
    else:
        if policy.roots is not None and not policy.follow_links:
            real = os.path.realpath(path)
            if not any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in policy.roots):
                raise FileRefused(
                    "outside_input",
                    f"{display(path)}: a symlink to {display(real)}, outside INPUT: not read "
                    "(pass --follow-links to read files that links lead to)",
                )
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(
                "not_regular", f"{display(path)}: {file_kind(st.st_mode)}, not a regular file: not read"
            )
        size = st.st_size
    if size > limit:
        raise _too_large(path, size, limit)
    return size


def _read_capped(f, path: str, limit: int, expected: int) -> bytes:
    """At most `limit` bytes from `f`; FileRefused as soon as there are more (a file growing while read, or
    one in a bucket whose size was not asked first)."""
    first = f.read(min(expected, limit) + 1)
    if len(first) <= min(expected, limit):
        return first  # the usual case: the whole file in one read
    chunks, total = [first], len(first)
    while total <= limit:
        chunk = f.read(min(_CHUNK, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > limit:
        raise _too_large(path, f"more than {limit}", limit)
    return b"".join(chunks)


def read_limited(path: str, limit: int, policy: ReadPolicy = ANYWHERE) -> bytes:
    """The file's bytes, refused before reading (`check_file`) and stopped at `limit` while reading. Local
    files are opened non-blocking and checked again once open, so a file swapped for a FIFO in between cannot
    make the read wait."""
    if not _is_local(path):
        # One request, capped at the limit (`storage.read_object`): a size check first would be one more round
        # trip to the bucket per file (`check_file`), which dominates reading small files remotely.
        from pipelines import storage

        try:
            data = storage.read_object(path, limit)
            if len(data) > limit:
                raise _too_large(path, f"more than {limit}", limit)
            return data
        except FileRefused:
            raise
        except Exception as exc:  # noqa: BLE001 - Beam wraps the client's error: name the file and the cause
            if "404" in str(exc) or "Not Found" in str(exc) or isinstance(exc, FileNotFoundError):
                raise FileNotFoundError(f"{display(path)}: no such file") from exc
            raise OSError(f"{display(path)}: cannot read ({type(exc).__name__}: {exc})") from exc
    size = check_file(path, limit, policy)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileRefused("not_regular", f"{display(path)}: {file_kind(mode)}, not a regular file: not read")
        return _read_capped(f, path, limit, size)


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
    """A trace file's bytes exactly as stored (no decompression guessed from the name), bounded by `limit_for`
    its kind; no symlink rule (see `read_limited` with a ReadPolicy for that)."""
    return read_limited(path, limit_for(path))


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



class Prefetch:
    """Reads the files of a shard's episodes from a bucket ahead of their conversion, in threads.

    A bucket answers each request after a round trip (tens of milliseconds), so reading one file after another
    leaves a worker waiting most of the time. `take(i)` fetches every file of episode i, `window` at a time
    (its conversion reads them all anyway); while it converts, the files of episodes i+1, ... are fetched in
    order, at most `window` files ahead; no more are started while the later episodes' files already fetched
    hold `max_bytes` or more (checked when an episode is taken). Only files in a bucket are
    fetched: local files are read when asked, as before. A file that could not be fetched (refused, missing,
    an error) is left out, so the converter reads it itself and reports it as it always does. Use as a
    context manager."""

    def __init__(self, episodes: list[tuple[str, ...]], read, window: int = 16,  # noqa: ANN001
                 max_bytes: int = 256 * 2**20) -> None:  # fmt: skip
        from concurrent.futures import ThreadPoolExecutor

        self.read, self.window, self.max_bytes = read, window, max_bytes
        self.queue = [(i, p) for i, paths in enumerate(episodes) for p in dict.fromkeys(paths) if not _is_local(p)]
        self.pending: dict[int, dict[str, object]] = {}
        self.held = self.in_flight = 0
        self.pool = ThreadPoolExecutor(max_workers=window) if self.queue else None
        self._fill()

    def _fill(self) -> None:
        while self.pool is not None and self.queue and self.in_flight < self.window and self.held < self.max_bytes:
            index, path = self.queue.pop(0)
            self.pending.setdefault(index, {})[path] = self.pool.submit(self.read, path)
            self.in_flight += 1

    def take(self, index: int) -> dict[str, bytes]:
        """The fetched files of episode `index` (waiting for those under way); later episodes' files are
        fetched meanwhile. Files of earlier episodes never taken are dropped."""
        for stale in [i for i in self.pending if i < index]:
            for future in self.pending.pop(stale).values():
                future.cancel()
        mine = self.pending.setdefault(index, {})
        for _, path in [item for item in self.queue if item[0] == index]:  # the rest of this episode: now
            if self.pool is not None and path not in mine:
                mine[path] = self.pool.submit(self.read, path)
        self.queue = [(i, p) for i, p in self.queue if i > index]
        got: dict[str, bytes] = {}
        for path, future in self.pending.pop(index, {}).items():
            try:
                got[path] = future.result()
            except Exception:  # noqa: BLE001 - the converter reads it again and reports it, naming the file
                pass
        ahead = [f for files in self.pending.values() for f in files.values()]
        self.in_flight = len(ahead)
        # Bytes already fetched for later episodes (what `max_bytes` bounds), not those handed over here.
        self.held = sum(len(f.result()) for f in ahead if f.done() and not f.cancelled() and f.exception() is None)
        self._fill()
        return got

    def __enter__(self) -> Prefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            for files in self.pending.values():
                for future in files.values():
                    future.cancel()
            self.pool.shutdown(wait=True)


#: Files read as a stream, record by record (TFRecord inputs): their size is not a memory bound (what is kept
#: is bounded per record and per episode by the reader), so only a sanity limit applies.
MAX_STREAMED_FILE = 1 << 40


def open_guarded(path: str, limit: int = MAX_STREAMED_FILE, policy: ReadPolicy = ANYWHERE):
    """A binary stream of the file after the same checks as `read_limited` (regular file, inside the policy's
    roots, at most `limit` bytes), for files read piecewise. Local files are opened non-blocking (a FIFO
    swapped in after the check cannot make the open wait) and checked again once open; other filesystems
    (gs://, s3://) go through `FileSystems.open` unchecked (no local stat means anything there). Raises
    FileRefused or OSError (missing, a symlink loop, no permission)."""
    if not _is_local(path):
        return FileSystems.open(path, compression_type="uncompressed")
    check_file(path, limit, policy)
    try:
        return open_regular(path)
    except NotRegularFile as exc:
        raise FileRefused(
            "not_regular", f"{display(path)}: {file_kind(exc.mode)}, not a regular file: not read"
        ) from None


def is_local(path: str) -> bool:
    """A path on the local disk (no scheme, or one Beam does not know), where os-level checks apply."""
    return _is_local(path)

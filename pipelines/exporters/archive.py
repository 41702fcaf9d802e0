"""ZIP archives of exported datasets, with member paths checked on the way in and on the way out.

A dataset folder becomes one ZIP file whose members are the folder's files relative to it. A member name
that is absolute, climbs out with `..`, or is a symlink would let an archive overwrite files outside the
folder it is extracted to (zip-slip), so such names are refused both when writing and when extracting.
"""

from __future__ import annotations

import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pipelines.errors import StepmarkError


class UnsafeArchivePath(StepmarkError):
    """A member path that would escape the folder the archive is written from or extracted to."""


class ArchiveTooLarge(StepmarkError):
    """An archive that would inflate beyond its limits (a ZIP bomb, or simply more than the caller allows)."""


@dataclass(frozen=True)
class ExtractLimits:
    """What `safe_extract` accepts. The defaults fit exported datasets (stored members, ratio 1; a few GB)
    and refuse a 1 MB archive that inflates to 1 GiB (ratio ~1000)."""

    total_bytes: int = 32 * 2**30
    member_bytes: int = 16 * 2**30
    members: int = 1_000_000
    #: Largest inflated/compressed size of one member; members under `RATIO_FLOOR` bytes are exempt (a small
    #: text file of one repeated character compresses 100-fold and harms no one).
    ratio: float = 100.0


RATIO_FLOOR = 1 << 20
_COPY_CHUNK = 1 << 20


def check_member_name(name: str, *, archive: str | os.PathLike[str] = "") -> PurePosixPath:
    """Returns the member name as a relative POSIX path, or raises if it is unsafe.

    Refused: empty names, absolute paths (`/x`, `C:\\x`, `\\\\host\\x`), any `..` component, backslashes
    (Windows separators that extractors on other systems treat differently), and NUL bytes.
    """
    where = f"{archive}: " if archive else ""
    if not name or "\x00" in name:
        raise UnsafeArchivePath(f"{where}empty or NUL-containing member name {name!r}")
    if "\\" in name:
        raise UnsafeArchivePath(f"{where}member name {name!r} contains a backslash")
    path = PurePosixPath(name)
    if path.is_absolute() or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchivePath(f"{where}member name {name!r} is an absolute path")
    if any(part == ".." for part in path.parts):
        raise UnsafeArchivePath(f"{where}member name {name!r} climbs out of the archive with '..'")
    return path


def _is_symlink_member(info: zipfile.ZipInfo) -> bool:
    mode = info.external_attr >> 16
    return stat.S_ISLNK(mode)


def write_zip(folder: str | os.PathLike[str], zip_path: str | os.PathLike[str]) -> int:
    """Writes every regular file under `folder` into `zip_path` (paths relative to `folder`).

    Returns the number of bytes of the archive. Symlinks under the folder are refused rather than followed,
    so an archive never carries data from outside the dataset. Members are stored uncompressed: the Riegeli
    and TFRecord shards inside are already compressed or binary, and stored members can be read in place.
    """
    from pipelines import storage

    if storage.is_remote(str(folder)):
        return _write_zip_of_objects(str(folder), zip_path)
    root = Path(folder)
    if not root.is_dir():
        raise StepmarkError(f"{root}: not a folder, cannot archive it")
    with zipfile.ZipFile(zip_path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in [*dirnames, *filenames]:
                if (Path(dirpath) / name).is_symlink():
                    raise UnsafeArchivePath(f"{Path(dirpath) / name}: symlinks are not archived")
            for name in sorted(filenames):
                full = Path(dirpath) / name
                arcname = full.relative_to(root).as_posix()
                check_member_name(arcname, archive=zip_path)
                zf.write(full, arcname)
    return Path(zip_path).stat().st_size


def _write_zip_of_objects(folder: str, zip_path: str | os.PathLike[str]) -> int:
    """`write_zip` of a folder in an object store: each object streamed into the archive in path order (an
    object store has no symlinks); local space is the archive's."""
    import time

    from pipelines import storage

    root = storage.strip_slash(folder)
    with zipfile.ZipFile(zip_path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for meta in storage.files_below(root):
            arcname = meta.path[len(root) :].lstrip("/")
            check_member_name(arcname, archive=zip_path)
            info = zipfile.ZipInfo(arcname, date_time=time.localtime()[:6])
            with storage.open_read(meta.path) as src, zf.open(info, "w", force_zip64=True) as dst:
                storage.copy_stream(src, dst)
    return Path(zip_path).stat().st_size


def check_zip(zip_path: str | os.PathLike[str]) -> list[zipfile.ZipInfo]:
    """Returns the archive's members after checking every name (and refusing symlink members)."""
    with zipfile.ZipFile(zip_path) as zf:
        infos = zf.infolist()
    for info in infos:
        check_member_name(info.filename.rstrip("/") if info.is_dir() else info.filename, archive=zip_path)
        if _is_symlink_member(info):
            raise UnsafeArchivePath(f"{zip_path}: member {info.filename!r} is a symlink")
    return infos


def check_sizes(
    zip_path: str | os.PathLike[str], infos: list[zipfile.ZipInfo], limits: ExtractLimits
) -> None:
    """Refuse the archive when its members' declared sizes break `limits` (checked before anything is
    written; `zipfile` then never inflates a member past its declared size)."""
    if len(infos) > limits.members:
        raise ArchiveTooLarge(f"{zip_path}: {len(infos)} members; at most {limits.members} are extracted")
    total = 0
    for info in infos:
        if info.file_size > limits.member_bytes:
            raise ArchiveTooLarge(
                f"{zip_path}: member {info.filename!r} inflates to {info.file_size} bytes; "
                f"at most {limits.member_bytes} per member"
            )
        if info.file_size > RATIO_FLOOR and info.file_size > limits.ratio * max(info.compress_size, 1):
            raise ArchiveTooLarge(
                f"{zip_path}: member {info.filename!r} inflates {info.file_size / max(info.compress_size, 1):.0f}"
                f"-fold ({info.compress_size} -> {info.file_size} bytes); at most {limits.ratio:g}-fold (a ZIP bomb?)"
            )
        total += info.file_size
        if total > limits.total_bytes:
            raise ArchiveTooLarge(
                f"{zip_path}: members inflate to more than {limits.total_bytes} bytes in all; "
                f"at most {limits.total_bytes} are extracted"
            )


def safe_extract(
    zip_path: str | os.PathLike[str], dest: str | os.PathLike[str], limits: ExtractLimits = ExtractLimits()
) -> Path:
    """Extracts `zip_path` into `dest`, refusing the whole archive if any member is unsafe or too large.

    All names and declared sizes are checked before anything is written, so a malicious archive leaves
    `dest` untouched; while extracting, each member is also cut off at its declared size.
    """
    infos = check_zip(zip_path)
    check_sizes(zip_path, infos, limits)
    target = Path(dest).resolve()
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            out = (target / info.filename).resolve()
            if out != target and target not in out.parents:  # belt and braces after the name checks
                raise UnsafeArchivePath(f"{zip_path}: member {info.filename!r} resolves outside {target}")
            if info.is_dir():
                out.mkdir(parents=True, exist_ok=True)
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            written = 0
            with zf.open(info) as src, open(out, "wb") as dst:
                while chunk := src.read(_COPY_CHUNK):
                    written += len(chunk)
                    if written > info.file_size:  # zipfile stops at the declared size; never trust it blindly
                        raise ArchiveTooLarge(f"{zip_path}: member {info.filename!r} inflates past its size")
                    dst.write(chunk)
    return target

"""ZIP archives of exported datasets, with member paths checked on the way in and on the way out.

A dataset folder becomes one ZIP file whose members are the folder's files relative to it. A member name
that is absolute, climbs out with `..`, or is a symlink would let an archive overwrite files outside the
folder it is extracted to (zip-slip), so such names are refused both when writing and when extracting.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path, PurePosixPath

from pipelines.errors import StepmarkError


class UnsafeArchivePath(StepmarkError):
    """A member path that would escape the folder the archive is written from or extracted to."""


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


def check_zip(zip_path: str | os.PathLike[str]) -> list[zipfile.ZipInfo]:
    """Returns the archive's members after checking every name (and refusing symlink members)."""
    with zipfile.ZipFile(zip_path) as zf:
        infos = zf.infolist()
    for info in infos:
        check_member_name(info.filename.rstrip("/") if info.is_dir() else info.filename, archive=zip_path)
        if _is_symlink_member(info):
            raise UnsafeArchivePath(f"{zip_path}: member {info.filename!r} is a symlink")
    return infos


def safe_extract(zip_path: str | os.PathLike[str], dest: str | os.PathLike[str]) -> Path:
    """Extracts `zip_path` into `dest`, refusing the whole archive if any member is unsafe.

    All names are checked before anything is written, so a malicious archive leaves `dest` untouched.
    """
    check_zip(zip_path)
    target = Path(dest).resolve()
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            out = (target / info.filename).resolve()
            if out != target and target not in out.parents:  # belt and braces after the name checks
                raise UnsafeArchivePath(f"{zip_path}: member {info.filename!r} resolves outside {target}")
            zf.extract(info, target)
    return target

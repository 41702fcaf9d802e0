"""Where an export is written: a new temporary folder beside `--out`, renamed into place when complete.

An export never overwrites anything and never leaves a half-written dataset at `--out`: it writes into
`<out>.tmp-<pid>-<random>` (with an owner file naming the process), and publishes with one rename (folder)
or hard link (ZIP). The next export into the same folder removes temporary folders whose process is gone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import uuid
from pathlib import Path

from pipelines.episodes.publish import pid_alive
from pipelines.errors import StepmarkError


def check_out(out: str) -> Path:
    if not out.strip():
        raise StepmarkError("--out is empty: give the dataset folder (or ZIP file with --archive) to create")
    path = Path(out).absolute()
    if path.exists() or path.is_symlink():
        raise StepmarkError(f"{path}: already exists; choose another --out (exports never overwrite)")
    if path.parent.exists() and not path.parent.is_dir():
        raise StepmarkError(f"{path.parent}: not a folder, so --out cannot be created inside it")
    if not path.parent.is_dir():
        raise StepmarkError(f"{path.parent}: the folder for --out does not exist")
    return path


OWNER_FILE = "stepmark_export_owner.json"


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22); "" when unknown.

    With the pid it identifies a process for good: a pid reused after a crash has another start time.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


def new_staging(out: Path) -> Path:
    """`<out>.tmp-<pid>-<random>`, created with an owner file naming this process (host, pid, start time)."""
    pid = os.getpid()
    staging = out.with_name(f"{out.name}.tmp-{pid}-{uuid.uuid4().hex[:12]}")
    staging.mkdir()
    owner = {"host": socket.gethostname(), "pid": pid, "start": process_start(pid)}
    (staging / OWNER_FILE).write_text(json.dumps(owner) + "\n", encoding="utf-8")
    return staging


def _staging_owner_alive(folder: Path, pid: int) -> bool:
    """Whether the export that made `folder` may still be running (when unsure: yes, keep the folder)."""
    try:
        owner = json.loads((folder / OWNER_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        # Between mkdir and the owner file, or a folder older than owner files: the pid in the name decides.
        return pid_alive(pid)
    except (OSError, ValueError):
        return True
    if owner.get("host") != socket.gethostname():  # another machine's export on a shared filesystem
        return True
    if not pid_alive(pid):
        return False
    start = process_start(pid)
    return not (start and owner.get("start") and start != owner["start"])  # a reused pid is not the owner


def remove_stale_staging(out: Path) -> list[Path]:
    """Removes the temporary folders of exports whose process is gone (SIGKILL, power loss, OOM kill: nothing
    ran their cleanup) from `out`'s folder: `<out>.tmp-<pid>-*` folders, and those of other outputs there
    that carry an export owner file (the annotator gives every export a new name, so a killed one would
    otherwise never be retried and cleaned). Folders of live exports and of other hosts are left alone."""
    pattern = re.compile(r"^(?P<name>.+)\.tmp-(?P<pid>\d+)-[0-9a-f]{12}$")
    removed = []
    try:
        siblings = list(out.parent.iterdir())
    except OSError:
        return removed
    for folder in siblings:
        match = pattern.match(folder.name)
        if match is None or folder.is_symlink() or not folder.is_dir():
            continue
        if match.group("name") != out.name and not (folder / OWNER_FILE).is_file():
            continue  # not provably an export's folder
        if _staging_owner_alive(folder, int(match.group("pid"))):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _appeared(out: Path) -> StepmarkError:
    return StepmarkError(
        f"{out}: appeared while exporting (another export to the same --out?); not overwritten"
    )


def publish_file(tmp: Path, out: Path) -> None:
    """Moves the finished ZIP to `out` in one step without ever replacing a file that appeared meanwhile
    (a hard link fails on an existing name, where a rename would silently overwrite it)."""
    try:
        os.link(tmp, out)
    except FileExistsError:
        raise _appeared(out) from None
    except OSError:  # a filesystem without hard links: check, then rename (a small window remains)
        if out.exists() or out.is_symlink():
            raise _appeared(out) from None
        os.rename(tmp, out)
        return
    os.unlink(tmp)


def publish_folder(staging: Path, out: Path) -> None:
    """Renames the finished folder to `out`; a rename never replaces a non-empty folder, and an `out` that
    appeared meanwhile (even empty) is refused rather than replaced."""
    if out.exists() or out.is_symlink():
        raise _appeared(out)
    try:
        os.rename(staging, out)
    except OSError as exc:
        if out.exists():
            raise _appeared(out) from exc
        raise

"""Where an export is written: a new temporary folder beside `--out`, published when complete.

An export never overwrites anything and never leaves something at `--out` that a reader would take for a
complete dataset. It writes into `<out>.tmp-<pid>-<random>` (with an owner file naming the process) and
publishes it (`pipelines.storage`, schemas/storage.md): on a local disk with one rename (folder) or hard link
(ZIP). On an object store (no rename) a dataset folder is written in place under `--out` (owner file there) and
`stepmark_export.json`, written last, publishes it; a ZIP is one upload (an object appears whole or not at all). The next export to the same place removes
temporary folders whose process is gone, and on an object store the objects an interrupted publish left
under `--out` without `stepmark_export.json`.
"""

from __future__ import annotations

import os
import re
import sys
import uuid

from pipelines import storage
from pipelines.errors import StepmarkError
from pipelines.storage import Owner, process_start

__all__ = ["OWNER_FILE", "SUMMARY_FILE", "check_out", "new_staging", "process_start", "publish_file",
           "publish_folder", "remove_stale_staging"]  # fmt: skip

OWNER_FILE = "stepmark_export_owner.json"
#: The export's summary, written last: its presence means the dataset is complete (the publish marker).
SUMMARY_FILE = "stepmark_export.json"
_STAGING_NAME = re.compile(r"^(?P<name>.+)\.tmp-(?P<pid>\d+)-[0-9a-f]{12}$")


def check_out(out: str) -> str:
    """`--out` as the export will use it (absolute when local); refuses one that exists or cannot be made."""
    if not out.strip():
        raise StepmarkError("--out is empty: give the dataset folder (or ZIP file with --archive) to create")
    if storage.is_remote(out):
        return _check_remote_out(storage.strip_slash(out))
    path = os.path.abspath(out)
    parent = os.path.dirname(path)
    if os.path.lexists(path):
        raise StepmarkError(f"{path}: already exists; choose another --out (exports never overwrite)")
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise StepmarkError(f"{parent}: not a folder, so --out cannot be created inside it")
    if not os.path.isdir(parent):
        raise StepmarkError(f"{parent}: the folder for --out does not exist")
    return path


def _check_remote_out(out: str) -> str:
    storage.check_location(out, write=True)
    if storage.exists(out) or storage.is_published(out, SUMMARY_FILE):
        raise StepmarkError(f"{out}: already exists; choose another --out (exports never overwrite)")
    left = storage.files_below(out)
    if left:  # an interrupted export: never complete, and nobody else may be writing there
        writing = _staging_owner_alive(out)  # written in place: its owner file is under `out`
        if writing or any(_staging_owner_alive(folder, pid) for folder, pid in _stagings_of(out)):
            raise StepmarkError(f"{out}: another export is writing there; choose another --out")
        print(
            f"stepmark export: {out}: removing {len(left)} object(s) an interrupted export left "
            f"(no {SUMMARY_FILE})",
            file=sys.stderr,
            flush=True,
        )
        storage.delete([m.path for m in left])
    return out


def new_staging(out: str, archive: bool = False) -> str:
    """`<out>.tmp-<pid>-<random>`, created with an owner file naming this process (host, pid, start time).

    A dataset folder in a bucket is written in place instead, under `out` itself with the owner file there:
    it is unpublished until its summary is written last, and moving every object after the fact would be a
    copy and a delete each (measured: most of an export's time against an S3 server)."""
    if storage.is_remote(out) and not archive:
        storage.write_bytes(storage.join(out, OWNER_FILE), Owner.me().to_json().encode("utf-8"))
        return out
    pid = os.getpid()
    folder, name = storage.split(out)
    staging = storage.join(folder, f"{name}.tmp-{pid}-{uuid.uuid4().hex[:12]}")
    if not storage.is_remote(staging):
        os.mkdir(staging)
    storage.write_bytes(storage.join(staging, OWNER_FILE), Owner.me().to_json().encode("utf-8"))
    return staging


def _staging_owner_alive(folder: str, pid: int = 0) -> bool:
    """Whether the export that made `folder` may still be running (when unsure: yes, keep the folder)."""
    if not storage.exists(storage.join(folder, OWNER_FILE)):
        # Between mkdir and the owner file, or a folder older than owner files: the pid in the name decides.
        return storage.pid_alive(pid)
    owner = storage.read_owner(folder, OWNER_FILE)
    return owner is None or owner.alive()  # an unreadable owner file: keep the folder


def _stagings_of(out: str, every_output: bool = False) -> list[tuple[str, int]]:
    """(folder, pid) of the temporary folders beside `out`: its own, and with `every_output` those of other
    outputs there that carry an export owner file."""
    parent, name = storage.split(out)
    found: list[tuple[str, int]] = []
    if storage.is_remote(out):  # its own temporary folders only (listing a bucket's top level may be huge)
        folders = {storage.split(m.path)[0] for m in storage.match(f"{out}.tmp-*/{OWNER_FILE}")}
    else:
        try:
            folders = {os.path.join(parent, n) for n in os.listdir(parent)}
        except OSError:
            return found
    for folder in sorted(folders):
        base = storage.split(folder)[1]
        match = _STAGING_NAME.match(base)
        if match is None:
            continue
        if not storage.is_remote(folder) and (os.path.islink(folder) or not os.path.isdir(folder)):
            continue
        if match.group("name") != name:
            if not every_output or not storage.exists(storage.join(folder, OWNER_FILE)):
                continue  # not provably an export's folder
        found.append((folder, int(match.group("pid"))))
    return found


def remove_stale_staging(out: str) -> list[str]:
    """Removes the temporary folders of exports whose process is gone (SIGKILL, power loss, OOM kill: nothing
    ran their cleanup) from `out`'s folder: `<out>.tmp-<pid>-*` folders, and those of other outputs there
    that carry an export owner file (the annotator gives every export a new name, so a killed one would
    otherwise never be retried and cleaned). Folders of live exports and of other hosts are left alone."""
    removed = []
    for folder, pid in _stagings_of(out, every_output=True):
        if _staging_owner_alive(folder, pid):
            continue
        storage.delete_tree(folder)
        removed.append(folder)
    return removed


def publish_file(tmp: str, out: str) -> None:
    """The finished local ZIP at `out` in one step, never replacing a file that appeared meanwhile."""
    storage.publish_file(tmp, out)


def publish_folder(staging: str, out: str) -> None:
    """The finished folder at `out` (`storage.publish_folder`), the owner file left out; nothing to do for a
    dataset written in place in a bucket."""
    if staging == out:  # written in place (a bucket): its summary, written last, published it
        return
    owner = storage.join(staging, OWNER_FILE)
    if os.path.exists(owner):
        os.unlink(owner)
    storage.publish_folder(staging, out)

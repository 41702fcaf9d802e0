"""Where episode files live under the data directory: `<data>/<study>/<session>/<env_id>/<episode_id>/`.

An episode is written into a temporary sibling folder (`<episode_id>.tmp-<pid>`) and renamed to its final
name only once its files are complete and closed, so a half-written episode never sits at a final path.
Paths stored in the database are relative to the data directory (posix separators), so a data directory can
be moved or mounted elsewhere; absolute paths (written by other tools) are honoured as they are.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pipelines.errors import StepmarkError

TMP_MARK = ".tmp-"
# Written (episode proto as JSON) once the files are closed and before registration; renamed to
# EPISODE_FILE after the episode is registered in the store. Recovery looks for the pending name.
PENDING_FILE = "episode.pending.json"
EPISODE_FILE = "episode.json"
PICKLE_NAME = "episode.pkl"
JOURNAL_NAME = "steps.journal"  # a pickle episode's steps while it is written (pickle_store.py)
# One empty-named entry per episode being recorded, `<data>/.recording/<study>~<session>~<env>~<id>` holding
# the recorder's pid: created before the episode's temp folder, removed once it is registered or dropped. So
# finding what killed recorders left costs a listing of this folder, not a walk over every episode folder,
# and every command that opens the store can afford it (`publish.recover_recorded`).
RECORDING_DIR = ".recording"
_ENTRY_SEP = "~"  # never in a safe component (see _UNSAFE), so an entry name splits back into its four parts

_UNSAFE = re.compile(r"[^A-Za-z0-9._@+=-]")


def safe_component(value: str, what: str) -> str:
    """One path component from an id: unsafe characters become `_`; empty, `.` and `..` are refused."""
    if not value:
        raise StepmarkError(f"empty {what}: cannot build an episode path")
    cleaned = _UNSAFE.sub("_", value)
    if cleaned in (".", "..") or TMP_MARK in cleaned:
        raise StepmarkError(f"{what} {value!r} cannot be used as a folder name")
    return cleaned


@dataclass(frozen=True)
class EpisodePaths:
    """The final and temporary folders of one episode, and the final folder relative to the data dir."""

    data_dir: Path
    relative: PurePosixPath
    final: Path
    temp: Path


def episode_paths(
    data_dir: str | Path, study_id: str, session_id: str, env_id: str, episode_id: str, pid: int | None = None
) -> EpisodePaths:
    data = Path(data_dir)
    rel = PurePosixPath(
        safe_component(study_id, "study id"),
        safe_component(session_id, "session id"),
        safe_component(env_id, "environment id"),
        safe_component(episode_id, "episode id"),
    )
    final = data.joinpath(*rel.parts)
    temp = final.with_name(f"{final.name}{TMP_MARK}{os.getpid() if pid is None else pid}")
    return EpisodePaths(data_dir=data, relative=rel, final=final, temp=temp)


def resolve(data_dir: str | Path, stored: str) -> Path:
    """A path stored on an episode, made absolute against the data directory when it is relative."""
    p = Path(stored)
    return p if p.is_absolute() else Path(data_dir) / p


def temp_pid(folder: Path) -> int | None:
    """The recording process id encoded in a temporary folder's name (None if the name is not one)."""
    name = folder.name
    if TMP_MARK not in name:
        return None
    tail = name.rsplit(TMP_MARK, 1)[1]
    return int(tail) if tail.isdigit() else None


def final_name(folder: Path) -> str:
    """The episode folder name a temporary folder will be renamed to."""
    return folder.name.rsplit(TMP_MARK, 1)[0]


def temp_folders(data_dir: str | Path) -> list[Path]:
    """Temporary episode folders anywhere in the layout (`<study>/<session>/<env>/<id>.tmp-<pid>`)."""
    return sorted(p for p in Path(data_dir).glob(f"*/*/*/*{TMP_MARK}*") if p.is_dir())


def recording_entry(folder: Path) -> Path:
    """The index entry of an episode folder (temporary or final): `<data>/.recording/<s>~<s>~<e>~<id>`."""
    parts = (*folder.parts[-4:-1], folder.name.split(TMP_MARK, 1)[0])
    return folder.parents[3] / RECORDING_DIR / _ENTRY_SEP.join(parts)


def recording_entries(data_dir: str | Path) -> list[tuple[Path, Path]]:
    """(entry, final episode folder) for every index entry; names that are not four parts are left out."""
    index = Path(data_dir) / RECORDING_DIR
    if not index.is_dir():
        return []
    out = []
    for entry in sorted(index.iterdir()):
        parts = entry.name.split(_ENTRY_SEP)
        if len(parts) == 4 and all(parts) and not any(p in (".", "..") for p in parts):
            out.append((entry, Path(data_dir).joinpath(*parts)))
    return out


def pending_folders(data_dir: str | Path) -> list[Path]:
    """Final episode folders whose files are complete but whose registration was never confirmed."""
    return sorted(p.parent for p in Path(data_dir).glob(f"*/*/*/*/{PENDING_FILE}"))


#: Where recovery moves what a killed recorder left and nothing can read (`<data>/.quarantine/<name>`), out of
#: the layout: no later command finds it again, so it is reported once (schemas/episode_storage.md).
QUARANTINE_DIR = ".quarantine"


def quarantine_path(data_dir: str | Path, folder: Path) -> Path:
    """A free `<data>/.quarantine/<study>~<session>~<env>~<folder name>` for an episode folder's leftovers."""
    name = _ENTRY_SEP.join((*folder.parts[-4:-1], folder.name))
    target = Path(data_dir) / QUARANTINE_DIR / name
    n = 1
    while target.exists():
        n += 1
        target = target.with_name(f"{name}~{n}")
    return target

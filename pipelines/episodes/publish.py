"""Registering a written episode atomically, and recovering what a killed recorder left behind.

Order of a save (each step survives a kill at any point):
1. the writer closes its files in `<episode_id>.tmp-<pid>/` (complete only after close);
2. `episode.pending.json` (the Episode proto to register, and the writer's pid) is written in that folder;
3. the folder is renamed to `<episode_id>/` (atomic on one filesystem);
4. `repo.add_episode(...)` registers it;
5. the marker is renamed to `episode.json` (the folder now describes itself and is known registered).

Before any step, the recorder writes `episode.started.json` (the Episode proto as far as known, and its pid)
into the temp folder, so a recording cut by a crash still says whose episode it is.

So a killed recording leaves either
- a temp folder without a pending marker (killed mid-episode): recovery registers the steps its files hold
  as an ABANDONED episode (`metadata["interrupted"]`, figures counted from the files). The background
  writer closes the files of a killed recorder itself (`writer_child.py`), so they are readable. A folder
  that holds no step (killed before its first transition reached a file: only the started marker, or files
  without a transition) is deleted, as the recorder drops an empty episode; a folder whose files cannot be
  read, or without a started marker, is left where it is and reported, never deleted;
- a temp folder or final folder with a pending marker (complete but unconfirmed): recovery registers it as
  ABANDONED, keeping the state the recorder meant in `metadata["intended_state"]`;
- or a registered episode. The database never names files that are not complete, and recovery never deletes
  an episode's files that were not registered.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf import json_format

from pipelines.episodes import layout, stats
from pipelines.errors import StepmarkError
from pipelines.storage import pid_alive
from pipelines.store import errors as store_errors
from protos.rlds_creator import client_pb2, study_pb2

if TYPE_CHECKING:
    from pipelines.store import Repository

State = study_pb2.Episode.State
STARTED_FILE = "episode.started.json"


def write_pending(folder: Path, episode: study_pb2.Episode, name: str = layout.PENDING_FILE) -> Path:
    """Writes the registration marker (durably: the rename that follows must not outrun it)."""
    path = folder / name
    body = {"pid": os.getpid(), "episode": json_format.MessageToDict(episode)}
    tmp = path.with_suffix(".json.partial")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            json.dump(body, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        if exc.filename is None:  # a buffered write or flush names no file: say which one (full disk)
            raise OSError(exc.errno, exc.strerror, str(tmp)) from exc
        raise
    os.replace(tmp, path)
    return path


def write_started(folder: Path, episode: study_pb2.Episode) -> Path:
    """The marker of an episode being recorded (see the module docstring): who, where, which files; and its
    entry in the data directory's recording index, written first, so recovery finds the folder cheaply."""
    entry = layout.recording_entry(folder)
    entry.parent.mkdir(exist_ok=True)
    with entry.open("w", encoding="utf-8") as f:
        f.write(str(os.getpid()))
        f.flush()
        os.fsync(f.fileno())
    return write_pending(folder, episode, name=STARTED_FILE)


def _forget(folder: Path) -> None:
    """Drops a folder's recording-index entry: it is registered, or was dropped."""
    layout.recording_entry(folder).unlink(missing_ok=True)


def read_pending(folder: Path, name: str = layout.PENDING_FILE) -> tuple[int, study_pb2.Episode]:
    path = folder / name
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        episode = json_format.ParseDict(body["episode"], study_pb2.Episode())
        return int(body.get("pid", 0)), episode
    except (OSError, ValueError, KeyError, TypeError, json_format.ParseError) as exc:
        raise StepmarkError(f"{path}: unreadable registration marker: {exc}") from exc


def confirm(folder: Path) -> None:
    """Marks a published folder as registered (pending marker -> episode.json)."""
    pending = folder / layout.PENDING_FILE
    if pending.exists():
        os.replace(pending, folder / layout.EPISODE_FILE)
    (folder / STARTED_FILE).unlink(missing_ok=True)
    _forget(folder)


def publish(repo: Repository, paths: layout.EpisodePaths, episode: study_pb2.Episode) -> study_pb2.Episode:
    """Steps 2-5 above for a closed writer's temp folder. Returns the registered episode.

    If the store refuses the episode (study disabled, session gone) the files are deleted and the
    refusal re-raised; on any other failure (database unreachable) they stay pending for recovery.
    """
    write_pending(paths.temp, episode)
    if paths.final.exists():
        raise StepmarkError(f"{paths.final}: an episode folder with this id already exists")
    os.replace(paths.temp, paths.final)
    try:
        registered = repo.add_episode(episode)
    except store_errors.StoreError:
        discard(paths.final)
        raise
    confirm(paths.final)
    return registered


def discard(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    _forget(folder)


@dataclass
class RecoveryReport:
    """What `recover_abandoned` did: registered episodes, deleted folders, folders left alone (why)."""

    registered: list[study_pb2.Episode] = field(default_factory=list)
    confirmed: list[Path] = field(default_factory=list)
    deleted: list[Path] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    #: Folders of recorders still running: theirs to finish, not leftovers.
    live: list[Path] = field(default_factory=list)


def _is_registered(repo: Repository, episode: study_pb2.Episode) -> bool:
    ref = client_pb2.EpisodeRef(
        study_id=episode.study_id, session_id=episode.session_id, episode_id=episode.id
    )
    try:
        repo.get_episode(ref)
    except store_errors.NotFound:
        return False
    return True


def _files_readable(episode: study_pb2.Episode, data_dir: Path) -> bool:
    from pipelines.episodes import open_episode

    try:
        with open_episode(episode, data_dir) as reader:
            return len(reader) > 0
    except StepmarkError:
        return False


#: `_interrupted`'s answer for a folder that holds no step: deleted, as the recorder drops an empty episode.
EMPTY = "empty"


def _interrupted(temp: Path, data_dir: Path) -> str | None:
    """A temp folder killed mid-episode: writes its pending marker (ABANDONED, figures counted from the files)
    so the registration below takes it; returns why it cannot be, EMPTY when it holds no step (only its
    started marker, or files without a transition: what the recorder itself drops), or None."""
    if not (temp / STARTED_FILE).exists():
        return "no episode marker (episode.started.json): files kept for inspection"
    if all(p.name == STARTED_FILE or p.is_dir() for p in temp.rglob("*")):
        return EMPTY  # killed before its first step reached a file
    try:
        _, episode = read_pending(temp, STARTED_FILE)
    except StepmarkError as exc:
        return str(exc)
    probe = study_pb2.Episode()
    probe.CopyFrom(episode)
    if probe.storage.WhichOneof("type") == "environment_logger":
        probe.storage.environment_logger.tag_directory = str(temp)
    elif probe.storage.WhichOneof("type") == "pickle":
        probe.storage.pickle.path = str(temp / Path(probe.storage.pickle.path).name)
    try:
        figures = _count(probe, data_dir)
    except StepmarkError as exc:
        return f"files cannot be read ({exc}): kept for inspection"
    if figures is None:
        return EMPTY
    stats.apply_to_episode(episode, figures)
    episode.metadata.update({"interrupted": True})
    episode.end_time.FromSeconds(int(max(p.stat().st_mtime for p in temp.rglob("*"))))
    write_pending(temp, episode)
    return None


def _count(episode: study_pb2.Episode, data_dir: Path) -> stats.EpisodeStats | None:
    """Return and length of the steps an episode's files hold (None when there is no transition)."""
    from pipelines.episodes import open_episode

    with open_episode(episode, data_dir) as reader:
        if len(reader) < 2:
            return None
        rewards = [reader.step(i).reward for i in range(len(reader) - 1)]
    return stats.EpisodeStats(r=float(sum(rewards)), l=len(rewards), s=False)


def recover_abandoned(repo: Repository, data_dir: str | Path) -> RecoveryReport:
    """Registers what recorders that died left behind: see the module docstring for what each leftover becomes.

    Folders of live processes (by pid) are left alone, so this is safe while other recorders run. The only
    folders deleted are those of dead recorders that hold no step (only `episode.started.json`, or files
    without a transition), which the recorder would have dropped itself (`deleted`); whatever else cannot be
    registered is reported in `skipped` and stays on disk. Walks every episode folder: `record` and the
    annotator run it at start; every other command runs the cheap `recover_recorded`.
    """
    data = Path(data_dir)
    report = RecoveryReport()
    for temp in layout.temp_folders(data):
        _recover_temp(repo, data, temp, report)
    for folder in layout.pending_folders(data):
        _recover_pending(repo, data, folder, report)
    return report


def open_store(url: str | None, data_dir: str | Path) -> Repository:
    """The store, once what killed recorders left under `data_dir` is registered (`recover_recorded`): every
    command that opens the store goes through here, so a killed `record` leaves nothing behind for long.
    Says on stderr, a line each, what it registered or removed, and what it had to leave."""
    from pipelines.store import open_store as open_repository

    repo = open_repository(url, data_dir)
    try:
        report = recover_recorded(repo, data_dir)
    except BaseException:
        repo.close()
        raise
    print_report(report)
    return repo


def print_report(report: RecoveryReport) -> None:
    """One stderr line per episode recovered, folder removed or folder left (live recorders' are not news)."""
    for episode in report.registered:
        print(f"stepmark: recovered episode {episode.id} ({episode.num_steps} steps) as ABANDONED: its recorder "
              "was killed", file=sys.stderr)  # fmt: skip
    for folder in report.deleted:
        print(f"stepmark: removed {folder}: a recording killed before its first step", file=sys.stderr)
    for folder, why in report.skipped:
        print(f"stepmark: left {folder}: {why}", file=sys.stderr)


def recover_recorded(repo: Repository, data_dir: str | Path) -> RecoveryReport:
    """`recover_abandoned` for the episodes in the recording index only (`layout.RECORDING_DIR`): what
    recorders killed since the index exists left behind, found by listing one small folder. An entry whose
    folders are gone (registered and confirmed, or dropped) is removed; one that cannot be handled stays, and
    is tried again by the next command."""
    data = Path(data_dir)
    report = RecoveryReport()
    for entry, final in layout.recording_entries(data):
        try:
            text = entry.read_text(encoding="utf-8").strip()
            temp = final.with_name(f"{final.name}{layout.TMP_MARK}{text}") if text.isdigit() else None
            if temp is not None and temp.is_dir():
                _recover_temp(repo, data, temp, report)
            if (final / layout.PENDING_FILE).exists():
                _recover_pending(repo, data, final, report)
            elif temp is None or not temp.exists():
                entry.unlink(missing_ok=True)  # nothing left to recover
        except OSError as exc:  # a read-only or full disk: the command itself goes on
            report.skipped.append((final, f"recovery failed: {exc}"))
    return report


def _recover_temp(repo: Repository, data: Path, temp: Path, report: RecoveryReport) -> None:
    """A dead recorder's temporary folder: made pending (registered by `_recover_pending`) or deleted."""
    pid = layout.temp_pid(temp)
    if pid is None:
        report.skipped.append((temp, "not a recorder temp folder name"))
        return
    if pid == os.getpid() or pid_alive(pid):
        report.live.append(temp)
        return
    if not (temp / layout.PENDING_FILE).exists():
        why = _interrupted(temp, data)  # killed mid-episode: keep the steps its files hold
        if why == EMPTY:
            discard(temp)
            report.deleted.append(temp)
            return
        if why is not None:
            report.skipped.append((temp, why))
            return
    final = temp.with_name(layout.final_name(temp))
    if final.exists():
        report.skipped.append((temp, f"{final.name} already exists"))
        return
    os.replace(temp, final)


def _recover_pending(repo: Repository, data: Path, folder: Path, report: RecoveryReport) -> None:
    """A complete folder whose registration was never confirmed: confirmed, or registered as ABANDONED."""
    try:
        pid, episode = read_pending(folder)
    except StepmarkError as exc:
        report.skipped.append((folder, str(exc)))
        return
    if pid != os.getpid() and pid_alive(pid):
        report.live.append(folder)
        return
    if _is_registered(repo, episode):
        confirm(folder)
        report.confirmed.append(folder)
        return
    if not _files_readable(episode, data):
        report.skipped.append((folder, "files cannot be read: kept for inspection"))
        return
    intended = State.Name(episode.state) if episode.state else "STATE_UNSPECIFIED"
    episode.state = State.STATE_ABANDONED
    episode.metadata.update({"recovered": True, "intended_state": intended})
    try:
        registered = repo.add_episode(episode)
    except store_errors.StoreError as exc:
        report.skipped.append((folder, f"store refused it: {exc}"))
        return
    confirm(folder)
    report.registered.append(registered)

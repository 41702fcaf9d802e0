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
  writer closes the files of a killed recorder itself (`writer_child.py`), so they are readable; files
  nobody closed (the writer killed too, or writing in-process) are salvaged: the complete steps they hold
  (envlogger: up to the last flush, once a second; pickle: its `steps.journal`) are copied into a new,
  closed episode, and the original files move to `<data>/.quarantine/`. A folder that holds no step (killed
  before its first transition reached a file: only the started marker, or files without a transition) is
  deleted, as the recorder drops an empty episode; a folder from which nothing can be read, or without a
  started marker, moves whole to the quarantine folder (reported once: it is out of the layout then);
- a temp folder or final folder with a pending marker (complete but unconfirmed): recovery registers it as
  ABANDONED, keeping the state the recorder meant in `metadata["intended_state"]`;
- or a registered episode. The database never names files that are not complete, and recovery never deletes
  an episode's files that were not registered.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf import json_format

from pipelines.episodes import layout, stats
from pipelines.errors import StepmarkError
from pipelines.storage import Owner, pid_alive
from pipelines.store import errors as store_errors
from protos.rlds_creator import client_pb2, study_pb2

if TYPE_CHECKING:
    from pipelines.store import Repository

State = study_pb2.Episode.State
STARTED_FILE = "episode.started.json"


def write_pending(folder: Path, episode: study_pb2.Episode, name: str = layout.PENDING_FILE) -> Path:
    """Writes the registration marker (durably: the rename that follows must not outrun it)."""
    path = folder / name
    me = Owner.me()  # host and start time too: a recorder on another host, or a reused pid, is not ours
    owner = {"host": me.host, "pid": me.pid, "start": me.start}
    body = {"pid": os.getpid(), "owner": owner, "episode": json_format.MessageToDict(episode)}
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


def _marker_owner(folder: Path, name: str) -> Owner | None:
    """Who wrote a marker (None: no marker, or one written before markers named their owner)."""
    try:
        owner = json.loads((folder / name).read_text(encoding="utf-8"))["owner"]
        return Owner(str(owner["host"]), int(owner["pid"]), str(owner.get("start", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(folder: Path, name: str, pid: int) -> bool:
    """Whether the process that wrote `folder` may still be at work (when unsure: yes). The marker's owner
    decides (another host's recorder is never touched; a pid reused by a later process is not its owner);
    without one (or one naming another pid than the folder), the pid alone."""
    owner = _marker_owner(folder, name)
    return owner.alive() if owner is not None and owner.pid == pid else pid_alive(pid)


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
    """What `recover_abandoned` did: registered episodes, deleted folders, folders moved to the quarantine
    folder (from, to, why), folders left alone (why)."""

    registered: list[study_pb2.Episode] = field(default_factory=list)
    confirmed: list[Path] = field(default_factory=list)
    deleted: list[Path] = field(default_factory=list)
    quarantined: list[tuple[Path, Path, str]] = field(default_factory=list)
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


#: `_interrupted`'s answers: the folder holds no step (deleted, as the recorder drops an empty episode); it is
#: ready (its pending marker written); nothing in it can be read (moved to the quarantine folder); or it may be
#: a recorder's that has not written its marker yet (left alone).
EMPTY = "empty"
READY = "ready"
QUARANTINE = "quarantine"
LIVE = "live"
GONE = "gone"  # already moved to the quarantine folder, whole
#: A temp folder without a started marker younger than this may be a recorder (on another host) between
#: creating it and writing the marker: left alone until then.
NO_MARKER_GRACE = 600.0


class _Quarantined(Exception):
    """A salvage found no step: the folder is in the quarantine folder now, and reported."""


def _interrupted(temp: Path, data_dir: Path, report: RecoveryReport) -> tuple[str, str]:
    """A temp folder killed mid-episode: writes its pending marker (ABANDONED, figures counted from the files,
    salvaged first when nobody closed them) so the registration below takes it. Returns one of the answers
    above, and why for QUARANTINE."""
    if not (temp / STARTED_FILE).exists():
        if time.time() - temp.stat().st_mtime < NO_MARKER_GRACE:
            return LIVE, ""
        return QUARANTINE, "no episode marker (episode.started.json)"
    if all(p.name == STARTED_FILE or p.is_dir() for p in temp.rglob("*")):
        return EMPTY, ""  # killed before its first step reached a file
    try:
        _, episode = read_pending(temp, STARTED_FILE)
    except StepmarkError as exc:
        return QUARANTINE, str(exc)
    probe = study_pb2.Episode()
    probe.CopyFrom(episode)
    if probe.storage.WhichOneof("type") == "environment_logger":
        probe.storage.environment_logger.tag_directory = str(temp)
    elif probe.storage.WhichOneof("type") == "pickle":
        probe.storage.pickle.path = str(temp / Path(probe.storage.pickle.path).name)
    last_write = max(p.stat().st_mtime for p in temp.rglob("*"))
    try:
        figures = _count(probe, data_dir)
    except StepmarkError:  # files nobody closed: copy the complete steps they hold
        try:
            figures, moved = _salvage(temp, probe, data_dir, report)
        except _Quarantined:
            return GONE, ""
        episode.metadata.update({"salvaged": True, "quarantine": moved.relative_to(data_dir).as_posix()})
    if figures is None:
        return EMPTY, ""
    stats.apply_to_episode(episode, figures)
    episode.metadata.update({"interrupted": True})
    episode.end_time.FromSeconds(int(last_write))
    write_pending(temp, episode)
    return READY, ""


def _salvage(
    temp: Path, probe: study_pb2.Episode, data_dir: Path, report: RecoveryReport
) -> tuple[stats.EpisodeStats | None, Path]:
    """Files a killed writer never closed: they move to the quarantine folder, and the complete steps they
    hold are written back into `temp` as a closed episode (so the quarantine keeps every byte the recorder
    wrote, and the episode only what can be read). Returns its figures and the quarantine folder; when no
    transition can be read, moves the rest of the folder there too and raises `_Quarantined`."""
    from pipelines.episodes import envlogger_store, pickle_store

    moved = layout.quarantine_path(data_dir, temp)
    moved.mkdir(parents=True)
    for item in sorted(temp.iterdir()):
        if item.name != STARTED_FILE:
            os.replace(item, moved / item.name)
    try:
        if probe.storage.WhichOneof("type") == "pickle":
            records = pickle_store.salvage_journal(moved / layout.JOURNAL_NAME, temp)
        else:
            records = envlogger_store.salvage(moved, temp)
        figures = _count(probe, data_dir)
        if figures is None:
            raise StepmarkError(f"{moved}: no transition among the {records} complete records")
    except StepmarkError as exc:  # nothing to recover: the marker joins the files, the folder goes
        for item in sorted(temp.iterdir()):
            if item.name == STARTED_FILE:
                os.replace(item, moved / item.name)
            elif item.is_dir():  # a salvage that failed half way: its own output, not the recorder's
                shutil.rmtree(item)
            else:
                item.unlink()
        temp.rmdir()
        _forget(temp)
        report.quarantined.append((temp, moved, f"no step can be read ({exc})"))
        raise _Quarantined from exc
    lost = "" if probe.storage.WhichOneof("type") == "pickle" else " (steps after its last flush cannot be read)"
    report.quarantined.append((temp, moved, f"files never closed{lost}; {records} complete records recovered"))
    return figures, moved


def _quarantine(folder: Path, data_dir: Path, why: str, report: RecoveryReport) -> None:
    """Moves a leftover nothing can read out of the layout, whole, into `<data>/.quarantine/` (said once)."""
    target = layout.quarantine_path(data_dir, folder)
    target.parent.mkdir(exist_ok=True)
    os.replace(folder, target)
    _forget(folder)
    report.quarantined.append((folder, target, why))


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

    Folders of live processes (by the owner in their marker) are left alone, so this is safe while other
    recorders run. The only folders deleted are those of dead recorders that hold no step (only
    `episode.started.json`, or files without a transition), which the recorder would have dropped itself
    (`deleted`); what nothing can read moves to `<data>/.quarantine/` (`quarantined`), and what the store
    refuses is reported in `skipped`. Walks every episode folder: `record` and the annotator run it at start;
    every other command runs the cheap `recover_recorded`.
    """
    data = Path(data_dir).absolute()  # the files are opened by stored paths relative to it
    report = RecoveryReport()
    with _recovery_lock(data) as mine:
        if not mine:
            return report
        for temp in layout.temp_folders(data):
            _recover_temp(repo, data, temp, report)
        for folder in layout.pending_folders(data):
            _recover_pending(repo, data, folder, report)
    return report


@contextlib.contextmanager
def _recovery_lock(data: Path) -> Iterator[bool]:
    """One recovery at a time per data directory: two commands started together must not both salvage the
    same folder. Yields False when another process holds it (it is doing the work); True (unlocked) when
    the data directory is read-only, where recovery can change nothing anyway."""
    try:
        index = data / layout.RECORDING_DIR
        index.mkdir(exist_ok=True)
        handle = (index / _LOCK_NAME).open("a")  # noqa: SIM115 - closed below
    except OSError:
        yield True
        return
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        handle.close()  # releases the lock


_LOCK_NAME = ".lock"  # one part: `layout.recording_entries` ignores it


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
    for folder, target, why in report.quarantined:
        print(f"stepmark: moved {folder} to {target}: {why}", file=sys.stderr)
    for folder, why in report.skipped:
        print(f"stepmark: left {folder}: {why}", file=sys.stderr)


def recover_recorded(repo: Repository, data_dir: str | Path) -> RecoveryReport:
    """`recover_abandoned` for the episodes in the recording index only (`layout.RECORDING_DIR`): what
    recorders killed since the index exists left behind, found by listing one small folder. An entry whose
    folders are gone (registered and confirmed, or dropped) is removed; one that cannot be handled stays, and
    is tried again by the next command."""
    data = Path(data_dir).absolute()  # the files are opened by stored paths relative to it
    report = RecoveryReport()
    if not layout.recording_entries(data):
        return report  # nothing in flight or left: no lock to take (the common case, every command)
    with _recovery_lock(data) as mine:
        if not mine:
            return report
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
    if pid == os.getpid() or _alive(temp, STARTED_FILE, pid):
        report.live.append(temp)
        return
    if not (temp / layout.PENDING_FILE).exists():
        outcome, why = _interrupted(temp, data, report)  # killed mid-episode: keep the steps its files hold
        if outcome == EMPTY:
            discard(temp)
            report.deleted.append(temp)
            return
        if outcome == LIVE:
            report.live.append(temp)
            return
        if outcome == GONE:
            return
        if outcome == QUARANTINE:
            _quarantine(temp, data, why, report)
            return
    final = temp.with_name(layout.final_name(temp))
    if final.exists():
        _quarantine(temp, data, f"{final.name} already exists", report)
        return
    os.replace(temp, final)


def _recover_pending(repo: Repository, data: Path, folder: Path, report: RecoveryReport) -> None:
    """A complete folder whose registration was never confirmed: confirmed, or registered as ABANDONED."""
    try:
        pid, episode = read_pending(folder)
    except StepmarkError as exc:
        _quarantine(folder, data, str(exc), report)
        return
    if pid != os.getpid() and _alive(folder, layout.PENDING_FILE, pid):
        report.live.append(folder)
        return
    if _is_registered(repo, episode):
        confirm(folder)
        report.confirmed.append(folder)
        return
    if not _files_readable(episode, data):
        _quarantine(folder, data, "its files cannot be read", report)
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

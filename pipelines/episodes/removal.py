"""Which files belong to a stored episode, and removing them when the episode is deleted.

Only what stepmark itself wrote is removed: an envlogger tag directory or a Pickle episode's folder, and only
inside the data directory (resolved, so a symlink cannot lead outside it) and never the data directory itself.
UI episodes point into `convert-ui` shards, which hold many episodes and belong to whoever ran the conversion:
they are kept, and the plan says where.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import json_format

from pipelines.episodes.layout import PICKLE_NAME, resolve
from protos.rlds_creator import study_pb2


@dataclass
class FilesPlan:
    """What deleting an episode does on disk: folders/files removed, and files kept (with why)."""

    remove: list[Path] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return path != root


def episode_files(episode: study_pb2.Episode, data_dir: str | Path) -> FilesPlan:
    """The plan for one episode (nothing is touched)."""
    root = Path(data_dir).resolve()
    plan = FilesPlan()
    kind = episode.storage.WhichOneof("type") if episode.HasField("storage") else None
    if kind == "environment_logger":
        target = resolve(root, episode.storage.environment_logger.tag_directory)
    elif kind == "pickle":
        stored = resolve(root, episode.storage.pickle.path)
        # Pickle episodes are written as <episode folder>/episode.pkl: the folder goes; another name, the file.
        target = stored.parent if stored.name == PICKLE_NAME else stored
    else:
        meta = json_format.MessageToDict(episode.metadata) if episode.HasField("metadata") else {}
        record = meta.get("ui_record") if isinstance(meta.get("ui_record"), dict) else None
        if record and record.get("shard"):
            plan.keep.append(
                f"UI record {record.get('episode_id', '?')} stays in the convert-ui shard {record['shard']} "
                "(shared with other episodes; delete the convert-ui output yourself if it is no longer needed)"
            )
        return plan
    real = target.resolve()
    if not _inside(real, root):
        plan.keep.append(f"{target} is outside the data directory {root}: not removed")
    elif real.exists():
        plan.remove.append(real)
    return plan


def remove_files(plan: FilesPlan) -> list[str]:
    """Remove what the plan lists; returns one problem line per path that could not be removed."""
    problems = []
    for path in plan.remove:
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        except OSError as exc:
            problems.append(f"{path}: could not remove ({exc.strerror or exc})")
    return problems

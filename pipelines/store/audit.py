"""The audit log's vocabulary: what an entry says and which changes `undo_last` can revert."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class AuditAction(StrEnum):
    STUDY_CREATE = "study.create"
    STUDY_UPDATE = "study.update"
    STUDY_ENABLE = "study.enable"
    STUDY_DISABLE = "study.disable"
    SESSION_CREATE = "session.create"
    SESSION_STATE = "session.state"
    SESSION_END = "session.end"
    EPISODE_ADD = "episode.add"
    EPISODE_STATE = "episode.state"
    EPISODE_NOTES = "episode.notes"
    EPISODE_TAG_ADD = "episode.tag.add"
    EPISODE_TAG_REMOVE = "episode.tag.remove"
    STEP_TAG_ADD = "step.tag.add"
    STEP_TAG_REMOVE = "step.tag.remove"
    EPISODE_DELETE = "episode.delete"
    UNDO = "undo"


# Annotation changes a user can take back; their inverse is always well defined.
UNDOABLE: frozenset[AuditAction] = frozenset(
    {
        AuditAction.EPISODE_STATE,
        AuditAction.EPISODE_NOTES,
        AuditAction.EPISODE_TAG_ADD,
        AuditAction.EPISODE_TAG_REMOVE,
        AuditAction.STEP_TAG_ADD,
        AuditAction.STEP_TAG_REMOVE,
    }
)


@dataclass(frozen=True)
class AuditEntry:
    """One change: who, when, what, on which study/session/episode/step, and the value before and after.

    `before`/`after` are JSON values: `{"label": ...}` for tags (None on the absent side), `{"notes": ...}`,
    `{"state": "STATE_..."}`, or the whole proto in protobuf's JSON mapping for studies and episodes.
    An `undo` entry has `undo_of` = id of the entry it reverted and before/after of the reverting change.
    """

    id: int
    time: datetime
    user: str
    action: str
    study_id: str | None = None
    session_id: str | None = None
    episode_id: str | None = None
    step_index: int | None = None
    before: Any = None
    after: Any = None
    undo_of: int | None = None

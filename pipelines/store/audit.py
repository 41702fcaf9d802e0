"""The audit log's vocabulary: what an entry says and which changes `undo_last` can revert."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pipelines.store import field_actions
from pipelines.store import grounding_kinds as grounding


class AuditAction(StrEnum):
    STUDY_CREATE = "study.create"
    STUDY_UPDATE = "study.update"
    STUDY_ENABLE = "study.enable"
    STUDY_DISABLE = "study.disable"
    STUDY_PALETTE = "study.palette"
    STUDY_REVIEWERS = "study.reviewers"
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
    STEP_SEGMENT_ADD = "step.segment.add"
    STEP_SEGMENT_REMOVE = "step.segment.remove"
    EPISODE_DELETE = "episode.delete"
    UNDO = "undo"
    REDO = "redo"


# Annotation changes a user can take back; their inverse is always well defined.
UNDOABLE: frozenset[AuditAction] = frozenset(
    {
        AuditAction.EPISODE_STATE,
        AuditAction.EPISODE_NOTES,
        AuditAction.EPISODE_TAG_ADD,
        AuditAction.EPISODE_TAG_REMOVE,
        AuditAction.STEP_TAG_ADD,
        AuditAction.STEP_TAG_REMOVE,
        AuditAction.STEP_SEGMENT_ADD,
        AuditAction.STEP_SEGMENT_REMOVE,
    }
)


@dataclass(frozen=True)
class AuditEntry:
    """One change: who, when, what, on which study/session/episode/step, and the value before and after.

    `before`/`after` are JSON values: `{"label": ...}` for tags (None on the absent side), `{"notes": ...}`,
    `{"state": "STATE_..."}`, or the whole proto in protobuf's JSON mapping for studies and episodes.
    An `undo` entry has `undo_of` = id of the entry it reverted and before/after of the reverting change; a
    `redo` entry has `undo_of` = id of the undo it reverted. `reverted_action` is, for both, the action of the
    change at the root of that chain (e.g. "step.tag.add"), so the entry can be described on its own.
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
    reverted_action: str | None = None


_WHAT = {
    AuditAction.EPISODE_TAG_ADD: "episode tag {label} added",
    AuditAction.EPISODE_TAG_REMOVE: "episode tag {label} removed",
    AuditAction.STEP_TAG_ADD: "tag {label} added to step {step}",
    AuditAction.STEP_TAG_REMOVE: "tag {label} removed from step {step}",
    AuditAction.STEP_SEGMENT_ADD: "tag {label} added to steps {span}",
    AuditAction.STEP_SEGMENT_REMOVE: "tag {label} removed from steps {span}",
    AuditAction.EPISODE_NOTES: "notes edited",
    AuditAction.EPISODE_STATE: "state changed from {state_before} to {state_after}",
}


def _short(episode_id: str | None) -> str:
    if not episode_id:
        return "?"
    return episode_id if len(episode_id) <= 8 else episode_id[:6] + "…"


def describe(entry: AuditEntry, episode_label: str | None = None) -> str:
    """What a change (or the undo/redo of one) did, in plain words, e.g.
    "Undid: tag 'jump' added to step 12 (episode 3f2a5c…)". Plain text: show it with `st.text` or escape it.
    """
    action = entry.action
    prefix = ""
    original = entry
    if action in (AuditAction.UNDO, AuditAction.REDO):
        prefix = "Undid: " if action == AuditAction.UNDO else "Redid: "
        action = entry.reverted_action or ""
        # An undo's before/after are the reverse of the change it names; a redo's are the change itself.
        if entry.action == AuditAction.UNDO:
            original = AuditEntry(**{**entry.__dict__, "before": entry.after, "after": entry.before})
    if action.startswith("grounding."):  # grounding annotations (issue 11) say themselves what they are
        value = original.after if action == grounding.ADD else original.before
        where = episode_label or f"episode {_short(entry.episode_id)}"
        return f"{prefix}{grounding.describe(action, value, entry.step_index)} ({where})"
    if action.startswith("field."):  # study fields (issue 26) say themselves what they are
        value = original.before if action == field_actions.CLEAR else original.after
        where = episode_label or f"episode {_short(entry.episode_id)}"
        return f"{prefix}{field_actions.describe(action, value, entry.step_index)} ({where})"
    side = original.after or original.before or {}
    state_before = (original.before or {}).get("state", "?") if isinstance(original.before, dict) else "?"
    state_after = (original.after or {}).get("state", "?") if isinstance(original.after, dict) else "?"
    label = side.get("label") if isinstance(side, dict) else None
    span = f"{side.get('start')}–{side.get('end')}" if isinstance(side, dict) else "?"
    template = _WHAT.get(action)  # type: ignore[call-overload]
    if template is None:
        what = action or "a change"
    elif label is None and "{label}" in template:  # an undo/redo that found nothing left to change
        step = f" on step {entry.step_index}" if entry.step_index is not None else ""
        what = f"{action}{step}: nothing was left to change"
    else:
        what = template.format(
            label=repr(label), step=entry.step_index, span=span,
            state_before=str(state_before).removeprefix("STATE_").lower(),
            state_after=str(state_after).removeprefix("STATE_").lower(),
        )  # fmt: skip
    if action in (AuditAction.STEP_SEGMENT_ADD, AuditAction.STEP_SEGMENT_REMOVE) and isinstance(side, dict):
        n = len(side.get("tags") or [])
        what += f" ({n} step{'s' if n != 1 else ''})"
    where = episode_label or f"episode {_short(entry.episode_id)}"
    return f"{prefix}{what} ({where})"

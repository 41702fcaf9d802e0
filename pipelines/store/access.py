"""What the repository and the modules that work through its transactions share, so that neither imports
the other: the episode reference type and its `STUDY/SESSION/EPISODE` text form, the store's clock, and `EpisodeAccess`, the part of the repository
that `grounding.py` uses (one transaction with the episode row locked, the step check, the audit row, the
reviewer rule). `repository.py` imports `revert.py`, which imports `grounding.py`; grounding needs only these.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy.orm import Session

from pipelines.store.errors import StoreError
from pipelines.store.models import AuditRow, EpisodeRow
from protos.rlds_creator import client_pb2

EpisodeRef = client_pb2.EpisodeRef


def parse_ref(text: str) -> EpisodeRef:
    """`STUDY/SESSION/EPISODE` (the protocol's `EpisodeRef`, as `stepmark export --episode` and `stepmark fields
    import` take it) -> EpisodeRef; a clear error for anything else."""
    parts = text.split("/")
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise StoreError(f"episode reference {text!r} is not STUDY/SESSION/EPISODE")
    return EpisodeRef(study_id=parts[0], session_id=parts[1], episode_id=parts[2])


def now() -> datetime:
    """The store's clock: every time it writes is UTC."""
    return datetime.now(UTC)


class EpisodeAccess(Protocol):
    """The repository's transaction helpers (see `Repository` for their rules)."""

    def _write(self) -> AbstractContextManager[Session]: ...

    def _read(self) -> AbstractContextManager[Session]: ...

    @staticmethod
    def _episode_row(s: Session, ref: EpisodeRef, *, lock: bool = False) -> EpisodeRow: ...

    @staticmethod
    def _check_step(row: EpisodeRow, index: int) -> None: ...

    @staticmethod
    def _where(row: EpisodeRow) -> dict[str, Any]: ...

    @staticmethod
    def _audit(s: Session, user: str, action: Any, **fields: Any) -> AuditRow: ...

    def _require_review(self, s: Session, row: EpisodeRow, user: str, what: str) -> None: ...

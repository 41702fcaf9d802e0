"""The metadata store: studies, sessions, episodes, tags and the audit log in a SQL database.

`open_store(None, data_dir)` opens (creating or upgrading) the embedded SQLite file `<data_dir>/stepmark.db`;
`open_store(url, data_dir)` any SQLAlchemy URL, e.g. `postgresql+psycopg://user@host/db`.
Tables, rules and versioning are documented in `schemas/store.md`.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.store.audit import AuditAction, AuditEntry
from pipelines.store.database import create_engine, upgrade
from pipelines.store.errors import (
    AlreadyExists,
    Conflict,
    InvalidSpec,
    NameTaken,
    NotFound,
    PermissionDenied,
    SchemaVersionError,
    StoreError,
    StudyDisabled,
)
from pipelines.store.migrations import CURRENT_VERSION
from pipelines.store.repository import Repository, new_id
from pipelines.store.spec_file import load_study_spec, parse_study_spec


def open_store(url: str | None, data_dir: str | Path) -> Repository:
    """A Repository over `url` (None: `<data_dir>/stepmark.db`), its schema created or upgraded first."""
    engine = create_engine(url, data_dir)
    try:
        old, new = upgrade(engine)
    except BaseException:
        engine.dispose()
        raise
    repo = Repository(engine, data_dir)
    if 0 < old < new:  # an upgrade may rewrite every row (migration 8): the planner's statistics follow, and on
        repo.analyze()  # PostgreSQL a VACUUM makes the pages all-visible again (else counts read the heap: 2 s at 1M)
    return repo


__all__ = [
    "CURRENT_VERSION",
    "AlreadyExists",
    "AuditAction",
    "AuditEntry",
    "Conflict",
    "InvalidSpec",
    "NameTaken",
    "NotFound",
    "PermissionDenied",
    "Repository",
    "SchemaVersionError",
    "StoreError",
    "StudyDisabled",
    "load_study_spec",
    "new_id",
    "open_store",
    "parse_study_spec",
]

"""Errors the store raises. All are `StepmarkError`s, so the command line prints them as one line."""

from __future__ import annotations

from pipelines.errors import StepmarkError


class StoreError(StepmarkError):
    """A store operation was refused or could not be done."""


class NotFound(StoreError):
    """The study, session, environment or episode does not exist (or does not belong to the reference)."""


class AlreadyExists(StoreError):
    """An object with the given id already exists."""


class SourceTaken(AlreadyExists):
    """The study already has an episode of that source (e.g. the same UI record)."""


class NameTaken(AlreadyExists):
    """The creator already has a study of that name (names are unique per creator)."""


class Conflict(StoreError):
    """The change would overwrite someone else's later change (e.g. undoing notes edited since)."""


class PermissionDenied(StoreError):
    """The user may not do this (e.g. only the study's creator may edit, enable or disable it)."""


class StudyDisabled(StoreError):
    """The study is disabled: it takes no new sessions and no new episodes."""


class InvalidSpec(StoreError):
    """A study specification breaks a rule of the store (missing name, duplicate environment ids, ...)."""


class SchemaVersionError(StoreError):
    """The database was written by a newer stepmark (or its version table is unreadable)."""

"""The annotator's own error type, apart from `operations` so that its helper modules can raise it too."""

from __future__ import annotations

from pipelines.errors import StepmarkError


class OperationError(StepmarkError):
    """An operation that cannot run in the session's current state (e.g. a step tag with no episode open)."""

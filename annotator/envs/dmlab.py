"""DeepMind Lab: specs are accepted and stored, but no environment can be created on this platform.

There is no installable deepmind-lab distribution for Python 3.11 on Linux (it is built from source with
Bazel against its own Python); studies that name DMLab levels keep their spec so they can be run where
DMLab exists, and `create` explains why it cannot run here.
"""

from __future__ import annotations

from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2

UNAVAILABLE = (
    "DMLab environments are not available on this platform: no installable deepmind-lab distribution "
    "for Python 3.11/Linux; the spec is kept"
)


def create(spec: study_pb2.EnvironmentSpec, *, seed: int | None = None) -> None:
    """Always raises: see the module docstring."""
    level = spec.dmlab.id or "<no level id>"
    raise StepmarkError(f"{UNAVAILABLE} (environment {spec.id or spec.name!r}, level {level!r})")


def valid_ids() -> list[str]:
    """No level list can be read without the package, so none is offered."""
    return []

"""Shared test helpers: where the real fixtures are, and small factories used across test packages."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The throwaway PostgreSQL server fixtures (postgres_server, pg_url), one per test process.
pytest_plugins = ["tests.pg_fixture", "tests.object_store"]

REPO_ROOT = Path(__file__).resolve().parent.parent
# Real data lives beside the repository (../shared/fixtures), in CI as on a developer's machine.
FIXTURES = Path(os.environ.get("STEPMARK_FIXTURES", REPO_ROOT.parent / "shared" / "fixtures")).resolve()

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"real fixtures not found at {FIXTURES} (expected ../shared/fixtures beside the repo)")
    return FIXTURES


_REAL_MAIN = sys.modules["__main__"]


@pytest.fixture(autouse=True)
def _restore_main_module() -> Iterator[None]:
    """Streamlit's AppTest leaves the app script installed as `__main__`; processes started later with the
    `spawn` method (multiprocessing, Dask workers) would re-run that script on start-up and die. Put the real
    `__main__` back after every test."""
    yield
    if sys.modules.get("__main__") is not _REAL_MAIN:
        sys.modules["__main__"] = _REAL_MAIN

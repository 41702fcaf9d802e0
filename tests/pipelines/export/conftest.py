"""Session fixtures for the export tests: real recorded episodes in a real SQLite store (see export_data.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pipelines.export.export_data import ExportData, build


@pytest.fixture(scope="session")
def export_data(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> ExportData:
    return build(tmp_path_factory.mktemp("export-data") / "data", fixtures_dir)

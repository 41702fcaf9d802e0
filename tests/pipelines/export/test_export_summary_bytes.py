"""The export summary's byte counts (issue 32, 9b): `bytes` is every file of the output, the summary file itself
included (with --archive the ZIP; the summary inside it counts the files in the ZIP); `episode_bytes` is the
episode files the workers wrote, the same figure as the `episode_bytes` counter."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from pipelines import export
from tests.pipelines.export.export_data import ExportData


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


def _episode_files(root: Path, fmt: str) -> int:
    """Bytes of the per-episode files as they lie in the output (envlogger shards, TFDS shards, Parquet files)."""
    if fmt == "envlogger":
        return sum(size for name, size in _files(root).items() if name[:8].isdigit() and "/" in name)
    if fmt == "tfds":
        return sum(size for name, size in _files(root).items() if ".tfrecord-" in name)
    return sum(size for name, size in _files(root).items() if name.startswith("data/") and "-empty" not in name)


@pytest.mark.parametrize("fmt", ["envlogger", "parquet"])
def test_summary_bytes_count_every_file_and_match_the_counter(
    export_data: ExportData, tmp_path: Path, fmt: str
) -> None:
    out = tmp_path / "out"
    refs = [export_data.ref(e) for e in export_data.procgen]
    summary = export.export_episodes(export.ExportRequest(data_dir=str(export_data.data_dir), out=str(out),
                                                          refs=refs, format=fmt))  # fmt: skip
    files = _files(out)
    written = json.loads((out / export.SUMMARY_FILE).read_text())
    assert summary.bytes == written["bytes"] == sum(files.values()), files  # the summary file included
    assert written["datasets"][0]["bytes"] == sum(files.values()) - files[export.SUMMARY_FILE]
    assert summary.episode_bytes == written["episode_bytes"] == summary.counters["episode_bytes"]
    assert summary.episode_bytes == _episode_files(out, fmt) < summary.bytes
    assert "bytes" not in summary.counters  # one name per figure
    assert f"{summary.bytes:,} bytes" in summary.describe()
    assert f"{summary.episode_bytes:,} bytes of episode files" in summary.describe()


def test_archive_summary_counts_the_files_in_the_zip(export_data: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "out.zip"
    refs = [export_data.ref(e) for e in export_data.nethack]
    summary = export.export_episodes(export.ExportRequest(data_dir=str(export_data.data_dir), out=str(out),
                                                          refs=refs, archive=True))  # fmt: skip
    assert summary.bytes == out.stat().st_size  # the output is the ZIP
    with zipfile.ZipFile(out) as z:
        inside = json.loads(z.read(export.SUMMARY_FILE))
        assert inside["bytes"] == sum(i.file_size for i in z.infolist() if not i.is_dir())
        assert inside["episode_bytes"] == summary.episode_bytes == summary.counters["episode_bytes"]

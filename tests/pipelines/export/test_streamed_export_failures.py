"""The streamed export when things go wrong: a failure while the driver writes the work file leaves nothing in the
bucket. Real recorded NetHack episodes, moto's S3 server (tests/object_store.py)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from pipelines import export
from pipelines.exporters import selection
from tests.object_store import Bucket
from tests.pipelines.export.export_data import ExportData, copy_data, register_copies


def _request(data_dir: Path, study_id: str, out: str, fmt: str = "parquet") -> export.ExportRequest:
    return export.ExportRequest(
        data_dir=str(data_dir), out=out, format=fmt, study_id=study_id, beam_args=["--runner=FnApiRunner"]
    )


@pytest.fixture
def many(export_data: ExportData, tmp_path: Path) -> tuple[Path, str]:
    data_dir = copy_data(export_data, tmp_path / "data")
    return data_dir, register_copies(data_dir, export_data.nethack[0], 7)


def test_a_failure_mid_selection_leaves_no_object_in_the_bucket(
    many: tuple[Path, str], s3: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The work file's writer held the first batches when the third batch failed: nothing of it is uploaded,
    neither when the error leaves the writer nor later when the writer is collected (an S3 writer's close,
    which garbage collection calls, would upload what it holds after the staging folder was removed)."""
    data_dir, study_id = many
    monkeypatch.setattr(selection, "BATCH", 2)
    batches = []
    grounding_of = export._grounding_of

    def third_batch_fails(repo, episodes, mode):  # noqa: ANN001, ANN202
        batches.append(len(episodes))
        if len(batches) == 3:
            raise RuntimeError("store went away mid-selection")
        return grounding_of(repo, episodes, mode)

    monkeypatch.setattr(export, "_grounding_of", third_batch_fails)
    with pytest.raises(RuntimeError, match="mid-selection") as failed:
        export.export_episodes(_request(data_dir, study_id, s3.url("out")))
    assert batches == [2, 2, 2]
    del failed  # its traceback holds the writer's frames: collected now, as at the end of a command
    gc.collect()
    assert s3.keys() == []
    assert s3.server.client().list_multipart_uploads(Bucket=s3.name).get("Uploads", []) == []

    monkeypatch.setattr(export, "_grounding_of", grounding_of)  # the next export to the same place works
    summary = export.export_episodes(_request(data_dir, study_id, s3.url("out")))
    assert summary.episodes == 7 and "out/stepmark_export.json" in s3.keys()


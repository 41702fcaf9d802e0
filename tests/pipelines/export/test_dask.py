"""The same export on a real distributed engine: a local Dask cluster with two worker processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines import export
from tests.pipelines.export import readback
from tests.pipelines.export.export_data import NETHACK_ENV, PROCGEN_ENV, ExportData


@pytest.mark.slow
def test_export_on_a_dask_cluster_equals_the_local_run(export_data: ExportData, tmp_path: Path) -> None:
    from distributed import Client, LocalCluster

    # Two datasets (Procgen and NetHack) in one export: both must come out of the one pipeline.
    refs = [export_data.ref(e) for e in [*export_data.procgen, *export_data.nethack]]
    local = export.export_episodes(
        export.ExportRequest(
            data_dir=str(export_data.data_dir), out=str(tmp_path / "local"), refs=refs, split_by_spec=True
        )
    )
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            summary = export.export_episodes(
                export.ExportRequest(
                    data_dir=str(export_data.data_dir),
                    out=str(tmp_path / "dask"),
                    refs=refs,
                    split_by_spec=True,
                    beam_args=[
                        "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                        f"--dask_client_address={cluster.scheduler_address}",
                    ],
                )
            )
            workers = client.run(lambda: True)
    assert len(workers) == 2
    assert (summary.episodes, summary.steps) == (local.episodes, local.steps) and summary.episodes == 4
    for name in (PROCGEN_ENV, NETHACK_ENV):
        a, b = (
            readback.read_envlogger(tmp_path / "local" / name),
            readback.read_envlogger(tmp_path / "dask" / name),
        )
        assert len(a) == 2 and [e["metadata"] for e in a] == [e["metadata"] for e in b]
        for x, y in zip(a, b, strict=True):
            assert [r["reward"] for r in x["records"]] == [r["reward"] for r in y["records"]]
            assert [r["custom_data"]["episode"] for r in x["records"]] == [
                r["custom_data"]["episode"] for r in y["records"]
            ]


@pytest.mark.tfds
def test_tfds_on_dask_is_refused_clearly(export_data: ExportData, tmp_path: Path) -> None:
    """DaskRunner (Beam 2.77) cannot run TFDS's shard writer (fan-out + side inputs): say so up front."""
    from pipelines.errors import StepmarkError

    with pytest.raises(StepmarkError, match="DaskRunner"):
        export.export_episodes(
            export.ExportRequest(
                data_dir=str(export_data.data_dir),
                out=str(tmp_path / "t"),
                format="tfds",
                refs=[export_data.ref(export_data.procgen[0])],
                beam_args=[
                    "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                    "--dask_client_address=x:1",
                ],
            )
        )
    assert not (tmp_path / "t").exists()

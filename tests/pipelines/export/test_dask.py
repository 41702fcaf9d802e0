"""The same export on a real distributed engine: a local Dask cluster with two worker processes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pipelines import export
from tests.pipelines.export import readback
from tests.pipelines.export.export_data import NETHACK_ENV, PROCGEN_ENV, ExportData


@pytest.mark.slow
def test_export_on_a_dask_cluster_equals_the_local_run(export_data: ExportData, tmp_path: Path) -> None:
    from distributed import Client, LocalCluster, get_task_stream

    # Two datasets (Procgen and NetHack) in one export: both must come out of the one pipeline.
    refs = [export_data.ref(e) for e in [*export_data.procgen, *export_data.nethack]]
    local = export.export_episodes(
        export.ExportRequest(
            data_dir=str(export_data.data_dir), out=str(tmp_path / "local"), refs=refs, split_by_spec=True
        )
    )
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client, get_task_stream(client) as tasks:
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
    # The 4 episodes were exported in 4 tasks, which any worker can run: they are spread over partitions for
    # the cluster's threads (Beam's DaskRunner put up to 128 elements in one partition, so one task exported
    # them all). The partitions run as fused tasks keyed ("from_sequence-apply_dofn_to_bundle-<hash>", i);
    # which worker runs which is the scheduler's choice, not asserted.
    exporting = {t["key"] for t in tasks.data if str(t["key"]).startswith("('from_sequence-")}
    assert len(exporting) == 4, sorted(str(t["key"]) for t in tasks.data)
    assert {t["worker"] for t in tasks.data} <= set(workers)
    assert (summary.episodes, summary.steps) == (local.episodes, local.steps) and summary.episodes == 4
    for name in (PROCGEN_ENV, NETHACK_ENV):
        a, b = (
            readback.read_envlogger(tmp_path / "local" / name),
            readback.read_envlogger(tmp_path / "dask" / name),
        )
        assert len(a) == 2 and [e["metadata"] for e in a] == [e["metadata"] for e in b]
    # Deterministic output: the same files, byte for byte, whichever runner wrote them.
    assert digests(tmp_path / "local") == digests(tmp_path / "dask")


def digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.tfds
@pytest.mark.slow
def test_tfds_export_on_dask_equals_the_local_run(export_data: ExportData, tmp_path: Path) -> None:
    """Each worker writes its episode's own shard file; the last step names them: runs on Dask too."""
    from distributed import LocalCluster

    refs = [export_data.ref(e) for e in export_data.procgen]
    kw = {"data_dir": str(export_data.data_dir), "format": "tfds", "refs": refs, "splits": "train=0.5,val=0.5"}
    export.export_episodes(export.ExportRequest(out=str(tmp_path / "local"), **kw))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        export.export_episodes(
            export.ExportRequest(
                out=str(tmp_path / "dask"),
                beam_args=[
                    "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                    f"--dask_client_address={cluster.scheduler_address}",
                ],
                **kw,
            )
        )
    assert digests(tmp_path / "local") == digests(tmp_path / "dask")
    assert len(readback.read_tfds(tmp_path / "dask")) == 2

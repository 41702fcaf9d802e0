"""Beam options stepmark adds: on the DaskRunner, an export's episodes are cut into enough dask partitions for
every worker of the cluster (Beam's default puts 128 elements in one)."""

from __future__ import annotations

import logging

import pytest

from pipelines.beam_options import PARTITIONS_PER_THREAD, spread_over_dask

DASK = "--runner=apache_beam.runners.dask.dask_runner.DaskRunner"


def test_other_runners_and_the_users_own_partitioning_are_left_alone() -> None:
    for args in ([], ["--runner=FnApiRunner", "--direct_num_workers=2"], ["--runner=DirectRunner"]):
        assert spread_over_dask(args, 500) == args
    for flag in ("--dask_npartitions=3", "--dask_partition_size=7", "--dask_npartitions"):
        args = [DASK, "--dask_client_address=tcp://127.0.0.1:1", flag, *(["3"] if "=" not in flag else [])]
        assert spread_over_dask(args, 500) == args
    assert spread_over_dask([DASK], 0) == [DASK]


@pytest.mark.slow
def test_partitions_follow_the_clusters_worker_threads() -> None:
    from distributed import LocalCluster

    logging.getLogger("distributed").setLevel(logging.ERROR)
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        args = [DASK, f"--dask_client_address={cluster.scheduler_address}"]
        assert spread_over_dask(args, 500) == [*args, f"--dask_npartitions={PARTITIONS_PER_THREAD * 4}"]
        assert spread_over_dask(args, 3) == [*args, "--dask_npartitions=3"]  # never an empty partition
        short = ["--runner=DaskRunner", f"--dask_client_address={cluster.scheduler_address}"]
        assert spread_over_dask(short, 500)[-1] == f"--dask_npartitions={PARTITIONS_PER_THREAD * 4}"


def test_an_unreachable_cluster_falls_back_to_this_machines_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner itself then reports that it cannot connect; stepmark does not fail first."""
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    args = [DASK, "--dask_client_address=tcp://127.0.0.1:9", "--dask_connection_timeout=1"]
    assert spread_over_dask(args, 500) == [*args, f"--dask_npartitions={PARTITIONS_PER_THREAD * 3}"]
    assert spread_over_dask([DASK], 500) == [DASK, f"--dask_npartitions={PARTITIONS_PER_THREAD * 3}"]

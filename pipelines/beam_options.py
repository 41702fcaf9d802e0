"""Beam pipeline options shared by stepmark's batch jobs: FnApiRunner unless the user picks a runner.

The plain DirectRunner first tries to download the Prism runner and stalls offline; FnApiRunner runs locally
without it. Every other flag (`--runner=...DaskRunner --dask_client_address=...`, Dataflow/Flink/Spark flags,
`--direct_num_workers`, ...) passes straight through to Beam.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.errors import StepmarkError

#: Registered short name of apache_beam.runners.portability.fn_api_runner.FnApiRunner (checked in Beam 2.77).
DEFAULT_RUNNER = "FnApiRunner"


def has_runner(beam_args: Sequence[str]) -> bool:
    return any(a == "--runner" or a.startswith("--runner=") for a in beam_args)


def pipeline_options(beam_args: Sequence[str]) -> PipelineOptions:
    """PipelineOptions from the command line's Beam flags, defaulting `--runner=FnApiRunner`."""
    args = list(beam_args)
    if not has_runner(args):
        args.insert(0, f"--runner={DEFAULT_RUNNER}")
    return PipelineOptions(args)


def runner_name(options: PipelineOptions) -> str:
    """The runner as the user named it (`DaskRunner` or its dotted path), or its class name."""
    runner = options.view_as(StandardOptions).runner or DEFAULT_RUNNER
    return runner if isinstance(runner, str) else type(runner).__name__


def check_runner(options: PipelineOptions) -> None:
    """A StepmarkError naming `--runner` when Beam cannot create that runner (a typo, a missing extra), before
    anything is written; Beam would raise it from `pipeline.run()` with a traceback."""
    from apache_beam.runners.runner import create_runner

    runner = options.view_as(StandardOptions).runner
    if isinstance(runner, str):
        try:
            create_runner(runner)
        except (ValueError, ImportError) as exc:
            raise StepmarkError(f"--runner={runner}: {exc}") from None


# DaskRunner flags that set how a `Create`'s elements are cut into dask partitions (one Beam bundle each).
DASK_PARTITION_FLAGS = ("--dask_npartitions", "--dask_partition_size")
# Partitions per worker thread: enough that one slow episode does not leave the other workers idle at the end,
# few enough that the per-partition cost (a task per stage, the DoFn set up again) stays small.
PARTITIONS_PER_THREAD = 4


def spread_over_dask(beam_args: Sequence[str], elements: int) -> list[str]:
    """`beam_args`, plus `--dask_npartitions` for a pipeline whose `Create` holds `elements` heavy elements
    (whole episodes) when it runs on the DaskRunner and the user set neither partition flag.

    The DaskRunner runs one bundle per dask partition and puts up to 128 elements in one by default: 144
    episodes made two partitions (128 + 16), so 2 workers exported slower than 1 (measured: 0.77x the marginal
    throughput). With `PARTITIONS_PER_THREAD` partitions per worker thread: 1.8-1.9x (bench/bench_export.py)."""
    args = list(beam_args)
    if elements < 1 or any(a.split("=", 1)[0] in DASK_PARTITION_FLAGS for a in args):
        return args
    options = pipeline_options(args)
    if runner_name(options).rsplit(".", 1)[-1] != "DaskRunner":
        return args
    threads = _dask_threads(options)
    return [*args, f"--dask_npartitions={max(1, min(elements, PARTITIONS_PER_THREAD * threads))}"]


def _dask_threads(options: PipelineOptions) -> int:
    """Worker threads of the Dask cluster the runner will use: asked of its scheduler when an address or a
    scheduler file is given, else this machine's CPUs (the runner then starts a local cluster)."""
    from apache_beam.runners.dask.dask_runner import DaskOptions

    given = options.view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)
    where = {k: given[k] for k in ("address", "scheduler_file") if given.get(k)}
    if where:
        try:
            from distributed import Client

            with Client(**where, timeout=given.get("timeout") or 30) as client:
                return max(1, sum(client.nthreads().values()))
        except Exception:  # noqa: BLE001 - the runner reports an unreachable cluster itself, with its own words
            pass
    return max(1, os.cpu_count() or 1)

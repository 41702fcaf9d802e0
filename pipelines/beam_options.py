"""Beam pipeline options shared by stepmark's batch jobs: FnApiRunner unless the user picks a runner.

The plain DirectRunner first tries to download the Prism runner and stalls offline; FnApiRunner runs locally
without it. Every other flag (`--runner=...DaskRunner --dask_client_address=...`, Dataflow/Flink/Spark flags,
`--direct_num_workers`, ...) passes straight through to Beam.
"""

from __future__ import annotations

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
    """The runner as the user would name it (last dotted component)."""
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

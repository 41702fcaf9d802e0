"""`stepmark export`: selected episodes -> one envlogger or TFDS/RLDS dataset (folder or ZIP).

Any option the export does not know is a Beam pipeline option and goes to the runner unchanged
(`--runner=...`, `--direct_num_workers=2`, `--dask_client_address=...`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


class _BeamFlagsParser(argparse.ArgumentParser):
    """Keeps unknown `--flags` as Beam options (`beam_args`) instead of refusing them.

    The top-level parser refuses unknown arguments; the export subparser hands them on, like `run(argv)`
    in the apache_beam examples does with `parse_known_args`.
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = super().parse_known_args(args, namespace)
        # A word is a Beam flag's value only right after a `--flag` without `=`; anything else is stray.
        stray = [
            a
            for i, a in enumerate(extras)
            if not a.startswith("-") and (i == 0 or not extras[i - 1].startswith("-") or "=" in extras[i - 1])
        ]
        if stray:
            self.error(f"unrecognized arguments: {' '.join(stray)}")
        ns.beam_args = [*getattr(ns, "beam_args", []), *extras]
        return ns, []


def register(subparsers: argparse._SubParsersAction, parents: dict[str, argparse.ArgumentParser]) -> None:
    from pipelines.export import add_export_arguments

    p = subparsers.add_parser(
        "export",
        parents=[parents["store"]],
        help="export episodes as an envlogger, TFDS/RLDS or Parquet dataset (Beam pipeline)",
        description=(
            "Export selected episodes (by reference, study, tag or state) as one training-ready dataset: "
            "envlogger (Riegeli), TFDS/RLDS or Parquet, as a folder or one ZIP file, with spaces, specs and "
            "splits in its metadata. Fields: schemas/dataset_spec.md. "
            "Other --flags are Beam pipeline options (default runner: FnApiRunner)."
        ),
    )
    p.__class__ = _BeamFlagsParser
    add_export_arguments(p)
    p.set_defaults(func=export, beam_args=[])


def export(args: argparse.Namespace) -> int:
    from pipelines.export import export_episodes, print_progress, request_from_args

    request = request_from_args(args, getattr(args, "beam_args", []))
    summary = export_episodes(request, print_progress)
    print(summary.describe())
    if summary.dead_letters:
        print(f"{len(summary.dead_letters)} episode(s) could not be exported (see above)", file=sys.stderr)
        return 1
    return 0

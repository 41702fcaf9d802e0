"""`stepmark report`: the quality report of a convert-ui output and/or a study as one self-contained page."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipelines.errors import StepmarkError


def report_command(args: argparse.Namespace) -> int:
    from pipelines.report.html import render
    from pipelines.report.ui_stats import ui_stats

    if not args.output and not args.study:
        raise StepmarkError("give a convert-ui output folder, --study ID, or both")
    folder = args.output
    store = None
    if args.study:
        from pipelines.episodes.publish import open_store
        from pipelines.report.store_stats import import_folders, store_stats

        with open_store(args.store, args.data) as repo:
            store = store_stats(repo, args.study)
            if folder is None:  # a UI study: the output its episodes were imported from
                folder = next(iter(import_folders(repo, args.study, args.data)), None)
    from pipelines import storage

    ui = ui_stats(folder) if folder else None
    out = args.out if storage.is_remote(args.out) else str(Path(args.out))
    storage.check_location(out, write=True)
    page = render(ui, store).encode("utf-8")
    try:
        storage.write_bytes(out, page)
    except OSError as exc:
        raise StepmarkError(f"--out {out}: cannot write ({exc.strerror})") from exc
    print(f"wrote {out} ({len(page) // 1024} KiB)")
    return 0


def register(subparsers: argparse._SubParsersAction, parents: dict[str, argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "report",
        parents=[parents["store"]],
        help="quality report with plots (one self-contained HTML file)",
        description="Plots and key figures of a convert-ui output (objects, types, actionable grid, actions, "
        "target resolution, apps, screen sizes, dead letters, sample screenshots) and/or of a study "
        "(returns, lengths, success, states, annotators, tags, queue progress, agreement). With --study "
        "alone, the UI plots come from the convert-ui output the study's UI episodes were imported from.",
    )
    p.add_argument("output", nargs="?", metavar="CONVERT_OUTPUT", help="convert-ui output folder")
    p.add_argument("--study", metavar="ID", help="a study in the store")
    p.add_argument("--out", required=True, metavar="FILE", help="the HTML file to write")
    p.set_defaults(func=report_command)

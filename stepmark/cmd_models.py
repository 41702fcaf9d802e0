"""`stepmark suggest`: a model backend's suggestions for a study's step fields (schemas/model_backend.md)."""

from __future__ import annotations

import argparse


def run_suggest(args: argparse.Namespace) -> int:
    from pipelines import suggest

    return suggest.run(args.beam_args, parsed=args)


def register(subparsers: argparse._SubParsersAction, parents: dict[str, argparse.ArgumentParser]) -> None:
    from pipelines import suggest

    p = subparsers.add_parser(
        "suggest",
        parents=[parents["store"]],
        help="ask a model backend for a study's step fields and store its answers as suggestions",
        description="Ask a backend (openai:URL, python:package.module:function, grounded-instructions) about "
        "each selected step and store what fits the fields as suggestions of model:NAME@VERSION (shown in the "
        "player, where Enter accepts one; never a person's value). A run again skips the places that already "
        "hold this model's suggestion. Bad answers are dead letters with their reason. Any further flags go to "
        "Apache Beam (default --runner=FnApiRunner; Dask as for convert-ui).",
    )
    from stepmark.cmd_export import _BeamFlagsParser

    p.__class__ = _BeamFlagsParser  # other --flags are Beam options, as for export
    suggest.add_arguments(p)
    p.set_defaults(func=run_suggest, beam_args=[])

"""`stepmark evaluate`: an agent's predicted actions scored against a study's steps, stored as a named run;
`--compare A B` sets two runs side by side (schemas/evaluation.md)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from pipelines.episodes.publish import open_store
from pipelines.errors import StepmarkError
from pipelines.evaluation import runs


def _stream_json(head: dict[str, Any], key: str, items: Iterator[dict[str, Any]], out: TextIO) -> None:
    """`head` with `key` holding `items`, written as they come (a run may fail 100,000 steps)."""
    text = json.dumps(head, indent=2)
    out.write(text[:-2] + f',\n  "{key}": [' if head else '{\n  "' + key + '": [')
    for n, item in enumerate(items):
        out.write(("," if n else "") + "\n    " + json.dumps(item))
    out.write("\n  ]\n}\n")


def _pct(figures: dict[str, Any]) -> str:
    acc = figures.get("accuracy")
    shown = "-" if acc is None else f"{100 * acc:.1f}%"
    return f"{figures['matched']}/{figures['steps']} ({shown})"


def _action(value: dict[str, Any] | None) -> str:
    """An action in one line of plain text (never markup)."""
    if not value:
        return "(none)"
    kind = value.get("action_type", "?")
    rest = {k: v for k, v in value.items() if k not in ("action_type", "width", "height")}
    return kind + ("" if not rest else " " + json.dumps(rest, ensure_ascii=False))


def _print_run(summary: dict[str, Any], failed: Iterator[dict[str, Any]]) -> None:
    print(f"run {summary['run']!r} of study {summary['study']}: {summary['predictions']} prediction(s)")
    print(f"step accuracy: {_pct(summary)}; missing: {summary['missing']}")
    for kind, figures in summary["per_type"].items():
        print(f"  {kind}: {_pct(figures)}" + (f", missing {figures['missing']}" if figures["missing"] else ""))
    rate = summary["episode_success"]
    shown = "-" if rate is None else f"{100 * rate:.1f}%"
    print(f"episode success: {summary['episodes_succeeded']}/{summary['episodes']} ({shown})")
    print("failed steps (episode, step, recorded, predicted, reason):")
    for f in failed:
        print(f"  {f['episode']}  {f['step']}  {_action(f['recorded'])}  {_action(f['predicted'])}  {f['reason']}")


def _compare(args: argparse.Namespace, repo: Any) -> int:
    a, b = args.compare
    if a == b:
        raise StepmarkError("--compare needs two different runs")
    sa_, sb = runs.summary(repo, args.study, a), runs.summary(repo, args.study, b)
    kinds = sorted(set(sa_["per_type"]) | set(sb["per_type"]))
    empty = {"steps": 0, "matched": 0, "missing": 0, "accuracy": None}
    table = {k: {a: sa_["per_type"].get(k, empty), b: sb["per_type"].get(k, empty)} for k in kinds}
    differ = runs.compare(repo, args.study, a, b)
    if args.json:
        head = {"study": args.study, "runs": [a, b], "overall": {a: _figures(sa_), b: _figures(sb)}, "per_type": table}
        _stream_json(head, "differ", differ, sys.stdout)
        return 0
    width = max([len("overall"), *map(len, kinds)])
    print(f"{'':{width}}  {a}  |  {b}")
    print(f"{'overall':{width}}  {_pct(sa_)}  |  {_pct(sb)}")
    for k in kinds:
        print(f"{k:{width}}  {_pct(table[k][a])}  |  {_pct(table[k][b])}")
    print(f"episode success: {sa_['episodes_succeeded']}/{sa_['episodes']}  |  {sb['episodes_succeeded']}/{sb['episodes']}")
    print(f"steps where they differ (episode, step, recorded, {a}, {b}):")
    for d in differ:
        side = [f"{'ok' if d['runs'][r]['matched'] else d['runs'][r]['reason']} {_action(d['runs'][r]['predicted'])}"
                for r in (a, b)]
        print(f"  {d['episode']}  {d['step']}  {_action(d['recorded'])}  {side[0]}  |  {side[1]}")
    return 0


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    keep = ("steps", "matched", "missing", "accuracy", "episodes", "episodes_succeeded", "episode_success")
    return {k: summary[k] for k in keep}


def evaluate_command(args: argparse.Namespace) -> int:
    if bool(args.predictions) == bool(args.compare):
        raise StepmarkError("give either --predictions FILE.jsonl or --compare A B")
    with open_store(args.store, args.data) as repo:
        if args.compare:
            return _compare(args, repo)
        name = args.name or args.predictions.rsplit("/", 1)[-1].removesuffix(".jsonl")
        summary = runs.evaluate(repo, args.study, args.predictions, name, args.user, replace=args.replace)
        failed = runs.failed_steps(repo, args.study, summary["run"])
        if args.json:
            _stream_json(summary, "failed", failed, sys.stdout)
        else:
            _print_run(summary, failed)
    return 0


def register(subparsers: argparse._SubParsersAction, parents: dict[str, argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "evaluate",
        parents=[parents["store"]],
        help="score an agent's predicted actions against a study's steps (a stored run), or compare two runs",
        description='One JSON object a line: {"episode": REF, "step": N, "action": {"action_type": ...}} in '
        "AndroidControl's action space (schemas/evaluation.md). Any invalid line, or a prediction for a step "
        "the study does not have, refuses the whole file (FILE:LINE); nothing is stored then. Steps without "
        "a prediction count as failed (missing).",
    )
    p.add_argument("--study", required=True, metavar="ID")
    p.add_argument("--predictions", metavar="FILE.jsonl", help="predicted actions, one a line")
    p.add_argument("--name", metavar="RUN", help="the run's name (default: the file's name without .jsonl)")
    p.add_argument("--replace", action="store_true", help="replace a run of the same name (else refused)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), help="two runs of the study side by side")
    p.add_argument("--json", action="store_true", help="print JSON (for machines)")
    p.set_defaults(func=evaluate_command)

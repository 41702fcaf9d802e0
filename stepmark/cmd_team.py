"""`stepmark queue`, `stepmark agreement` and `stepmark adjudicate`: team annotation from the command line."""

from __future__ import annotations

import argparse
import json

from pipelines.episodes.publish import open_store
from pipelines.store import queue as work_queue
from pipelines.store.agreement import AgreementReport, adjudicate, study_agreement
from stepmark.cmd_store import _table


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def format_agreement(report: AgreementReport) -> str:
    """The agreement tables as text (the Quality page shows the same tables)."""
    lines = [
        f"study {report.study_id}: {report.episodes} episode(s) done by 2+ annotators, "
        f"{report.units} step(s), annotators: {', '.join(report.annotators) or 'none'}",
        f"Krippendorff's alpha (nominal, label sets): {_fmt(report.alpha)}",
    ]
    if report.labels:
        rows = [["LABEL", "ALPHA", "MARKS"]]
        rows += [[a.label, _fmt(a.alpha), str(a.marks)] for a in report.labels]
        lines += ["", "per label:", _table(rows)]
    if report.pairs:
        rows = [["LABEL", "ANNOTATOR A", "ANNOTATOR B", "COHEN KAPPA", "STEPS"]]
        rows += [[p.label, p.user_a, p.user_b, _fmt(p.kappa), str(p.units)] for p in report.pairs]
        lines += ["", "pairs:", _table(rows)]
    if report.per_annotator:
        rows = [["ANNOTATOR", "STEPS", "WITH MAJORITY", "AGREE", "RATE"]]
        rows += [
            [a.user, str(a.units), str(a.with_majority), str(a.agree), _fmt(a.rate)]
            for a in report.per_annotator
        ]
        lines += ["", "agreement with the majority:", _table(rows)]
    if report.disagreements:
        rows = [["EPISODE", "STEP", "LABELS", "MAJORITY", "CONSENSUS"]]
        for d in report.disagreements:
            labels = "; ".join(f"{u}: {', '.join(v) or '-'}" for u, v in d.labels.items())
            majority = "none" if d.majority is None else ", ".join(d.majority) or "-"
            consensus = "" if d.consensus is None else ", ".join(d.consensus) or "-"
            rows.append([d.episode_id, str(d.step_index), labels, majority, consensus])
        lines += ["", f"disagreements ({len(report.disagreements)}):", _table(rows)]
    return "\n".join(lines)


def agreement_command(args: argparse.Namespace) -> int:
    with open_store(args.store, args.data) as repo:
        report = study_agreement(repo, args.study)
    print(json.dumps(report.to_json(), indent=2) if args.json else format_agreement(report))
    return 0


def adjudicate_command(args: argparse.Namespace) -> int:
    with open_store(args.store, args.data) as repo:
        chosen = adjudicate(repo, args.episode, args.step, args.label, args.user)
    print(
        f"episode {args.episode} step {args.step}: consensus {', '.join(chosen) or '(no tag)'} by {args.user}"
    )
    return 0


def queue_set(args: argparse.Namespace) -> int:
    config = work_queue.QueueConfig(
        args.study, args.overlap, args.env, tuple(args.state) if args.state else None, args.tag
    )
    with open_store(args.store, args.data) as repo:
        work_queue.set_queue(repo, config, args.user)
    return queue_show(args)


def queue_show(args: argparse.Namespace) -> int:
    """The queue's totals (aggregates); with --episodes every queued episode's row, printed a page at a time."""
    with open_store(args.store, args.data) as repo:
        progress = work_queue.progress(repo, args.study)
        c = progress.config
        filters = [f"environment {c.environment_id}"] if c.environment_id else []
        filters += [f"state {'|'.join(c.states)}"] if c.states else []
        filters += [f"tag {c.tag}"] if c.tag else []
        print(
            f"queue of study {c.study_id}: overlap {c.overlap}, {', '.join(filters) or 'all episodes'}; "
            f"{progress.episodes} episode(s), {progress.episodes_complete} complete, "
            f"{progress.slots_done} of {progress.slots_total} labellings done"
        )
        if args.episodes:
            print("EPISODE  DONE  DONE BY  OPEN BY")
            for p in work_queue.iter_episode_progress(repo, args.study):
                print(f"{p.episode_id}  {p.done}/{p.overlap}  {','.join(p.done_by) or '-'}  "
                      f"{','.join(p.open_by) or '-'}")  # fmt: skip
    return 0


def register(subparsers: argparse._SubParsersAction, parents: dict[str, argparse.ArgumentParser]) -> None:
    store = [parents["store"]]
    q = subparsers.add_parser("queue", help="a study's work queue: overlap, filter, progress")
    sub = q.add_subparsers(dest="queue_command", metavar="ACTION", required=True)
    setp = sub.add_parser(
        "set",
        parents=store,
        help="set how many annotators label each episode and which episodes are queued (study creator)",
    )
    setp.add_argument("--study", required=True, metavar="ID")
    setp.add_argument("--overlap", type=int, default=1, help="annotators per episode (default 1)")
    setp.add_argument("--env", help="only episodes of this environment id")
    setp.add_argument("--state", action="append", help="only episodes in this state, e.g. STATE_COMPLETED")
    setp.add_argument("--tag", help="only episodes with this tag (on the episode or a step)")
    setp.add_argument("--episodes", action="store_true", help="also list every queued episode's progress")
    setp.set_defaults(func=queue_set)
    show = sub.add_parser("show", parents=store, help="the queue's settings and progress")
    show.add_argument("--study", required=True, metavar="ID")
    show.add_argument("--episodes", action="store_true", help="also list every queued episode's progress")
    show.set_defaults(func=queue_show)

    agree = subparsers.add_parser(
        "agreement",
        parents=store,
        help="inter-annotator agreement of a study's queue (alpha, kappa, majority, disagreements)",
        description="Agreement on step tags over the episodes two or more annotators marked done: "
        "Krippendorff's alpha (nominal) overall and per label, Cohen's kappa per pair, agreement with the "
        "majority per annotator, and the steps they disagree on (with any adjudicated consensus).",
    )
    agree.add_argument("--study", required=True, metavar="ID")
    agree.add_argument("--json", action="store_true", help="print JSON instead of tables")
    agree.set_defaults(func=agreement_command)

    adj = subparsers.add_parser(
        "adjudicate",
        parents=store,
        help="set the consensus labels of a disputed step (they become the step's tags)",
    )
    adj.add_argument("--episode", required=True, metavar="ID")
    adj.add_argument("--step", required=True, type=int)
    adj.add_argument("--label", action="append", default=[], help="a consensus label (repeat; none: no tag)")
    adj.set_defaults(func=adjudicate_command)

"""`stepmark queue`, `stepmark agreement` and `stepmark adjudicate`: team annotation from the command line."""

from __future__ import annotations

import argparse
import json

from pipelines.episodes.publish import open_store
from pipelines.store import queue as work_queue
from pipelines.store.agreement import AgreementReport, adjudicate, study_agreement
from pipelines.store.field_agreement import FieldAgreement, study_field_agreement
from pipelines.store.field_review import SourceReview, study_field_review
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
        more = ", those without a consensus first" if len(report.disagreements) < report.disputed else ""
        lines += ["", f"disagreements ({report.disagreements_title}{more}):", _table(rows)]
    return "\n".join(lines)


def format_field_agreement(fields: list[FieldAgreement]) -> str:
    """The per-field agreement of a study's own fields as text (the Quality page shows the same table)."""
    if not fields:
        return ""
    rows = [["FIELD", "KIND", "METRIC", "UNITS", "ALPHA", "SIMILARITY", "DISPUTED"]]
    rows += [[f.field, f.kind, f.metric, str(f.units), _fmt(f.alpha), _fmt(f.similarity), str(f.disputed_count)]
             for f in fields]  # fmt: skip
    lines = ["", "study fields:", _table(rows)]
    disputes = [["FIELD", "EPISODE", "STEP", "VALUES", "CONSENSUS"]]
    for f in fields:
        for d in f.disputed:
            step = "episode" if d.step < 0 else str(d.step) if d.end == d.step else f"{d.step}-{d.end}"
            values = "; ".join(f"{u}: {json.dumps(v, ensure_ascii=False)}" for u, v in d.values.items())
            consensus = "" if d.consensus is None else json.dumps(d.consensus, ensure_ascii=False)
            disputes.append([f.field, d.episode_id, step, values, consensus])
    if len(disputes) > 1:
        lines += ["", f"disputed field values ({len(disputes) - 1}):", _table(disputes)]
    lines += [f"{f.field}: {len(f.disputed)} of {f.disputed_count} disputed places listed, those without a "
              f"consensus first ({f.disputed_open} without one)" for f in fields if len(f.disputed) < f.disputed_count]  # fmt: skip
    return "\n".join(lines)


def format_field_review(reviews: list[SourceReview]) -> str:
    """What people did with each source's suggestions per field, and alpha with the source as one more
    annotator (pipelines/store/field_review.py; the Quality page shows the same table)."""
    if not reviews:
        return ""
    rows = [["FIELD", "SOURCE", "SUGGESTIONS", "UNSEEN", "ACCEPTED", "EDITED", "REPLACED", "ALPHA WITH SOURCE",
             "UNITS", "ALPHA PEOPLE", "PEOPLE UNITS"]]  # fmt: skip
    rows += [[r.field, r.source, str(r.suggestions), str(r.unseen), str(r.accepted), str(r.edited), str(r.replaced),
              _fmt(r.alpha), str(r.units), _fmt(r.alpha_people), str(r.people_units)] for r in reviews]  # fmt: skip
    return "\n".join(["", "review of suggestions (per field and source):", _table(rows)])


def agreement_command(args: argparse.Namespace) -> int:
    with open_store(args.store, args.data) as repo:
        report = study_agreement(repo, args.study)
        fields = study_field_agreement(repo, args.study)
        reviews = study_field_review(repo, args.study)
    if args.json:
        print(json.dumps({**report.to_json(), "fields": [f.to_json() for f in fields],
                          "field_review": [r.to_json() for r in reviews]}, indent=2))  # fmt: skip
    else:
        print(format_agreement(report) + format_field_agreement(fields) + format_field_review(reviews))
    return 0


def adjudicate_command(args: argparse.Namespace) -> int:
    if args.field:
        return adjudicate_field_command(args)
    with open_store(args.store, args.data) as repo:
        chosen = adjudicate(repo, args.episode, args.step, args.label, args.user)
    print(
        f"episode {args.episode} step {args.step}: consensus {', '.join(chosen) or '(no tag)'} by {args.user}"
    )
    return 0


def adjudicate_field_command(args: argparse.Namespace) -> int:
    """`stepmark adjudicate --field NAME --value JSON`: the consensus value of a study field at a place."""
    from pipelines.errors import StepmarkError
    from pipelines.store import field_values

    try:
        value = json.loads(args.value) if args.value is not None else None
    except ValueError:
        raise StepmarkError(f"--value {args.value!r} is not JSON (a text value is quoted: '\"yes\"')") from None
    if value is None:
        raise StepmarkError("--field needs --value (JSON: \"yes\", 3, true, [\"a\", \"b\"])")
    with open_store(args.store, args.data) as repo:
        ref = repo.refs_of([args.episode]).get(args.episode)
        if ref is None:
            raise StepmarkError(f"episode {args.episode!r} not found")
        step = None if args.step < 0 else args.step
        chosen = field_values.adjudicate(repo, ref, args.field, args.user, value, step=step, end=args.end)
    print(f"episode {args.episode} step {args.step}: consensus {args.field} = {json.dumps(chosen)} by {args.user}")
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
    adj.add_argument("--field", help="a study field instead of labels: set its consensus value (--value)")
    adj.add_argument("--value", help="with --field: the consensus value as JSON, e.g. '\"yes\"', 3, true")
    adj.add_argument("--end", type=int, help="with --field on a segment field: the segment's last step")
    adj.set_defaults(func=adjudicate_command)

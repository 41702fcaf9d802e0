"""The annotator's side of team work: the work queue, agreement tables, adjudication and the quality plots.

Thin helpers over `pipelines.store.queue`, `pipelines.store.agreement` and `pipelines.report`, shaped for the
pages (episode keys as the other pages use them, pandas tables); every store change is made as `ops.user`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.orm import Session

from annotator.operations import ref_key, ref_of
from pipelines.report.store_stats import StoreStats, import_folders, store_stats
from pipelines.store import agreement, listing
from pipelines.store import queue as work_queue
from pipelines.store.agreement import AgreementReport
from pipelines.store.models import AdjudicationRow, AuditRow, QueueAssignmentRow, StudyQueueRow
from pipelines.store.queue import Assignment, QueueConfig, QueueProgress
from protos.rlds_creator import client_pb2

if TYPE_CHECKING:
    from pipelines.report.plots import PlotImage


def episode_keys(ops, episode_ids: Iterable[str]) -> dict[str, str]:
    """Episode id -> the key the Replay page opens (study/session/episode), for these episodes only."""
    return {i: ref_key(ref) for i, ref in ops.repo.refs_of(episode_ids).items()}


def progress(ops, study_id: str) -> QueueProgress:
    """The queue's totals (SQL aggregates)."""
    return work_queue.progress(ops.repo, study_id)


def progress_rows(ops, study_id: str, page: int, size: int) -> pd.DataFrame:
    """Page `page` (0-based) of the queued episodes' progress: one jump (OFFSET over the index) and one page."""
    cursor = work_queue.progress_cursor(ops.repo, study_id, page * size)
    rows = (
        [p for p, _ in work_queue.episode_progress(ops.repo, study_id, cursor, size)]
        if page == 0 or cursor
        else []
    )
    keys = episode_keys(ops, (p.episode_id for p in rows))
    return pd.DataFrame(
        [
            {
                "episode": keys.get(p.episode_id, p.episode_id),
                "done": f"{p.done} of {p.overlap}",
                "complete": p.complete,
                "done by": ", ".join(p.done_by),
                "in progress by": ", ".join(p.open_by),
            }
            for p in rows
        ],
        columns=["episode", "done", "complete", "done by", "in progress by"],
    )


def my_open(ops, study_id: str) -> Assignment | None:
    return next((a for a in work_queue.assignments(ops.repo, study_id, ops.user) if a.state == "open"), None)


def queued_studies(ops, study_ids: Sequence[str]) -> set[str]:
    """The studies among `study_ids` whose creator set up a work queue. The store treats a study without one
    as "overlap 1 over every episode"; the pages hand out episodes only from a queue someone asked for."""
    if not study_ids:
        return set()
    with Session(ops.repo.engine) as s:
        query = sa.select(StudyQueueRow.study_id).where(StudyQueueRow.study_id.in_(list(study_ids)))
        return set(s.scalars(query))


def last_study(ops, study_ids: Sequence[str], *, holding: bool = False) -> str | None:
    """The study this annotator last worked on, from the store (not this browser's memory), among `study_ids`:
    with `holding`, first the study where they hold an open queue slot (newest taken); then the study of their
    newest change in the audit log (tags, labels, queue, adjudication)."""
    wanted = set(study_ids)
    with Session(ops.repo.engine) as s:
        if holding:
            held = s.scalars(
                sa.select(QueueAssignmentRow.study_id)
                .where(QueueAssignmentRow.user == ops.user, QueueAssignmentRow.state == work_queue.OPEN)
                .order_by(QueueAssignmentRow.assigned_time.desc(), QueueAssignmentRow.id.desc())
            ).all()
            for study_id in held:
                if study_id in wanted:
                    return study_id
        # The newest entries first, on the (user, id) index; a few hundred are enough to find a study.
        recent = s.scalars(
            sa.select(AuditRow.study_id)
            .where(AuditRow.user == ops.user, AuditRow.study_id.is_not(None))
            .order_by(AuditRow.id.desc())
            .limit(500)
        )
        return next((study_id for study_id in recent if study_id in wanted), None)


def default_study(ops, study_ids: Sequence[str], *, holding: bool = False) -> str | None:
    """Where a page opens: the study last worked on, else the first study with a work queue, else the first."""
    if not study_ids:
        return None
    last = last_study(ops, study_ids, holding=holding)
    if last is not None:
        return last
    queued = queued_studies(ops, study_ids)
    return next((i for i in study_ids if i in queued), study_ids[0])


def activity(ops, study_id: str) -> tuple:
    """A cheap fingerprint of what the Quality page and the queue numbers show: it changes when an annotator
    takes, finishes or gives back an episode, or a step is adjudicated (the page then draws itself again)."""
    with Session(ops.repo.engine) as s:
        queue = s.execute(
            sa.select(sa.func.count(), sa.func.max(QueueAssignmentRow.id), sa.func.max(QueueAssignmentRow.done_time))
            .where(QueueAssignmentRow.study_id == study_id)
        ).one()
        adjudicated = s.execute(  # from the adjudications, each one's episode by key (listing.in_study): a join
            sa.select(sa.func.count(), sa.func.max(AdjudicationRow.id))  # let SQLite walk a 1M-episode study
            .where(listing.in_study(AdjudicationRow.episode_id, study_id))  # for them on every rerun (0.2-0.4 s)
        ).one()
        queued = s.get(StudyQueueRow, study_id)
        setting = None if queued is None else (queued.overlap, queued.environment_id, queued.tag, str(queued.states))
    return (tuple(queue), tuple(adjudicated), setting)


def take_next(ops, study_id: str) -> str | None:
    """Take (or resume) this user's next queued episode; its Replay key, or None when nothing is left (or the
    study has no work queue: nobody asked for its episodes to be handed out)."""
    if study_id not in queued_studies(ops, [study_id]):
        return None
    assignment = work_queue.next_episode(ops.repo, study_id, ops.user)
    if assignment is None:
        return None
    episode = ops.repo.get_episode(client_pb2.EpisodeRef(episode_id=assignment.episode_id))
    return ref_key(ref_of(episode))


def mark_done(ops, episode_id: str) -> Assignment:
    return work_queue.mark_done(ops.repo, episode_id, ops.user)


def release(ops, episode_id: str) -> bool:
    return work_queue.release(ops.repo, episode_id, ops.user)


def set_queue(ops, config: QueueConfig) -> QueueConfig:
    return work_queue.set_queue(ops.repo, config, ops.user)


@dataclass(frozen=True)
class Quality:
    """The Quality page's summaries of a study and their plots, drawn."""

    stats: StoreStats
    plots: tuple[PlotImage, ...]


def quality(ops, study_id: str) -> Quality:
    """The study's summaries and plots for the Quality page, made once per change of this study (a change in
    another study keeps them), not on every rerun (4.4 s at a million episodes with 2,000 of them labelled
    twice, plus 2-3 s to draw the plots). Shared between sessions: read it, do not change it."""

    def make() -> Quality:
        from pipelines.report.plots import images, store_plots  # matplotlib: only for the pages that draw

        stats = store_stats(ops.repo, study_id)
        plots = images(store_plots(stats))
        # What the page shows of the per-episode returns and lengths is in the plots: a remembered summary
        # keeps no array as long as the study (16 bytes an environment episode).
        return Quality(replace(stats, returns={}, lengths={}), plots)

    return ops.repo.remembered(("quality", study_id), make, study_id=study_id)


def adjudicate(ops, episode_id: str, step: int, labels: list[str]) -> list[str]:
    return agreement.adjudicate(ops.repo, episode_id, step, labels, ops.user)


REPLAY_PATH = "replay"  # the Replay page's URL path (views/replay.py), relative to the annotator's root


def replay_link(key: str, step: int) -> str:
    """The Replay page's deep link to one step of an episode (it reads `episode` and `step` from the query)."""
    return f"{REPLAY_PATH}?{urlencode({'episode': key, 'step': str(step)})}"


def agreement_tables(report: AgreementReport, keys: dict[str, str] | None = None) -> dict[str, pd.DataFrame]:
    """The tables `stepmark agreement` prints, as data frames; with `keys` (episode id -> Replay key: the
    `episode_keys` of the disputed episodes) each disputed step links to it in Replay."""
    keys = keys or {}
    return {
        "labels": pd.DataFrame(
            [{"label": a.label, "alpha": a.alpha, "marks": a.marks} for a in report.labels],
            columns=["label", "alpha", "marks"],
        ),
        "pairs": pd.DataFrame(
            [
                {
                    "label": p.label,
                    "annotator A": p.user_a,
                    "annotator B": p.user_b,
                    "kappa": p.kappa,
                    "steps": p.units,
                }
                for p in report.pairs
            ],
            columns=["label", "annotator A", "annotator B", "kappa", "steps"],
        ),  # fmt: skip
        "annotators": pd.DataFrame(
            [
                {"annotator": a.user, "steps": a.units, "with majority": a.with_majority,
                 "no majority": a.units - a.with_majority, "agree": a.agree, "rate": a.rate}
                for a in report.per_annotator
            ],
            columns=["annotator", "steps", "with majority", "no majority", "agree", "rate"],
        ),  # fmt: skip
        "disagreements": pd.DataFrame(
            [
                {
                    "episode": d.episode_id,
                    "step": d.step_index,
                    "labels": "; ".join(f"{u}: {', '.join(v) or '-'}" for u, v in d.labels.items()),
                    "majority": "" if d.majority is None else ", ".join(d.majority) or "-",
                    "consensus": "" if d.consensus is None else ", ".join(d.consensus) or "-",
                    "open": replay_link(keys[d.episode_id], d.step_index) if d.episode_id in keys else None,
                }
                for d in report.disagreements
            ],
            columns=["episode", "step", "labels", "majority", "consensus", "open"],
        ),
    }


def ui_folders(ops, study_id: str) -> list[str]:
    """convert-ui output folders the study's UI episodes were imported from (for the UI plots)."""
    return import_folders(ops.repo, study_id, ops.data_dir)


def my_labels(ops, episode_id: str) -> dict[int, list[str]]:
    return work_queue.user_labels(ops.repo, episode_id, ops.user)


def set_label(ops, episode_id: str, step: int, label: str, present: bool) -> bool:
    return work_queue.set_step_label(ops.repo, episode_id, ops.user, step, label, present)


def done_and_next(ops, study_id: str, episode_id: str) -> str | None:
    """Finish the episode labelled apart from the shared tags (no snapshot) and take the next one."""
    work_queue.mark_done(ops.repo, episode_id, ops.user, snapshot=False)
    return take_next(ops, study_id)

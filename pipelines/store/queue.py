"""A study's work queue: which episodes are queued, how many annotators label each, who takes which next.

Functions take the `Repository` (its engine) and keep their rows to themselves, like the repository does.
The guarantee that matters: however many annotators press "Next" at once, no episode gets more annotators
than the queue's overlap. Each annotator takes a numbered slot (0..overlap-1) and the database's unique
(episode, slot) constraint refuses a second taker of the same slot; the insert is INSERT ... ON CONFLICT DO
NOTHING, so a loser moves on to the next free slot or episode instead of failing. On SQLite a write
transaction also holds the database's write lock (BEGIN IMMEDIATE).

An annotator's own labels (`annotator_step_labels`, written with `set_step_label`) are the input of
agreement, kept apart from the shared step tags so that overlapping annotators answer independently. For
teams that tag on the Replay page instead, `mark_done` can record the episode's step tags at that moment as
the annotator's labels (what they signed off).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines.store import listing
from pipelines.store.database import WRITE
from pipelines.store.errors import NotFound, PermissionDenied, StoreError
from pipelines.store.listing import Cursor, EpisodeQuery, Sort
from pipelines.store.mapping import utc
from pipelines.store.models import (
    AnnotatorStepLabelRow,
    AuditRow,
    EpisodeRow,
    QueueAssignmentRow,
    StepTagRow,
    StudyQueueRow,
    StudyRow,
)
from pipelines.store.repository import Repository
from pipelines.store.tags import insert_new
from protos.rlds_creator import study_pb2

MAX_OVERLAP = 20
OPEN, DONE = "open", "done"
# Audit actions of the queue (the audit log's action column is free text; these join audit.AuditAction's).
QUEUE_SET, QUEUE_TAKE, QUEUE_DONE, QUEUE_RELEASE = "queue.set", "queue.take", "queue.done", "queue.release"


@dataclass(frozen=True)
class QueueConfig:
    """Overlap and filter of a study's queue; a filter left None matches every episode."""

    study_id: str
    overlap: int = 1
    environment_id: str | None = None
    states: tuple[str, ...] | None = None  # Episode.State names, e.g. ("STATE_COMPLETED",)
    tag: str | None = None  # an episode tag or a tag on any step


@dataclass(frozen=True)
class Assignment:
    study_id: str
    episode_id: str
    user: str
    slot: int
    state: str
    assigned_time: datetime
    done_time: datetime | None


@dataclass(frozen=True)
class EpisodeProgress:
    episode_id: str
    done_by: tuple[str, ...]
    open_by: tuple[str, ...]
    overlap: int

    @property
    def done(self) -> int:
        return len(self.done_by)

    @property
    def complete(self) -> bool:
        return self.done >= self.overlap


@dataclass(frozen=True)
class QueueProgress:
    """A queue's totals, counted by aggregate queries (per-episode rows: `episode_progress`)."""

    config: QueueConfig
    episodes: int  # queued episodes
    slots_done: int  # done labellings, at most `overlap` per episode
    episodes_complete: int  # episodes with `overlap` done labellings

    @property
    def slots_total(self) -> int:
        return self.config.overlap * self.episodes


def _now() -> datetime:
    return datetime.now(UTC)


@contextmanager
def _write(repo: Repository) -> Iterator[Session]:
    """One write transaction (BEGIN IMMEDIATE on SQLite), as the repository's own writes."""
    with Session(repo.engine.execution_options(**{WRITE: True}), expire_on_commit=False) as s, s.begin():
        yield s


@contextmanager
def _read(repo: Repository) -> Iterator[Session]:
    with Session(repo.engine, expire_on_commit=False) as s, s.begin():
        yield s


def _audit(s: Session, user: str, action: str, **fields: Any) -> None:
    s.add(AuditRow(time=_now(), user=user, action=action, **fields))


def _study(s: Session, study_id: str) -> StudyRow:
    row = s.get(StudyRow, study_id)
    if row is None:
        raise NotFound(f"study {study_id!r} not found")
    return row


def _config(s: Session, study_id: str) -> QueueConfig:
    _study(s, study_id)
    row = s.get(StudyQueueRow, study_id)
    if row is None:
        return QueueConfig(study_id)
    return QueueConfig(
        study_id, row.overlap, row.environment_id, tuple(row.states) if row.states else None, row.tag
    )


def _assignment(row: QueueAssignmentRow) -> Assignment:
    return Assignment(
        row.study_id,
        row.episode_id,
        row.user,
        row.slot,
        row.state,
        utc(row.assigned_time),
        utc(row.done_time),
    )


def get_queue(repo: Repository, study_id: str) -> QueueConfig:
    with _read(repo) as s:
        return _config(s, study_id)


def set_queue(repo: Repository, config: QueueConfig, user: str) -> QueueConfig:
    """Set a study's overlap and filter (the study's creator only, as for other study settings)."""
    if not 1 <= config.overlap <= MAX_OVERLAP:
        raise StoreError(f"overlap must be between 1 and {MAX_OVERLAP}, not {config.overlap}")
    for state in config.states or ():
        if state not in study_pb2.Episode.State.keys():
            raise StoreError(f"unknown episode state {state!r} in the queue filter")
    with _write(repo) as s:
        study = _study(s, config.study_id)
        if study.creator != user:
            raise PermissionDenied(f"only the study's creator ({study.creator}) may change its queue")
        before = _config(s, config.study_id)
        values = {
            "overlap": config.overlap,
            "environment_id": config.environment_id or None,
            "states": list(config.states) if config.states else None,
            "tag": config.tag or None,
            "updated_by": user,
            "updated_time": _now(),
        }
        row = s.get(StudyQueueRow, config.study_id)
        if row is None:
            s.add(StudyQueueRow(study_id=config.study_id, **values))
        else:
            for key, value in values.items():
                setattr(row, key, value)
        _audit(s, user, QUEUE_SET, study_id=config.study_id, before=_as_json(before), after=_as_json(config))
        s.flush()
        return _config(s, config.study_id)


def _as_json(config: QueueConfig) -> dict[str, Any]:
    return {
        "overlap": config.overlap,
        "environment_id": config.environment_id,
        "states": list(config.states) if config.states else None,
        "tag": config.tag,
    }


def queue_query(config: QueueConfig) -> EpisodeQuery:
    """The queue's filter as an episode list's (valid sessions only)."""
    states = tuple(study_pb2.Episode.State.Value(n) for n in config.states) if config.states else None
    return EpisodeQuery(
        study_id=config.study_id, env_id=config.environment_id or None, states=states, tag=config.tag or None
    )


def next_episode(repo: Repository, study_id: str, user: str) -> Assignment | None:
    """The episode `user` should label next: their open one if any, else a new slot on the queued episode
    nearest its overlap that they have not taken yet (earliest registered first); None when nothing is left.
    """
    with _write(repo) as s:
        config = _config(s, study_id)
        mine = s.scalars(
            sa.select(QueueAssignmentRow)
            .where(
                QueueAssignmentRow.study_id == study_id,
                QueueAssignmentRow.user == user,
                QueueAssignmentRow.state == OPEN,
            )
            .order_by(QueueAssignmentRow.assigned_time, QueueAssignmentRow.id)
            .limit(1)
        ).first()
        if mine is not None:
            return _assignment(mine)
        # The candidates are read in two statements (started, then untouched episodes), each seeing what was
        # committed when it began: an episode another annotator takes between the two is in neither, so a pass
        # that finds nothing is read once more before saying nothing is left (on PostgreSQL four annotators
        # pressing Next at once left episodes short of their overlap).
        for _ in range(2):
            for episode_id in _candidates(s, config, user):
                assignment = _take(s, config, episode_id, user)
                if assignment is not None:
                    return assignment
        return None


def _candidates(s: Session, config: QueueConfig, user: str, batch: int = 50) -> Iterator[str]:
    """Queued episodes `user` has no slot on, nearest their overlap first: those others started (read from the
    assignments, which grow with the work done), then untouched ones in registration order, `batch` at a
    time from the index, so taking an episode never reads the whole study."""
    q = queue_query(config)
    mine = sa.exists().where(QueueAssignmentRow.episode_id == EpisodeRow.id, QueueAssignmentRow.user == user)
    taken = (
        sa.select(QueueAssignmentRow.episode_id, sa.func.count().label("n"))
        .where(QueueAssignmentRow.study_id == config.study_id)
        .group_by(QueueAssignmentRow.episode_id)
        .subquery()
    )
    started = listing.where(
        sa.select(EpisodeRow.id).join(taken, taken.c.episode_id == EpisodeRow.id), q
    ).where(taken.c.n < config.overlap, ~mine)
    yield from s.scalars(
        started.order_by(taken.c.n.desc(), EpisodeRow.registered_time, EpisodeRow.id)
    ).all()
    untouched = listing.where(sa.select(EpisodeRow.id, EpisodeRow.registered_time), q).where(
        ~sa.exists().where(QueueAssignmentRow.episode_id == EpisodeRow.id)
    )
    after: tuple | None = None
    while True:
        query = untouched
        if after is not None:
            query = query.where(sa.tuple_(EpisodeRow.registered_time, EpisodeRow.id) > after)
        rows = s.execute(query.order_by(EpisodeRow.registered_time, EpisodeRow.id).limit(batch)).all()
        if not rows:
            return
        yield from (episode_id for episode_id, _ in rows)
        after = (rows[-1][1], rows[-1][0])


def _take(s: Session, config: QueueConfig, episode_id: str, user: str) -> Assignment | None:
    """Insert `user` into a free slot of the episode; None if every slot is taken (or they hold one)."""
    for _ in range(config.overlap):
        used = set(
            s.scalars(sa.select(QueueAssignmentRow.slot).where(QueueAssignmentRow.episode_id == episode_id))
        )
        free = next((slot for slot in range(config.overlap) if slot not in used), None)
        if free is None:
            return None
        now = _now()
        values = {
            "study_id": config.study_id,
            "episode_id": episode_id,
            "user": user,
            "slot": free,
            "state": OPEN,
            "assigned_time": now,
            "done_time": None,
        }
        if insert_new(s, QueueAssignmentRow, [values], QueueAssignmentRow.id):
            _audit(s, user, QUEUE_TAKE, study_id=config.study_id, episode_id=episode_id, after={"slot": free})
            return Assignment(config.study_id, episode_id, user, free, OPEN, now, None)
        mine = s.scalars(
            sa.select(QueueAssignmentRow.id).where(
                QueueAssignmentRow.episode_id == episode_id, QueueAssignmentRow.user == user
            )
        ).first()
        if mine is not None:  # the same user took it from another window meanwhile
            return None
    return None


def _my_row(s: Session, episode_id: str, user: str) -> QueueAssignmentRow:
    row = s.scalars(
        sa.select(QueueAssignmentRow)
        .where(QueueAssignmentRow.episode_id == episode_id, QueueAssignmentRow.user == user)
        .with_for_update()
    ).first()
    if row is None:
        raise NotFound(f"episode {episode_id!r} is not in {user}'s queue (press Next to take an episode)")
    return row


def mark_done(repo: Repository, episode_id: str, user: str, *, snapshot: bool = True) -> Assignment:
    """`user` is done with the episode. Idempotent. With `snapshot` and no labels of their own yet, the
    episode's step tags are recorded as theirs (see the module doc); a page where annotators label apart from
    the shared tags (`set_step_label`) passes snapshot=False, so that "no label" stays their answer."""
    with _write(repo) as s:
        row = _my_row(s, episode_id, user)
        if row.state == DONE:
            return _assignment(row)
        own = s.scalar(
            sa.select(sa.func.count())
            .select_from(AnnotatorStepLabelRow)
            .where(AnnotatorStepLabelRow.episode_id == episode_id, AnnotatorStepLabelRow.user == user)
        )
        if snapshot and not own:
            now = _now()
            for step_index, label in s.execute(
                sa.select(StepTagRow.step_index, StepTagRow.label).where(StepTagRow.episode_id == episode_id)
            ).all():
                s.add(
                    AnnotatorStepLabelRow(
                        episode_id=episode_id, user=user, step_index=step_index, label=label, created_time=now
                    )
                )
        row.state, row.done_time = DONE, _now()
        _audit(s, user, QUEUE_DONE, study_id=row.study_id, episode_id=episode_id, after={"slot": row.slot})
        s.flush()
        return _assignment(row)


def release(repo: Repository, episode_id: str, user: str) -> bool:
    """Give back an open slot (skip an episode); False if `user` holds none. Done slots stay done."""
    with _write(repo) as s:
        row = s.scalars(
            sa.select(QueueAssignmentRow).where(
                QueueAssignmentRow.episode_id == episode_id,
                QueueAssignmentRow.user == user,
                QueueAssignmentRow.state == OPEN,
            )
        ).first()
        if row is None:
            return False
        _audit(
            s, user, QUEUE_RELEASE, study_id=row.study_id, episode_id=episode_id, before={"slot": row.slot}
        )
        s.delete(row)
        return True


def assignments(repo: Repository, study_id: str, user: str | None = None) -> list[Assignment]:
    query = sa.select(QueueAssignmentRow).where(QueueAssignmentRow.study_id == study_id)
    if user is not None:
        query = query.where(QueueAssignmentRow.user == user)
    with _read(repo) as s:
        rows = s.scalars(query.order_by(QueueAssignmentRow.id)).all()
        return [_assignment(r) for r in rows]


def progress(repo: Repository, study_id: str) -> QueueProgress:
    """The queue's totals: queued episodes (one count), done labellings and complete episodes (one aggregate
    over the done assignments, which grow with the annotators' work, not with the study)."""
    with _read(repo) as s:
        config = _config(s, study_id)
        q = queue_query(config)
        count = repo.count_episodes(q)  # the Episodes page counted the same study: remembered (listing.Counts)
        done = (
            sa.select(QueueAssignmentRow.episode_id, sa.func.count().label("n"))
            .where(QueueAssignmentRow.study_id == study_id, QueueAssignmentRow.state == DONE)
            .group_by(QueueAssignmentRow.episode_id)
            .subquery()
        )
        overlap = config.overlap
        queued = listing.where(sa.select(EpisodeRow.id).where(EpisodeRow.id == done.c.episode_id), q).exists()
        totals = sa.select(  # per done episode, one look-up of the episode by key: the work, not the study
            sa.func.sum(sa.case((done.c.n > overlap, overlap), else_=done.c.n)),
            sa.func.sum(sa.case((done.c.n >= overlap, 1), else_=0)),
        ).where(queued)
        slots_done, complete = s.execute(totals).one()
    return QueueProgress(config, count, int(slots_done or 0), int(complete or 0))


def episode_progress(
    repo: Repository, study_id: str, after: Cursor | None = None, limit: int = 50
) -> list[tuple[EpisodeProgress, Cursor]]:
    """One page of the queued episodes (registration order, keyset after `after`): who is done, who holds
    an open slot."""
    with _read(repo) as s:
        config = _config(s, study_id)
        ids = listing.page_ids(s, queue_query(config), Sort(), after, limit)
        rows = s.execute(
            sa.select(QueueAssignmentRow.episode_id, QueueAssignmentRow.user, QueueAssignmentRow.state)
            .where(QueueAssignmentRow.episode_id.in_([i for i, _ in ids]))
            .order_by(QueueAssignmentRow.slot)
        ).all()
    done: dict[str, list[str]] = {i: [] for i, _ in ids}
    open_: dict[str, list[str]] = {i: [] for i, _ in ids}
    for episode_id, user, state in rows:
        (done if state == DONE else open_)[episode_id].append(user)
    return [
        (EpisodeProgress(i, tuple(done[i]), tuple(open_[i]), config.overlap), cursor) for i, cursor in ids
    ]


def progress_cursor(repo: Repository, study_id: str, offset: int) -> Cursor | None:
    """The cursor that starts the queued episodes' page beginning at row `offset` (jump to a page)."""
    with _read(repo) as s:
        return listing.cursor_at(s, queue_query(_config(s, study_id)), Sort(), offset)


def iter_episode_progress(repo: Repository, study_id: str, batch: int = 500) -> Iterator[EpisodeProgress]:
    """Every queued episode's progress, a page at a time (`queue show --episodes`)."""
    after: Cursor | None = None
    while page := episode_progress(repo, study_id, after, batch):
        yield from (p for p, _ in page)
        after = page[-1][1]


def set_step_label(
    repo: Repository, episode_id: str, user: str, step_index: int, label: str, present: bool = True
) -> bool:
    """Add (or remove) one of `user`'s own labels on a step; True if something changed."""
    label = label.strip()
    if not label or len(label) > 256:
        raise StoreError("a label must be 1 to 256 characters long")
    with _write(repo) as s:
        if s.get(EpisodeRow, episode_id) is None:
            raise NotFound(f"episode {episode_id!r} not found")
        if present:
            values = {
                "episode_id": episode_id,
                "user": user,
                "step_index": step_index,
                "label": label,
                "created_time": _now(),
            }
            return bool(insert_new(s, AnnotatorStepLabelRow, [values], AnnotatorStepLabelRow.id))
        result = s.execute(
            sa.delete(AnnotatorStepLabelRow).where(
                AnnotatorStepLabelRow.episode_id == episode_id,
                AnnotatorStepLabelRow.user == user,
                AnnotatorStepLabelRow.step_index == step_index,
                AnnotatorStepLabelRow.label == label,
            )
        )
        return result.rowcount > 0  # type: ignore[attr-defined]


LABEL_BATCH = 500  # episodes whose done assignments and labels `done_labels` reads at a time


@dataclass(frozen=True)
class EpisodeLabels:
    """Labels of one episode by every annotator who is done with it: user -> step -> labels."""

    episode_id: str
    num_steps: int
    by_user: dict[str, dict[int, frozenset[str]]]
    registered: datetime | None = None  # the episode's registration time (the order lists show)


def done_labels(repo: Repository, study_id: str, least: int = 1) -> Iterator[EpisodeLabels]:
    """Per episode with at least `least` done annotators, each done annotator's own labels, in episode id
    order, read LABEL_BATCH episodes at a time (keyset over the done assignments' index, then their rows by
    id), so a study's labels never sit in memory whole."""
    after = ""
    while True:
        with _read(repo) as s:
            ids = list(
                s.scalars(
                    sa.select(QueueAssignmentRow.episode_id)
                    .where(
                        QueueAssignmentRow.study_id == study_id,
                        QueueAssignmentRow.state == DONE,
                        QueueAssignmentRow.episode_id > after,
                    )
                    .group_by(QueueAssignmentRow.episode_id)
                    .having(sa.func.count() >= least)
                    .order_by(QueueAssignmentRow.episode_id)
                    .limit(LABEL_BATCH)
                )
            )
            if not ids:
                return
            rows = s.connection()  # plain rows: the ORM's per-row work is most of the time here
            done = rows.execute(
                sa.select(
                    QueueAssignmentRow.episode_id,
                    QueueAssignmentRow.user,
                    EpisodeRow.num_steps,
                    EpisodeRow.kind,
                    EpisodeRow.registered_time,
                )
                .join(EpisodeRow, EpisodeRow.id == QueueAssignmentRow.episode_id)
                .where(
                    QueueAssignmentRow.episode_id.in_(ids),
                    QueueAssignmentRow.study_id == study_id,
                    QueueAssignmentRow.state == DONE,
                )
                .order_by(QueueAssignmentRow.episode_id, QueueAssignmentRow.user)
            ).all()
            labels = rows.execute(
                sa.select(
                    AnnotatorStepLabelRow.episode_id,
                    AnnotatorStepLabelRow.user,
                    AnnotatorStepLabelRow.step_index,
                    AnnotatorStepLabelRow.label,
                ).where(AnnotatorStepLabelRow.episode_id.in_(ids))
            ).all()
        sets: dict[tuple[str, str], dict[int, set[str]]] = {}
        for episode_id, user, step, label in labels:
            sets.setdefault((episode_id, user), {}).setdefault(step, set()).add(label)
        out: dict[str, EpisodeLabels] = {}
        for episode_id, user, num_steps, kind, registered in done:
            entry = out.get(episode_id)
            if entry is None:
                steps = _step_count(num_steps, kind)
                entry = out[episode_id] = EpisodeLabels(episode_id, steps, {}, utc(registered))
            entry.by_user[user] = {k: frozenset(v) for k, v in sets.get((episode_id, user), {}).items()}
        yield from out.values()
        after = ids[-1]


def _step_count(num_steps: int | None, kind: str | None) -> int:
    """Taggable steps: UI episodes have num_steps, environment episodes one more (the final observation)."""
    n = num_steps or 0
    return n if kind == "ui" else n + 1


def user_labels(repo: Repository, episode_id: str, user: str) -> dict[int, list[str]]:
    """`user`'s own labels on an episode: step -> labels (sorted), steps without one left out."""
    with _read(repo) as s:
        rows = s.execute(
            sa.select(AnnotatorStepLabelRow.step_index, AnnotatorStepLabelRow.label)
            .where(AnnotatorStepLabelRow.episode_id == episode_id, AnnotatorStepLabelRow.user == user)
            .order_by(AnnotatorStepLabelRow.step_index, AnnotatorStepLabelRow.label)
        ).all()
    out: dict[int, list[str]] = {}
    for step, label in rows:
        out.setdefault(step, []).append(label)
    return out

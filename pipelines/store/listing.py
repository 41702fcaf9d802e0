"""Episode lists that page in SQL: filtered, sorted, keyset-paged queries and counts by aggregate.

Nothing here loads a whole study: a page is at most `MAX_PAGE` rows, a count is one `count(*)`, and the ids of
a selection come in batches of `BATCH` (`iter_episode_ids`). Each filter and each sort the Episodes page offers
has an index (migration 7, `migrations.py`): (study_id, column, id) for the sorts, (label, episode_id) on the tag
tables, a partial index on the episodes that have notes.

Keyset paging: a page is the rows after the last row of the previous one in (sort column, id) order, a range
condition on the index, so page 1,000 costs what page 1 costs. NULLs of a nullable sort column come after
every value in both directions, in id order (the same on SQLite and PostgreSQL, whose own NULL orders differ),
so a page is read from at most two index ranges. Jumping to page N finds its first row with OFFSET over the
same order (`cursor_at`), once.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa
import sqlalchemy.orm
from sqlalchemy.orm import Session

from pipelines.store.errors import StoreError
from pipelines.store.models import (
    AuditRow,
    EpisodeRow,
    EpisodeTagRow,
    EvaluationResultRow,
    EvaluationRunRow,
    SessionRow,
    StepTagRow,
)
from protos.rlds_creator import study_pb2

_INVALID = study_pb2.Session.STATE_INVALID
MAX_PAGE = 500
BATCH = MAX_PAGE

#: Sort keys the listing offers -> column (the Episodes table's columns that live in the episode row).
SORTS: dict[str, Any] = {
    "registered": EpisodeRow.registered_time,
    "user": EpisodeRow.user,
    "environment": EpisodeRow.environment_id,
    "status": EpisodeRow.state,
    "steps": EpisodeRow.num_steps,
    "total reward": EpisodeRow.total_reward,
}
_NOT_NULL = {"registered", "user", "status"}


@dataclass(frozen=True)
class EpisodeQuery:
    """Filters of an episode list; None means any. `tag` matches an episode tag or a tag on any step;
    `notes_query` is a case-insensitive substring of the notes."""

    study_id: str | None = None
    session_id: str | None = None
    env_id: str | None = None
    states: tuple[int, ...] | None = None
    tag: str | None = None
    user: str | None = None
    notes_query: str | None = None
    include_invalid_sessions: bool = False
    #: The name of one of the study's `stepmark evaluate` runs: only episodes with a step it failed.
    failed_in_run: str | None = None


@dataclass(frozen=True)
class Cursor:
    """Where a page starts: after the row with this sort value and id (`value` None: a NULL value)."""

    value: Any
    id: str


@dataclass(frozen=True)
class Sort:
    key: str = "registered"
    descending: bool = False

    def __post_init__(self) -> None:
        if self.key not in SORTS:
            raise StoreError(f"cannot sort episodes by {self.key!r}; choose one of {', '.join(SORTS)}")


def valid_sessions_only(query: sa.Select) -> sa.Select:
    """Leave out episodes of INVALID sessions (a correlated NOT EXISTS: evaluated only on the rows read)."""
    return query.where(_not_in_invalid_session())


def _not_in_invalid_session() -> sa.ColumnElement[bool]:
    invalid = sa.exists().where(SessionRow.id == EpisodeRow.session_id, SessionRow.state == _INVALID)
    return sa.or_(EpisodeRow.session_id.is_(None), ~invalid)


def in_study(episode_id: Any, study_id: str) -> sa.ColumnElement[bool]:
    """Rows of a table keyed by episode (tags, labels, adjudications) whose episode is in the study: a look-up
    of each row's episode by key, so the work follows the (few) rows of that table, never the study's episodes."""
    return sa.select(EpisodeRow.study_id).where(EpisodeRow.id == episode_id).scalar_subquery() == study_id


def _tagged(tag: str) -> sa.ColumnElement[bool]:
    """Episodes with the tag on the episode or any step, found through the tag tables' label indexes."""
    ids = sa.union(
        sa.select(EpisodeTagRow.episode_id).where(EpisodeTagRow.label == tag),
        sa.select(StepTagRow.episode_id).where(StepTagRow.label == tag),
    )
    return EpisodeRow.id.in_(ids)


def _annotated(study_id: str | None, text: str) -> sa.Select:
    """Ids of the episodes (of the study) whose notes contain `text`, case-insensitively, read from the partial
    index of episodes that have notes. The study is a plain condition there, which no index serves: SQLite's
    sampled statistics rate every (study_id, ...) index alike, and it walked a million-episode study (614 ms)
    for its 5,000 annotated ones."""
    notes = sa.orm.aliased(EpisodeRow, name="annotated")
    query = sa.select(notes.id).where(
        notes.notes.is_not(None), sa.func.lower(notes.notes).contains(text.lower(), autoescape=True)
    )
    if study_id is not None:
        query = query.where(sa.func.coalesce(notes.study_id, notes.study_id) == study_id)
    return query


def failed_in_run(study_id: str | None, name: str) -> sa.ColumnElement[bool]:
    """Episodes with at least one failed step in the study's run `name`, read from the run's index
    (`run_id`, `matched`, `episode_id`); no study: no episode."""
    run_id = (
        sa.select(EvaluationRunRow.id)
        .where(EvaluationRunRow.study_id == (study_id or ""), EvaluationRunRow.name == name)
        .scalar_subquery()
    )
    failed = sa.select(EvaluationResultRow.episode_id).where(
        EvaluationResultRow.run_id == run_id, EvaluationResultRow.matched.is_(False)
    )
    return EpisodeRow.id.in_(failed)


def where(query: sa.Select, q: EpisodeQuery, *, sessions: bool = True) -> sa.Select:
    """`query` (over episodes) filtered by `q`; `sessions=False` leaves the INVALID-session rule to the caller."""
    if q.study_id is not None and not q.notes_query:
        query = query.where(EpisodeRow.study_id == q.study_id)
    if q.session_id is not None:
        query = query.where(EpisodeRow.session_id == q.session_id)
    if q.env_id is not None:
        query = query.where(EpisodeRow.environment_id == q.env_id)
    if q.states is not None:
        query = query.where(EpisodeRow.state.in_(list(q.states)))
    if q.user is not None:
        query = query.where(EpisodeRow.user == q.user)
    if q.tag is not None:
        query = query.where(_tagged(q.tag))
    if q.notes_query:
        query = query.where(EpisodeRow.id.in_(_annotated(q.study_id, q.notes_query)))
    if q.failed_in_run is not None:
        query = query.where(failed_in_run(q.study_id, q.failed_in_run))

    if sessions and not q.include_invalid_sessions:
        query = valid_sessions_only(query)
    return query


def invalid_sessions(s: Session, study_id: str | None, limit: int | None = None) -> list[str]:
    """Ids of the INVALID sessions (of one study); few, whatever the number of episodes (at most `limit`)."""
    query = sa.select(SessionRow.id).where(SessionRow.state == _INVALID)
    if study_id is not None:
        query = query.where(SessionRow.study_id == study_id)
    return list(s.scalars(query.limit(limit)))


#: INVALID sessions a `NOT IN (...)` lists at most: one bound parameter each, and drivers cap them (SQLite's
#: SQLITE_MAX_VARIABLE_NUMBER: 999 on old builds, 32,766 by default since 3.32; psycopg: 65,535).
NOT_IN_BOUND = 500


def valid_only(s: Session, q: EpisodeQuery) -> sa.ColumnElement[bool] | None:
    """The INVALID-session rule as a plain condition on the episode row: None when the study has no INVALID
    session (the common case) or the query includes them; else `session_id NOT IN (...)` over those few
    sessions. Unlike the correlated NOT EXISTS, it leaves the sort's index usable for an OFFSET: PostgreSQL
    planned the jump to the middle of a 1M-episode study as a scan and an external sort (1.8 s) around it.

    Past `NOT_IN_BOUND` INVALID sessions (those of every study when the query names none, as an export by
    `--tag` or `--state` does) the list would outgrow the driver's parameter limit and fail the query: the
    correlated NOT EXISTS then, slower for an OFFSET but one parameter whatever the number of sessions."""
    if q.include_invalid_sessions:
        return None
    invalid = invalid_sessions(s, q.study_id, limit=NOT_IN_BOUND + 1)
    if not invalid:
        return None
    if len(invalid) > NOT_IN_BOUND:
        return _not_in_invalid_session()
    return sa.or_(EpisodeRow.session_id.is_(None), EpisodeRow.session_id.not_in(invalid))


def _listed(s: Session, query: sa.Select, q: EpisodeQuery) -> sa.Select:
    """`query` filtered by `q`, INVALID sessions left out by `valid_only`."""
    query = where(query, q, sessions=False)
    rule = valid_only(s, q)
    return query if rule is None else query.where(rule)


def count(s: Session, q: EpisodeQuery) -> int:
    """How many episodes match: one count over the filter's index, minus those of INVALID sessions (counted
    through the session index, 500 invalid sessions at a time), so no row is checked against its session."""
    total = s.scalar(where(sa.select(sa.func.count()).select_from(EpisodeRow), q, sessions=False)) or 0
    if q.include_invalid_sessions:
        return int(total)
    invalid = invalid_sessions(s, q.study_id)
    for start in range(0, len(invalid), 500):
        query = sa.select(sa.func.count()).select_from(EpisodeRow)
        query = where(query.where(EpisodeRow.session_id.in_(invalid[start : start + 500])), q, sessions=False)
        total -= s.scalar(query) or 0
    return int(total)


_MISSING = object()


class UntilChanged:
    """Values computed from the store, remembered until it changes: every change that can move a count or a
    summary (an episode registered or deleted, a state, a tag, notes, a session made INVALID, an episode taken or
    done in a queue, a field value, an adjudication, grounding, an undo) writes an audit entry in its own
    transaction, with the id of the study it changes, so the newest id of the study's entries (one probe of the
    index (study_id, id), migration 11) says whether a value of that study still holds; a value not of one study
    (a count over every study) goes by the whole log's newest id. A quiet study's summaries then outlive the
    clicks in the other studies. An annotator's own step labels in a queue are not audited (an entry would show
    them in the episode's history, which the Label page keeps from the other annotators): they enter a summary
    only with the annotator's `queue.done`, which is audited; one changed after that is seen within `max_age`.
    A rerun that only pages or sorts then counts nothing (a COUNT of a 1M-episode study is 0.15-0.26 s on
    PostgreSQL, and the Episodes page with its queue panel made two), and the Quality page's summaries (4.4 s at
    1M) are made once per change of their study, not per click. Values stay exact. Rows changed outside
    stepmark (no audit entry) are seen after a restart.
    Thread-safe; `size` values at the most, least recently used dropped first. A value is shared: callers must
    not change it.

    On PostgreSQL audit ids come from a sequence and may commit out of order (id 10 committing after id 11 was
    read), so a remembered value is also given up after `max_age` seconds: it may lag by that much, never for
    good."""

    def __init__(self, size: int = 256, max_age: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._cache: OrderedDict[Any, tuple[int | None, float, Any]] = OrderedDict()
        self._computing: dict[Any, threading.Lock] = {}  # key -> held while one thread computes it
        self._size = size
        self._max_age = max_age
        self._clock = clock

    def get(self, s: Session, key: Any, compute: Callable[[], Any], study_id: str | None = None) -> Any:
        """The value remembered under `key`, or `compute()` (remembered under the current mark of the study it
        is made of, or of the store when None, read first in `s`: the value is at least this new). A key
        always names the same study, so its marks compare."""
        return self.get_marked(mark(s, study_id), key, compute)

    def get_marked(self, current: int | None, key: Any, compute: Callable[[], Any]) -> Any:
        """As `get`, the mark read by the caller. One thread computes a missing value while the others asking
        for the same key wait for it (a summary of seconds is not made once per open page)."""
        with self._lock:
            value = self._fresh(key, current)
            if value is not _MISSING:
                return value
            key_lock = self._computing.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                value = self._fresh(key, current)  # made by another thread while this one waited
            if value is _MISSING:
                started = self._clock()  # its age counts from before the mark could move on
                value = compute()
                with self._lock:
                    self._cache[key] = (current, started, value)
                    self._cache.move_to_end(key)
                    while len(self._cache) > self._size:
                        self._cache.popitem(last=False)
            with self._lock:
                self._computing.pop(key, None)
        return value

    def _fresh(self, key: Any, current: int | None) -> Any:
        hit = self._cache.get(key)
        if hit is None or hit[0] != current or self._clock() - hit[1] >= self._max_age:
            return _MISSING
        self._cache.move_to_end(key)
        return hit[2]


def mark(s: Session, study_id: str | None = None) -> int | None:
    """A change mark: the newest audit id of the study's entries (None before its first), or of the whole log
    when `study_id` is None. Either is one probe of an index: the study's the last entry of its range of
    (study_id, id) (migration 11), the store's the primary key's last."""
    if study_id is None:
        return s.scalar(sa.select(sa.func.max(AuditRow.id)))
    query = sa.select(AuditRow.id).where(AuditRow.study_id == study_id).order_by(AuditRow.id.desc()).limit(1)
    return s.scalar(query)


class Counts(UntilChanged):
    """Counts of episode lists (`UntilChanged`, keyed by the query): a study's lists by the study's mark, so a
    change elsewhere does not make them counted again."""

    def count(self, s: Session, q: EpisodeQuery) -> int:
        return int(self.get(s, q, lambda: count(s, q), q.study_id))


def _ordered(query: sa.Select, column: Any, descending: bool) -> sa.Select:
    if descending:
        return query.order_by(column.desc(), EpisodeRow.id.desc())
    return query.order_by(column, EpisodeRow.id)


def _after(column: Any, cursor: Cursor, descending: bool) -> sa.ColumnElement[bool]:
    pair = sa.tuple_(column, EpisodeRow.id)
    return pair < (cursor.value, cursor.id) if descending else pair > (cursor.value, cursor.id)


def page_ids(
    s: Session, q: EpisodeQuery, sort: Sort, after: Cursor | None, limit: int
) -> list[tuple[str, Cursor]]:
    """Up to `limit` episode ids after `after`, each with its own cursor (the next page starts after the
    last). Values first, in the sort's direction; NULLs last, by id."""
    if not 1 <= limit <= MAX_PAGE:
        raise StoreError(f"a page holds 1 to {MAX_PAGE} episodes, not {limit}")
    column = SORTS[sort.key]
    base = _listed(s, sa.select(EpisodeRow.id, column), q)
    out: list[tuple[str, Cursor]] = []
    if after is None or after.value is not None:
        values = base if sort.key in _NOT_NULL else base.where(column.is_not(None))
        if after is not None:
            values = values.where(_after(column, after, sort.descending))
        for episode_id, value in s.execute(_ordered(values, column, sort.descending).limit(limit)):
            out.append((episode_id, Cursor(value, episode_id)))
    if len(out) < limit and sort.key not in _NOT_NULL:
        nulls = base.where(column.is_(None))
        if after is not None and after.value is None:
            nulls = nulls.where(EpisodeRow.id > after.id)
        for episode_id, _ in s.execute(nulls.order_by(EpisodeRow.id).limit(limit - len(out))):
            out.append((episode_id, Cursor(None, episode_id)))
    return out


def cursor_at(s: Session, q: EpisodeQuery, sort: Sort, offset: int) -> Cursor | None:
    """The cursor that starts the page whose first row is row `offset` (0-based) of the order; None for 0 or
    past the end. One OFFSET over the index (jumping to a page), not a walk of every page before it."""
    if offset <= 0:
        return None
    column = SORTS[sort.key]
    base = _listed(s, sa.select(EpisodeRow.id, column), q)
    if sort.key in _NOT_NULL:
        row = s.execute(_ordered(base, column, sort.descending).offset(offset - 1).limit(1)).first()
        return None if row is None else Cursor(row[1], row[0])
    valued = base.where(column.is_not(None))
    row = s.execute(_ordered(valued, column, sort.descending).offset(offset - 1).limit(1)).first()
    if row is not None:
        return Cursor(row[1], row[0])
    n_valued = s.scalar(sa.select(sa.func.count()).select_from(valued.subquery())) or 0
    row = s.execute(
        base.where(column.is_(None)).order_by(EpisodeRow.id).offset(offset - 1 - n_valued).limit(1)
    ).first()
    return None if row is None else Cursor(None, row[0])


def grouped(s: Session, q: EpisodeQuery, column: Any) -> dict[Any, int]:
    """Matching episodes per value of `column` (GROUP BY), INVALID sessions' episodes subtracted as in `count`."""
    every, invalid = _grouped(s, q, (column,), ())
    return {key[0]: n for key, (n,) in _less(every, invalid).items()}


def margins(s: Session, q: EpisodeQuery, *columns: Any) -> tuple[list[dict[Any, int]], tuple[int, int]]:
    """(matching episodes per value of each of `columns`, INVALID sessions' episodes subtracted as in `count`;
    episodes and steps of every matching episode, those included), for the report. PostgreSQL: one GROUP BY
    over all the columns, one pass over the study (a count per column read an index each: 1.2-1.9 s warm for a
    1M-episode study, against 0.25-0.5 s). SQLite: a GROUP BY per column over its index and one count, as its
    index scans are quick (0.4 s) and one pass reading every row is not (2.7 s)."""
    steps = sa.func.coalesce(sa.func.sum(EpisodeRow.num_steps), 0)
    if s.get_bind().dialect.name != "postgresql":
        whole = s.execute(where(sa.select(sa.func.count(), steps).select_from(EpisodeRow), q, sessions=False)).one()
        return [grouped(s, q, column) for column in columns], (int(whole[0]), int(whole[1]))
    every, invalid = _grouped(s, replace(q, include_invalid_sessions=False), columns, (steps,))
    out: list[dict[Any, int]] = [{} for _ in columns]
    for key, (n, _) in (every if q.include_invalid_sessions else _less(every, invalid)).items():
        for counted, value in zip(out, key, strict=True):
            counted[value] = counted.get(value, 0) + n
    return out, (sum(n for n, _ in every.values()), sum(k for _, k in every.values()))


def _grouped(
    s: Session, q: EpisodeQuery, columns: tuple[Any, ...], sums: tuple[Any, ...]
) -> tuple[dict[tuple, tuple[int, ...]], dict[tuple, tuple[int, ...]]]:
    """(count and `sums` per combination of `columns` over every matching episode, the same over those of the
    study's INVALID sessions, found through the session index 500 sessions at a time; empty when the query
    includes them)."""

    def run(query: sa.Select) -> Iterator[tuple[tuple, tuple[int, ...]]]:
        n = len(columns)
        for row in s.execute(query.group_by(*columns)):
            yield tuple(row[:n]), tuple(int(x or 0) for x in row[n:])

    select = sa.select(*columns, sa.func.count(), *sums).select_from(EpisodeRow)
    every = dict(run(where(select, q, sessions=False)))
    invalid: dict[tuple, tuple[int, ...]] = {}
    if q.include_invalid_sessions:
        return every, invalid
    ids = invalid_sessions(s, q.study_id)
    for start in range(0, len(ids), 500):
        part = where(select.where(EpisodeRow.session_id.in_(ids[start : start + 500])), q, sessions=False)
        for key, values in run(part):
            invalid[key] = tuple(a + b for a, b in zip(invalid.get(key, (0,) * len(values)), values, strict=True))
    return every, invalid


def _less(every: dict[tuple, tuple[int, ...]], invalid: dict[tuple, tuple[int, ...]]) -> dict[tuple, tuple[int, ...]]:
    """`every` with `invalid` taken away, groups left with no episode dropped."""
    out = {key: tuple(a - b for a, b in zip(values, invalid.get(key, (0,) * len(values)), strict=True))
           for key, values in every.items()}  # fmt: skip
    return {key: values for key, values in out.items() if values[0]}


def states(s: Session, q: EpisodeQuery) -> dict[int, int]:
    """Matching episodes per state (one GROUP BY)."""
    return {int(state): n for state, n in grouped(s, q, EpisodeRow.state).items()}


def search_ids(s: Session, text: str, study_id: str | None, limit: int) -> list[str]:
    """Up to `limit` ids of a picker (Replay, Export): the newest episodes (of the study) when `text` is empty,
    else those whose id starts with `text` (a range of the primary key) and then those whose notes contain it
    (the partial index of annotated episodes). Bounded whatever the study's size; INVALID sessions left out."""
    if not 1 <= limit <= MAX_PAGE:
        raise StoreError(f"a picker shows 1 to {MAX_PAGE} episodes, not {limit}")
    text = text.strip()
    q = EpisodeQuery(study_id=study_id)
    if not text:
        return [i for i, _ in page_ids(s, q, Sort("registered", True), None, limit)]
    if s.get_bind().dialect.name == "sqlite":  # binary collation: a prefix is a range of the primary key
        starts = sa.and_(EpisodeRow.id >= text, EpisodeRow.id < text + "\U0010ffff")
    else:  # a database collation (en_US: "-" and "_" ignored at first level) makes that range miss matches
        starts = EpisodeRow.id.startswith(text, autoescape=True)
    prefix = where(sa.select(EpisodeRow.id), q).where(starts)
    found = list(s.scalars(prefix.order_by(EpisodeRow.id).limit(limit)))
    if len(found) < limit:
        noted = where(sa.select(EpisodeRow.id), replace(q, notes_query=text))
        noted = noted.order_by(EpisodeRow.registered_time.desc(), EpisodeRow.id.desc()).limit(limit)
        found += [i for i in s.scalars(noted) if i not in found][: limit - len(found)]
    return found


@dataclass(frozen=True)
class TagCounts:
    """An episode's tags as the Episodes table counts them: on the episode, and on its steps."""

    episode: int = 0
    steps: int = 0  # step tags (a tag on each of 5 steps counts 5)
    tagged_steps: int = 0  # steps with at least one tag


def tag_counts(s: Session, episode_ids: list[str]) -> dict[str, TagCounts]:
    """Episode and step tags per episode of a page (two GROUP BYs over the tag tables' episode index): the
    counts only, so an episode with thousands of step tags costs what one with none does."""
    if len(episode_ids) > MAX_PAGE:
        raise StoreError(f"tags are counted for a page of at most {MAX_PAGE} episodes, not {len(episode_ids)}")
    if not episode_ids:
        return {}
    on_episode = dict(
        s.execute(
            sa.select(EpisodeTagRow.episode_id, sa.func.count())
            .where(EpisodeTagRow.episode_id.in_(episode_ids))
            .group_by(EpisodeTagRow.episode_id)
        ).all()
    )
    on_steps = {
        episode_id: (int(n), int(steps))
        for episode_id, n, steps in s.execute(
            sa.select(StepTagRow.episode_id, sa.func.count(), sa.func.count(sa.distinct(StepTagRow.step_index)))
            .where(StepTagRow.episode_id.in_(episode_ids))
            .group_by(StepTagRow.episode_id)
        )
    }
    return {
        i: TagCounts(int(on_episode.get(i, 0)), *on_steps.get(i, (0, 0)))
        for i in episode_ids
        if i in on_episode or i in on_steps
    }

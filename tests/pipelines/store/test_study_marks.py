"""Summaries and counts remembered per study (`listing.mark`, `Repository.remembered(..., study_id=)`), on a real
SQLite file and a real PostgreSQL database, over UI episodes imported from the real DroidBot run and Rico screens
in ../shared/fixtures: a change in one study keeps another study's remembered summary and counts (they are not
made again), a change in the study itself makes them again at once, for every kind of change the store writes;
each such change is audited with its study's id, and the study's mark is one probe of an index."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from pipelines import convert
from pipelines.report.store_stats import store_stats
from pipelines.store import Repository, agreement, listing, queue
from pipelines.store import field_values as fv
from pipelines.store import grounding as g
from pipelines.store.field_defs import parse_text
from pipelines.store.listing import EpisodeQuery
from pipelines.store.models import AuditRow
from pipelines.store.queue import QueueConfig
from pipelines.ui_import import import_records, import_ui
from protos.rlds_creator import study_pb2

ALICE, BOB = "alice@example.com", "bob@example.com"
FIELDS = """
fields:
  - {name: action_correct, scope: step, kind: choice, options: [yes, no, unsure]}
"""


@pytest.fixture(scope="module")
def converted(tmp_path_factory, fixtures_dir) -> tuple[Path, Path]:
    """convert-ui outputs of the DroidBot run (one episode) and of the Rico screens (more to import later)."""
    root = tmp_path_factory.mktemp("marks")
    outs = []
    for source in ("droidbot", "rico"):
        out = root / source
        assert convert.run([str(fixtures_dir / source), str(out), "--runner=FnApiRunner", "--quiet"]) in (0, None)
        outs.append(out)
    return outs[0], outs[1]


@dataclass
class Study:
    """One study of the test: the DroidBot episode imported by ALICE (its creator), a queue of overlap 2, a
    study field, and a step tag of BOB's."""

    id: str
    name: str
    ref: Any
    session_id: str
    more: Path  # a convert-ui output not imported yet
    kept: dict[str, Any] = field(default_factory=dict)  # what `prepare` made, for `change`


def _study(repo: Repository, converted: tuple[Path, Path], name: str) -> Study:
    spec = import_ui(repo, str(converted[0]), name, ALICE)
    (episode,) = repo.list_episodes(study_id=spec.id)
    ref = Repository.ref(episode)
    queue.set_queue(repo, QueueConfig(spec.id, overlap=2), ALICE)
    fv.define(repo, spec.id, parse_text(FIELDS, "fields.yaml"), ALICE)
    repo.add_step_tag(ref, 0, "crash", BOB)
    return Study(spec.id, name, ref, episode.session_id, converted[1])


def _undo_prepared(repo: Repository, st: Study) -> None:
    repo.add_step_tag(st.ref, 2, "undone", BOB)
    assert repo.undo_last(BOB, st.ref) is not None


def _take(repo: Repository, st: Study) -> None:
    st.kept["taken"] = queue.next_episode(repo, st.id, BOB)
    assert st.kept["taken"] is not None
    queue.set_step_label(repo, st.ref.episode_id, BOB, 1, "jump")


def _renamed(repo: Repository, st: Study) -> bool:
    spec = repo.get_study(st.id)
    spec.name = st.name + " (renamed)"
    return repo.save_study(spec, ALICE).name == spec.name


@dataclass(frozen=True)
class Kind:
    """A kind of change: `change` makes it in a study (after `prepare` there, before anything is remembered)."""

    name: str
    change: Callable[[Repository, Study], Any]
    prepare: Callable[[Repository, Study], Any] = lambda repo, st: None


REJECTED = study_pb2.Episode.STATE_REJECTED
KINDS = [
    Kind("episode tag", lambda repo, st: repo.add_episode_tag(st.ref, "late", BOB)),
    Kind("step tag", lambda repo, st: repo.add_step_tag(st.ref, 1, "late", BOB)),
    Kind("step tag removed", lambda repo, st: repo.remove_step_tag(st.ref, 0, "crash", BOB)),
    Kind("segment", lambda repo, st: repo.add_segment_tag(st.ref, 0, 2, "span", BOB)),
    Kind("notes", lambda repo, st: repo.set_notes(st.ref, "a late note", BOB)),
    Kind("state", lambda repo, st: repo.set_episode_state(st.ref, REJECTED, ALICE).state == REJECTED),
    Kind("undo", lambda repo, st: repo.undo_last(BOB, st.ref),
         lambda repo, st: repo.add_step_tag(st.ref, 2, "undone", BOB)),  # fmt: skip
    Kind("redo", lambda repo, st: repo.redo_last(BOB, st.ref), _undo_prepared),
    Kind("field value", lambda repo, st: fv.set_value(repo, st.ref, "action_correct", BOB, "yes", step=1)),
    Kind("field adjudication", lambda repo, st: fv.adjudicate(repo, st.ref, "action_correct", ALICE, "no", step=1)),
    Kind("field definitions", lambda repo, st: fv.define(repo, st.id, [], ALICE) == []),
    Kind("grounding", lambda repo, st: g.add(repo, st.ref, 0, g.BOX, BOB, box=[10, 20, 300, 400])),
    Kind("grounding removed", lambda repo, st: g.remove(repo, st.ref, st.kept["box"].id, BOB),
         lambda repo, st: st.kept.update(box=g.add(repo, st.ref, 0, g.BOX, BOB, box=[1, 2, 30, 40]))),  # fmt: skip
    Kind("queue taken", lambda repo, st: queue.next_episode(repo, st.id, BOB)),
    Kind("queue done", lambda repo, st: queue.mark_done(repo, st.ref.episode_id, BOB, snapshot=False), _take),
    Kind("queue released", lambda repo, st: queue.release(repo, st.ref.episode_id, BOB), _take),
    Kind("queue set", lambda repo, st: queue.set_queue(repo, QueueConfig(st.id, overlap=3), ALICE)),
    Kind("labels adjudicated", lambda repo, st: agreement.adjudicate(repo, st.ref.episode_id, 1, ["jump"], ALICE)),
    Kind("session invalid", lambda repo, st: repo.set_session_state(st.session_id, study_pb2.Session.STATE_INVALID)),
    Kind("episode deleted", lambda repo, st: repo.delete_episode(st.ref, ALICE)),
    Kind("import-ui", lambda repo, st: import_records(repo, str(st.more), st.name, ALICE).added),
    Kind("study renamed", _renamed),
]


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_a_study_summary_outlives_changes_in_other_studies_and_not_its_own(
    repo: Repository, converted: tuple[Path, Path], kind: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo._summaries._max_age = repo._counts._max_age = 3600.0  # only a change may make them again here
    a, b = _study(repo, converted, "A"), _study(repo, converted, "B")
    for st in (a, b):
        kind.prepare(repo, st)
    made: list[str] = []
    counted: list[str | None] = []
    real_count = listing.count
    monkeypatch.setattr(listing, "count", lambda s, q: counted.append(q.study_id) or real_count(s, q))

    def summary(st: Study) -> Any:
        return repo.remembered(("summary", st.id), lambda: made.append(st.id) or store_stats(repo, st.id),
                               study_id=st.id)  # fmt: skip

    def count(st: Study) -> int:  # a list the summary does not count itself
        before = len(counted)
        n = repo.count_episodes(EpisodeQuery(study_id=st.id, user=ALICE))
        return n if len(counted) == before else -1 - n  # negative: counted now, not remembered

    assert count(a) < 0 and count(a) >= 0 and count(b) < 0  # counted once, then remembered
    first = summary(a), summary(b)
    assert made == [a.id, b.id]

    def changed(st: Study) -> None:
        with repo._read() as s:
            newest = listing.mark(s)
        assert kind.change(repo, st)
        with repo._read() as s:  # what the change wrote names the study
            written = s.execute(sa.select(AuditRow.action, AuditRow.study_id).where(AuditRow.id > newest)).all()
        assert written and {study_id for _, study_id in written} == {st.id}, written

    changed(b)
    assert summary(a) is first[0] and made == [a.id, b.id]  # kept: nothing of A changed
    assert count(a) >= 0
    assert summary(b) is not first[1] and made == [a.id, b.id, b.id]  # B's own change: made again
    assert count(b) < 0

    changed(a)
    assert summary(a) is not first[0] and made[-1] == a.id and len(made) == 4
    assert count(a) < 0


def test_lists_over_every_study_follow_every_change(repo: Repository, converted: tuple[Path, Path]) -> None:
    """A count over every study (no study in the query) and a value remembered without a study go by the
    whole store's mark: a change in any study counts again."""
    repo._summaries._max_age = repo._counts._max_age = 3600.0
    a, b = _study(repo, converted, "A"), _study(repo, converted, "B")
    made: list[int] = []
    everything = EpisodeQuery(tag="late")
    assert repo.count_episodes(everything) == 0
    repo.remembered("all", lambda: made.append(1))
    repo.remembered("all", lambda: made.append(1))
    assert made == [1]
    repo.add_episode_tag(b.ref, "late", BOB)
    assert repo.count_episodes(everything) == 1
    repo.remembered("all", lambda: made.append(1))
    assert made == [1, 1]
    repo.add_episode_tag(a.ref, "late", BOB)
    assert repo.count_episodes(everything) == 2


def test_a_studys_mark_is_one_probe_of_the_study_index(repo: Repository, converted: tuple[Path, Path]) -> None:
    """The mark is read on every rerun of a page: the newest entry of the study's range of (study_id, id), read
    from the index backwards (no scan of the log, no sort), on both databases."""
    a, b = _study(repo, converted, "A"), _study(repo, converted, "B")
    with repo._read() as s:
        marks = listing.mark(s, a.id), listing.mark(s, b.id), listing.mark(s)
        query = sa.select(AuditRow.id).where(AuditRow.study_id == a.id).order_by(AuditRow.id.desc()).limit(1)
        assert marks[0] == s.scalar(query) and marks[1] == marks[2] > marks[0]
        assert listing.mark(s, "no such study") is None
    seen: list[tuple[str, Any]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, parameters))

    sa.event.listen(repo.engine, "before_cursor_execute", capture)
    try:
        with repo._read() as s:
            listing.mark(s, a.id)
    finally:
        sa.event.remove(repo.engine, "before_cursor_execute", capture)
    (statement, parameters), = seen
    postgres = repo.engine.dialect.name == "postgresql"
    with repo.engine.connect() as conn:
        cur = conn.connection.driver_connection.cursor()
        if postgres:  # a small log: make the planner show whether the index serves the probe at all
            cur.execute("SET enable_seqscan = off")
            cur.execute("SET enable_sort = off")
            cur.execute("SET enable_bitmapscan = off")
        cur.execute(("EXPLAIN " if postgres else "EXPLAIN QUERY PLAN ") + statement, parameters)
        plan = "\n".join(str(row[-1]) for row in cur.fetchall())
        cur.close()
    if postgres:
        assert "Index Only Scan Backward using ix_audit_log_study" in plan and "Sort" not in plan, plan
    else:
        assert "USING COVERING INDEX ix_audit_log_study (study_id=?)" in plan and "TEMP B-TREE" not in plan, plan

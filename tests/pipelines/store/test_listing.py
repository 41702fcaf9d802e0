"""Episode lists paged in SQL (`pipelines/store/listing.py`), on a real SQLite file and a real PostgreSQL
database: every sort walked page by page gives the whole order once, jumps land where the order says, counts
and filters agree with the full listing, and each page query is served by an index (no sort of the study)."""

from __future__ import annotations

import random

import pytest
import sqlalchemy as sa

from pipelines.store import Repository, StoreError
from pipelines.store.listing import SORTS, EpisodeQuery, Sort
from protos.rlds_creator import study_pb2
from tests.pipelines.store.conftest import env_episode, study_spec

Episode = study_pb2.Episode
STATES = (Episode.STATE_COMPLETED, Episode.STATE_REJECTED, Episode.STATE_ABANDONED)
USERS = ("alice@example.com", "bob@example.com", "carol@example.com")


@pytest.fixture
def listed(repo: Repository) -> tuple[Repository, str, list[Episode]]:
    """40 episodes in one study (varied user, environment, state, steps and reward, some without steps or
    reward), 5 in an INVALID session, 3 in another study; tags and notes on a few."""
    rng = random.Random(7)
    study = repo.create_study(study_spec(), "alice@example.com")
    other = repo.create_study(study_spec("Other"), "alice@example.com")
    sessions = {u: repo.create_session(study.id, u) for u in USERS}
    episodes = []
    for i in range(40):
        user = USERS[i % 3]
        e = env_episode(study.id, sessions[user], ("maze", "pong")[i % 2], num_steps=rng.randint(1, 9),
                        reward=float(rng.randint(0, 3)))  # fmt: skip
        e.state = STATES[i % 3]
        if i % 7 == 0:
            e.ClearField("num_steps")
        if i % 5 == 0:
            e.ClearField("total_reward")
        episodes.append(e)
    added = repo.add_episodes(episodes)
    bad = repo.create_session(study.id, "mallory@example.com")
    repo.add_episodes(env_episode(study.id, bad) for _ in range(5))
    repo.set_session_state(bad.id, study_pb2.Session.STATE_INVALID)
    other_session = repo.create_session(other.id, "alice@example.com")
    repo.add_episodes(env_episode(other.id, other_session) for _ in range(3))
    for e in added[:6]:
        repo.add_step_tag(Repository.ref(e), 0, "crash", "bob@example.com")
    repo.add_episode_tag(Repository.ref(added[10]), "crash", "bob@example.com")
    repo.set_notes(Repository.ref(added[3]), "Falls into the PIT", "alice@example.com")
    repo.set_notes(Repository.ref(added[4]), "100% wrong_way", "alice@example.com")
    return repo, study.id, repo.list_episodes(study_id=study.id)


def _value(e: Episode, key: str):
    return {
        "user": e.user.email,
        "environment": e.environment_id if e.environment_id else None,
        "status": e.state,
        "steps": e.num_steps if e.HasField("num_steps") else None,
        "total reward": e.total_reward if e.HasField("total_reward") else None,
    }[key]


def _expected(episodes: list[Episode], key: str, descending: bool) -> list[str]:
    """The order the listing promises: values in the sort's direction (ties by id, same direction), NULLs
    last by id. Registration order is the full listing's own order."""
    if key == "registered":
        ids = [e.id for e in episodes]
        return ids[::-1] if descending else ids
    valued = sorted((e for e in episodes if _value(e, key) is not None),
                    key=lambda e: (_value(e, key), e.id), reverse=descending)  # fmt: skip
    nulls = sorted(e.id for e in episodes if _value(e, key) is None)
    return [e.id for e in valued] + nulls


def _walk(repo: Repository, q: EpisodeQuery, sort: Sort, size: int) -> list[str]:
    ids, after = [], None
    while page := repo.page_episodes(q, sort, after, size):
        assert len(page) <= size
        ids += [e.id for e, _ in page]
        after = page[-1][1]
    return ids


@pytest.mark.parametrize("descending", [False, True])
def test_every_sort_pages_through_the_whole_order_once(listed, descending: bool) -> None:
    repo, study_id, episodes = listed
    q = EpisodeQuery(study_id=study_id)
    assert repo.count_episodes(q) == len(episodes) == 40
    for key in SORTS:
        sort = Sort(key, descending)
        expected = _expected(episodes, key, descending)
        assert _walk(repo, q, sort, 7) == expected, key
        # jump to a page: its first row is the order's row at that offset
        for offset in (0, 7, 21, 35, 39):
            cursor = repo.episode_cursor(q, sort, offset)
            first = repo.page_episodes(q, sort, cursor, 7)
            assert [e.id for e, _ in first] == expected[offset : offset + 7], (key, offset)
        assert repo.episode_cursor(q, sort, 40) is not None
        assert repo.page_episodes(q, sort, repo.episode_cursor(q, sort, 40), 7) == []


def test_filters_and_counts_agree_with_the_full_listing(listed) -> None:
    repo, study_id, _ = listed
    cases = [
        {},
        {"env_id": "pong"},
        {"states": (Episode.STATE_REJECTED,)},
        {"states": (Episode.STATE_REJECTED, Episode.STATE_ABANDONED), "env_id": "maze"},
        {"tag": "crash"},
        {"user": "bob@example.com"},
        {"notes_query": "into the pit"},
        {"notes_query": "100%"},  # LIKE wildcards are matched literally
        {"notes_query": "_"},
        {"include_invalid_sessions": True},
        {"tag": "crash", "user": "alice@example.com", "states": (Episode.STATE_COMPLETED,)},
    ]
    for case in cases:
        expected = [e.id for e in repo.list_episodes(study_id=study_id, **case)]
        q = EpisodeQuery(study_id=study_id, **case)
        assert repo.count_episodes(q) == len(expected), case
        assert _walk(repo, q, Sort(), 4) == expected, case
        assert [i for batch in repo.iter_episode_ids(q, batch=3) for i in batch] == expected, case
    assert repo.count_episodes(EpisodeQuery(study_id=study_id, tag="crash")) == 7
    assert repo.count_episodes(EpisodeQuery(study_id=study_id, include_invalid_sessions=True)) == 45
    assert repo.count_episodes(EpisodeQuery()) == 43  # every study, invalid sessions left out
    states = repo.episode_states(EpisodeQuery(study_id=study_id))
    assert sum(states.values()) == 40 and states[Episode.STATE_REJECTED] == 13


def test_a_page_carries_its_episodes_tags(listed) -> None:
    repo, study_id, episodes = listed
    page = repo.page_episodes(EpisodeQuery(study_id=study_id, tag="crash"), Sort(), None, 50)
    assert len(page) == 7
    tagged = {e.id: e for e, _ in page}
    assert tagged[episodes[10].id].tags[0].label == "crash"
    assert [t.label for t in tagged[episodes[0].id].step_metadata[0].tags] == ["crash"]


def test_bad_sorts_and_page_sizes_are_refused(listed) -> None:
    repo, study_id, _ = listed
    with pytest.raises(StoreError, match="cannot sort episodes by 'kind'"):
        Sort("kind")
    with pytest.raises(StoreError, match="a page holds 1 to 500 episodes, not 0"):
        repo.page_episodes(EpisodeQuery(study_id=study_id), Sort(), None, 0)


def _plans(repo: Repository, run) -> list[str]:
    """The database's plan of every statement `run` executes."""
    seen: list[tuple[str, object]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, parameters))

    sa.event.listen(repo.engine, "before_cursor_execute", capture)
    try:
        run()
    finally:
        sa.event.remove(repo.engine, "before_cursor_execute", capture)
    plans = []
    with repo.engine.connect() as conn:
        raw = conn.connection.driver_connection
        postgres = repo.engine.dialect.name == "postgresql"
        cur = raw.cursor()
        if postgres:  # tiny tables: make the planner show whether an index can serve the order at all
            cur.execute("SET enable_seqscan = off")
            cur.execute("SET enable_sort = off")
            cur.execute("SET enable_bitmapscan = off")
        for statement, parameters in seen:
            cur.execute(("EXPLAIN " if postgres else "EXPLAIN QUERY PLAN ") + statement, parameters)
            plans.append("\n".join(str(row[-1]) for row in cur.fetchall()))
        cur.close()
    return plans


@pytest.mark.parametrize("key", list(SORTS))
def test_each_sort_of_a_study_reads_an_index_in_order(listed, key: str) -> None:
    repo, study_id, _ = listed
    q = EpisodeQuery(study_id=study_id)
    first = repo.page_episodes(q, Sort(key), None, 5)
    plans = _plans(repo, lambda: listing_ids(repo, q, Sort(key, True), first[-1][1]))
    order_plans = [p for p in plans if "episodes" in p]
    assert order_plans
    for plan in order_plans:
        assert "TEMP B-TREE FOR ORDER BY" not in plan and "Sort  (" not in plan and "Sort (" not in plan, plan
        assert "Seq Scan" not in plan and not any(
            line.strip().endswith("SCAN episodes") for line in plan.splitlines()
        ), plan
        assert "ix_episodes_" in plan or "Index" in plan, plan


def listing_ids(repo: Repository, q: EpisodeQuery, sort: Sort, after) -> None:  # noqa: ANN001
    from pipelines.store import listing

    with repo._read() as s:
        listing.page_ids(s, q, sort, after, 5)


def test_analyze_gives_the_planner_statistics_so_a_tag_starts_from_its_few_episodes(repo: Repository) -> None:
    """2,000 episodes in one study, 3 tagged: with statistics the tag filter's count starts from the tag's
    rows (episodes looked up by key); without them SQLite walked the whole study's index."""
    study = repo.create_study(study_spec(), "alice@example.com")
    session = repo.create_session(study.id, "bob@example.com")
    added = repo.add_episodes(env_episode(study.id, session) for _ in range(2000))
    for e in added[:3]:
        repo.add_step_tag(Repository.ref(e), 1, "rare", "bob@example.com")
    repo.analyze()
    q = EpisodeQuery(study_id=study.id, tag="rare")
    if repo.engine.dialect.name == "sqlite":
        with repo.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'episodes'").scalar()
        plans = _plans(repo, lambda: fresh_count(repo, q))
        assert not any("ix_episodes_study" in p for p in plans), plans
    else:
        with repo.engine.connect() as conn:
            analyzed = conn.exec_driver_sql(
                "SELECT last_analyze FROM pg_stat_user_tables WHERE relname = 'episodes'"
            ).scalar()
        assert analyzed is not None
    assert repo.count_episodes(q) == 3


def fresh_count(repo: Repository, q: EpisodeQuery) -> int:
    """The count's own queries (Repository.count_episodes remembers counts until the store changes)."""
    from pipelines.store import listing

    with repo._read() as s:
        return listing.count(s, q)


def test_the_notes_search_reads_the_annotated_episodes_only(listed) -> None:
    repo, study_id, _ = listed
    q = EpisodeQuery(study_id=study_id, notes_query="pit")
    assert repo.count_episodes(q) == 1
    if repo.engine.dialect.name != "sqlite":
        return  # PostgreSQL chooses by its own statistics
    plans = _plans(repo, lambda: (fresh_count(repo, q), repo.page_episodes(q, Sort("steps"), None, 5)))
    notes = [p for p in plans if "annotated" in p]
    assert len(notes) >= 3 and all("SCAN annotated USING INDEX ix_episodes_study_notes" in p for p in notes), plans
    for plan in plans:  # the episodes themselves by key (or through an invalid session), never a walk of the study
        assert "SCAN episodes" not in plan and "ix_episodes_study_" not in plan.replace("ix_episodes_study_notes", ""), plan


def _statements(repo: Repository, run) -> list[str]:
    seen: list[str] = []

    def capture(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        seen.append(" ".join(statement.split()))

    sa.event.listen(repo.engine, "before_cursor_execute", capture)
    try:
        run()
    finally:
        sa.event.remove(repo.engine, "before_cursor_execute", capture)
    return seen


def test_counts_are_remembered_until_the_store_changes(listed) -> None:
    """A rerun that pages or sorts counts nothing (one look-up of the audit log's newest id); every change that
    moves a count (episode added or deleted, state, tag, notes, a session made INVALID) is counted at once."""
    repo, study_id, episodes = listed
    q = EpisodeQuery(study_id=study_id)
    rejected = EpisodeQuery(study_id=study_id, states=(Episode.STATE_REJECTED,))
    tagged = EpisodeQuery(study_id=study_id, tag="late")
    noted = EpisodeQuery(study_id=study_id, notes_query="late note")
    assert [repo.count_episodes(x) for x in (q, rejected, tagged, noted)] == [40, 13, 0, 0]
    again = _statements(repo, lambda: [repo.count_episodes(x) for x in (q, rejected, tagged, noted)])
    assert not any("count(" in s.lower() for s in again), again
    ref = Repository.ref(episodes[0])
    session = repo.create_session(study_id, "alice@example.com")
    changes = [
        (lambda: repo.add_episodes([env_episode(study_id, session)]), (41, 13, 0, 0)),
        (lambda: repo.set_episode_state(ref, Episode.STATE_REJECTED, "alice@example.com"), (41, 14, 0, 0)),
        (lambda: repo.add_step_tag(ref, 1, "late", "bob@example.com"), (41, 14, 1, 0)),
        (lambda: repo.set_notes(ref, "a late note", "bob@example.com"), (41, 14, 1, 1)),
        (lambda: repo.delete_episode(ref, "alice@example.com"), (40, 13, 0, 0)),
        (lambda: repo.set_session_state(session.id, study_pb2.Session.STATE_INVALID), (39, 13, 0, 0)),
    ]
    for change, expected in changes:
        change()
        assert tuple(repo.count_episodes(x) for x in (q, rejected, tagged, noted)) == expected
        assert tuple(len(repo.list_episodes(study_id=study_id, **f)) for f in (
            {}, {"states": (Episode.STATE_REJECTED,)}, {"tag": "late"}, {"notes_query": "late note"},
        )) == expected  # fmt: skip


@pytest.mark.parametrize("key", list(SORTS))
def test_a_jump_reads_the_sorts_index_without_a_per_row_session_check(listed, key: str) -> None:
    """Jumping to page N is one OFFSET over the sort's index: INVALID sessions are left out by a plain condition
    (none at all when the study has no INVALID session), not a correlated NOT EXISTS, with which PostgreSQL
    planned the jump to the middle of a 1M-episode study as a scan and an external sort (1.8-3.2 s)."""
    repo, study_id, episodes = listed
    clean = repo.create_study(study_spec("Clean"), "alice@example.com")
    session = repo.create_session(clean.id, "alice@example.com")
    repo.add_episodes(env_episode(clean.id, session, num_steps=n) for n in range(12))
    repo.analyze()
    for q, where in ((EpisodeQuery(study_id=study_id), "invalid"), (EpisodeQuery(study_id=clean.id), "clean")):
        plans = _plans(repo, lambda q=q: repo.episode_cursor(q, Sort(key, True), 3))
        order_plans = [p for p in plans if "episodes" in p]
        assert order_plans, where
        for plan in order_plans:
            assert "SubPlan" not in plan and "CORRELATED" not in plan, (where, plan)
            assert "TEMP B-TREE FOR ORDER BY" not in plan and "Sort  (" not in plan, (where, plan)
            if where == "clean" and repo.engine.dialect.name == "postgresql":
                assert "Index Only Scan" in plan, plan
    # and the jump still leaves the INVALID session's episodes out
    expected = _expected(episodes, key, True)
    assert [e.id for e, _ in repo.page_episodes(
        EpisodeQuery(study_id=study_id), Sort(key, True), repo.episode_cursor(EpisodeQuery(study_id=study_id),
        Sort(key, True), 21), 7)] == expected[21:28]  # fmt: skip


def test_a_remembered_count_is_given_up_after_its_age_even_with_no_newer_audit_entry(listed) -> None:
    """On PostgreSQL an audit id may commit after a higher one was read: the count remembered under the higher
    mark would then stay stale for good. A row changed without a newer audit entry (here: deleted in SQL) is
    counted once the remembered count is `max_age` old; until then the remembered figure is served."""
    from pipelines.store import listing

    repo, study_id, episodes = listed
    now = [100.0]
    counts = listing.Counts(max_age=10.0, clock=lambda: now[0])
    q = EpisodeQuery(study_id=study_id)
    with repo._read() as s:
        assert counts.count(s, q) == 40
    with repo.engine.begin() as conn:  # no audit entry: the mark does not move
        conn.execute(sa.text("DELETE FROM episodes WHERE id = :id"), {"id": episodes[0].id})
    now[0] += 9.0
    with repo._read() as s:
        assert counts.count(s, q) == 40  # remembered (same mark, younger than max_age)
    now[0] += 2.0
    with repo._read() as s:
        assert counts.count(s, q) == 39


def test_a_missing_value_is_made_once_for_every_thread_that_asks_for_it() -> None:
    """Every open Quality page reruns when the team moves: the summary (seconds at 1M) is made by one of them
    and handed to the others, not once per page; a newer mark makes it again."""
    import threading

    from pipelines.store import listing

    memo = listing.UntilChanged()
    made, gate = [], threading.Event()

    def compute():
        made.append(1)
        gate.wait(5)
        return len(made)

    got: list[int] = []
    threads = [threading.Thread(target=lambda: got.append(memo.get_marked(7, "k", compute))) for _ in range(6)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(10)
    assert made == [1] and got == [1] * 6
    assert memo.get_marked(8, "k", compute) == 2  # the store changed


def test_more_invalid_sessions_than_the_driver_takes_parameters(repo: Repository) -> None:
    """An export by `--state` (no study) leaves out the INVALID sessions of every study: past the driver's limit
    of bound parameters a `NOT IN` over all of them failed the query (PostgreSQL through psycopg: 65,535;
    SQLite: 999 on old builds, lowered to that here on the real connection). Pages, jumps and counts stay exact."""
    import sqlite3

    from pipelines.store.models import SessionRow

    study = repo.create_study(study_spec(), "alice@example.com")
    good, bad = repo.create_session(study.id, "alice@example.com"), repo.create_session(study.id, "bob@example.com")
    kept = repo.add_episodes(env_episode(study.id, good) for _ in range(4))
    repo.add_episodes(env_episode(study.id, bad) for _ in range(2))
    repo.set_session_state(bad.id, study_pb2.Session.STATE_INVALID)
    postgres = repo.engine.dialect.name == "postgresql"
    many = 65_536 if postgres else 1_000
    rows = [{"id": f"invalid-{i:06d}", "study_id": study.id, "user": "mallory@example.com",
             "state": study_pb2.Session.STATE_INVALID} for i in range(many)]  # fmt: skip
    with repo.engine.begin() as conn:
        conn.execute(sa.insert(SessionRow), rows)
    if not postgres:

        def old_build_limit(dbapi_connection, _record) -> None:  # noqa: ANN001
            dbapi_connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)

        sa.event.listen(repo.engine, "connect", old_build_limit)
        repo.engine.dispose()  # every connection from now on has the lower limit
    expected = [e.id for e in kept]
    for q in (EpisodeQuery(states=(Episode.STATE_COMPLETED,)), EpisodeQuery(study_id=study.id)):
        assert [i for ids in repo.iter_episode_ids(q, 3) for i in ids] == expected
        cursor = repo.episode_cursor(q, Sort(), 2)
        assert [e.id for e, _ in repo.page_episodes(q, Sort(), cursor, 5)] == expected[2:]
        assert repo.count_episodes(q) == 4


def test_the_reports_margins_agree_with_the_full_listing(listed) -> None:
    """`margins` (one GROUP BY over every column on PostgreSQL, one per column on SQLite): episodes per state,
    user and environment as the listing has them, INVALID sessions left out unless asked; the episodes and
    steps of every matching episode, INVALID ones included."""
    from sqlalchemy.orm import Session

    from pipelines.store import listing
    from pipelines.store.models import EpisodeRow

    repo, study_id, episodes = listed
    every = repo.list_episodes(study_id=study_id, include_invalid_sessions=True)
    columns = (EpisodeRow.state, EpisodeRow.user, EpisodeRow.environment_id)
    for include in (False, True):
        shown = every if include else episodes
        with Session(repo.engine) as s:
            margins, whole = listing.margins(s, EpisodeQuery(study_id=study_id, include_invalid_sessions=include),
                                             *columns)  # fmt: skip
        expected = [{}, {}, {}]
        for e in shown:
            for counted, value in zip(expected, (e.state, e.user.email, e.environment_id), strict=True):
                counted[value] = counted.get(value, 0) + 1
        assert margins == expected, include
        assert whole == (45, sum(e.num_steps for e in every))
    assert len(episodes) == 40 and sum(margins[0].values()) == 45


def test_tag_counts_count_episode_and_step_tags_of_a_page(listed) -> None:
    repo, study_id, episodes = listed
    first = Repository.ref(episodes[0])
    repo.add_segment_tag(first, 2, 5, "slow", "alice@example.com")  # 4 more step tags on 4 more steps
    repo.add_step_tag(first, 2, "odd", "alice@example.com")  # a second tag on step 2
    repo.add_episode_tag(first, "hard", "alice@example.com")
    ids = [e.id for e in episodes[:12]]
    counts = repo.tag_counts(ids)
    expected = {}
    for e in repo.list_episodes(study_id=study_id):
        if e.id in ids:
            step = sum(len(m.tags) for m in e.step_metadata.values())
            steps = sum(1 for m in e.step_metadata.values() if len(m.tags))
            if len(e.tags) or step:
                expected[e.id] = (len(e.tags), step, steps)
    assert {i: (c.episode, c.steps, c.tagged_steps) for i, c in counts.items()} == expected
    assert counts[episodes[0].id] == type(counts[episodes[0].id])(episode=1, steps=6, tagged_steps=5)
    assert counts[episodes[10].id].episode == 1 and counts[episodes[10].id].steps == 0
    assert repo.tag_counts([]) == {}
    with pytest.raises(StoreError, match="at most"):
        repo.tag_counts([f"e{i}" for i in range(501)])

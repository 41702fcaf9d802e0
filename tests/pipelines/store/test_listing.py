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
        plans = _plans(repo, lambda: repo.count_episodes(q))
        assert not any("ix_episodes_study" in p for p in plans), plans
    else:
        with repo.engine.connect() as conn:
            analyzed = conn.exec_driver_sql(
                "SELECT last_analyze FROM pg_stat_user_tables WHERE relname = 'episodes'"
            ).scalar()
        assert analyzed is not None
    assert repo.count_episodes(q) == 3


def test_the_notes_search_reads_the_annotated_episodes_only(listed) -> None:
    repo, study_id, _ = listed
    q = EpisodeQuery(study_id=study_id, notes_query="pit")
    assert repo.count_episodes(q) == 1
    if repo.engine.dialect.name != "sqlite":
        return  # PostgreSQL chooses by its own statistics
    plans = _plans(repo, lambda: (repo.count_episodes(q), repo.page_episodes(q, Sort("steps"), None, 5)))
    notes = [p for p in plans if "annotated" in p]
    assert len(notes) >= 3 and all("SCAN annotated USING INDEX ix_episodes_study_notes" in p for p in notes), plans
    for plan in plans:  # the episodes themselves by key (or through an invalid session), never a walk of the study
        assert "SCAN episodes" not in plan and "ix_episodes_study_" not in plan.replace("ix_episodes_study_notes", ""), plan

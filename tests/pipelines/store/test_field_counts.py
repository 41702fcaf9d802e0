"""The field counts the database keeps as values are written (migration 10's triggers, read by
pipelines/store/field_counts.py and the agreement's shared places), held after every kind of write to a
GROUP BY over the values themselves, on SQLite and PostgreSQL: values set, replaced and cleared by
annotators, undone and redone, imported, moved by an UPDATE, episodes deleted (a cascade), writers at once,
and a version-9 store migrated with its values."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines.store import Repository, open_store
from pipelines.store import field_values as fv
from pipelines.store.database import WRITE, create_engine
from pipelines.store.field_agreement import shared_places
from pipelines.store.field_counts import FieldCounts, compact, study_field_counts
from pipelines.store.field_defs import parse_text
from pipelines.store.migrations import migrate
from tests.pipelines.store.conftest import env_episode, study_spec

LEAD, ANN, BEA, CID = "lead@example.com", "ann@example.com", "bea@example.com", "cid@example.com"
FIELDS = """fields:
  - {name: ok, scope: step, kind: choice, options: [yes, no]}
  - {name: done, scope: episode, kind: boolean}
  - {name: parts, scope: segment, kind: text}
"""
PLACES = "SELECT episode_id, field, step_index, end_index, COUNT(*) FROM field_values GROUP BY 1, 2, 3, 4"


def recount(engine: sa.Engine) -> dict[str, object]:
    """The places, episodes and per-study figures, recomputed from the values (the reference), and as the
    database keeps them."""
    with engine.connect() as conn:
        q = conn.exec_driver_sql
        study = "(SELECT study_id FROM episodes WHERE id = v.episode_id)"
        expected = {
            "places": sorted(q(f"SELECT v.episode_id, v.field, v.step_index, v.end_index, {study}, COUNT(*) "
                               "FROM field_values v GROUP BY 1, 2, 3, 4").all()),
            "episodes": sorted(q(f"SELECT v.episode_id, v.field, {study}, "
                                 "COUNT(DISTINCT v.step_index || ':' || v.end_index) FROM field_values v "
                                 "GROUP BY 1, 2").all()),
        }  # fmt: skip
        figures: dict[str, dict[str, tuple]] = {}
        for sid, field, n, users, timed, seconds, places, episodes in q(
            f"SELECT {study} AS s, v.field, COUNT(*), COUNT(DISTINCT v.\"user\"), COUNT(v.seconds), "
            "COALESCE(SUM(v.seconds), 0), COUNT(DISTINCT v.episode_id || ':' || v.step_index || ':' || v.end_index), "
            "COUNT(DISTINCT v.episode_id) FROM field_values v GROUP BY 1, 2"
        ):  # fmt: skip
            figures.setdefault(sid, {})[field] = (n, users, timed, round(seconds, 6), places, episodes)
        expected["figures"] = figures
        kept = {
            "places": sorted(q("SELECT episode_id, field, step_index, end_index, study_id, annotators "
                               "FROM field_places").all()),
            "episodes": sorted(q("SELECT episode_id, field, study_id, places FROM field_episodes").all()),
        }  # fmt: skip
        studies = [sid for (sid,) in q("SELECT id FROM studies")]
    with Session(engine) as s:
        kept["figures"] = {
            sid: {f: (c.values, c.annotators, c.timed, round(c.seconds, 6), c.places, c.episodes)
                  for f, c in study_field_counts(s, sid).items()}
            for sid in studies
        }  # fmt: skip
    kept["figures"] = {sid: f for sid, f in kept["figures"].items() if f}
    return {"expected": expected, "kept": kept}


def assert_counted(repo: Repository) -> None:
    """The figures equal the values' GROUP BY with the changes pending, and again once compacted (leaving
    no change and no row of zeros behind)."""
    both = recount(repo.engine)
    assert both["kept"] == both["expected"]
    with repo.engine.connect() as conn:
        studies = [sid for (sid,) in conn.exec_driver_sql("SELECT id FROM studies")]
    for sid in studies:
        compact(repo.engine, sid)
    assert recount(repo.engine)["kept"] == both["expected"]
    with repo.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM field_count_changes").scalar() == 0
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM field_counts WHERE entries = 0 AND places = 0 "
                                    "AND episodes = 0").scalar() == 0  # fmt: skip


@pytest.fixture
def study(repo: Repository) -> tuple[str, list]:
    """(study id, refs of 4 episodes of 6 steps) with FIELDS, and a second study with one valued episode."""
    study = repo.create_study(study_spec(), LEAD)
    session = repo.create_session(study.id, LEAD)
    refs = [repo.ref(repo.add_episode(env_episode(study.id, session, num_steps=6))) for _ in range(4)]
    fv.define(repo, study.id, parse_text(FIELDS, "f.yaml"), LEAD)
    other = repo.create_study(study_spec("Other study"), LEAD)
    other_ref = repo.ref(repo.add_episode(env_episode(other.id, repo.create_session(other.id, LEAD), num_steps=6)))
    fv.define(repo, other.id, parse_text(FIELDS, "f.yaml"), LEAD)
    fv.set_value(repo, other_ref, "ok", ANN, "yes", step=0, seconds=1.0)
    return study.id, refs


def test_counts_follow_every_write(repo: Repository, study: tuple[str, list], tmp_path: Path) -> None:
    study_id, (a, b, c, d) = study
    for user, seconds in ((ANN, 2.0), (BEA, None), (CID, 3.5)):
        for step in range(3):
            fv.set_value(repo, a, "ok", user, "yes" if step or user != CID else "no", step=step, seconds=seconds)
    fv.set_value(repo, a, "done", ANN, True)
    fv.set_value(repo, b, "done", BEA, False, seconds=1.25)
    fv.set_value(repo, a, "parts", ANN, "login", step=0, end=2)
    fv.set_value(repo, a, "parts", ANN, "search", step=3, end=5)
    fv.set_value(repo, a, "parts", BEA, "log in", step=0, end=2)
    assert_counted(repo)
    with Session(repo.engine) as s:
        counts = study_field_counts(s, study_id)
    assert counts["ok"] == FieldCounts(values=9, annotators=3, timed=6, seconds=16.5, places=3, episodes=1)
    assert counts["done"] == FieldCounts(values=2, annotators=2, timed=1, seconds=1.25, places=2, episodes=2)
    assert counts["parts"] == FieldCounts(values=3, annotators=2, timed=0, seconds=0.0, places=2, episodes=1)
    assert counts["ok"].seconds_mean == pytest.approx(16.5 / 6) and counts["parts"].seconds_mean is None
    # the shared places, from the partial index, with every annotator's value
    shared = {(name, place): values for name, place, values, _ in shared_places(repo, study_id)}
    assert shared == {
        ("ok", (a.episode_id, 0, 0)): {ANN: "yes", BEA: "yes", CID: "no"},
        ("ok", (a.episode_id, 1, 1)): {ANN: "yes", BEA: "yes", CID: "yes"},
        ("ok", (a.episode_id, 2, 2)): {ANN: "yes", BEA: "yes", CID: "yes"},
        ("parts", (a.episode_id, 0, 2)): {ANN: "login", BEA: "log in"},
    }

    fv.set_value(repo, a, "ok", CID, "yes", step=0, seconds=9.0)  # replaced: one value out, one in
    fv.set_value(repo, a, "ok", BEA, None, step=1)  # cleared
    fv.set_value(repo, a, "parts", ANN, None, step=3, end=5)  # the last value of a place
    assert_counted(repo)
    repo.undo_last(ANN, a)  # the segment is back
    repo.undo_last(BEA, a)  # and BEA's value
    repo.redo_last(BEA, a)
    assert_counted(repo)

    lines = [{"episode": c.episode_id, "step": s, "field": "ok", "value": "no", "user": CID} for s in range(4)]
    lines.append({"episode": d.episode_id, "step": None, "field": "done", "value": True, "user": ANN})
    lines.append({"episode": d.episode_id, "step": 1, "field": "ok", "value": "yes", "source": "model"})
    (tmp_path / "values.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert fv.import_values(repo, study_id, tmp_path / "values.jsonl", LEAD).values == 5
    assert_counted(repo)

    with repo.engine.begin() as conn:  # an UPDATE moving values, and one changing only the value (not counted)
        conn.exec_driver_sql("UPDATE field_values SET step_index = 5, end_index = 5 WHERE field = 'ok' "
                             f"AND episode_id = '{c.episode_id}' AND step_index = 0")  # fmt: skip
        conn.exec_driver_sql(f"UPDATE field_values SET seconds = 4.0 WHERE episode_id = '{c.episode_id}'")
        conn.exec_driver_sql(f"UPDATE field_values SET value = '\"yes\"' WHERE episode_id = '{c.episode_id}'")
    assert_counted(repo)

    assert repo.delete_episode(a, LEAD) and repo.delete_episode(c, LEAD)  # values go by cascade
    assert_counted(repo)
    with Session(repo.engine) as s:
        counts = study_field_counts(s, study_id)
    assert set(counts) == {"done"} and counts["done"].values == 2 and counts["done"].episodes == 2
    assert list(shared_places(repo, study_id)) == []


def test_counts_stay_exact_with_writers_at_once(repo: Repository, study: tuple[str, list]) -> None:
    """Annotators saving at the same time on the same places and the same counters."""
    study_id, refs = study
    errors: list[BaseException] = []

    def annotate(user: str) -> None:
        try:
            for round_ in range(3):
                for ref in refs:
                    for step in range(6):
                        value = None if (round_ == 2 and step % 3 == 0) else ("yes", "no")[(step + round_) % 2]
                        fv.set_value(repo, ref, "ok", user, value, step=step, seconds=float(step))
        except BaseException as e:  # noqa: BLE001 - reported by the test below
            errors.append(e)

    threads = [threading.Thread(target=annotate, args=(user,)) for user in (ANN, BEA, CID)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert_counted(repo)
    with Session(repo.engine) as s:
        ok = study_field_counts(s, study_id)["ok"]
    assert (ok.values, ok.annotators, ok.places, ok.episodes) == (3 * 4 * 4, 3, 4 * 4, 4)


def test_seconds_taken_away_leave_no_residue(repo: Repository, study: tuple[str, list]) -> None:
    study_id, (a, *_) = study
    fv.set_value(repo, a, "ok", ANN, "yes", step=0, seconds=0.7)
    fv.set_value(repo, a, "ok", ANN, "yes", step=1, seconds=0.1)
    fv.set_value(repo, a, "ok", ANN, "no", step=2)
    fv.set_value(repo, a, "ok", ANN, None, step=0)
    fv.set_value(repo, a, "ok", ANN, None, step=1)
    for _ in range(2):  # pending, then compacted
        with Session(repo.engine) as s:
            ok = study_field_counts(s, study_id)["ok"]
        assert (ok.values, ok.timed, ok.seconds, ok.seconds_mean) == (1, 0, 0.0, None)
        compact(repo.engine, study_id)


def test_the_report_compacts_a_backlog_and_gives_the_same_figures(
    repo: Repository, study: tuple[str, list], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipelines.report.field_stats import field_stats
    from pipelines.store import field_counts

    study_id, refs = study
    for ref in refs:
        for step in range(6):
            fv.set_value(repo, ref, "ok", ANN, "yes", step=step, seconds=1.5)
    before = field_stats(repo, study_id)  # 24 changes pending: read as they are
    with Session(repo.engine) as s:
        assert field_counts.pending(s, study_id) == 24
    monkeypatch.setattr(field_counts, "COMPACT_AT", 10)
    assert field_stats(repo, study_id) == before
    with Session(repo.engine) as s:
        assert field_counts.pending(s, study_id) == 0
    ok = next(f for f in before if f.field == "ok")
    assert (ok.values, ok.filled, ok.places, ok.seconds_total) == (24, 24, 24, 36.0)


@pytest.mark.postgres
def test_writers_in_other_episodes_never_wait_on_each_other(pg_url: str, data_dir: Path) -> None:
    """An import holding its transaction open (values in several episodes, places filled and emptied) does not
    make an annotator saving or clearing in another episode wait (any lock wait fails it by lock_timeout), nor
    does a compaction running meanwhile move or lose the import's changes."""
    with open_store(pg_url, data_dir) as repo:
        study = repo.create_study(study_spec(), LEAD)
        session = repo.create_session(study.id, LEAD)
        refs = [repo.ref(repo.add_episode(env_episode(study.id, session, num_steps=6))) for _ in range(4)]
        fv.define(repo, study.id, parse_text(FIELDS, "f.yaml"), LEAD)
        fv.set_value(repo, refs[3], "ok", BEA, "no", step=0)
        t0 = datetime(2026, 1, 2, tzinfo=UTC)
        with repo.engine.connect() as importer:
            importer.begin()
            for ref in refs[:3]:
                for step in range(3):
                    _insert(importer, "field_values", episode_id=ref.episode_id, field="ok", step_index=step,
                            end_index=step, user=ANN, value='"yes"', origin="imported", seconds=None,
                            created_time=t0)  # fmt: skip
            with repo.engine.connect() as annotator:
                with annotator.begin():
                    annotator.exec_driver_sql("SET LOCAL lock_timeout = '3s'")
                    _insert(annotator, "field_values", episode_id=refs[3].episode_id, field="ok", step_index=1,
                            end_index=1, user=CID, value='"yes"', origin="scratch", seconds=2.0,
                            created_time=t0)  # fmt: skip
                    annotator.exec_driver_sql(f"DELETE FROM field_values WHERE episode_id = '{refs[3].episode_id}' "
                                              f"AND \"user\" = '{BEA}'")  # fmt: skip
            compact(repo.engine, study.id)  # the import's changes are not committed: left for later
            importer.commit()
        assert_counted(repo)
        with Session(repo.engine) as s:
            ok = study_field_counts(s, study.id)["ok"]
        assert (ok.values, ok.annotators, ok.places, ok.episodes) == (10, 2, 10, 4)


def _insert(conn: sa.Connection, table: str, **row: object) -> None:
    columns = ", ".join(f'"{k}"' for k in row)
    conn.execute(sa.text(f"INSERT INTO {table} ({columns}) VALUES ({', '.join(':' + k for k in row)})"), row)


def test_migration_counts_the_values_of_an_older_store(store_url: str | None, data_dir: Path) -> None:
    engine = create_engine(store_url, data_dir)
    t0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    with engine.execution_options(**{WRITE: True}).begin() as conn:
        assert migrate(conn, target=9) == (0, 9)
        for study in ("s1", "s2"):
            _insert(conn, "studies", id=study, name=study, creator=LEAD, creation_time=t0, state=1, updated_time=t0)
            for i in range(3):
                _insert(conn, "episodes", id=f"{study}-e{i}", study_id=study, user=ANN, state=1, num_steps=6,
                        total_reward=0.0, registered_time=t0)  # fmt: skip
        values = [("s1-e0", "ok", 0, ANN, 1.0), ("s1-e0", "ok", 0, BEA, None), ("s1-e0", "ok", 1, ANN, 2.0),
                  ("s1-e1", "done", -1, BEA, None), ("s2-e2", "ok", 3, CID, 0.5)]  # fmt: skip
        for episode, field, step, user, seconds in values:
            _insert(conn, "field_values", episode_id=episode, field=field, step_index=step, end_index=step,
                    user=user, value='"yes"', origin="scratch", seconds=seconds, created_time=t0)  # fmt: skip
    engine.dispose()
    with open_store(store_url, data_dir) as repo:
        assert_counted(repo)
        with Session(repo.engine) as s:
            assert study_field_counts(s, "s1") == {
                "ok": FieldCounts(values=3, annotators=2, timed=2, seconds=3.0, places=2, episodes=1),
                "done": FieldCounts(values=1, annotators=1, timed=0, seconds=0.0, places=1, episodes=1),
            }
        assert [p for _, p, _, _ in shared_places(repo, "s1")] == [("s1-e0", 0, 0)]
        with repo.engine.begin() as conn:  # and the triggers run from then on
            conn.exec_driver_sql("DELETE FROM field_values WHERE \"user\" = 'bea@example.com'")
        assert_counted(repo)
        assert list(shared_places(repo, "s1")) == []


@pytest.mark.postgres
def test_a_reader_that_may_not_write_gets_the_figures_uncompacted(
    pg_url: str, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`stepmark report` under a read-only PostgreSQL role: the compaction is refused, said in a warning, and
    the figures (the sums plus the changes) are the same."""
    import uuid

    from pipelines.report.field_stats import field_stats
    from pipelines.store import field_counts

    role = f"reader_{uuid.uuid4().hex[:8]}"
    with open_store(pg_url, data_dir) as repo:
        study = repo.create_study(study_spec(), LEAD)
        ref = repo.ref(repo.add_episode(env_episode(study.id, repo.create_session(study.id, LEAD), num_steps=6)))
        fv.define(repo, study.id, parse_text(FIELDS, "f.yaml"), LEAD)
        for step in range(4):
            fv.set_value(repo, ref, "ok", ANN, "yes", step=step, seconds=2.0)
        expected = field_stats(repo, study.id)
        with repo.engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE ROLE {role} LOGIN")
            conn.exec_driver_sql(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    try:
        monkeypatch.setattr(field_counts, "COMPACT_AT", 1)
        url = sa.engine.make_url(pg_url).set(username=role)
        with open_store(url.render_as_string(hide_password=False), tmp_path / "ro") as reader:
            assert field_stats(reader, study.id) == expected
        assert "not compacted" in caplog.text
        with open_store(pg_url, data_dir) as repo, Session(repo.engine) as s:
            assert field_counts.pending(s, study.id) == 4
    finally:
        with open_store(pg_url, data_dir) as repo, repo.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP OWNED BY {role}")
            conn.exec_driver_sql(f"DROP ROLE {role}")

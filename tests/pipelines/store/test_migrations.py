"""Schema versioning: fresh databases, the v1 -> v2 upgrade with data, and refusing newer databases."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipelines.store import CURRENT_VERSION, AlreadyExists, SchemaVersionError, StoreError, open_store
from pipelines.store.database import WRITE, create_engine
from pipelines.store.migrations import MIGRATIONS, migrate
from pipelines.store.models import Base
from protos.rlds_creator import client_pb2, study_pb2
from tests.pipelines.store.conftest import study_spec


def _schema(engine: sa.Engine) -> dict[str, dict]:
    """Tables -> columns (type, nullable), indexes and unique constraints, as the database reports them."""
    inspector = sa.inspect(engine)
    schema = {}
    for table in sorted(inspector.get_table_names()):
        schema[table] = {
            "columns": {
                c["name"]: (str(c["type"]).split(" ")[0], c["nullable"]) for c in inspector.get_columns(table)
            },
            "pk": sorted(inspector.get_pk_constraint(table)["constrained_columns"]),
            "indexes": sorted(
                (i["name"], tuple(i["column_names"]), bool(i["unique"])) for i in inspector.get_indexes(table)
            ),
            "unique": sorted(
                (u["name"], tuple(u["column_names"])) for u in inspector.get_unique_constraints(table)
            ),
            "fks": sorted(
                (
                    tuple(f["constrained_columns"]),
                    f["referred_table"],
                    (f.get("options") or {}).get("ondelete"),
                )
                for f in inspector.get_foreign_keys(table)
            ),
        }
    return schema


def _second_database(store_url: str | None, tmp_path: Path, request: pytest.FixtureRequest) -> sa.Engine:
    if store_url is None:
        return create_engine(None, tmp_path / "models")
    server = request.getfixturevalue("postgres_server")
    name = server.create_database()
    request.addfinalizer(lambda: server.drop_database(name))
    return create_engine(server.url(name), tmp_path)


def test_migrated_schema_equals_the_models(
    store_url: str | None, data_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    repo = open_store(store_url, data_dir)
    expected_engine = _second_database(store_url, tmp_path, request)
    Base.metadata.create_all(expected_engine)
    migrated, expected = _schema(repo.engine), _schema(expected_engine)
    repo.close()
    expected_engine.dispose()
    assert migrated == expected


def test_fresh_database_records_every_migration(store_url: str | None, data_dir: Path) -> None:
    open_store(store_url, data_dir).close()
    with open_store(store_url, data_dir) as repo, repo.engine.connect() as conn:  # reopening applies nothing
        rows = conn.execute(sa.text("SELECT version, description FROM schema_version ORDER BY version")).all()
    versions = [m.version for m in MIGRATIONS]
    # ascending and ending at CURRENT_VERSION; a gap is a version another branch adds (9 before 8 merges)
    assert [r.version for r in rows] == versions == sorted(set(versions)) and versions[-1] == CURRENT_VERSION
    assert CURRENT_VERSION >= 2


def test_sqlite_settings(data_dir: Path) -> None:
    with open_store(None, data_dir) as repo, repo.engine.connect() as conn:
        assert Path(repo.engine.url.database) == (data_dir / "stepmark.db").resolve()
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000


def _insert(conn: sa.Connection, table: str, **values: object) -> None:
    columns = ", ".join(f'"{k}"' for k in values)
    params = ", ".join(f":{k}" for k in values)
    conn.execute(sa.text(f"INSERT INTO {table} ({columns}) VALUES ({params})"), values)


def test_upgrade_from_v1_keeps_data_and_backfills_sources(store_url: str | None, data_dir: Path) -> None:
    """Build a version-1 database by hand (as an older stepmark left it), then open it with this one."""
    engine = create_engine(store_url, data_dir)
    spec = study_spec()
    t0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    ui_meta = {
        "kind": "ui",
        "ui_record": {"shard": "s-0", "offset": 7, "episode_id": "rico/1"},
        "success": False,
    }
    with engine.execution_options(**{WRITE: True}).begin() as conn:
        assert migrate(conn, target=1) == (0, 1)
        _insert(
            conn, "studies", id="s1", name="Old", creator="alice", creation_time=t0, state=1, updated_time=t0
        )
        for i, env in enumerate(spec.environment_specs):
            _insert(
                conn, "environments", study_id="s1", id=env.id, position=i, name=env.name,
                family=env.WhichOneof("type"), spec=env.SerializeToString(),
            )  # fmt: skip
        _insert(conn, "sessions", id="se1", study_id="s1", user="bob", state=1, start_time=t0)
        episodes = [("e-env", {"kind": "env", "success": True}), ("e-ui", ui_meta), ("e-ui-dup", ui_meta)]
        for n, (episode_id, meta) in enumerate(episodes):
            _insert(
                conn, "episodes", id=episode_id, study_id="s1", session_id="se1", environment_id="maze",
                user="bob", state=1, metadata=json.dumps(meta), num_steps=5, total_reward=1.0, notes=f"note {n}",
                registered_time=datetime(2026, 1, 2, 3, 4, 5 + n, tzinfo=UTC),
            )  # fmt: skip
        _insert(conn, "episode_tags", episode_id="e-env", label="good", user="bob", created_time=t0)
        _insert(conn, "step_tags", episode_id="e-ui", step_index=2, label="tap", user="bob", created_time=t0)
        _insert(
            conn,
            "audit_log",
            time=t0,
            user="bob",
            action="episode.tag.add",
            study_id="s1",
            episode_id="e-env",
        )
    engine.dispose()

    with open_store(store_url, data_dir) as repo:
        with repo.engine.connect() as conn:
            assert (
                conn.execute(sa.text("SELECT MAX(version) FROM schema_version")).scalar() == CURRENT_VERSION
            )
        study = repo.get_study("s1")
        assert study.name == "Old" and list(study.environment_specs) == list(spec.environment_specs)
        episodes = {e.id: e for e in repo.list_episodes(study_id="s1")}
        assert set(episodes) == {"e-env", "e-ui", "e-ui-dup"}
        assert [t.label for t in episodes["e-env"].tags] == ["good"]
        assert [t.label for t in episodes["e-ui"].step_metadata[2].tags] == ["tap"]
        assert episodes["e-ui"].metadata["ui_record"]["offset"] == 7
        assert episodes["e-ui-dup"].notes == "note 2"
        # The oldest copy of the record owns its import key; the duplicate is kept, without the key.
        assert repo.source_keys("s1") == {"ui:rico/1": "e-ui"}
        assert repo.audit_log(client_pb2.EpisodeRef(episode_id="e-env"))[0].action == "episode.tag.add"
        # And the upgraded database works like a new one.
        assert repo.add_episode_tag(client_pb2.EpisodeRef(episode_id="e-ui"), "checked", "bob") is True
        again = study_pb2.Episode(study_id="s1", session_id="se1", environment_id="maze", state=1)
        again.user.email = "bob"
        again.metadata.update(ui_meta)
        assert repo.add_episodes([again]) == []


def test_newer_database_is_refused(store_url: str | None, data_dir: Path) -> None:
    with open_store(store_url, data_dir) as repo, repo.engine.begin() as conn:
        _insert(
            conn,
            "schema_version",
            version=CURRENT_VERSION + 1,
            applied_time=datetime.now(UTC),
            description="x",
        )
    with pytest.raises(SchemaVersionError, match=f"version {CURRENT_VERSION + 1} is newer than .* supports"):
        open_store(store_url, data_dir)


def test_foreign_database_is_refused(store_url: str | None, data_dir: Path) -> None:
    engine = create_engine(store_url, data_dir)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE studies (id INTEGER PRIMARY KEY)"))
    engine.dispose()
    with pytest.raises(SchemaVersionError, match=r"stepmark tables \(studies\) but no schema_version"):
        open_store(store_url, data_dir)


def test_every_stepmark_table_marks_a_database_as_stepmark_s(store_url: str | None, data_dir: Path) -> None:
    """A database holding any table a migration creates (the newest too) but no schema_version is refused."""
    from pipelines.store.migrations import _TABLES

    assert set(Base.metadata.tables) - {"schema_version"} <= set(_TABLES)
    engine = create_engine(store_url, data_dir)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE field_suggestions (id INTEGER PRIMARY KEY)"))
    engine.dispose()
    with pytest.raises(SchemaVersionError, match=r"stepmark tables \(field_suggestions\) but no schema_version"):
        open_store(store_url, data_dir)


def test_audit_log_is_append_only_in_the_database(store_url: str | None, data_dir: Path) -> None:
    with open_store(store_url, data_dir) as repo:
        repo.create_study(study_spec(), "alice")
        for statement in ("UPDATE audit_log SET \"user\" = 'mallory'", "DELETE FROM audit_log"):
            with pytest.raises(sa.exc.DatabaseError, match="audit_log is append-only"):
                with repo.engine.begin() as conn:
                    conn.execute(sa.text(statement))
        assert [e.user for e in repo.audit_log()] == ["alice"]


def test_unusable_databases_are_reported_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "stepmark.db").write_bytes(b"not a database " * 100)
    with pytest.raises(
        StoreError, match=r"cannot open database sqlite:///.*stepmark.db: file is not a database"
    ):
        open_store(None, tmp_path)
    with pytest.raises(StoreError, match="--data .*: cannot create the data directory"):
        open_store(None, tmp_path / "stepmark.db" / "sub")
    with pytest.raises(StoreError, match="not a database URL"):
        open_store("not a url", tmp_path)
    with pytest.raises(StoreError, match=r"Connection refused") as info:
        open_store("postgresql+psycopg://postgres@127.0.0.1:1/x", tmp_path)
    assert "\n" not in str(info.value)


def test_upgrade_from_v3_renames_duplicate_study_names_and_keeps_old_undos(
    store_url: str | None, data_dir: Path
) -> None:
    """Version 3 allowed one creator two studies of one name (and an entry undone twice): version 4 renames the
    later studies deterministically, audits the renames, and starts enforcing both rules."""
    engine = create_engine(store_url, data_dir)
    t0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    with engine.execution_options(**{WRITE: True}).begin() as conn:
        assert migrate(conn, target=3) == (0, 3)
        for n, (study_id, name, creator) in enumerate(
            [("s3", "Maze", "ann"), ("s1", "Maze", "ann"), ("s2", "Maze", "bob"), ("s4", "Maze (2)", "ann"),
             ("s5", "Maze", "ann")]
        ):  # fmt: skip
            when = t0 if study_id in ("s1", "s3") else datetime(2026, 1, 3, n, tzinfo=UTC)
            _insert(conn, "studies", id=study_id, name=name, creator=creator, creation_time=when, state=1,
                    updated_time=when)  # fmt: skip
        for _ in (1, 2):  # the race issue 13 found: one entry undone twice
            _insert(conn, "audit_log", time=t0, user="ann", action="undo", episode_id="gone", undo_of=7)
    engine.dispose()

    with open_store(store_url, data_dir) as repo:
        names = {s.id: (s.name, s.creator.email) for s in repo.list_studies()}
        # same creation time: the smaller id keeps the name; "Maze (2)" was taken, so s3 becomes "Maze (3)"
        assert names == {
            "s1": ("Maze", "ann"), "s3": ("Maze (3)", "ann"), "s5": ("Maze (4)", "ann"),
            "s4": ("Maze (2)", "ann"), "s2": ("Maze", "bob"),
        }  # fmt: skip
        renames = [
            (e.study_id, e.before, e.after, e.user) for e in repo.audit_log() if e.action == "study.update"
        ]
        assert sorted(renames) == [
            ("s3", {"name": "Maze"}, {"name": "Maze (3)"}, "stepmark-migration"),
            ("s5", {"name": "Maze"}, {"name": "Maze (4)"}, "stepmark-migration"),
        ]
        assert [repo.get_palette(s) for s in ("s1", "s2")] == [[], []] and repo.list_reviewers("s1") == []
        with pytest.raises(AlreadyExists, match="ann already has a study named 'Maze'"):
            repo.create_study(study_pb2.StudySpec(name="Maze"), "ann")
        with pytest.raises(sa.exc.IntegrityError):  # the database itself refuses, whatever the code does
            with repo.engine.begin() as conn:
                _insert(conn, "studies", id="s9", name="Maze", creator="ann", creation_time=t0, state=1,
                        updated_time=t0)  # fmt: skip
        with pytest.raises(sa.exc.IntegrityError):
            with repo.engine.begin() as conn:
                for _ in (1, 2):
                    _insert(conn, "audit_log", time=t0, user="ann", action="undo", undo_of=8, reverts=8)


def test_upgrade_from_v7_backfills_episode_kind(store_url: str | None, data_dir: Path) -> None:
    """Migration 8 on a version-7 database with episodes: every row kept, `kind` backfilled in SQL from
    `metadata.kind` (only a string of at most 32 characters), the (study_id, kind, id) index built, and new
    episodes get their kind on insert."""
    engine = create_engine(store_url, data_dir)
    spec = study_spec()
    t0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    metas = {
        "e-env": {"kind": "env", "success": True},
        "e-ui": {"kind": "ui", "ui_record": {"shard": "s-0", "offset": 7, "episode_id": "rico/1"}},
        "e-none": None,
        "e-nokind": {"success": False},
        "e-number": {"kind": 3},
        "e-long": {"kind": "x" * 33},
        "e-object": {"kind": {"nested": "ui"}},
    }
    with engine.execution_options(**{WRITE: True}).begin() as conn:
        assert migrate(conn, target=7) == (0, 7)
        _insert(conn, "studies", id="s1", name="Old", creator="alice", creation_time=t0, state=1, updated_time=t0)
        for i, env in enumerate(spec.environment_specs):
            _insert(
                conn, "environments", study_id="s1", id=env.id, position=i, name=env.name,
                family=env.WhichOneof("type"), spec=env.SerializeToString(),
            )  # fmt: skip
        _insert(conn, "sessions", id="se1", study_id="s1", user="bob", state=1, start_time=t0)
        for n, (episode_id, meta) in enumerate(metas.items()):
            _insert(
                conn, "episodes", id=episode_id, study_id="s1", session_id="se1", environment_id="maze",
                user="bob", state=1, metadata=None if meta is None else json.dumps(meta), num_steps=5,
                total_reward=1.0, notes=f"note {n}", registered_time=datetime(2026, 1, 2, 3, 4, n, tzinfo=UTC),
            )  # fmt: skip
    engine.dispose()

    with open_store(store_url, data_dir) as repo:
        with repo.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT MAX(version) FROM schema_version")).scalar() == CURRENT_VERSION
            kinds = dict(conn.execute(sa.text("SELECT id, kind FROM episodes")).all())
            indexes = {i["name"]: i["column_names"] for i in sa.inspect(conn).get_indexes("episodes")}
        assert kinds == {
            "e-env": "env", "e-ui": "ui", "e-none": None, "e-nokind": None, "e-number": None, "e-long": None,
            "e-object": None,
        }  # fmt: skip
        assert indexes["ix_episodes_study_kind"] == ["study_id", "kind", "id"]
        with repo.engine.connect() as conn:  # the planner has figures for the new index and column at once
            if conn.dialect.name == "sqlite":
                stats = conn.execute(sa.text("SELECT stat FROM sqlite_stat1 WHERE idx = 'ix_episodes_study_kind'"))
            else:
                stats = conn.execute(sa.text("SELECT 1 FROM pg_stats WHERE tablename = 'episodes' AND attname = 'kind'"))
            assert stats.all()
            if conn.dialect.name == "postgresql":  # open_store vacuumed the rewritten table (counts index-only)
                vacuumed = None
                for _ in range(50):
                    conn.exec_driver_sql("SELECT pg_stat_clear_snapshot()")
                    vacuumed = conn.exec_driver_sql(
                        "SELECT last_vacuum FROM pg_stat_user_tables WHERE relname = 'episodes'"
                    ).scalar()
                    if vacuumed is not None:
                        break
                    time.sleep(0.1)
                assert vacuumed is not None
        episodes = {e.id: e for e in repo.list_episodes(study_id="s1")}
        assert set(episodes) == set(metas)  # nothing lost, metadata untouched
        assert episodes["e-ui"].metadata["ui_record"]["offset"] == 7 and episodes["e-number"].metadata["kind"] == 3
        assert repo.source_keys("s1") == {}  # v2 backfilled keys only for rows present then (none)
        fresh = study_pb2.Episode(study_id="s1", session_id="se1", environment_id="maze", state=1, id="e-new")
        fresh.user.email = "bob"
        fresh.metadata.update({"kind": "ui", "ui_record": {"shard": "s-1", "offset": 0, "episode_id": "x"}})
        repo.add_episodes([fresh])
        with repo.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT kind FROM episodes WHERE id = 'e-new'")).scalar() == "ui"

"""Schema versioning: an ordered list of migrations and the code that applies them.

Every database, new or old, is brought to `CURRENT_VERSION` by running the missing migrations in order, in one
transaction (SQLite and PostgreSQL both have transactional DDL), under a lock so two processes opening a new
database at once do not both build it. Each applied migration adds a row to `schema_version`.

A migration is frozen once released: it must not import the models (they describe only the latest schema).
To change the schema: edit `models.py`, append a migration here that turns version N into N+1 (DDL plus any
data backfill), and bump nothing else; `tests/pipelines/store/test_migrations.py` checks that the migrated
schema equals the models and that an older database keeps its data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from pipelines.store.errors import SchemaVersionError

# Tables stepmark owns; a database holding some of them but no version table is not ours to touch.
# Every table a migration creates (tests/pipelines/store/test_migrations.py checks it against the models).
_TABLES = (
    "studies", "environments", "sessions", "episodes", "episode_tags", "step_tags", "audit_log", "study_reviewers",
    "study_queues", "queue_assignments", "annotator_step_labels", "adjudications", "grounding_annotations",
    "study_fields", "field_values", "field_suggestions", "field_adjudications",
    "field_places", "field_episodes", "field_counts", "field_count_changes",
    "evaluation_runs", "evaluation_results",
)  # fmt: skip
# Arbitrary constant for pg_advisory_xact_lock ("stepmark" in ASCII, truncated to fit a bigint).
_PG_LOCK_KEY = 0x737465706D61726B


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


def _v1_initial(conn: Connection) -> None:
    """Version 1: studies, environments, sessions, episodes, tags, audit log."""
    md = sa.MetaData()
    id_ = sa.String(64)
    email = sa.String(320)
    label = sa.String(256)
    time = sa.DateTime(timezone=True)
    sa.Table(
        "studies",
        md,
        sa.Column("id", id_, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("description", sa.Text),
        sa.Column("instructions", sa.Text),
        sa.Column("creator", email, nullable=False, index=True),
        sa.Column("creation_time", time, nullable=False),
        sa.Column("state", sa.Integer, nullable=False),
        sa.Column("updated_time", time, nullable=False),
    )
    sa.Table(
        "environments",
        md,
        sa.Column("study_id", id_, sa.ForeignKey("studies.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("name", sa.Text),
        sa.Column("family", sa.String(32)),
        sa.Column("spec", sa.LargeBinary, nullable=False),
    )
    sa.Table(
        "sessions",
        md,
        sa.Column("id", id_, primary_key=True),
        sa.Column("study_id", id_, sa.ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user", email, nullable=False),
        sa.Column("state", sa.Integer, nullable=False),
        sa.Column("start_time", time),
        sa.Column("end_time", time),
        sa.Index("ix_sessions_study_user", "study_id", "user"),
    )
    sa.Table(
        "episodes",
        md,
        sa.Column("id", id_, primary_key=True),
        sa.Column("study_id", id_, sa.ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
        sa.Column("session_id", id_, sa.ForeignKey("sessions.id", ondelete="CASCADE")),
        sa.Column("environment_id", sa.String(128)),
        sa.Column("user", email, nullable=False),
        sa.Column("state", sa.Integer, nullable=False),
        sa.Column("start_time", time),
        sa.Column("end_time", time),
        sa.Column("metadata", sa.JSON),
        sa.Column("num_steps", sa.Integer),
        sa.Column("total_reward", sa.Float),
        sa.Column("storage_kind", sa.String(32)),
        sa.Column("storage_tag_directory", sa.Text),
        sa.Column("storage_index", sa.Integer),
        sa.Column("storage_pickle_path", sa.Text),
        sa.Column("notes", sa.Text),
        sa.Column("controller_id", sa.String(256)),
        sa.Column("registered_time", time, nullable=False),
        sa.Index("ix_episodes_study", "study_id"),
        sa.Index("ix_episodes_session", "session_id"),
    )
    sa.Table(
        "episode_tags",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("episode_id", id_, sa.ForeignKey("episodes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("label", label, nullable=False),
        sa.Column("user", email),
        sa.Column("created_time", time, nullable=False),
        sa.UniqueConstraint("episode_id", "label", name="uq_episode_tags_episode_label"),
    )
    sa.Table(
        "step_tags",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("episode_id", id_, sa.ForeignKey("episodes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("step_index", sa.Integer, nullable=False),
        sa.Column("label", label, nullable=False),
        sa.Column("user", email),
        sa.Column("created_time", time, nullable=False),
        sa.UniqueConstraint("episode_id", "step_index", "label", name="uq_step_tags_episode_step_label"),
    )
    sa.Table(
        "audit_log",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", time, nullable=False),
        sa.Column("user", email, nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("study_id", id_),
        sa.Column("session_id", id_),
        sa.Column("episode_id", id_),
        sa.Column("step_index", sa.Integer),
        sa.Column("before", sa.JSON(none_as_null=True)),
        sa.Column("after", sa.JSON(none_as_null=True)),
        sa.Column("undo_of", sa.Integer),
    )
    md.create_all(conn)


def _v2_sources_and_audit_indexes(conn: Connection) -> None:
    """Version 2: `episodes.source_key` (idempotent imports) and audit-log indexes.

    Backfills `source_key` = "ui:<episode id>" from the metadata of UI episodes imported under version 1. If
    version 1 let the same record in twice, the oldest copy gets the key and the others keep NULL (no data is
    dropped; the unique index could not be built otherwise).
    """
    conn.execute(sa.text("ALTER TABLE episodes ADD COLUMN source_key TEXT"))
    episodes = sa.table(
        "episodes",
        sa.column("id", sa.String),
        sa.column("study_id", sa.String),
        sa.column("metadata", sa.JSON),
        sa.column("registered_time", sa.DateTime(timezone=True)),
        sa.column("source_key", sa.String),
    )
    rows = conn.execute(
        sa.select(episodes.c.id, episodes.c.study_id, episodes.c.metadata).order_by(
            episodes.c.registered_time, episodes.c.id
        )
    )
    seen: set[tuple[str, str]] = set()
    for episode_id, study_id, metadata in rows.all():
        key = source_key(metadata)
        if key is None or (study_id, key) in seen:
            continue
        seen.add((study_id, key))
        conn.execute(sa.update(episodes).where(episodes.c.id == episode_id).values(source_key=key))
    conn.execute(sa.text("CREATE UNIQUE INDEX ux_episodes_study_source ON episodes (study_id, source_key)"))
    conn.execute(sa.text("CREATE INDEX ix_audit_log_episode ON audit_log (episode_id, id)"))
    conn.execute(sa.text('CREATE INDEX ix_audit_log_user ON audit_log ("user", id)'))


_APPEND_ONLY = "audit_log is append-only"


def _v3_append_only_audit_log(conn: Connection) -> None:
    """Version 3: the database itself refuses UPDATE and DELETE (and TRUNCATE) on `audit_log`.

    SQLite and PostgreSQL get triggers; on other databases the rule is kept by the code only.
    """
    if conn.dialect.name == "sqlite":
        for op in ("UPDATE", "DELETE"):
            conn.execute(
                sa.text(
                    f"CREATE TRIGGER audit_log_no_{op.lower()} BEFORE {op} ON audit_log "
                    f"BEGIN SELECT RAISE(ABORT, '{_APPEND_ONLY}'); END"
                )
            )
    elif conn.dialect.name == "postgresql":
        conn.execute(
            sa.text(
                "CREATE FUNCTION stepmark_audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN RAISE EXCEPTION '{_APPEND_ONLY}'; END $$"
            )
        )
        conn.execute(
            sa.text(
                "CREATE TRIGGER audit_log_no_change BEFORE UPDATE OR DELETE ON audit_log "
                "FOR EACH ROW EXECUTE FUNCTION stepmark_audit_log_append_only()"
            )
        )
        conn.execute(
            sa.text(
                "CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log "
                "FOR EACH STATEMENT EXECUTE FUNCTION stepmark_audit_log_append_only()"
            )
        )


def _renamed(name: str, taken: set[str]) -> str:
    """`name (2)`, `name (3)`, ...: the first that is not taken."""
    n = 2
    while f"{name} ({n})" in taken:
        n += 1
    return f"{name} ({n})"


def _v4_palettes_reviewers_unique_names_reverts(conn: Connection) -> None:
    """Version 4: tag palettes, reviewers, unique study names per creator, one undo/redo per audit entry.

    - `studies.palette` (JSON list of labels, NULL = none);
    - `study_reviewers` (study, user, added_by, added_time);
    - UNIQUE (`creator`, `name`) on `studies`. Older versions allowed one creator two studies of one name (a
      race in `import-ui --study NAME`): the oldest (creation time, then id) keeps the name, each later one is
      renamed `NAME (2)`, `NAME (3)`, ... (the first such name that creator does not use), and the rename is
      written to the audit log as a `study.update` by `stepmark-migration`;
    - `audit_log.reverts` under a unique index (set by undo/redo from now on; older entries keep NULL) and an
      index on `undo_of`.
    """
    json_type = sa.JSON().compile(dialect=conn.dialect)
    conn.execute(sa.text(f"ALTER TABLE studies ADD COLUMN palette {json_type}"))
    md = sa.MetaData()
    sa.Table("studies", md, sa.Column("id", sa.String(64), primary_key=True))  # only for the foreign key
    reviewers = sa.Table(
        "study_reviewers",
        md,
        sa.Column(
            "study_id", sa.String(64), sa.ForeignKey("studies.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("user", sa.String(320), primary_key=True),
        sa.Column("added_by", sa.String(320), nullable=False),
        sa.Column("added_time", sa.DateTime(timezone=True), nullable=False),
    )
    reviewers.create(conn)

    studies = sa.table(
        "studies", sa.column("id"), sa.column("name"), sa.column("creator"), sa.column("creation_time")
    )
    audit = sa.table(
        "audit_log", sa.column("time"), sa.column("user"), sa.column("action"), sa.column("study_id"),
        sa.column("before", sa.JSON(none_as_null=True)), sa.column("after", sa.JSON(none_as_null=True)),
    )  # fmt: skip
    rows = conn.execute(
        sa.select(studies.c.id, studies.c.name, studies.c.creator).order_by(
            studies.c.creator, studies.c.creation_time, studies.c.id
        )
    ).all()
    taken: dict[str, set[str]] = {}
    for _, name, creator in rows:
        taken.setdefault(creator, set()).add(name)
    seen: set[tuple[str, str]] = set()
    now = datetime.now(UTC)
    for study_id, name, creator in rows:
        if (creator, name) not in seen:
            seen.add((creator, name))
            continue
        new_name = _renamed(name, taken[creator])
        taken[creator].add(new_name)
        conn.execute(sa.update(studies).where(studies.c.id == study_id).values(name=new_name))
        conn.execute(
            sa.insert(audit).values(
                time=now, user="stepmark-migration", action="study.update", study_id=study_id,
                before={"name": name}, after={"name": new_name},
            )
        )  # fmt: skip
    conn.execute(sa.text("CREATE UNIQUE INDEX ux_studies_creator_name ON studies (creator, name)"))

    conn.execute(sa.text("ALTER TABLE audit_log ADD COLUMN reverts INTEGER"))
    conn.execute(sa.text("CREATE UNIQUE INDEX ux_audit_log_reverts ON audit_log (reverts)"))
    conn.execute(sa.text("CREATE INDEX ix_audit_log_undo_of ON audit_log (undo_of)"))
def _v5_queue_agreement(conn: Connection) -> None:
    """Version 5: work queues (`study_queues`, `queue_assignments`), per-annotator step labels, adjudications.

    Creates four new tables only; no existing table or row changes (independent of version 4).
    """
    md = sa.MetaData()
    id_ = sa.String(64)
    email = sa.String(320)
    label = sa.String(256)
    time = sa.DateTime(timezone=True)
    sa.Table("studies", md, sa.Column("id", id_, primary_key=True))
    sa.Table("episodes", md, sa.Column("id", id_, primary_key=True))
    tables = [
        sa.Table(
            "study_queues",
            md,
            sa.Column("study_id", id_, sa.ForeignKey("studies.id", ondelete="CASCADE"), primary_key=True),
            sa.Column("overlap", sa.Integer, nullable=False),
            sa.Column("environment_id", sa.String(128)),
            sa.Column("states", sa.JSON(none_as_null=True)),
            sa.Column("tag", label),
            sa.Column("updated_by", email, nullable=False),
            sa.Column("updated_time", time, nullable=False),
        ),
        sa.Table(
            "queue_assignments",
            md,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("study_id", id_, sa.ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
            sa.Column("episode_id", id_, sa.ForeignKey("episodes.id", ondelete="CASCADE"), nullable=False),
            sa.Column("user", email, nullable=False),
            sa.Column("slot", sa.Integer, nullable=False),
            sa.Column("state", sa.String(16), nullable=False),
            sa.Column("assigned_time", time, nullable=False),
            sa.Column("done_time", time),
            sa.UniqueConstraint("episode_id", "user", name="uq_queue_assignments_episode_user"),
            sa.UniqueConstraint("episode_id", "slot", name="uq_queue_assignments_episode_slot"),
            sa.Index("ix_queue_assignments_study_user", "study_id", "user"),
        ),
        sa.Table(
            "annotator_step_labels",
            md,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("episode_id", id_, sa.ForeignKey("episodes.id", ondelete="CASCADE"), nullable=False),
            sa.Column("user", email, nullable=False),
            sa.Column("step_index", sa.Integer, nullable=False),
            sa.Column("label", label, nullable=False),
            sa.Column("created_time", time, nullable=False),
            sa.UniqueConstraint(
                "episode_id", "user", "step_index", "label",
                name="uq_annotator_step_labels_episode_user_step_label",
            ),
        ),
        sa.Table(
            "adjudications",
            md,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("episode_id", id_, sa.ForeignKey("episodes.id", ondelete="CASCADE"), nullable=False),
            sa.Column("step_index", sa.Integer, nullable=False),
            sa.Column("labels", sa.JSON, nullable=False),
            sa.Column("user", email, nullable=False),
            sa.Column("time", time, nullable=False),
            sa.UniqueConstraint("episode_id", "step_index", name="uq_adjudications_episode_step"),
        ),
    ]
    for table in tables:
        table.create(conn)


def _v6_grounding_annotations(conn: Connection) -> None:
    """Version 6 (issue 11): grounding annotations on UI steps. Self-contained: one new table and its index."""
    md = sa.MetaData()
    sa.Table("episodes", md, sa.Column("id", sa.String(64), primary_key=True))  # the FK target, not created
    table = sa.Table(
        "grounding_annotations",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "episode_id", sa.String(64), sa.ForeignKey("episodes.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("step_index", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("object_id", sa.String(64)),
        sa.Column("slot", sa.String(320), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("user", sa.String(320), nullable=False),
        sa.Column("created_time", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("episode_id", "step_index", "user", "slot", name="uq_grounding_annotations_slot"),
    )
    sa.Index("ix_grounding_annotations_episode_step", table.c.episode_id, table.c.step_index)
    table.create(conn)


# v7 (issue 21): an index for every filter and sort of the Episodes page and for the queue's aggregates.
# (name, table, columns); `ix_episodes_study_notes` is partial (episodes that have notes), built apart.
LIST_INDEXES = (
    ("ix_episodes_study_registered", "episodes", "study_id, registered_time, id"),
    ("ix_episodes_registered", "episodes", "registered_time, id"),
    ("ix_episodes_study_user", "episodes", 'study_id, "user", id'),
    ("ix_episodes_study_env", "episodes", "study_id, environment_id, id"),
    ("ix_episodes_study_state", "episodes", "study_id, state, id"),
    ("ix_episodes_study_steps", "episodes", "study_id, num_steps, id"),
    ("ix_episodes_study_reward", "episodes", "study_id, total_reward, id"),
    ("ix_episode_tags_label", "episode_tags", "label, episode_id"),
    ("ix_step_tags_label", "step_tags", "label, episode_id"),
    ("ix_queue_assignments_study_state", "queue_assignments", "study_id, state, episode_id"),
)


def _v7_list_indexes(conn: Connection) -> None:
    """Version 7 (issue 21): lists page in SQL. Indexes only, no data changes: (study_id, column, id) for
    each sort of the Episodes table (keyset paging walks them), (label, episode_id) on both tag tables (the
    tag filter starts from the label), a partial index of the episodes that have notes (the notes search
    reads those only), and (study_id, state, episode_id) on queue assignments (progress by aggregates).
    `ix_episodes_study` is dropped: `ix_episodes_study_registered` starts with the same column."""
    conn.execute(sa.text("DROP INDEX ix_episodes_study"))
    for name, table, columns in LIST_INDEXES:
        conn.execute(sa.text(f"CREATE INDEX {name} ON {table} ({columns})"))
    conn.execute(
        sa.text("CREATE INDEX ix_episodes_study_notes ON episodes (study_id, id) WHERE notes IS NOT NULL")
    )


# v8 (issue 21): what the report and the listing's kind counts read from a column instead of each row's JSON.
KIND_LENGTH = 32


def _v8_episode_kind(conn: Connection) -> None:
    """Version 8 (issue 21): `episodes.kind`, a copy of `metadata.kind` ("ui", "env"; NULL when the metadata
    has none, or a kind that is not a string of at most 32 characters), under an index (study_id, kind, id).

    `stepmark report` counted UI episodes and picked the environment ones by reading every episode's JSON
    metadata (twice), so its time grew faster than the study. Backfilled by one UPDATE in SQL (no row travels
    to Python); set on insert by `Repository` from then on. Self-contained: one column, one index."""
    conn.execute(sa.text(f"ALTER TABLE episodes ADD COLUMN kind VARCHAR({KIND_LENGTH})"))
    episodes = sa.table("episodes", sa.column("metadata", sa.JSON), sa.column("kind", sa.String))
    if conn.dialect.name == "sqlite":  # json_type: only a JSON string is a kind (numbers extract as numbers)
        path = sa.literal_column("'$.kind'")
        value = sa.func.json_extract(episodes.c.metadata, path)
        is_text = sa.func.json_type(episodes.c.metadata, path) == "text"
    else:
        value = episodes.c.metadata["kind"].as_string()
        is_text = sa.func.json_typeof(episodes.c.metadata["kind"]) == "string"
    conn.execute(
        sa.update(episodes)
        .where(episodes.c.metadata.is_not(None), is_text, sa.func.length(value) <= KIND_LENGTH)
        .values(kind=value)
    )
    conn.execute(sa.text("CREATE INDEX ix_episodes_study_kind ON episodes (study_id, kind, id)"))
    # Fresh statistics for the new index and column, in the same transaction: without them SQLite took the new
    # index for every `study_id = ?` query (it has no figures for it) and read each row through it (a GROUP BY
    # state over a 1M-episode study: 0.3 -> 5.6 s).
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("PRAGMA analysis_limit = 1000")
        conn.exec_driver_sql("ANALYZE episodes")
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql("ANALYZE episodes")


def _v9_study_fields(conn: Connection) -> None:
    """Version 9 (issue 26): a study's own typed fields, the annotators' values, suggestions (imported or from
    a model) and per-field adjudications. Tables only; numbered 9 so it merges after version 8 (another
    branch: `episodes.kind`), with which it shares nothing."""
    md = sa.MetaData()
    id_ = sa.String(64)
    email = sa.String(320)
    name = sa.String(64)
    time = sa.DateTime(timezone=True)
    stubs = [sa.Table(t, md, sa.Column("id", id_, primary_key=True)) for t in ("studies", "episodes")]  # FK only

    def episode() -> sa.ForeignKey:
        return sa.ForeignKey("episodes.id", ondelete="CASCADE")

    sa.Table(
        "study_fields",
        md,
        sa.Column("study_id", id_, sa.ForeignKey("studies.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("name", name, primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("definition", sa.JSON, nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
        sa.Column("updated_by", email, nullable=False),
        sa.Column("updated_time", time, nullable=False),
    )
    values = sa.Table(
        "field_values",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("episode_id", id_, episode(), nullable=False),
        sa.Column("field", name, nullable=False),
        sa.Column("step_index", sa.Integer, nullable=False),
        sa.Column("end_index", sa.Integer, nullable=False),
        sa.Column("user", email, nullable=False),
        sa.Column("value", sa.JSON, nullable=False),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("seconds", sa.Float),
        sa.Column("created_time", time, nullable=False),
        sa.UniqueConstraint(
            "episode_id", "field", "user", "step_index", "end_index", name="uq_field_values_slot"
        ),
    )
    sa.Index("ix_field_values_episode_step", values.c.episode_id, values.c.step_index)
    suggestions = sa.Table(
        "field_suggestions",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("episode_id", id_, episode(), nullable=False),
        sa.Column("field", name, nullable=False),
        sa.Column("step_index", sa.Integer, nullable=False),
        sa.Column("end_index", sa.Integer, nullable=False),
        sa.Column("source", email, nullable=False),
        sa.Column("value", sa.JSON, nullable=False),
        sa.Column("created_time", time, nullable=False),
        sa.UniqueConstraint(
            "episode_id", "field", "source", "step_index", "end_index", name="uq_field_suggestions_slot"
        ),
    )
    sa.Index("ix_field_suggestions_episode_step", suggestions.c.episode_id, suggestions.c.step_index)
    sa.Table(
        "field_adjudications",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("episode_id", id_, episode(), nullable=False),
        sa.Column("field", name, nullable=False),
        sa.Column("step_index", sa.Integer, nullable=False),
        sa.Column("end_index", sa.Integer, nullable=False),
        sa.Column("value", sa.JSON, nullable=False),
        sa.Column("user", email, nullable=False),
        sa.Column("time", time, nullable=False),
        sa.UniqueConstraint("episode_id", "field", "step_index", "end_index", name="uq_field_adjudications_slot"),
    )
    md.create_all(conn, tables=[t for t in md.sorted_tables if t not in stubs])


# v10 (issue 21): field values counted by triggers. A place is (episode_id, field, step_index, end_index).
_PLACE = ("episode_id", "field", "step_index", "end_index")
_COUNTS = "entries, timed, seconds, places, episodes"


def _v10_field_counts(conn: Connection) -> None:
    """Version 10 (issue 21): a study's field values counted as they are written, so `stepmark report`, the
    Quality page and agreement stop grouping every value of the store (1.05M values: 4.5 s of statistics and
    2.0 s of agreement on PostgreSQL at 1M episodes, growing with the store).

    A trigger on `field_values` (every path that writes values: the annotator, imports, undo, the cascade from
    an episode's deletion) keeps `field_places` (annotators per place; its partial index lists the shared ones)
    and `field_episodes` (places per episode and field), both keyed by episode, and appends one row to
    `field_count_changes` per value written or removed (+/-1 value, its timing, and the place and episode it
    filled or emptied). Nothing a writer touches is shared with writers in other episodes: study-wide counter
    rows updated in place made an import and an annotator saving elsewhere wait on each other and deadlock on
    PostgreSQL. `field_counts` holds the compacted sums (`pipelines/store/field_counts.compact`). Backfilled
    from the values in SQL, then the trigger is created, in the migration's transaction; on PostgreSQL
    `field_values` is locked against writers first, so a value written meanwhile by an older process is
    neither missed nor counted twice. SQLite and PostgreSQL only (the store supports no other)."""
    triggers = _FIELD_COUNT_TRIGGERS.get(conn.dialect.name)
    if triggers is None:
        raise SchemaVersionError(f"stepmark's store runs on SQLite or PostgreSQL, not {conn.dialect.name}")
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("LOCK TABLE field_values IN SHARE MODE")
    md = sa.MetaData()
    id_ = sa.String(64)
    name = sa.String(64)
    email = sa.String(320)
    places = sa.Table(
        "field_places", md,
        sa.Column("episode_id", id_, primary_key=True), sa.Column("field", name, primary_key=True),
        sa.Column("step_index", sa.Integer, primary_key=True), sa.Column("end_index", sa.Integer, primary_key=True),
        sa.Column("study_id", id_, nullable=False), sa.Column("annotators", sa.Integer, nullable=False),
    )  # fmt: skip
    shared = sa.text("annotators >= 2")
    sa.Index("ix_field_places_shared", places.c.study_id, places.c.field, places.c.episode_id,
             places.c.step_index, places.c.end_index, sqlite_where=shared, postgresql_where=shared)  # fmt: skip
    sa.Table(
        "field_episodes", md,
        sa.Column("episode_id", id_, primary_key=True), sa.Column("field", name, primary_key=True),
        sa.Column("study_id", id_, nullable=False), sa.Column("places", sa.Integer, nullable=False),
    )  # fmt: skip

    def counts() -> list[sa.Column]:
        return [sa.Column("entries", sa.Integer, nullable=False), sa.Column("timed", sa.Integer, nullable=False),
                sa.Column("seconds", sa.Float, nullable=False), sa.Column("places", sa.Integer, nullable=False),
                sa.Column("episodes", sa.Integer, nullable=False)]  # fmt: skip

    sa.Table(
        "field_counts", md,
        sa.Column("study_id", id_, primary_key=True), sa.Column("field", name, primary_key=True),
        sa.Column("user", email, primary_key=True), *counts(),
    )  # fmt: skip
    changes = sa.Table(
        "field_count_changes", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True), sa.Column("study_id", id_, nullable=False),
        sa.Column("field", name, nullable=False), sa.Column("user", email, nullable=False), *counts(),
    )  # fmt: skip
    sa.Index("ix_field_count_changes_study", changes.c.study_id, changes.c.id)
    md.create_all(conn)
    for statement in (
        "INSERT INTO field_places (episode_id, field, step_index, end_index, study_id, annotators) "
        "SELECT v.episode_id, v.field, v.step_index, v.end_index, e.study_id, COUNT(*) "
        "FROM field_values v JOIN episodes e ON e.id = v.episode_id "
        "GROUP BY v.episode_id, v.field, v.step_index, v.end_index, e.study_id",
        "INSERT INTO field_episodes (episode_id, field, study_id, places) "
        "SELECT episode_id, field, study_id, COUNT(*) FROM field_places GROUP BY episode_id, field, study_id",
        f'INSERT INTO field_counts (study_id, field, "user", {_COUNTS}) '
        'SELECT e.study_id, v.field, v."user", COUNT(*), COUNT(v.seconds), COALESCE(SUM(v.seconds), 0), 0, 0 '
        'FROM field_values v JOIN episodes e ON e.id = v.episode_id GROUP BY e.study_id, v.field, v."user"',
        f"INSERT INTO field_counts (study_id, field, \"user\", {_COUNTS}) "
        "SELECT study_id, field, '', 0, 0, 0, SUM(places), COUNT(*) FROM field_episodes GROUP BY study_id, field",
    ):
        conn.exec_driver_sql(statement)
    for statement in triggers:
        conn.exec_driver_sql(statement)
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("ANALYZE field_places, field_episodes, field_counts")


def _at(row: str, table: str = "") -> str:
    """`table.episode_id = row.episode_id AND ...` over a place's key."""
    prefix = f"{table}." if table else ""
    return " AND ".join(f"{prefix}{c} = {row}.{c}" for c in _PLACE)


_VALUE_COLUMNS = 'episode_id, field, step_index, end_index, "user", seconds'  # an UPDATE of these recounts
_CHANGE = f'INSERT INTO field_count_changes (study_id, field, "user", {_COUNTS}) '
# SQLite has no variables in triggers: each statement reads back what the one before it wrote (one writer at a
# time, so nothing else changes in between). The statements on OLD run before those on NEW (an UPDATE).
_SQLITE_OUT = (
    f"UPDATE field_places SET annotators = annotators - 1 WHERE {_at('OLD')};"
    # the study from the place (the episode may be gone already: a cascade from its deletion); the episode
    # empties when its last place does
    + _CHANGE
    + "SELECT p.study_id, OLD.field, OLD.\"user\", -1, -(OLD.seconds IS NOT NULL), -COALESCE(OLD.seconds, 0), "
    "-(p.annotators <= 0), -(p.annotators <= 0 AND (SELECT f.places FROM field_episodes f "
    "WHERE f.episode_id = OLD.episode_id AND f.field = OLD.field) <= 1) "
    f"FROM field_places p WHERE {_at('OLD', 'p')};"
    "UPDATE field_episodes SET places = places - 1 WHERE episode_id = OLD.episode_id AND field = OLD.field "
    f"AND EXISTS (SELECT 1 FROM field_places WHERE {_at('OLD')} AND annotators <= 0);"
    "DELETE FROM field_episodes WHERE episode_id = OLD.episode_id AND field = OLD.field AND places <= 0;"
    f"DELETE FROM field_places WHERE {_at('OLD')} AND annotators <= 0;"
)
_SQLITE_IN = (
    "INSERT INTO field_places (episode_id, field, step_index, end_index, study_id, annotators) "
    "VALUES (NEW.episode_id, NEW.field, NEW.step_index, NEW.end_index, "
    "(SELECT study_id FROM episodes WHERE id = NEW.episode_id), 1) "
    "ON CONFLICT (episode_id, field, step_index, end_index) DO UPDATE SET annotators = field_places.annotators + 1;"
    "INSERT INTO field_episodes (episode_id, field, study_id, places) "
    f"SELECT NEW.episode_id, NEW.field, study_id, 1 FROM field_places WHERE {_at('NEW')} AND annotators = 1 "
    "ON CONFLICT (episode_id, field) DO UPDATE SET places = field_episodes.places + 1;"
    + _CHANGE
    + "SELECT p.study_id, NEW.field, NEW.\"user\", 1, NEW.seconds IS NOT NULL, COALESCE(NEW.seconds, 0), "
    "p.annotators = 1, (p.annotators = 1 AND (SELECT f.places FROM field_episodes f "
    "WHERE f.episode_id = NEW.episode_id AND f.field = NEW.field) = 1) "
    f"FROM field_places p WHERE {_at('NEW', 'p')};"
)
# PostgreSQL: one function. It takes the row of (episode, field) in `field_episodes` before the place's row, so
# every writer in one episode locks the two in the same order (a save and an import in the same episode
# deadlocked when each held one); the upserts return the counts they leave, under the rows' locks.
_EPISODE_KEY = "f.episode_id = {0}.episode_id AND f.field = {0}.field"
_PG_FUNCTION = (
    "DECLARE sid VARCHAR(64); n INTEGER; m INTEGER; dp INTEGER; de INTEGER; BEGIN "
    "IF TG_OP <> 'INSERT' THEN "
    "sid := NULL; n := NULL; m := NULL; dp := 0; de := 0; "
    f"SELECT f.places INTO m FROM field_episodes f WHERE {_EPISODE_KEY.format('OLD')} FOR UPDATE; "
    f"UPDATE field_places p SET annotators = p.annotators - 1 WHERE {_at('OLD', 'p')} "
    "RETURNING p.study_id, p.annotators INTO sid, n; "
    "IF n <= 0 THEN "
    f"DELETE FROM field_places p WHERE {_at('OLD', 'p')}; dp := -1; "
    "IF m <= 1 THEN "
    f"DELETE FROM field_episodes f WHERE {_EPISODE_KEY.format('OLD')}; de := -1; "
    "ELSE "
    f"UPDATE field_episodes f SET places = f.places - 1 WHERE {_EPISODE_KEY.format('OLD')}; "
    "END IF; "
    "END IF; "
    "IF sid IS NULL THEN SELECT e.study_id INTO sid FROM episodes e WHERE e.id = OLD.episode_id; END IF; "
    "IF sid IS NOT NULL THEN "
    + _CHANGE
    + "VALUES (sid, OLD.field, OLD.\"user\", -1, -((OLD.seconds IS NOT NULL)::int), -COALESCE(OLD.seconds, 0), dp, de); "
    "END IF; "
    "END IF; "
    "IF TG_OP <> 'DELETE' THEN "
    "dp := 0; de := 0; "
    "SELECT e.study_id INTO sid FROM episodes e WHERE e.id = NEW.episode_id; "
    # the episode's row first (created with 0 places if the field has none there yet: this value fills one)
    "INSERT INTO field_episodes AS f (episode_id, field, study_id, places) VALUES (NEW.episode_id, NEW.field, sid, 0) "
    "ON CONFLICT (episode_id, field) DO UPDATE SET places = f.places RETURNING f.places INTO m; "
    "INSERT INTO field_places AS p (episode_id, field, step_index, end_index, study_id, annotators) "
    "VALUES (NEW.episode_id, NEW.field, NEW.step_index, NEW.end_index, sid, 1) "
    "ON CONFLICT (episode_id, field, step_index, end_index) DO UPDATE SET annotators = p.annotators + 1 "
    "RETURNING p.annotators INTO n; "
    "IF n = 1 THEN "
    "dp := 1; "
    f"UPDATE field_episodes f SET places = f.places + 1 WHERE {_EPISODE_KEY.format('NEW')}; "
    "IF m = 0 THEN de := 1; END IF; "
    "END IF; "
    + _CHANGE
    + "VALUES (sid, NEW.field, NEW.\"user\", 1, (NEW.seconds IS NOT NULL)::int, COALESCE(NEW.seconds, 0), dp, de); "
    "END IF; "
    "RETURN NULL; END"
)
_FIELD_COUNT_TRIGGERS: dict[str, tuple[str, ...]] = {
    "sqlite": (
        f"CREATE TRIGGER field_values_counted_insert AFTER INSERT ON field_values BEGIN {_SQLITE_IN} END",
        f"CREATE TRIGGER field_values_counted_delete AFTER DELETE ON field_values BEGIN {_SQLITE_OUT} END",
        f"CREATE TRIGGER field_values_counted_update AFTER UPDATE OF {_VALUE_COLUMNS} ON field_values "
        f"BEGIN {_SQLITE_OUT} {_SQLITE_IN} END",
    ),
    "postgresql": (
        f"CREATE FUNCTION stepmark_field_values_counted() RETURNS trigger LANGUAGE plpgsql AS $$ {_PG_FUNCTION} $$",
        f"CREATE TRIGGER field_values_counted AFTER INSERT OR DELETE OR UPDATE OF {_VALUE_COLUMNS} "
        "ON field_values FOR EACH ROW EXECUTE FUNCTION stepmark_field_values_counted()",
    ),
}


def _v11_audit_study_index(conn: Connection) -> None:
    """Version 11 (issue 21): an index (study_id, id) on the audit log, so a study's change mark (its newest
    audit id, `listing.mark`) is one probe of an index: summaries remembered per study are then given up only
    by a change in that study. Index only; independent of version 10."""
    conn.execute(sa.text("CREATE INDEX ix_audit_log_study ON audit_log (study_id, id)"))


def _v12_evaluation_runs(conn: Connection) -> None:
    """Version 12 (issue 33): `stepmark evaluate` runs (a study's predictions scored by name) and their per-step
    results; the index (run_id, matched, episode_id) lists a run's failed episodes for the Episodes page.
    Tables only; independent of versions 13 and 14 (other branches)."""
    md = sa.MetaData()
    id_ = sa.String(64)
    for t in ("studies", "episodes"):  # FK targets only
        sa.Table(t, md, sa.Column("id", id_, primary_key=True))
    sa.Table(
        "evaluation_runs",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("study_id", id_, sa.ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("predictions", sa.Text, nullable=False),
        sa.Column("created_by", sa.String(320), nullable=False),
        sa.Column("created_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("summary", sa.JSON, nullable=False),
        sa.UniqueConstraint("study_id", "name", name="uq_evaluation_runs_study_name"),
    )
    results = sa.Table(
        "evaluation_results",
        md,
        sa.Column(
            "run_id", sa.Integer, sa.ForeignKey("evaluation_runs.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("episode_id", id_, sa.ForeignKey("episodes.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("step_index", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("line", sa.Integer),
        sa.Column("recorded_type", sa.String(32)),
        sa.Column("predicted_type", sa.String(32)),
        sa.Column("matched", sa.Boolean),
        sa.Column("reason", sa.String(32)),
        sa.Column("recorded", sa.JSON),
        sa.Column("predicted", sa.JSON),
    )
    sa.Index("ix_evaluation_results_failed", results.c.run_id, results.c.matched, results.c.episode_id)
    md.create_all(conn, tables=[md.tables["evaluation_runs"], results])


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _v1_initial),
    Migration(
        2, "episodes.source_key for idempotent imports; audit log indexes", _v2_sources_and_audit_indexes
    ),
    Migration(3, "audit_log append-only (triggers)", _v3_append_only_audit_log),
    Migration(
        4,
        "tag palettes, study reviewers, unique study names per creator, one undo/redo per audit entry",
        _v4_palettes_reviewers_unique_names_reverts,
    ),
    # Issue 12 (work queue, agreement); numbered 5 so it merges after version 4. Independent of version 4.
    Migration(5, "work queues, per-annotator step labels, adjudications", _v5_queue_agreement),
    # Version 5 comes from another branch (issue 12); this one is self-contained and applies after it.
    Migration(6, "grounding annotations on UI steps", _v6_grounding_annotations),
    Migration(7, "indexes for paged, filtered and sorted episode lists", _v7_list_indexes),
    Migration(8, "episodes.kind (metadata.kind as a column, indexed) for aggregates", _v8_episode_kind),
    # Issue 26; independent of version 8 (issue 21: episodes.kind).
    Migration(9, "study fields: definitions, values, suggestions, adjudications", _v9_study_fields),
    Migration(10, "study field values counted by a trigger (places, episodes, changes to the counts)", _v10_field_counts),
    # Independent of version 10 (another branch): an index only.
    Migration(11, "audit log index (study_id, id): a study's change mark in one probe", _v11_audit_study_index),
    # Issue 33 (evaluate); numbered 12, independent of 13 and 14 (other branches).
    Migration(12, "evaluation runs and their per-step results", _v12_evaluation_runs),
)
CURRENT_VERSION = MIGRATIONS[-1].version


def source_key(metadata: object) -> str | None:
    """The import key of an episode from its metadata: "ui:<id>" for a UI record, else None."""
    if not isinstance(metadata, dict) or metadata.get("kind") != "ui":
        return None
    record = metadata.get("ui_record")
    if isinstance(record, dict) and record.get("episode_id"):
        return f"ui:{record['episode_id']}"
    return None


def schema_version(conn: Connection) -> int:
    """The database's schema version: 0 for an empty database."""
    inspector = sa.inspect(conn)
    if not inspector.has_table("schema_version"):
        ours = [t for t in _TABLES if inspector.has_table(t)]
        if ours:
            raise SchemaVersionError(
                f"database has stepmark tables ({', '.join(ours)}) but no schema_version table; "
                "it was not created by stepmark or is damaged"
            )
        return 0
    version = conn.execute(sa.text("SELECT MAX(version) FROM schema_version")).scalar()
    return int(version or 0)


def migrate(conn: Connection, target: int = CURRENT_VERSION) -> tuple[int, int]:
    """Bring the database to `target` inside the caller's transaction; returns (old, new) versions.

    Refuses a database newer than this code. The caller holds a write transaction (BEGIN IMMEDIATE on
    SQLite); on PostgreSQL an advisory lock serializes concurrent first opens.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
    current = schema_version(conn)
    if current > CURRENT_VERSION:
        raise SchemaVersionError(
            f"database schema version {current} is newer than this stepmark supports ({CURRENT_VERSION}); "
            "upgrade stepmark to open it"
        )
    if current == 0:
        sa.Table(
            "schema_version",
            sa.MetaData(),
            sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("applied_time", sa.DateTime(timezone=True), nullable=False),
            sa.Column("description", sa.Text, nullable=False),
        ).create(conn)
    for migration in MIGRATIONS:
        if current < migration.version <= target:
            migration.apply(conn)
            conn.execute(
                sa.text(
                    "INSERT INTO schema_version (version, applied_time, description) VALUES (:v, :t, :d)"
                ),
                {"v": migration.version, "t": datetime.now(UTC), "d": migration.description},
            )
    return current, max(current, target)

"""SQLAlchemy 2 models of the store: the current (latest) schema.

The rows hold the `rlds_creator` protos field by field so that the database can be queried (listings, filters)
without decoding blobs. Exceptions, on purpose:
- an environment spec is kept as the serialized `EnvironmentSpec` proto (`environments.spec`), so every proto2
  field, default and presence bit round-trips exactly and new spec fields need no migration; the id, name, order
  and family are copied into columns for look-ups;
- episode metadata (`google.protobuf.Struct`) is JSON.
Tags are rows with unique constraints (not a list in a column), so concurrent writers never overwrite each other.
The audit log is append-only: rows are inserted, never updated or deleted.

Fresh databases are built by running every migration in `migrations.py`, not by `create_all`; a test checks
that the migrated schema equals these models.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

ID = String(64)
EMAIL = String(320)
LABEL = String(256)
TIME = DateTime(timezone=True)


class Base(DeclarativeBase):
    pass


class SchemaVersion(Base):
    """One row per applied migration; the highest version is the database's schema version."""

    __tablename__ = "schema_version"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    applied_time: Mapped[datetime] = mapped_column(TIME)
    description: Mapped[str] = mapped_column(Text)


class StudyRow(Base):
    __tablename__ = "studies"
    # v4: a creator's study names are unique (import-ui finds or creates a study by name, race-free).
    __table_args__ = (Index("ux_studies_creator_name", "creator", "name", unique=True),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    description: Mapped[str | None] = mapped_column(Text)
    instructions: Mapped[str | None] = mapped_column(Text)
    creator: Mapped[str] = mapped_column(EMAIL, index=True)
    creation_time: Mapped[datetime] = mapped_column(TIME)
    state: Mapped[int] = mapped_column(Integer)  # StudySpec.State
    updated_time: Mapped[datetime] = mapped_column(TIME)
    # v4: the tag palette (labels for the digit keys 1-9, in order); NULL = no palette.
    palette: Mapped[list[str] | None] = mapped_column(JSON(none_as_null=True))

    environments: Mapped[list[EnvironmentRow]] = relationship(
        back_populates="study", order_by="EnvironmentRow.position", cascade="all, delete-orphan"
    )


class EnvironmentRow(Base):
    """One `EnvironmentSpec` of a study; `spec` is the serialized proto (the source of truth)."""

    __tablename__ = "environments"

    study_id: Mapped[str] = mapped_column(ID, ForeignKey("studies.id", ondelete="CASCADE"), primary_key=True)
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str | None] = mapped_column(Text)
    family: Mapped[str | None] = mapped_column(String(32))  # the `type` oneof case, e.g. "procgen"
    spec: Mapped[bytes] = mapped_column(LargeBinary)

    study: Mapped[StudyRow] = relationship(back_populates="environments")


class StudyReviewerRow(Base):
    """v4: a user with the reviewer role in a study (may change others' episode states and remove their tags)."""

    __tablename__ = "study_reviewers"

    study_id: Mapped[str] = mapped_column(ID, ForeignKey("studies.id", ondelete="CASCADE"), primary_key=True)
    user: Mapped[str] = mapped_column(EMAIL, primary_key=True)
    added_by: Mapped[str] = mapped_column(EMAIL)
    added_time: Mapped[datetime] = mapped_column(TIME)


class SessionRow(Base):
    __tablename__ = "sessions"
    __table_args__ = (Index("ix_sessions_study_user", "study_id", "user"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    study_id: Mapped[str] = mapped_column(ID, ForeignKey("studies.id", ondelete="CASCADE"))
    user: Mapped[str] = mapped_column(EMAIL)
    state: Mapped[int] = mapped_column(Integer)  # Session.State
    start_time: Mapped[datetime | None] = mapped_column(TIME)
    end_time: Mapped[datetime | None] = mapped_column(TIME)


class EpisodeRow(Base):
    __tablename__ = "episodes"
    __table_args__ = (
        Index("ix_episodes_session", "session_id"),
        # v2: an imported record is registered once per study (idempotent imports).
        Index("ux_episodes_study_source", "study_id", "source_key", unique=True),
        # v7: lists page in SQL; one index per sort and filter of the Episodes page (`listing.py`).
        Index("ix_episodes_study_registered", "study_id", "registered_time", "id"),
        Index("ix_episodes_registered", "registered_time", "id"),
        Index("ix_episodes_study_user", "study_id", "user", "id"),
        Index("ix_episodes_study_env", "study_id", "environment_id", "id"),
        Index("ix_episodes_study_state", "study_id", "state", "id"),
        Index("ix_episodes_study_steps", "study_id", "num_steps", "id"),
        Index("ix_episodes_study_reward", "study_id", "total_reward", "id"),
        Index("ix_episodes_study_kind", "study_id", "kind", "id"),  # v8: the report's kinds
        Index(
            "ix_episodes_study_notes", "study_id", "id",
            sqlite_where=sa.text("notes IS NOT NULL"), postgresql_where=sa.text("notes IS NOT NULL"),
        ),  # fmt: skip
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    study_id: Mapped[str] = mapped_column(ID, ForeignKey("studies.id", ondelete="CASCADE"))
    session_id: Mapped[str | None] = mapped_column(ID, ForeignKey("sessions.id", ondelete="CASCADE"))
    environment_id: Mapped[str | None] = mapped_column(String(128))
    user: Mapped[str] = mapped_column(EMAIL)
    state: Mapped[int] = mapped_column(Integer)  # Episode.State
    start_time: Mapped[datetime | None] = mapped_column(TIME)
    end_time: Mapped[datetime | None] = mapped_column(TIME)
    meta: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON)
    num_steps: Mapped[int | None] = mapped_column(Integer)
    total_reward: Mapped[float | None] = mapped_column(Float)
    # Episode.storage oneof: "environment_logger" (tag directory + index), "pickle" (path) or NULL (UI records).
    storage_kind: Mapped[str | None] = mapped_column(String(32))
    storage_tag_directory: Mapped[str | None] = mapped_column(Text)
    storage_index: Mapped[int | None] = mapped_column(Integer)
    storage_pickle_path: Mapped[str | None] = mapped_column(Text)
    notes: Mapped[str | None] = mapped_column(Text)
    controller_id: Mapped[str | None] = mapped_column(String(256))
    registered_time: Mapped[datetime] = mapped_column(TIME)
    # v2: where an imported episode came from ("ui:<UiEpisode.episode_id>"); NULL for recorded episodes.
    source_key: Mapped[str | None] = mapped_column(Text)
    # v8: `metadata.kind` ("ui", "env") as a column, so aggregates never read the JSON; NULL when it has none.
    kind: Mapped[str | None] = mapped_column(String(32))

    tags: Mapped[list[EpisodeTagRow]] = relationship(
        order_by="EpisodeTagRow.id", cascade="all, delete-orphan", passive_deletes=True
    )
    step_tags: Mapped[list[StepTagRow]] = relationship(
        order_by="StepTagRow.id", cascade="all, delete-orphan", passive_deletes=True
    )


class EpisodeTagRow(Base):
    __tablename__ = "episode_tags"
    __table_args__ = (
        UniqueConstraint("episode_id", "label", name="uq_episode_tags_episode_label"),
        Index("ix_episode_tags_label", "label", "episode_id"),  # v7: the tag filter
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    episode_id: Mapped[str] = mapped_column(ID, ForeignKey("episodes.id", ondelete="CASCADE"))
    label: Mapped[str] = mapped_column(LABEL)
    user: Mapped[str | None] = mapped_column(EMAIL)
    created_time: Mapped[datetime] = mapped_column(TIME)


class StepTagRow(Base):
    __tablename__ = "step_tags"
    __table_args__ = (
        UniqueConstraint("episode_id", "step_index", "label", name="uq_step_tags_episode_step_label"),
        Index("ix_step_tags_label", "label", "episode_id"),  # v7: the tag filter
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    episode_id: Mapped[str] = mapped_column(ID, ForeignKey("episodes.id", ondelete="CASCADE"))
    step_index: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(LABEL)
    user: Mapped[str | None] = mapped_column(EMAIL)
    created_time: Mapped[datetime] = mapped_column(TIME)


class AuditRow(Base):
    """Append-only log of every change (triggers refuse UPDATE/DELETE, migration 3). No foreign keys: entries
    outlive the episodes they describe.
    """

    __tablename__ = "audit_log"
    __table_args__ = (
        # v2: the Episodes page reads one episode's history; undo reads one user's latest changes.
        Index("ix_audit_log_episode", "episode_id", "id"),
        Index("ix_audit_log_user", "user", "id"),
        # v4: "is this entry undone/redone already?" and at most one undo/redo per entry, kept by the database.
        Index("ix_audit_log_undo_of", "undo_of"),
        Index("ux_audit_log_reverts", "reverts", unique=True),
        # v11: a study's change mark (its newest entry, `listing.mark`) in one probe.
        Index("ix_audit_log_study", "study_id", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[datetime] = mapped_column(TIME)
    user: Mapped[str] = mapped_column(EMAIL)
    action: Mapped[str] = mapped_column(String(64))
    study_id: Mapped[str | None] = mapped_column(ID)
    session_id: Mapped[str | None] = mapped_column(ID)
    episode_id: Mapped[str | None] = mapped_column(ID)
    step_index: Mapped[int | None] = mapped_column(Integer)
    before: Mapped[Any | None] = mapped_column(JSON(none_as_null=True))
    after: Mapped[Any | None] = mapped_column(JSON(none_as_null=True))
    # For an "undo" entry: the id of the entry it reverted; for a "redo" entry: the id of the undo it reverted.
    undo_of: Mapped[int | None] = mapped_column(Integer)
    # v4: the same id as `undo_of` on undo/redo entries written since version 4, under a unique index: two
    # concurrent undos can never both revert one entry. NULL on older entries and on every other action.
    reverts: Mapped[int | None] = mapped_column(Integer)


# -- work queue, per-annotator labels and adjudication (issue 12; migration 5) -------------------------------


class StudyQueueRow(Base):
    """A study's work queue: how many annotators label each episode and which episodes are queued.

    No row means overlap 1 over every episode of the study.
    """

    __tablename__ = "study_queues"

    study_id: Mapped[str] = mapped_column(ID, ForeignKey("studies.id", ondelete="CASCADE"), primary_key=True)
    overlap: Mapped[int] = mapped_column(Integer)
    environment_id: Mapped[str | None] = mapped_column(String(128))
    states: Mapped[list[str] | None] = mapped_column(JSON(none_as_null=True))  # Episode.State names
    tag: Mapped[str | None] = mapped_column(LABEL)
    updated_by: Mapped[str] = mapped_column(EMAIL)
    updated_time: Mapped[datetime] = mapped_column(TIME)


class QueueAssignmentRow(Base):
    """One annotator's slot on one episode. `slot` runs 0..overlap-1; the unique (episode, slot) constraint is
    what keeps two concurrent takers from both getting the last slot.
    """

    __tablename__ = "queue_assignments"
    __table_args__ = (
        UniqueConstraint("episode_id", "user", name="uq_queue_assignments_episode_user"),
        UniqueConstraint("episode_id", "slot", name="uq_queue_assignments_episode_slot"),
        Index("ix_queue_assignments_study_user", "study_id", "user"),
        Index("ix_queue_assignments_study_state", "study_id", "state", "episode_id"),  # v7: progress
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    study_id: Mapped[str] = mapped_column(ID, ForeignKey("studies.id", ondelete="CASCADE"))
    episode_id: Mapped[str] = mapped_column(ID, ForeignKey("episodes.id", ondelete="CASCADE"))
    user: Mapped[str] = mapped_column(EMAIL)
    slot: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))  # "open" | "done"
    assigned_time: Mapped[datetime] = mapped_column(TIME)
    done_time: Mapped[datetime | None] = mapped_column(TIME)


class AnnotatorStepLabelRow(Base):
    """One annotator's own label on one step (agreement's input), kept apart from the shared step tags."""

    __tablename__ = "annotator_step_labels"
    __table_args__ = (
        UniqueConstraint(
            "episode_id",
            "user",
            "step_index",
            "label",
            name="uq_annotator_step_labels_episode_user_step_label",
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    episode_id: Mapped[str] = mapped_column(ID, ForeignKey("episodes.id", ondelete="CASCADE"))
    user: Mapped[str] = mapped_column(EMAIL)
    step_index: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(LABEL)
    created_time: Mapped[datetime] = mapped_column(TIME)


class AdjudicationRow(Base):
    """An adjudicator's decision on a disputed step: the consensus labels (also written as its step tags)."""

    __tablename__ = "adjudications"
    __table_args__ = (UniqueConstraint("episode_id", "step_index", name="uq_adjudications_episode_step"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    episode_id: Mapped[str] = mapped_column(ID, ForeignKey("episodes.id", ondelete="CASCADE"))
    step_index: Mapped[int] = mapped_column(Integer)
    labels: Mapped[list[str]] = mapped_column(JSON)
    user: Mapped[str] = mapped_column(EMAIL)
    time: Mapped[datetime] = mapped_column(TIME)


class GroundingAnnotationRow(Base):
    """v6: one grounding annotation on a UI step (issue 11; rules in `pipelines/store/grounding.py`).

    `object_id` is the stable `Object.id` the annotation is about (NULL for `no_target`; a fresh id for a drawn
    `box`). `slot` names what a newer annotation by the same author replaces (`target` for target/no_target,
    `label:<object id>:<label>`, `wrong_box:<object id>`, `box:<object id>`): one row per author and slot.
    """

    __tablename__ = "grounding_annotations"
    __table_args__ = (
        Index("ix_grounding_annotations_episode_step", "episode_id", "step_index"),
        UniqueConstraint("episode_id", "step_index", "user", "slot", name="uq_grounding_annotations_slot"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    episode_id: Mapped[str] = mapped_column(ID, ForeignKey("episodes.id", ondelete="CASCADE"))
    step_index: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    object_id: Mapped[str | None] = mapped_column(ID)
    slot: Mapped[str] = mapped_column(String(320))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    user: Mapped[str] = mapped_column(EMAIL)
    created_time: Mapped[datetime] = mapped_column(TIME)


# -- study fields (issue 26; migration 9; rules in pipelines/store/field_values.py) ---------------------------

FIELD = String(64)


class StudyFieldRow(Base):
    """One field a study defines (schemas/study_fields.schema.json). A removed field stays with `active` false,
    so the values given to it stay readable and exportable."""

    __tablename__ = "study_fields"

    study_id: Mapped[str] = mapped_column(ID, ForeignKey("studies.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(FIELD, primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    scope: Mapped[str] = mapped_column(String(16))  # step | episode | segment
    kind: Mapped[str] = mapped_column(String(16))  # choice | multi_choice | text | number | boolean
    definition: Mapped[dict[str, Any]] = mapped_column(JSON)  # the field as the file gave it
    active: Mapped[bool] = mapped_column(Boolean)
    updated_by: Mapped[str] = mapped_column(EMAIL)
    updated_time: Mapped[datetime] = mapped_column(TIME)


class FieldValueRow(Base):
    """One annotator's value of one field: on a step (step_index = end_index), a segment (start..end) or the
    episode (-1, -1). `origin`: accepted (equal to a suggestion), edited (a suggestion existed), scratch,
    imported (`stepmark fields import` with a user). `seconds`: time the annotator spent on it (player)."""

    __tablename__ = "field_values"
    __table_args__ = (
        UniqueConstraint("episode_id", "field", "user", "step_index", "end_index", name="uq_field_values_slot"),
        Index("ix_field_values_episode_step", "episode_id", "step_index"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    episode_id: Mapped[str] = mapped_column(ID, ForeignKey("episodes.id", ondelete="CASCADE"))
    field: Mapped[str] = mapped_column(FIELD)
    step_index: Mapped[int] = mapped_column(Integer)
    end_index: Mapped[int] = mapped_column(Integer)
    user: Mapped[str] = mapped_column(EMAIL)
    value: Mapped[Any] = mapped_column(JSON)
    origin: Mapped[str] = mapped_column(String(16))
    seconds: Mapped[float | None] = mapped_column(Float)
    created_time: Mapped[datetime] = mapped_column(TIME)


class FieldSuggestionRow(Base):
    """A suggested value from a named source (a model, another tool), imported with `stepmark fields import`."""

    __tablename__ = "field_suggestions"
    __table_args__ = (
        UniqueConstraint(
            "episode_id", "field", "source", "step_index", "end_index", name="uq_field_suggestions_slot"
        ),
        Index("ix_field_suggestions_episode_step", "episode_id", "step_index"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    episode_id: Mapped[str] = mapped_column(ID, ForeignKey("episodes.id", ondelete="CASCADE"))
    field: Mapped[str] = mapped_column(FIELD)
    step_index: Mapped[int] = mapped_column(Integer)
    end_index: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(EMAIL)
    value: Mapped[Any] = mapped_column(JSON)
    created_time: Mapped[datetime] = mapped_column(TIME)


class FieldAdjudicationRow(Base):
    """An adjudicator's consensus value of one field where annotators disagree (what consensus exports use)."""

    __tablename__ = "field_adjudications"
    __table_args__ = (
        UniqueConstraint("episode_id", "field", "step_index", "end_index", name="uq_field_adjudications_slot"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    episode_id: Mapped[str] = mapped_column(ID, ForeignKey("episodes.id", ondelete="CASCADE"))
    field: Mapped[str] = mapped_column(FIELD)
    step_index: Mapped[int] = mapped_column(Integer)
    end_index: Mapped[int] = mapped_column(Integer)
    value: Mapped[Any] = mapped_column(JSON)
    user: Mapped[str] = mapped_column(EMAIL)
    time: Mapped[datetime] = mapped_column(TIME)


# v10 (issue 21): a study's field values counted as they are written, by triggers on `field_values` (migration
# 10), so the report and the Quality page read a row per field and annotator and agreement reads only the shared
# places instead of grouping every value of the store. Derived: nothing writes them but the triggers and
# `field_counts.compact`.


class FieldPlaceRow(Base):
    """A place of a field (a step, a segment or the episode) holding at least one value: how many
    annotators gave one. The partial index lists a study's shared places (two or more) in agreement order."""

    __tablename__ = "field_places"
    __table_args__ = (
        Index(
            "ix_field_places_shared", "study_id", "field", "episode_id", "step_index", "end_index",
            sqlite_where=sa.text("annotators >= 2"), postgresql_where=sa.text("annotators >= 2"),
        ),  # fmt: skip
    )

    episode_id: Mapped[str] = mapped_column(ID, primary_key=True)
    field: Mapped[str] = mapped_column(FIELD, primary_key=True)
    step_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    end_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[str] = mapped_column(ID)
    annotators: Mapped[int] = mapped_column(Integer)


class FieldEpisodeRow(Base):
    """An episode holding at least one value of a field: in how many places."""

    __tablename__ = "field_episodes"

    episode_id: Mapped[str] = mapped_column(ID, primary_key=True)
    field: Mapped[str] = mapped_column(FIELD, primary_key=True)
    study_id: Mapped[str] = mapped_column(ID)
    places: Mapped[int] = mapped_column(Integer)


class _FieldSums:
    """What a value's write adds to a field's counts (the changes) and what they add up to (the sums)."""

    entries: Mapped[int] = mapped_column(Integer)
    timed: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)
    places: Mapped[int] = mapped_column(Integer)
    episodes: Mapped[int] = mapped_column(Integer)


class FieldCountRow(_FieldSums, Base):
    """Per study, field and annotator: values given, how many the player timed, their seconds; the row of user
    "" holds the field's places and episodes holding a value. The compacted part of the counts: the changes
    since are in `field_count_changes` (`field_counts.compact` moves them here)."""

    __tablename__ = "field_counts"

    study_id: Mapped[str] = mapped_column(ID, primary_key=True)
    field: Mapped[str] = mapped_column(FIELD, primary_key=True)
    user: Mapped[str] = mapped_column(EMAIL, primary_key=True)


class FieldCountChangeRow(_FieldSums, Base):
    """One write of a value as the counts see it (+1 or -1 value, and the place or episode it filled or
    emptied): appended by the triggers, never updated, so writers in other episodes share no row and wait on
    no lock of each other's."""

    __tablename__ = "field_count_changes"
    __table_args__ = (Index("ix_field_count_changes_study", "study_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    study_id: Mapped[str] = mapped_column(ID)
    field: Mapped[str] = mapped_column(FIELD)
    user: Mapped[str] = mapped_column(EMAIL)


# -- evaluation runs (issue 33; migration 12; rules in pipelines/evaluation/runs.py) -----------------------------


class EvaluationRunRow(Base):
    """One `stepmark evaluate` run: a predictions file scored against a study's steps, stored under its name
    (unique per study). `summary`: the figures the command printed (schemas/evaluation.md)."""

    __tablename__ = "evaluation_runs"
    __table_args__ = (UniqueConstraint("study_id", "name", name="uq_evaluation_runs_study_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    study_id: Mapped[str] = mapped_column(ID, ForeignKey("studies.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    predictions: Mapped[str] = mapped_column(Text)  # the file it read
    created_by: Mapped[str] = mapped_column(EMAIL)
    created_time: Mapped[datetime] = mapped_column(TIME)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)


class EvaluationResultRow(Base):
    """One scored step of a run: the recorded and predicted actions (AndroidControl JSON), whether they
    matched and why not. `line` is the predictions file's line (NULL: no prediction, reason `missing`)."""

    __tablename__ = "evaluation_results"
    __table_args__ = (Index("ix_evaluation_results_failed", "run_id", "matched", "episode_id"),)

    run_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("evaluation_runs.id", ondelete="CASCADE"), primary_key=True
    )
    episode_id: Mapped[str] = mapped_column(
        ID, ForeignKey("episodes.id", ondelete="CASCADE"), primary_key=True
    )
    step_index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    line: Mapped[int | None] = mapped_column(Integer)
    recorded_type: Mapped[str | None] = mapped_column(String(32))
    predicted_type: Mapped[str | None] = mapped_column(String(32))
    matched: Mapped[bool | None] = mapped_column(Boolean)
    reason: Mapped[str | None] = mapped_column(String(32))
    recorded: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    predicted: Mapped[dict[str, Any] | None] = mapped_column(JSON)

"""Conversions between rows and `rlds_creator` protos: the only place that knows both shapes."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format, struct_pb2, timestamp_pb2
from google.protobuf.message import Message

from pipelines.store.audit import AuditEntry
from pipelines.store.migrations import KIND_LENGTH
from pipelines.store.models import (
    AuditRow,
    EnvironmentRow,
    EpisodeRow,
    EpisodeTagRow,
    SessionRow,
    StepTagRow,
    StudyRow,
)
from protos.rlds_creator import study_pb2


def utc(dt: datetime | None) -> datetime | None:
    """SQLite returns naive datetimes; everything the store writes is UTC."""
    if dt is None:
        return None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def to_datetime(ts: timestamp_pb2.Timestamp) -> datetime:
    return ts.ToDatetime(tzinfo=UTC)


def set_timestamp(ts: timestamp_pb2.Timestamp, dt: datetime | None) -> None:
    if dt is not None:
        ts.FromDatetime(utc(dt))


def message_json(message: Message) -> dict[str, Any]:
    """A proto as JSON for the audit log (field names as in the .proto)."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _plain(value: Any) -> Any:
    """Struct numbers are doubles; store whole numbers as JSON integers so SQL users read `3`, not `3.0`."""
    if isinstance(value, float) and value.is_integer() and math.isfinite(value) and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def struct_to_json(struct: struct_pb2.Struct) -> dict[str, Any]:
    return _plain(json_format.MessageToDict(struct))


def environment_family(spec: study_pb2.EnvironmentSpec) -> str | None:
    return spec.WhichOneof("type")


def environment_row(spec: study_pb2.EnvironmentSpec, position: int) -> EnvironmentRow:
    return EnvironmentRow(
        id=spec.id,
        position=position,
        name=spec.name if spec.HasField("name") else None,
        family=environment_family(spec),
        spec=spec.SerializeToString(deterministic=True),
    )


def environment_spec(row: EnvironmentRow) -> study_pb2.EnvironmentSpec:
    return study_pb2.EnvironmentSpec.FromString(row.spec)


def study_spec(row: StudyRow) -> study_pb2.StudySpec:
    spec = study_pb2.StudySpec(id=row.id, name=row.name, state=row.state)
    if row.description is not None:
        spec.description = row.description
    if row.instructions is not None:
        spec.instructions = row.instructions
    spec.creator.email = row.creator
    set_timestamp(spec.creation_time, row.creation_time)
    spec.environment_specs.extend(environment_spec(env) for env in row.environments)
    return spec


def session_proto(row: SessionRow) -> study_pb2.Session:
    session = study_pb2.Session(id=row.id, study_id=row.study_id, state=row.state)
    session.user.email = row.user
    set_timestamp(session.start_time, row.start_time)
    set_timestamp(session.end_time, row.end_time)
    return session


def metadata_kind(meta: dict[str, Any] | None) -> str | None:
    """`episodes.kind` (v8) of an episode's metadata: its "kind" when that is a string of at most 32 characters
    (what migration 8 backfills), else None."""
    kind = (meta or {}).get("kind")
    return kind if isinstance(kind, str) and len(kind) <= KIND_LENGTH else None


def episode_columns(episode: study_pb2.Episode) -> dict[str, Any]:
    """Column values of an episode row from the proto (everything but id, tags and bookkeeping)."""
    storage = episode.storage
    kind = storage.WhichOneof("type") if episode.HasField("storage") else None
    meta = struct_to_json(episode.metadata) if episode.HasField("metadata") else None
    return {
        "study_id": episode.study_id,
        "session_id": episode.session_id or None,
        "environment_id": episode.environment_id or None,
        "user": episode.user.email,
        "state": episode.state,
        "start_time": to_datetime(episode.start_time) if episode.HasField("start_time") else None,
        "end_time": to_datetime(episode.end_time) if episode.HasField("end_time") else None,
        "meta": meta,
        "kind": metadata_kind(meta),
        "num_steps": episode.num_steps if episode.HasField("num_steps") else None,
        "total_reward": episode.total_reward if episode.HasField("total_reward") else None,
        "storage_kind": kind,
        "storage_tag_directory": (
            storage.environment_logger.tag_directory if kind == "environment_logger" else None
        ),
        "storage_index": storage.environment_logger.index if kind == "environment_logger" else None,
        "storage_pickle_path": storage.pickle.path if kind == "pickle" else None,
        "notes": episode.notes if episode.HasField("notes") else None,
        "controller_id": episode.controller_id if episode.HasField("controller_id") else None,
    }


def episode_proto(
    row: EpisodeRow, tags: list[EpisodeTagRow] | None = None, step_tags: list[StepTagRow] | None = None
) -> study_pb2.Episode:
    """The full episode: tags, notes and step_metadata included (tags in the order they were added)."""
    episode = study_pb2.Episode(id=row.id, study_id=row.study_id, state=row.state)
    if row.session_id is not None:
        episode.session_id = row.session_id
    if row.environment_id is not None:
        episode.environment_id = row.environment_id
    episode.user.email = row.user
    set_timestamp(episode.start_time, row.start_time)
    set_timestamp(episode.end_time, row.end_time)
    if row.meta is not None:
        episode.metadata.update(row.meta)
    if row.num_steps is not None:
        episode.num_steps = row.num_steps
    if row.total_reward is not None:
        episode.total_reward = row.total_reward
    if row.storage_kind == "environment_logger":
        episode.storage.environment_logger.tag_directory = row.storage_tag_directory or ""
        if row.storage_index is not None:
            episode.storage.environment_logger.index = row.storage_index
    elif row.storage_kind == "pickle":
        episode.storage.pickle.path = row.storage_pickle_path or ""
    if row.notes is not None:
        episode.notes = row.notes
    if row.controller_id is not None:
        episode.controller_id = row.controller_id
    for tag in row.tags if tags is None else tags:
        episode.tags.add(label=tag.label)
    for tag in row.step_tags if step_tags is None else step_tags:
        episode.step_metadata[tag.step_index].tags.add(label=tag.label)
    return episode


def audit_entry(row: AuditRow) -> AuditEntry:
    return AuditEntry(
        id=row.id,
        time=utc(row.time),  # type: ignore[arg-type]
        user=row.user,
        action=row.action,
        study_id=row.study_id,
        session_id=row.session_id,
        episode_id=row.episode_id,
        step_index=row.step_index,
        before=row.before,
        after=row.after,
        undo_of=row.undo_of,
    )

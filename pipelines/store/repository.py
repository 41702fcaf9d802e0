"""The store's one entry point: every operation is a method, every write one transaction with its audit row.

Methods take and return `rlds_creator` protos (episode references are `client_pb2.EpisodeRef`); rows never
leave this module. Rules of the reference implemented here:
- updating a study ignores its read-only fields (creator, creation time, state);
- only the creator updates, enables or disables a study;
- a disabled study takes no new sessions and no new episodes;
- episodes of an INVALID session are left out of listings (unless asked for);
- an episode may be deleted by its own user or by the study's creator;
- anyone may add tags; another user's episode state, and a tag someone else added, may be changed only by the
  episode's user, the study's creator or a reviewer of the study (`PermissionDenied` otherwise);
- a creator's study names are unique (a unique index: concurrent creations cannot both succeed).
Tags are rows under unique constraints, added with INSERT ... ON CONFLICT DO NOTHING, and notes/state changes
lock the episode row, so concurrent writers (two annotators, two processes) never lose each other's changes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from pipelines.store import access, listing, mapping, revert, tags
from pipelines.store.access import now
from pipelines.store.audit import AuditAction, AuditEntry
from pipelines.store.database import WRITE
from pipelines.store.errors import (
    AlreadyExists,
    Conflict,
    InvalidSpec,
    NameTaken,
    NotFound,
    PermissionDenied,
    SourceTaken,
    StoreError,
    StudyDisabled,
)
from pipelines.store.listing import Cursor, EpisodeQuery, Sort
from pipelines.store.migrations import source_key
from pipelines.store.models import (
    AuditRow,
    EnvironmentRow,
    EpisodeRow,
    EpisodeTagRow,
    SessionRow,
    StepTagRow,
    StudyRow,
)
from pipelines.store.roles import StudyRoles
from pipelines.store.roles import label as _label
from protos.rlds_creator import study_pb2

T = TypeVar("T")
SUMMARIES_REMEMBERED = 16  # studies' summaries (the Quality page's) kept at once, each until its study changes
# ... and for at most this long (what no audit entry marks: out-of-order commits on PostgreSQL, own queue labels
# changed after `queue.done`).
# Longer than a summary takes to make (8-10 s at a million episodes): counted from before it is made, a 10 s
# age had expired by the time the page that asked for it was reloaded.
SUMMARIES_MAX_AGE = 60.0

StudySpec = study_pb2.StudySpec
Episode = study_pb2.Episode
SessionProto = study_pb2.Session
EpisodeRef = access.EpisodeRef

_ENABLED = StudySpec.STATE_ENABLED
_DISABLED = StudySpec.STATE_DISABLED
_INVALID = SessionProto.STATE_INVALID
MAX_SEGMENT_STEPS = 100_000
MAX_STUDY_NAME = 500


def new_id() -> str:
    """A short random id (uuid4, hex)."""
    return uuid.uuid4().hex


_now = now  # the store's clock (`access.now`)


def _state_name(enum: Any, value: int) -> str:
    try:
        return enum.Name(value)
    except ValueError:
        return str(value)


def validate_spec(spec: StudySpec, source: str = "study spec") -> None:
    """Rules a stored study must meet; messages name the source and the field."""
    if not spec.name.strip():
        raise InvalidSpec(f"{source}: field 'name' is required")
    if len(spec.name) > MAX_STUDY_NAME:
        raise InvalidSpec(
            f"{source}: field 'name' is {len(spec.name)} characters long; the limit is {MAX_STUDY_NAME}"
        )
    if len(spec.id) > 64:
        raise InvalidSpec(f"{source}: field id is longer than 64 characters")
    seen: set[str] = set()
    for i, env in enumerate(spec.environment_specs):
        if not env.id.strip():
            raise InvalidSpec(f"{source}: field environment_specs[{i}].id is required (unique in the study)")
        if len(env.id) > 128:
            raise InvalidSpec(f"{source}: field environment_specs[{i}].id is longer than 128 characters")
        if env.id in seen:
            raise InvalidSpec(f"{source}: field environment_specs[{i}].id {env.id!r} is used twice")
        seen.add(env.id)


class Repository(StudyRoles):
    """Studies, sessions, episodes, tags and the audit log, over one SQLAlchemy engine."""

    def __init__(self, engine: Engine, data_dir: str | Path | None = None) -> None:
        self._counts = listing.Counts()
        self._summaries = listing.UntilChanged(size=SUMMARIES_REMEMBERED, max_age=SUMMARIES_MAX_AGE)
        self.engine = engine
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self._write_engine = engine.execution_options(**{WRITE: True})

    # -- plumbing ---------------------------------------------------------------------------------------------

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Repository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    @contextmanager
    def _write(self) -> Iterator[Session]:
        """One write transaction (BEGIN IMMEDIATE on SQLite); commits on success, rolls back on error."""
        with Session(self._write_engine, expire_on_commit=False) as s, s.begin():
            yield s

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self.engine) as s, s.begin():
            yield s

    @staticmethod
    def _audit(
        s: Session,
        user: str,
        action: AuditAction,
        *,
        study_id: str | None = None,
        session_id: str | None = None,
        episode_id: str | None = None,
        step_index: int | None = None,
        before: Any = None,
        after: Any = None,
        undo_of: int | None = None,
    ) -> AuditRow:
        row = AuditRow(
            time=_now(),
            user=user,
            action=str(action),
            study_id=study_id,
            session_id=session_id,
            episode_id=episode_id,
            step_index=step_index,
            before=before,
            after=after,
            undo_of=undo_of,
        )
        s.add(row)
        s.flush()
        return row

    @staticmethod
    def _study_row(s: Session, study_id: str, *, lock: bool = False) -> StudyRow:
        row = s.get(StudyRow, study_id, with_for_update=lock or None)
        if row is None:
            raise NotFound(f"study {study_id!r} not found")
        return row

    @staticmethod
    def _episode_row(s: Session, ref: EpisodeRef, *, lock: bool = False) -> EpisodeRow:
        if not ref.episode_id:
            raise NotFound("episode reference has no episode_id")
        row = s.get(EpisodeRow, ref.episode_id, with_for_update={"key_share": True} if lock else None)
        if (
            row is None
            or (ref.study_id and row.study_id != ref.study_id)
            or (ref.session_id and row.session_id != ref.session_id)
        ):
            raise NotFound(
                f"episode {ref.episode_id!r} not found"
                + (f" in study {ref.study_id!r}" if ref.study_id else "")
                + (f" session {ref.session_id!r}" if ref.session_id else "")
            )
        return row

    @staticmethod
    def _where(row: EpisodeRow) -> dict[str, Any]:
        return {"study_id": row.study_id, "session_id": row.session_id, "episode_id": row.id}

    @staticmethod
    def ref(episode: Episode) -> EpisodeRef:
        """The reference of an episode proto."""
        return EpisodeRef(study_id=episode.study_id, session_id=episode.session_id, episode_id=episode.id)

    # -- studies ----------------------------------------------------------------------------------------------

    def create_study(self, spec: StudySpec, creator: str) -> StudySpec:
        """Store a new study (id from the spec or a new one); creator, creation time and state are set here."""
        validate_spec(spec)
        if not creator:
            raise StoreError("a study needs a creator")
        study_id = spec.id or new_id()
        now = _now()
        with self._write() as s:
            if s.get(StudyRow, study_id) is not None:
                raise AlreadyExists(f"study {study_id!r} already exists")
            self._check_name_free(s, creator, spec.name, None)
            row = StudyRow(
                id=study_id,
                name=spec.name,
                description=spec.description if spec.HasField("description") else None,
                instructions=spec.instructions if spec.HasField("instructions") else None,
                creator=creator,
                creation_time=now,
                state=_ENABLED,
                updated_time=now,
            )
            row.environments = [
                mapping.environment_row(env, i) for i, env in enumerate(spec.environment_specs)
            ]
            s.add(row)
            self._flush_study(s, creator, spec.name)
            result = mapping.study_spec(row)
            self._audit(
                s, creator, AuditAction.STUDY_CREATE, study_id=study_id, after=mapping.message_json(result)
            )
            return result

    def save_study(self, spec: StudySpec, user: str) -> StudySpec:
        """Update a study's name, description, instructions and environments; read-only fields are ignored.

        Only the creator may do it. An environment that already has episodes cannot be removed.
        """
        if not spec.id:
            raise InvalidSpec("study spec has no id; use create_study for a new study")
        validate_spec(spec)
        with self._write() as s:
            row = self._study_row(s, spec.id, lock=True)
            if row.creator != user:
                raise PermissionDenied(f"only the creator ({row.creator}) may update study {row.id!r}")
            before = mapping.study_spec(row)
            if spec.name != before.name:
                self._check_name_free(s, row.creator, spec.name, row.id)
            new_ids = {env.id for env in spec.environment_specs}
            for env in row.environments:
                if env.id not in new_ids:
                    used = s.scalar(
                        sa.select(sa.func.count())
                        .select_from(EpisodeRow)
                        .where(EpisodeRow.study_id == row.id, EpisodeRow.environment_id == env.id)
                    )
                    if used:
                        raise InvalidSpec(
                            f"study {row.id!r}: environment {env.id!r} has {used} episode(s) and cannot be removed"
                        )
            row.name = spec.name
            row.description = spec.description if spec.HasField("description") else None
            row.instructions = spec.instructions if spec.HasField("instructions") else None
            row.updated_time = _now()
            existing = {env.id: env for env in row.environments}
            envs: list[EnvironmentRow] = []
            for i, env_spec in enumerate(spec.environment_specs):
                fresh = mapping.environment_row(env_spec, i)
                env = existing.get(env_spec.id)
                if env is None:
                    envs.append(fresh)
                else:
                    env.position, env.name, env.family, env.spec = (
                        fresh.position,
                        fresh.name,
                        fresh.family,
                        fresh.spec,
                    )
                    envs.append(env)
            row.environments = envs
            self._flush_study(s, row.creator, spec.name)
            result = mapping.study_spec(row)
            self._audit(
                s,
                user,
                AuditAction.STUDY_UPDATE,
                study_id=row.id,
                before=mapping.message_json(before),
                after=mapping.message_json(result),
            )
            return result

    @staticmethod
    def _check_name_free(s: Session, creator: str, name: str, study_id: str | None) -> None:
        taken = s.scalar(sa.select(StudyRow.id).where(StudyRow.creator == creator, StudyRow.name == name))
        if taken is not None and taken != study_id:
            raise NameTaken(f"{creator} already has a study named {name!r} ({taken})")

    @staticmethod
    def _flush_study(s: Session, creator: str, name: str) -> None:
        """Flush a new or renamed study; the unique index decides a race between two creators of one name."""
        try:
            s.flush()
        except IntegrityError as exc:
            raise AlreadyExists(
                f"{creator} already has a study named {name!r} (created concurrently)"
            ) from exc

    def find_study_by_name(self, name: str, creator: str | None = None) -> list[StudySpec]:
        """Studies called `name` (of one creator when given), oldest first."""
        with self._read() as s:
            query = sa.select(StudyRow).where(StudyRow.name == name)
            if creator is not None:
                query = query.where(StudyRow.creator == creator)
            rows = s.scalars(query.order_by(StudyRow.creation_time, StudyRow.id)).all()
            return [mapping.study_spec(row) for row in rows]

    def get_study(self, study_id: str) -> StudySpec:
        with self._read() as s:
            return mapping.study_spec(self._study_row(s, study_id))

    def list_studies(self, creator: str | None = None) -> list[StudySpec]:
        """All studies (or one creator's), oldest first."""
        with self._read() as s:
            query = sa.select(StudyRow).options(selectinload(StudyRow.environments))
            if creator is not None:
                query = query.where(StudyRow.creator == creator)
            rows = s.scalars(query.order_by(StudyRow.creation_time, StudyRow.id)).all()
            return [mapping.study_spec(row) for row in rows]

    def enable_study(self, study_id: str, enable: bool, user: str) -> StudySpec:
        """Enable or disable a study; only its creator may."""
        with self._write() as s:
            row = self._study_row(s, study_id, lock=True)
            if row.creator != user:
                action = "enable" if enable else "disable"
                raise PermissionDenied(f"only the creator ({row.creator}) may {action} study {study_id!r}")
            before = row.state
            row.state = _ENABLED if enable else _DISABLED
            row.updated_time = _now()
            self._audit(
                s,
                user,
                AuditAction.STUDY_ENABLE if enable else AuditAction.STUDY_DISABLE,
                study_id=study_id,
                before={"state": _state_name(StudySpec.State, before)},
                after={"state": _state_name(StudySpec.State, row.state)},
            )
            s.flush()
            return mapping.study_spec(row)

    def get_environment(self, study_id: str, env_id: str) -> study_pb2.EnvironmentSpec:
        with self._read() as s:
            row = s.get(EnvironmentRow, (study_id, env_id))
            if row is None:
                self._study_row(s, study_id)  # NotFound for the study first
                raise NotFound(f"study {study_id!r} has no environment {env_id!r}")
            return mapping.environment_spec(row)

    def episode_counts(self, *, include_invalid_sessions: bool = False) -> dict[str, int]:
        """Number of episodes per study id (studies without episodes are absent); aggregates only."""
        with self._read() as s:
            q = EpisodeQuery(include_invalid_sessions=include_invalid_sessions)
            return listing.grouped(s, q, EpisodeRow.study_id)

    # -- sessions ---------------------------------------------------------------------------------------------

    def create_session(self, study_id: str, user: str) -> SessionProto:
        """A new VALID session of `user` in an enabled study."""
        with self._write() as s:
            study = self._study_row(s, study_id)
            if study.state == _DISABLED:
                raise StudyDisabled(f"study {study_id!r} is disabled and takes no new sessions")
            row = SessionRow(
                id=new_id(), study_id=study_id, user=user, state=SessionProto.STATE_VALID, start_time=_now()
            )
            s.add(row)
            s.flush()
            result = mapping.session_proto(row)
            self._audit(
                s, user, AuditAction.SESSION_CREATE, study_id=study_id, session_id=row.id,
                after=mapping.message_json(result),
            )  # fmt: skip
            return result

    def get_session(self, session_id: str) -> SessionProto:
        with self._read() as s:
            row = s.get(SessionRow, session_id)
            if row is None:
                raise NotFound(f"session {session_id!r} not found")
            return mapping.session_proto(row)

    def list_sessions(self, study_id: str | None = None, user: str | None = None) -> list[SessionProto]:
        with self._read() as s:
            query = sa.select(SessionRow)
            if study_id is not None:
                query = query.where(SessionRow.study_id == study_id)
            if user is not None:
                query = query.where(SessionRow.user == user)
            rows = s.scalars(query.order_by(SessionRow.start_time, SessionRow.id)).all()
            return [mapping.session_proto(row) for row in rows]

    def set_session_state(self, session_id: str, state: int, user: str | None = None) -> SessionProto:
        """Mark a session VALID or INVALID (episodes of an invalid session are ignored by listings)."""
        if state not in SessionProto.State.values():
            raise StoreError(f"unknown session state {state}")
        with self._write() as s:
            row = s.get(SessionRow, session_id, with_for_update=True)
            if row is None:
                raise NotFound(f"session {session_id!r} not found")
            before = row.state
            row.state = state
            self._audit(
                s, user or row.user, AuditAction.SESSION_STATE, study_id=row.study_id, session_id=row.id,
                before={"state": _state_name(SessionProto.State, before)},
                after={"state": _state_name(SessionProto.State, state)},
            )  # fmt: skip
            return mapping.session_proto(row)

    def end_session(self, session_id: str, user: str | None = None) -> SessionProto:
        """Set the session's end time (now)."""
        with self._write() as s:
            row = s.get(SessionRow, session_id, with_for_update=True)
            if row is None:
                raise NotFound(f"session {session_id!r} not found")
            row.end_time = _now()
            self._audit(
                s, user or row.user, AuditAction.SESSION_END, study_id=row.study_id, session_id=row.id,
                after={"end_time": row.end_time.isoformat()},
            )  # fmt: skip
            return mapping.session_proto(row)

    # -- episodes ---------------------------------------------------------------------------------------------

    def _insert_episode(self, s: Session, episode: Episode, studies: dict[str, StudyRow]) -> EpisodeRow:
        if not episode.study_id:
            raise StoreError("episode has no study_id")
        if not episode.user.email:
            raise StoreError("episode has no user")
        study = studies.get(episode.study_id) or self._study_row(s, episode.study_id)
        studies[study.id] = study
        if study.state == _DISABLED:
            raise StudyDisabled(f"study {study.id!r} is disabled and takes no new episodes")
        if not episode.environment_id:
            raise StoreError(f"episode for study {study.id!r} has no environment_id")
        if episode.environment_id not in {env.id for env in study.environments}:
            raise NotFound(f"study {study.id!r} has no environment {episode.environment_id!r}")
        if episode.session_id:
            session = s.get(SessionRow, episode.session_id)
            if session is None or session.study_id != study.id:
                raise NotFound(f"session {episode.session_id!r} not found in study {study.id!r}")
        episode_id = episode.id or new_id()
        if len(episode_id) > 64:
            raise StoreError(f"episode id {episode_id[:70]!r}... is longer than 64 characters")
        if s.get(EpisodeRow, episode_id) is not None:
            raise AlreadyExists(f"episode {episode_id!r} already exists")
        columns = mapping.episode_columns(episode)
        key = source_key(columns["meta"])
        if key is not None:
            existing = s.scalar(
                sa.select(EpisodeRow.id).where(EpisodeRow.study_id == study.id, EpisodeRow.source_key == key)
            )
            if existing is not None:
                raise SourceTaken(f"study {study.id!r} already has {key} as episode {existing!r}")
        now = _now()
        row = EpisodeRow(id=episode_id, registered_time=now, source_key=key, **columns)
        row.tags = [
            EpisodeTagRow(label=_label(t.label), user=row.user, created_time=now) for t in episode.tags
        ]
        row.step_tags = [
            StepTagRow(step_index=index, label=_label(t.label), user=row.user, created_time=now)
            for index, meta in sorted(episode.step_metadata.items())
            for t in meta.tags
        ]
        s.add(row)
        s.flush()
        self._audit(
            s, row.user, AuditAction.EPISODE_ADD, **self._where(row),
            after=mapping.message_json(mapping.episode_proto(row)),
        )  # fmt: skip
        return row

    def add_episode(self, episode: Episode) -> Episode:
        """Register a finished episode (its files complete); refused if the study is disabled."""
        with self._write() as s:
            return mapping.episode_proto(self._insert_episode(s, episode, {}))

    def add_episodes(
        self, episodes: Iterable[Episode], *, skip_existing_sources: bool = True
    ) -> list[Episode]:
        """Register many episodes in one transaction; returns those added.

        With `skip_existing_sources`, an episode whose source (e.g. UI record id) is already in its study is
        skipped instead of failing the batch: re-importing the same records adds nothing.
        """
        batch = list(episodes)
        for attempt in range(5):
            try:
                return self._add_episodes(batch, skip_existing_sources)
            except (IntegrityError, SourceTaken) as exc:
                # Another process registered one of these sources after our check: its commit came between our
                # check and the insert's own (PostgreSQL reads each statement's newest commits), or the unique
                # index waited for it. A new transaction sees it and skips it.
                if isinstance(exc, SourceTaken) and not skip_existing_sources:
                    raise
                if not skip_existing_sources or attempt == 4:
                    raise AlreadyExists("an episode of this batch was registered concurrently") from None
        return []

    def _add_episodes(self, episodes: list[Episode], skip_existing_sources: bool) -> list[Episode]:
        added: list[Episode] = []
        studies: dict[str, StudyRow] = {}
        with self._write() as s:
            for episode in episodes:
                if skip_existing_sources:
                    meta = mapping.struct_to_json(episode.metadata) if episode.HasField("metadata") else None
                    key = source_key(meta)
                    if key is not None and s.scalar(
                        sa.select(EpisodeRow.id).where(
                            EpisodeRow.study_id == episode.study_id, EpisodeRow.source_key == key
                        )
                    ):
                        continue
                added.append(mapping.episode_proto(self._insert_episode(s, episode, studies)))
        return added

    def source_keys(self, study_id: str) -> dict[str, str]:
        """Import keys already in a study ("ui:<id>" -> episode id)."""
        with self._read() as s:
            rows = s.execute(
                sa.select(EpisodeRow.source_key, EpisodeRow.id).where(
                    EpisodeRow.study_id == study_id, EpisodeRow.source_key.is_not(None)
                )
            )
            return {key: episode_id for key, episode_id in rows.all()}

    def analyze(self) -> None:
        """Refresh the planner's statistics of the tables lists filter (after a bulk import). Without them
        SQLite takes `study_id = ?` for a selective condition and, e.g., walks a million-episode study to
        find a tag's few episodes (2.6 s) instead of starting from the tag (36 ms). SQLite: ANALYZE with an
        analysis limit (milliseconds at a million rows); PostgreSQL: VACUUM (ANALYZE) of those tables, which also
        marks their pages all-visible, so counts and page jumps read the indexes only (autovacuum does it too,
        later; a vacuum after a small import skips the pages already visible)."""
        tables = ("episodes", "episode_tags", "step_tags", "queue_assignments", "annotator_step_labels",
                  "field_values", "field_places")
        with self.engine.connect() as conn:
            if self.engine.dialect.name == "sqlite":
                conn.exec_driver_sql("PRAGMA analysis_limit = 1000")
                for table in tables:
                    conn.exec_driver_sql(f"ANALYZE {table}")
            elif self.engine.dialect.name == "postgresql":
                conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                    f"VACUUM (ANALYZE) {', '.join(tables)}"
                )
            conn.commit()

    def known_sources(self, study_id: str, keys: Sequence[str]) -> set[str]:
        """Which of these import keys the study has already (one indexed query per 500 keys)."""
        found: set[str] = set()
        with self._read() as s:
            for start in range(0, len(keys), 500):
                found.update(
                    s.scalars(
                        sa.select(EpisodeRow.source_key).where(
                            EpisodeRow.study_id == study_id, EpisodeRow.source_key.in_(keys[start : start + 500])
                        )
                    )
                )
        return found

    def get_episode(self, ref: EpisodeRef) -> Episode:
        """The episode with its tags, notes and step_metadata."""
        with self._read() as s:
            return mapping.episode_proto(self._episode_row(s, ref))

    def episodes_by_refs(self, refs: Sequence[EpisodeRef]) -> list[Episode]:
        """One episode per reference, in order; NotFound if any is missing.

        Episodes of INVALID sessions are included: the caller (export) reports them as skipped, with the reason.
        """
        with self._read() as s:
            rows = s.scalars(
                sa.select(EpisodeRow)
                .where(EpisodeRow.id.in_([r.episode_id for r in refs]))
                .options(selectinload(EpisodeRow.tags), selectinload(EpisodeRow.step_tags))
            ).all()
            by_id = {row.id: row for row in rows}
            result = []
            for ref in refs:
                row = by_id.get(ref.episode_id)
                if (
                    row is None
                    or (ref.study_id and row.study_id != ref.study_id)
                    or (ref.session_id and row.session_id != ref.session_id)
                ):
                    raise NotFound(f"episode {ref.episode_id!r} not found")
                result.append(mapping.episode_proto(row))
            return result

    def refs_of(self, episode_ids: Iterable[str]) -> dict[str, EpisodeRef]:
        """The full references of these episodes (absent ones left out), 500 ids per query."""
        ids = list(dict.fromkeys(episode_ids))
        out: dict[str, EpisodeRef] = {}
        with self._read() as s:
            for start in range(0, len(ids), 500):
                query = sa.select(EpisodeRow.id, EpisodeRow.study_id, EpisodeRow.session_id).where(
                    EpisodeRow.id.in_(ids[start : start + 500])
                )
                for episode_id, study_id, session_id in s.execute(query):
                    out[episode_id] = EpisodeRef(
                        study_id=study_id, session_id=session_id or "", episode_id=episode_id
                    )
        return out

    @staticmethod
    def _valid_sessions_only(query: sa.Select) -> sa.Select:
        return listing.valid_sessions_only(query)

    def list_episodes(
        self,
        *,
        study_id: str | None = None,
        session_id: str | None = None,
        env_id: str | None = None,
        states: Iterable[int] | None = None,
        tag: str | None = None,
        user: str | None = None,
        notes_query: str | None = None,
        include_invalid_sessions: bool = False,
    ) -> list[Episode]:
        """Episodes matching every given filter, in registration order: all of them in memory, for small
        selections (a session, an export's explicit choice). Lists a page shows use `page_episodes`.

        `tag` matches an episode tag or a tag on any of its steps; `notes_query` is a case-insensitive
        substring of the notes. Episodes of INVALID sessions are left out unless `include_invalid_sessions`.
        """
        q = EpisodeQuery(
            study_id, session_id, env_id, None if states is None else tuple(states), tag, user, notes_query,
            include_invalid_sessions,
        )  # fmt: skip
        query = listing.where(sa.select(EpisodeRow), q).options(
            selectinload(EpisodeRow.tags), selectinload(EpisodeRow.step_tags)
        )
        with self._read() as s:
            rows = s.scalars(query.order_by(EpisodeRow.registered_time, EpisodeRow.id)).all()
            return [mapping.episode_proto(row) for row in rows]

    def page_episodes(
        self, q: EpisodeQuery, sort: Sort | None = None, after: Cursor | None = None, limit: int = 50
    ) -> list[tuple[Episode, Cursor]]:
        """One page of a filtered, sorted list (keyset: the rows after `after`), each episode with its cursor;
        tags and step tags of the page's episodes only."""
        with self._read() as s:
            ids = listing.page_ids(s, q, sort or Sort(), after, limit)
            if not ids:
                return []
            rows = s.scalars(
                sa.select(EpisodeRow)
                .where(EpisodeRow.id.in_([i for i, _ in ids]))
                .options(selectinload(EpisodeRow.tags), selectinload(EpisodeRow.step_tags))
            ).all()
            by_id = {row.id: row for row in rows}
            return [(mapping.episode_proto(by_id[i]), cursor) for i, cursor in ids if i in by_id]

    def tag_counts(self, episode_ids: Iterable[str]) -> dict[str, listing.TagCounts]:
        """Episode and step tags of a page's episodes, counted in SQL (`listing.tag_counts`)."""
        with self._read() as s:
            return listing.tag_counts(s, list(episode_ids))

    def iter_stored(self, study_id: str, batch: int = listing.BATCH) -> Iterator[Episode]:
        """The study's episodes that have files of their own (envlogger or Pickle storage), as protos holding only
        their id and storage, `batch` rows at a time: what deleting one episode checks for shared files. UI
        episodes (no storage) are not read at all."""
        columns = (EpisodeRow.id, EpisodeRow.storage_kind, EpisodeRow.storage_tag_directory,
                   EpisodeRow.storage_index, EpisodeRow.storage_pickle_path)  # fmt: skip
        query = sa.select(*columns).where(EpisodeRow.study_id == study_id, EpisodeRow.storage_kind.is_not(None))
        with self._read() as s:
            for episode_id, kind, directory, index, pickle_path in s.execute(
                query.execution_options(yield_per=batch)
            ):
                episode = Episode(id=episode_id)
                if kind == "environment_logger":
                    episode.storage.environment_logger.tag_directory = directory or ""
                    episode.storage.environment_logger.index = index or 0
                elif kind == "pickle":
                    episode.storage.pickle.path = pickle_path or ""
                yield episode

    def find_episodes(self, text: str, *, study_id: str | None = None, limit: int = 50) -> list[Episode]:
        """A picker's episodes (`listing.search_ids`): newest first, or by id prefix, then notes text; at most
        `limit`, tags included."""
        with self._read() as s:
            ids = listing.search_ids(s, text, study_id, limit)
            if not ids:
                return []
            rows = s.scalars(
                sa.select(EpisodeRow)
                .where(EpisodeRow.id.in_(ids))
                .options(selectinload(EpisodeRow.tags), selectinload(EpisodeRow.step_tags))
            ).all()
            by_id = {row.id: row for row in rows}
            return [mapping.episode_proto(by_id[i]) for i in ids if i in by_id]

    def count_episodes(self, q: EpisodeQuery) -> int:
        """How many episodes match (aggregates only; remembered until the query's study changes, or the store
        for a query over every study: `listing.Counts`)."""
        with self._read() as s:
            return self._counts.count(s, q)

    def remembered(self, key: Any, compute: Callable[[], T], *, study_id: str | None = None) -> T:
        """`compute()`, remembered until the store changes (`listing.UntilChanged`): for summaries a page draws
        on every rerun. With `study_id` (a value made of that study's data only, every key of it naming that
        study), until that study changes: a click in another study keeps it. The value is shared between
        callers: do not change it."""
        with self._read() as s:  # the mark in a short read: `compute` opens sessions of its own
            current = listing.mark(s, study_id)
        return self._summaries.get_marked(current, key, compute)

    def episode_cursor(self, q: EpisodeQuery, sort: Sort, offset: int) -> Cursor | None:
        """The cursor that starts the page beginning at row `offset` of the list (jump to a page)."""
        with self._read() as s:
            return listing.cursor_at(s, q, sort, offset)

    def iter_episode_ids(self, q: EpisodeQuery, batch: int = listing.BATCH) -> Iterator[list[str]]:
        """Every matching episode id in registration order, `batch` at a time (select all across pages; bounded
        memory). Each page is its own short read, keyset from the last key (`episode_ids_after`): no transaction
        stays open while the caller works between pages (on PostgreSQL it would sit idle in transaction, block
        ALTER TABLE, hold back VACUUM and end at idle_in_transaction_session_timeout; on SQLite it keeps the WAL
        from being checkpointed), and each page sees what was committed before it is read. Ends when the page
        past the last key is empty."""
        after: Cursor | None = None
        while page := self.episode_ids_after(q, after, batch):
            yield [episode_id for episode_id, _ in page]
            after = page[-1][1]

    def episode_ids_after(
        self, q: EpisodeQuery, after: Cursor | None, limit: int = listing.BATCH
    ) -> list[tuple[str, Cursor]]:
        """One page of `iter_episode_ids`: up to `limit` matching ids in registration order after `after`, each
        with its cursor, in one short read."""
        with self._read() as s:
            return listing.page_ids(s, q, Sort(), after, min(limit, listing.MAX_PAGE))

    def invalid_sessions_among(self, session_ids: Iterable[str]) -> set[str]:
        """Which of these sessions are INVALID now (one page's sessions: 500 ids per query), so that a page of
        episodes read earlier can be checked again against the INVALID-session rule."""
        ids = [i for i in dict.fromkeys(session_ids) if i]
        out: set[str] = set()
        with self._read() as s:
            for start in range(0, len(ids), 500):
                query = sa.select(SessionRow.id).where(
                    SessionRow.id.in_(ids[start : start + 500]), SessionRow.state == _INVALID
                )
                out.update(s.scalars(query))
        return out

    def episode_states(self, q: EpisodeQuery) -> dict[int, int]:
        """Matching episodes per state (one GROUP BY)."""
        with self._read() as s:
            return listing.states(s, q)

    # -- tags, notes and state --------------------------------------------------------------------------------

    def set_episode_state(self, ref: EpisodeRef, state: int, user: str) -> Episode:
        """Set the state; someone else's episode only as study creator or reviewer (PermissionDenied)."""
        if state not in Episode.State.values():
            raise StoreError(f"unknown episode state {state}")
        with self._write() as s:
            row = self._episode_row(s, ref, lock=True)
            if row.state != state:
                if row.user != user:
                    self._require_review(s, row, user, "change the state")
                before = row.state
                row.state = state
                self._audit(
                    s, user, AuditAction.EPISODE_STATE, **self._where(row),
                    before={"state": _state_name(Episode.State, before)},
                    after={"state": _state_name(Episode.State, state)},
                )  # fmt: skip
            s.flush()
            return mapping.episode_proto(row)

    def _remove_tag(self, s: Session, row: EpisodeRow, step: int | None, label: str, user: str) -> bool:
        """Remove a tag (refused for someone else's tag without the right); audited with its author and time."""
        taken = tags.take(s, row.id, step, label)
        if taken is None:
            return False
        if taken.get("user") != user:
            self._require_review(s, row, user, f"remove {taken.get('user')}'s tag {label!r}")
        action = AuditAction.EPISODE_TAG_REMOVE if step is None else AuditAction.STEP_TAG_REMOVE
        self._audit(s, user, action, **self._where(row), step_index=step, before=taken)
        return True

    def add_episode_tag(self, ref: EpisodeRef, label: str, user: str) -> bool:
        """Tag an episode; False if it already has the tag."""
        label = _label(label)
        with self._write() as s:
            row = self._episode_row(s, ref)
            changed = tags.put(s, row.id, None, {"label": label}, user)
            if changed:
                self._audit(s, user, AuditAction.EPISODE_TAG_ADD, **self._where(row), after={"label": label})
            return changed

    def remove_episode_tag(self, ref: EpisodeRef, label: str, user: str) -> bool:
        """Untag an episode; False if it did not have the tag. Someone else's tag: see `can_review`."""
        with self._write() as s:
            return self._remove_tag(s, self._episode_row(s, ref), None, label.strip(), user)

    @staticmethod
    def _check_step(row: EpisodeRow, index: int) -> None:
        """Refuse indices outside the episode's stored steps.

        Environment episodes are stored RLDS-style with one final-observation step after their `num_steps`
        transitions (schemas/episode_storage.md), so their step indices run 0..num_steps; UI episodes have
        exactly `num_steps` steps.
        """
        last = row.num_steps
        if last and row.storage_kind is None and row.kind == "ui":
            last -= 1
        if index < 0 or (row.num_steps and index > last):
            raise StoreError(
                f"step {index} is out of range for episode {row.id!r} with {row.num_steps} steps"
            )

    def add_step_tag(self, ref: EpisodeRef, index: int, label: str, user: str) -> bool:
        """Tag step `index` (0-based) of an episode; False if the step already has the tag."""
        label = _label(label)
        with self._write() as s:
            row = self._episode_row(s, ref)
            self._check_step(row, index)
            changed = tags.put(s, row.id, index, {"label": label}, user)
            if changed:
                self._audit(
                    s, user, AuditAction.STEP_TAG_ADD, **self._where(row), step_index=index, after={"label": label}
                )  # fmt: skip
            return changed

    def remove_step_tag(self, ref: EpisodeRef, index: int, label: str, user: str) -> bool:
        """Untag a step; False if the step did not have the tag. Someone else's tag: see `can_review`."""
        with self._write() as s:
            return self._remove_tag(s, self._episode_row(s, ref), index, label.strip(), user)

    def _segment(self, row: EpisodeRow, start: int, end: int) -> None:
        if start > end:
            raise StoreError(f"segment start {start} is after its end {end}")
        if end - start + 1 > MAX_SEGMENT_STEPS:
            raise StoreError(f"segment {start}-{end} spans more than {MAX_SEGMENT_STEPS} steps")
        self._check_step(row, start)
        self._check_step(row, end)

    def add_segment_tag(self, ref: EpisodeRef, start: int, end: int, label: str, user: str) -> int:
        """Tag every step of [start, end] (inclusive) in one transaction and one audit entry
        (`step.segment.add`, `after` = label, start, end and the steps it added); returns how many it added.
        Steps that had the tag already are left alone, so undoing it removes exactly the tags it added."""
        label = _label(label)
        with self._write() as s:
            row = self._episode_row(s, ref)
            self._segment(row, start, end)
            now = _now()
            added = tags.put_steps(s, row.id, tags.tag_json(label, user, now), user, range(start, end + 1))
            if added:
                self._audit(
                    s, user, AuditAction.STEP_SEGMENT_ADD, **self._where(row), step_index=start,
                    after={"label": label, "start": start, "end": end,
                           "tags": [tags.tag_json(label, user, now, i) for i in added]},
                )  # fmt: skip
            return len(added)

    def remove_segment_tag(self, ref: EpisodeRef, start: int, end: int, label: str, user: str) -> int:
        """Remove a label from every step of [start, end] in one transaction and one audit entry
        (`step.segment.remove`, `before` = each removed tag with its author and time); returns how many."""
        label = label.strip()
        with self._write() as s:
            row = self._episode_row(s, ref)
            self._segment(row, start, end)
            taken = tags.take_steps(s, row.id, label, span=(start, end))
            others = sorted({str(t.get("user")) for t in taken if t.get("user") != user})
            if others:
                self._require_review(s, row, user, f"remove tags of {', '.join(others)}")
            if taken:
                self._audit(
                    s, user, AuditAction.STEP_SEGMENT_REMOVE, **self._where(row), step_index=start,
                    before={"label": label, "start": start, "end": end, "tags": taken},
                )  # fmt: skip
            return len(taken)

    def set_notes(self, ref: EpisodeRef, notes: str, user: str, *, expected: str | None = None) -> bool:
        """Replace the episode's notes (the row is locked while read and written); False if unchanged.

        With `expected` (the notes the editor last saw), raise Conflict when they changed meanwhile, checked in
        the same locked transaction as the write so two editors can never silently overwrite each other.
        """
        with self._write() as s:
            row = self._episode_row(s, ref, lock=True)
            before = row.notes or ""
            if before == notes:
                return False
            if expected is not None and before != expected:
                raise Conflict(f"the notes of episode {row.id!r} were changed by someone else meanwhile")
            row.notes = notes or None
            self._audit(
                s,
                user,
                AuditAction.EPISODE_NOTES,
                **self._where(row),
                before={"notes": before},
                after={"notes": notes},
            )
            return True

    def can_delete(self, episode: Episode, user: str) -> bool:
        """Only the episode's own user or the study's creator may delete it."""
        if episode.user.email and episode.user.email == user:
            return True
        with self._read() as s:
            creator = s.scalar(sa.select(StudyRow.creator).where(StudyRow.id == episode.study_id))
        return creator is not None and creator == user

    def delete_episode(self, ref: EpisodeRef, user: str) -> bool:
        """Delete an episode's row, tags included (not its files); False if it was already gone.

        PermissionDenied unless `user` is the episode's user or the study's creator. The full episode is kept in
        the audit entry's `before`.
        """
        with self._write() as s:
            try:
                row = self._episode_row(s, ref, lock=True)
            except NotFound:
                return False
            creator = s.scalar(sa.select(StudyRow.creator).where(StudyRow.id == row.study_id))
            if user not in (row.user, creator):
                raise PermissionDenied(
                    f"{user} may not delete episode {row.id!r}: only its user ({row.user}) or the study's "
                    f"creator ({creator})"
                )
            before = mapping.message_json(mapping.episode_proto(row))
            where = self._where(row)
            s.delete(row)
            s.flush()
            self._audit(s, user, AuditAction.EPISODE_DELETE, **where, before=before)
            return True

    def recent_tags(self, study_id: str, limit: int = 10) -> list[str]:
        """Labels used in a study (episode and step tags), most recently added first."""
        episode_tags = sa.select(
            EpisodeTagRow.label.label("label"), EpisodeTagRow.created_time.label("t")
        ).where(listing.in_study(EpisodeTagRow.episode_id, study_id))
        step_tags = sa.select(StepTagRow.label.label("label"), StepTagRow.created_time.label("t")).where(
            listing.in_study(StepTagRow.episode_id, study_id)
        )
        tags = sa.union_all(episode_tags, step_tags).subquery()
        latest = sa.func.max(tags.c.t)
        query = (
            sa.select(tags.c.label).group_by(tags.c.label).order_by(latest.desc(), tags.c.label).limit(limit)
        )
        with self._read() as s:
            return list(s.scalars(query).all())

    # -- audit log and undo -----------------------------------------------------------------------------------

    def audit_log(
        self,
        ref: EpisodeRef | None = None,
        limit: int | None = None,
        *,
        user: str | None = None,
        study_id: str | None = None,
    ) -> list[AuditEntry]:
        """Audit entries, newest first; for one episode when `ref` is given."""
        query = sa.select(AuditRow)
        if ref is not None:
            query = query.where(AuditRow.episode_id == ref.episode_id)
        if user is not None:
            query = query.where(AuditRow.user == user)
        if study_id is not None:
            query = query.where(AuditRow.study_id == study_id)
        query = query.order_by(AuditRow.id.desc())
        if limit is not None:
            query = query.limit(limit)
        with self._read() as s:
            return [revert.entry(s, row) for row in s.scalars(query).all()]

    def undo_last(self, user: str, ref: EpisodeRef | None = None) -> AuditEntry | None:
        """Revert `user`'s most recent undoable change (tag, segment, notes, state, or a redo) not yet undone;
        with `ref`, only among that user's changes on that episode.

        Changes to episodes that were deleted since are skipped. If someone else changed the notes or state
        since, undoing would drop their change: Conflict is raised and nothing changes. A removed tag comes back
        under its original author and creation time. The undo is logged (action "undo", `undo_of` = the
        reverted entry) and returned (`audit.describe` words it); None when there is nothing to undo. Each
        entry is undone at most once, whatever runs concurrently (see `revert`).
        """
        return revert.revert_last(
            self._write, user, ref.episode_id if ref is not None else None,
            redo=False, guard=self._require_review, now=_now,
        )  # fmt: skip

    def redo_last(self, user: str, ref: EpisodeRef | None = None) -> AuditEntry | None:
        """Re-apply `user`'s most recent undo (on the episode `ref`) not redone yet; None when there is none.

        A new change by the user there since the undo clears the redo chain, as in editors. Logged as "redo"
        with `undo_of` = the undo entry it reverted.
        """
        return revert.revert_last(
            self._write, user, ref.episode_id if ref is not None else None,
            redo=True, guard=self._require_review, now=_now,
        )  # fmt: skip

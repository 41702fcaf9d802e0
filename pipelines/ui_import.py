"""Registering the output of `stepmark convert-ui` in the store as a study, so UI episodes can be annotated.

Nothing is copied: each store episode points at its record (`metadata.ui_record` = shard path, byte offset,
UI episode id) and `pipelines.episodes.open_episode` reads the record from the shard when needed. Importing is
idempotent: a record already in the study (same UI episode id) is skipped, so re-running an import after a
conversion grew only adds the new episodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pipelines.store import AlreadyExists, NotFound, PermissionDenied, Repository, StoreError
from protos.rlds_creator import study_pb2

UI_ENV_ID = "android-ui"
UI_ENV_NAME = "Android UI"


@dataclass
class ImportResult:
    study: study_pb2.StudySpec
    added: list[study_pb2.Episode] = field(default_factory=list)
    skipped: int = 0  # records already in the study


def _ui_environment() -> study_pb2.EnvironmentSpec:
    """The study's one environment: no type (nothing to run), just a home for the UI episodes."""
    return study_pb2.EnvironmentSpec(
        id=UI_ENV_ID,
        name=UI_ENV_NAME,
        additional_instructions="Recorded Android UI traces (converted by stepmark convert-ui); replay only.",
    )


def _by_name(repo: Repository, name: str, user: str) -> study_pb2.StudySpec | None:
    """The user's own study of that name, else the one study of that name by anyone (several: an error)."""
    mine = repo.find_study_by_name(name, creator=user)
    if mine:
        return mine[0]  # unique per creator (schema version 4)
    matches = repo.find_study_by_name(name)
    if len(matches) > 1:
        ids = ", ".join(s.id for s in matches)
        raise StoreError(f"--study {name!r}: {len(matches)} studies have this name ({ids}); pass an id")
    return matches[0] if matches else None


def find_or_create_study(repo: Repository, study: str, user: str) -> study_pb2.StudySpec:
    """The study whose id or name is `study` (with an `android-ui` environment), created when there is none.

    Race-free: study names are unique per creator in the database, so of several imports creating the same
    study at once one creates it and the others find it.
    """
    try:
        spec = repo.get_study(study)
    except NotFound:
        found = _by_name(repo, study, user)
        if found is None:
            new = study_pb2.StudySpec(
                name=study,
                description="Android UI episodes imported from stepmark convert-ui output.",
                instructions="Review each episode; tag steps and write notes.",
            )
            new.environment_specs.append(_ui_environment())
            try:
                return repo.create_study(new, user)
            except AlreadyExists:  # created by a concurrent import of the same user
                found = _by_name(repo, study, user)
                if found is None:
                    raise
        spec = found
    if any(env.id == UI_ENV_ID for env in spec.environment_specs):
        return spec
    if spec.creator.email != user:
        raise PermissionDenied(
            f"study {spec.id!r} has no {UI_ENV_ID!r} environment and only its creator "
            f"({spec.creator.email}) may add one"
        )
    spec.environment_specs.append(_ui_environment())
    return repo.save_study(spec, user)


def _absolute(shard: str) -> str:
    """Local shards by absolute path (the store is read from other working directories); URLs unchanged."""
    return shard if "://" in shard else str(Path(shard).resolve())


def ui_episode(study_id: str, session: study_pb2.Session, record) -> study_pb2.Episode:  # noqa: ANN001
    """The store episode of one converted record (a `pipelines.ui_records.RecordRef`)."""
    episode = study_pb2.Episode(
        study_id=study_id,
        session_id=session.id,
        environment_id=UI_ENV_ID,
        state=study_pb2.Episode.STATE_COMPLETED,
        num_steps=record.num_steps,
        total_reward=0.0,
    )
    episode.user.CopyFrom(session.user)
    episode.metadata.update(
        {
            "kind": "ui",
            "ui_record": {
                "shard": _absolute(record.shard),
                "offset": record.offset,
                "episode_id": record.episode_id,
            },
            "app_package": record.app_package,
            "source": record.source,
            "success": False,
        }
    )
    return episode


def import_records(repo: Repository, output_path: str | Path, study_name: str, user: str) -> ImportResult:
    """Import every record under `output_path` (a convert-ui output folder or one shard)."""
    from pipelines.ui_records import index_records  # the CONVERT helper's reader

    local = Path(output_path) if "://" not in str(output_path) else None
    if local is not None and local.is_dir() and not any(local.iterdir()):
        raise StoreError(
            f"{output_path}: empty folder, not a convert-ui output (run stepmark convert-ui first)"
        )
    records = index_records(str(output_path))  # StepmarkError naming the path if it is not an output
    study = find_or_create_study(repo, study_name, user)
    known = repo.source_keys(study.id)
    new = [r for r in records if f"ui:{r.episode_id}" not in known]
    result = ImportResult(study=study, skipped=len(records) - len(new))
    if new:
        session = repo.create_session(study.id, user)
        result.added = repo.add_episodes(ui_episode(study.id, session, r) for r in new)
        result.skipped += len(new) - len(result.added)  # imported concurrently by someone else
        repo.end_session(session.id, user)
    return result


def import_ui(repo: Repository, output_path: str | Path, study_name: str, user: str) -> study_pb2.StudySpec:
    """Import a convert-ui output into the study `study_name` (created if needed); returns the study."""
    return import_records(repo, output_path, study_name, user).study

"""Registering the output of `stepmark convert-ui` in the store as a study, so UI episodes can be annotated.

Nothing is copied: each store episode points at its record (`metadata.ui_record` = shard path, byte offset,
UI episode id) and `pipelines.episodes.open_episode` reads the record from the shard when needed. Importing is
idempotent: a record already in the study (same UI episode id) is skipped, so re-running an import after a
conversion grew only adds the new episodes.

Importing streams: records are read one at a time and registered `BATCH` at a time (one transaction each,
which sees what earlier batches and concurrent imports registered), so memory does not grow with the
number of records. A record is not parsed whole to be registered: `record_header` reads the four fields the
store needs (id, step count, app, source) from the wire bytes and skips the rest (the screenshots and objects
that make a record large); the TFRecord reader has checked the record's CRC.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path

from pipelines import protowire
from pipelines.errors import StepmarkError
from pipelines.store import AlreadyExists, NotFound, PermissionDenied, Repository, StoreError
from pipelines.ui_records import RecordRef, episode_steps
from protos.rlds_creator import study_pb2

UI_ENV_ID = "android-ui"
UI_ENV_NAME = "Android UI"
BATCH = 1000  # records registered per transaction


@dataclass
class ImportResult:
    study: study_pb2.StudySpec
    added: int = 0  # episodes registered
    skipped: int = 0  # records already in the study


# UiEpisode (protos/stepmark/ui_episode.proto): episode_id = 1, episode = 2, app_package = 5, source = 6,
# goal = 8.
_ID, _EPISODE, _APP, _SOURCE, _GOAL = 1, 2, 5, 6, 8
MAX_GOAL = 500  # characters of a goal kept in the episode's metadata (its title); the record keeps all


def record_header(data: bytes, shard: str, offset: int) -> RecordRef:
    """The fields of a serialized UiEpisode the store needs, read off the wire (the time steps are counted,
    not parsed). StepmarkError naming the shard and byte when the bytes are not a UiEpisode."""
    found: dict[int, str] = {}
    steps = 0
    try:
        for number, wire, start, end in protowire.fields(data, 0, len(data)):
            if wire != 2:
                continue
            if number in (_ID, _APP, _SOURCE, _GOAL):
                found[number] = data[start:end].decode("utf-8")
            elif number == _EPISODE:
                steps += episode_steps(data, start, end)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StepmarkError(f"{shard} at byte {offset}: not a serialized UiEpisode ({exc})") from exc
    return RecordRef(found.get(_ID, ""), shard, offset, steps, found.get(_APP, ""), found.get(_SOURCE, ""),
                     found.get(_GOAL, ""))  # fmt: skip


def iter_headers(output_path: str | Path) -> Iterator[RecordRef]:
    """Every episode's header under a convert-ui output folder or shard, one record in memory at a time; an
    episode in parts is one header at its first part, counting the steps of all (StepmarkError when a part is
    missing: `ui_records.iter_parts`)."""
    from pipelines.ui_records import iter_parts  # the CONVERT helper's reader

    steps = 0
    for shard, offset, data, ends in iter_parts(str(output_path)):
        ref = record_header(data, shard, offset)
        steps += ref.num_steps
        if ends:
            yield dataclasses.replace(ref, num_steps=steps)
            steps = 0


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
    if record.goal:
        episode.metadata["goal"] = record.goal[:MAX_GOAL]
    return episode


def _batches(items: Iterable[RecordRef], size: int) -> Iterator[list[RecordRef]]:
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch


def import_records(
    repo: Repository, output_path: str | Path, study_name: str, user: str, *, batch: int = BATCH
) -> ImportResult:
    """Import every record under `output_path` (a convert-ui output folder or one shard), `batch` at a time."""
    local = Path(output_path) if "://" not in str(output_path) else None
    if local is not None and local.is_dir() and not any(local.iterdir()):
        raise StoreError(
            f"{output_path}: empty folder, not a convert-ui output (run stepmark convert-ui first)"
        )
    headers = iter_headers(output_path)  # StepmarkError naming the path if it is not an output
    first = next(headers, None)  # the output is checked before a study is created for it
    study = find_or_create_study(repo, study_name, user)
    result = ImportResult(study=study)
    if first is None:
        return result
    session = None
    for part in _batches(chain([first], headers), batch):
        known = repo.known_sources(study.id, [f"ui:{r.episode_id}" for r in part])
        new = [r for r in part if f"ui:{r.episode_id}" not in known]
        result.skipped += len(part) - len(new)
        if not new:
            continue
        if session is None:
            session = repo.create_session(study.id, user)
        added = repo.add_episodes(ui_episode(study.id, session, r) for r in new)
        result.added += len(added)
        result.skipped += len(new) - len(added)  # imported concurrently by someone else
    if session is not None:
        repo.end_session(session.id, user)
        repo.analyze()  # the study grew: the planner's statistics follow (Repository.analyze)
    return result


def import_ui(repo: Repository, output_path: str | Path, study_name: str, user: str) -> study_pb2.StudySpec:
    """Import a convert-ui output into the study `study_name` (created if needed); returns the study."""
    return import_records(repo, output_path, study_name, user).study

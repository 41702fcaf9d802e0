"""A study's shape as the store sees it, counted for the quality report: episodes per state and annotator,
returns, lengths and success per environment, tags per label and annotator, queue progress and agreement.

Episodes are the study's listing (INVALID sessions left out); tags are those of the same episodes, episode and
step tags together, counted under the user who added them. Counts are SQL aggregates over indexed columns (the
kind of an episode is `episodes.kind`, migration 8, never its JSON metadata); the returns and lengths of
environment episodes (the box plots) are streamed in batches into compact arrays, so a study of a million UI
episodes is counted without a row per episode in Python and without reading their metadata.
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines.store import Repository, listing
from pipelines.store.agreement import AgreementReport, study_agreement
from pipelines.store.field_review import study_field_review
from pipelines.store.listing import EpisodeQuery
from pipelines.store.models import EpisodeRow, EpisodeTagRow, SessionRow, StepTagRow
from pipelines.store.queue import QueueProgress, progress
from protos.rlds_creator import study_pb2

STREAM_BATCH = 5000


@dataclass
class StoreStats:
    study_id: str
    study_name: str
    episodes: int = 0
    ui_episodes: int = 0
    by_state: Counter[str] = field(default_factory=Counter)
    by_annotator: Counter[str] = field(default_factory=Counter)
    returns: dict[str, array] = field(default_factory=dict)  # environment id -> total rewards ("d")
    lengths: dict[str, array] = field(default_factory=dict)  # environment id -> num_steps ("q")
    success: dict[str, tuple[int, int]] = field(default_factory=dict)  # env -> (succeeded, with a verdict)
    tags_by_label: Counter[str] = field(default_factory=Counter)
    tags_by_annotator: Counter[str] = field(default_factory=Counter)
    queue: QueueProgress | None = None
    agreement: AgreementReport | None = None
    fields: list = field(default_factory=list)  # study fields (issue 26): report/field_stats.FieldStat per field
    field_agreement: list = field(default_factory=list)  # their agreement: store/field_agreement.FieldAgreement
    field_review: list = field(default_factory=list)  # their suggestions: store/field_review.SourceReview

    @property
    def success_rate(self) -> dict[str, float]:
        return {env: ok / n for env, (ok, n) in self.success.items() if n}


UI = "ui"


def import_folders(repo: Repository, study_id: str, data_dir: str | Path | None) -> list[str]:
    """The convert-ui output folders a study's UI episodes were imported from (`metadata.ui_record.shard`;
    a relative shard path is under the data directory).

    One `import-ui` call reads one output and registers its episodes in one session, so one UI episode per
    session names every folder: a look-up per session on the session index (sessions are few), not a read of
    every episode's metadata. UI episodes without a session (registered directly) are read as they are."""
    shard = EpisodeRow.meta[("ui_record", "shard")].as_string()  # one JSON path: one read of the JSON
    first_of_session = (
        sa.select(shard)
        .where(EpisodeRow.session_id == SessionRow.id, EpisodeRow.kind == UI, shard.is_not(None))
        .limit(1)
        .scalar_subquery()
    )
    with Session(repo.engine) as s, s.begin():
        sessions = sa.select(first_of_session).where(  # INVALID sessions' episodes are left out, as listed
            SessionRow.study_id == study_id, SessionRow.state != study_pb2.Session.STATE_INVALID
        )
        shards = set(s.scalars(sessions))
        # Without a session: from the session index (NULLs are indexed); the study and kind as plain conditions,
        # which no index serves (SQLite otherwise walked the study's (study_id, kind) range: 4.6 s at 1M).
        unsessioned = sa.select(shard).distinct().where(
            EpisodeRow.session_id.is_(None),
            sa.func.coalesce(EpisodeRow.study_id, EpisodeRow.study_id) == study_id,
            sa.func.coalesce(EpisodeRow.kind, EpisodeRow.kind) == UI,
            shard.is_not(None),
        )
        shards.update(s.scalars(unsessioned))
    folders = set()
    for shard_path in shards - {None}:
        path = str(shard_path)
        if "://" not in path and not Path(path).is_absolute() and data_dir is not None:
            path = str(Path(data_dir) / path)
        folders.add(path.rsplit("/", 1)[0] if "/" in path else ".")
    return sorted(folders)


def state_name(state: int) -> str:
    return study_pb2.Episode.State.Name(state).removeprefix("STATE_").lower()


# SQLite's JSON types of `metadata.success` (json_type) that are a verdict.
_VERDICTS = {"true": True, "false": False}


def _success_verdict(s: Session) -> sa.ColumnElement:
    """`metadata.success` as a verdict: on SQLite its JSON type (`json_extract` reads JSON true/false back as
    1/0, which are not booleans, so a plain read found no verdict at all), elsewhere the JSON value itself (a
    bool only when the JSON holds one; a number or a string is no verdict)."""
    if s.get_bind().dialect.name == "sqlite":
        return sa.func.json_type(EpisodeRow.meta, sa.literal_column("'$.success'"))
    return EpisodeRow.meta["success"]


def store_stats(repo: Repository, study_id: str) -> StoreStats:
    study = repo.get_study(study_id)
    stats = StoreStats(study.id, study.name)
    q = EpisodeQuery(study_id=study_id)
    count = sa.func.count()
    with Session(repo.engine) as s, s.begin():
        # the kind is a column (migration 8): no JSON read
        (states, users, kinds), whole = listing.margins(s, q, EpisodeRow.state, EpisodeRow.user, EpisodeRow.kind)
        stats.episodes = sum(states.values())
        for state, n in states.items():
            stats.by_state[state_name(state)] += n
        for user, n in users.items():
            stats.by_annotator[user or "(unknown)"] += n
        stats.ui_episodes = kinds.get(UI, 0)
        success: dict[str, list[int]] = {}
        verdict_of = _success_verdict(s)
        sqlite = s.get_bind().dialect.name == "sqlite"
        for kind in kinds.keys() - {UI}:  # environment episodes (any other kind): one index range per kind
            env_rows = listing.where(
                sa.select(EpisodeRow.environment_id, EpisodeRow.total_reward, EpisodeRow.num_steps,
                          verdict_of),
                q,
            ).where(EpisodeRow.kind.is_(None) if kind is None else EpisodeRow.kind == kind)  # fmt: skip
            for env_id, reward, steps, verdict in s.execute(env_rows.execution_options(yield_per=STREAM_BATCH)):
                env = env_id or "(none)"
                stats.returns.setdefault(env, array("d")).append(reward or 0.0)
                stats.lengths.setdefault(env, array("q")).append(steps or 0)
                counted = success.setdefault(env, [0, 0])
                if sqlite:  # the JSON type: 'true', 'false', 'integer', 'text', ... or None
                    verdict = _VERDICTS.get(verdict)
                if isinstance(verdict, bool):
                    counted[0] += verdict
                    counted[1] += 1
        stats.success = {env: (ok, n) for env, (ok, n) in success.items()}
        invalid = listing.invalid_sessions(s, study_id)
        for table in (EpisodeTagRow, StepTagRow):  # from the tags, each episode looked up by key
            query = sa.select(table.label, table.user, count).where(listing.in_study(table.episode_id, study_id))
            if invalid:
                session = sa.select(EpisodeRow.session_id).where(EpisodeRow.id == table.episode_id).scalar_subquery()
                query = query.where(sa.or_(session.is_(None), session.not_in(invalid)))
            rows = s.execute(query.group_by(table.label, table.user))
            for label, user, n in rows:
                stats.tags_by_label[label] += n
                stats.tags_by_annotator[user or "(unknown)"] += n
    stats.queue = progress(repo, study_id)
    stats.agreement = study_agreement(repo, study_id)
    from pipelines.report.field_stats import field_summary

    stats.fields, stats.field_agreement = field_summary(repo, study_id, whole)
    stats.field_review = study_field_review(repo, study_id)
    return stats

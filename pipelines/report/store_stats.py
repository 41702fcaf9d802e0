"""A study's shape as the store sees it, counted for the quality report: episodes per state and annotator,
returns, lengths and success per environment, tags per label and annotator, queue progress and agreement.

Episodes are the study's listing (`Repository.list_episodes`: INVALID sessions left out); tags are those of
the same episodes, episode and step tags together, counted under the user who added them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines.store import Repository
from pipelines.store.agreement import AgreementReport, study_agreement
from pipelines.store.models import EpisodeRow, EpisodeTagRow, StepTagRow
from pipelines.store.queue import QueueProgress, progress
from protos.rlds_creator import study_pb2


@dataclass
class StoreStats:
    study_id: str
    study_name: str
    episodes: int = 0
    ui_episodes: int = 0
    by_state: Counter[str] = field(default_factory=Counter)
    by_annotator: Counter[str] = field(default_factory=Counter)
    returns: dict[str, list[float]] = field(default_factory=dict)  # environment id -> total rewards
    lengths: dict[str, list[int]] = field(default_factory=dict)  # environment id -> num_steps
    success: dict[str, tuple[int, int]] = field(default_factory=dict)  # env -> (succeeded, with a verdict)
    tags_by_label: Counter[str] = field(default_factory=Counter)
    tags_by_annotator: Counter[str] = field(default_factory=Counter)
    queue: QueueProgress | None = None
    agreement: AgreementReport | None = None

    @property
    def success_rate(self) -> dict[str, float]:
        return {env: ok / n for env, (ok, n) in self.success.items() if n}


def import_folders(repo: Repository, study_id: str, data_dir: str | Path | None) -> list[str]:
    """The convert-ui output folders a study's UI episodes were imported from (`metadata.ui_record.shard`;
    a relative shard path is under the data directory)."""
    folders = set()
    for e in repo.list_episodes(study_id=study_id):
        record = e.metadata["ui_record"] if "ui_record" in e.metadata else None
        if record is not None and "shard" in record:
            shard = str(record["shard"])
            if "://" not in shard and not Path(shard).is_absolute() and data_dir is not None:
                shard = str(Path(data_dir) / shard)
            folders.add(shard.rsplit("/", 1)[0] if "/" in shard else ".")
    return sorted(folders)


def state_name(state: int) -> str:
    return study_pb2.Episode.State.Name(state).removeprefix("STATE_").lower()


def store_stats(repo: Repository, study_id: str) -> StoreStats:
    study = repo.get_study(study_id)
    stats = StoreStats(study.id, study.name)
    episodes = repo.list_episodes(study_id=study_id)
    success: dict[str, list[int]] = {}
    for e in episodes:
        stats.episodes += 1
        stats.by_state[state_name(e.state)] += 1
        stats.by_annotator[e.user.email or "(unknown)"] += 1
        if "kind" in e.metadata and e.metadata["kind"] == "ui":
            stats.ui_episodes += 1
            continue
        env = e.environment_id or "(none)"
        stats.returns.setdefault(env, []).append(e.total_reward)
        stats.lengths.setdefault(env, []).append(e.num_steps)
        verdict = success.setdefault(env, [0, 0])
        if "success" in e.metadata and isinstance(e.metadata["success"], bool):
            verdict[0] += bool(e.metadata["success"])
            verdict[1] += 1
    stats.success = {env: (ok, n) for env, (ok, n) in success.items()}
    listed = Repository._valid_sessions_only(
        sa.select(EpisodeRow.id).where(EpisodeRow.study_id == study_id)
    ).subquery()
    with Session(repo.engine) as s, s.begin():
        for table in (EpisodeTagRow, StepTagRow):
            rows = s.execute(
                sa.select(table.label, table.user).where(table.episode_id.in_(sa.select(listed.c.id)))
            ).all()
            for label, user in rows:
                stats.tags_by_label[label] += 1
                stats.tags_by_annotator[user or "(unknown)"] += 1
    stats.queue = progress(repo, study_id)
    stats.agreement = study_agreement(repo, study_id)
    return stats

"""Episode statistics: the one home of `info["episode"] = {r, l, s, mask}` and the episode's own figures.

Trainers and dashboards read an episode's return, length and success only from `info["episode"]` on the
finished transition (see `schemas/episode_stats.md`); a producer that leaves it out trains fine but logs a
return of 0. The same figures go on the stored episode (`total_reward`, `num_steps`, `metadata["success"]`)
so listings never have to open the step data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from protos.rlds_creator import study_pb2

EPISODE_KEY = "episode"
SUCCESS_KEY = "success"


@dataclass(frozen=True)
class EpisodeStats:
    """Return (`r`), length in transitions (`l`) and success (`s`) of one episode."""

    r: float
    l: int  # noqa: E741 - the key name consumers read
    s: bool


def episode_info(stats: EpisodeStats) -> dict[str, Any]:
    """The entry merged into a finished transition's info: `{"episode": {"r", "l", "s", "mask": True}}`."""
    return {EPISODE_KEY: {"r": float(stats.r), "l": int(stats.l), "s": bool(stats.s), "mask": True}}


def stats_from_info(info: dict[str, Any]) -> EpisodeStats | None:
    """Reads `info["episode"]` back the way consumers do: None when absent or masked out."""
    entry = info.get(EPISODE_KEY) if isinstance(info, dict) else None
    if not isinstance(entry, dict) or not entry.get("mask", True):
        return None
    return EpisodeStats(r=float(entry.get("r", 0.0)), l=int(entry.get("l", 0)), s=bool(entry.get("s", False)))


class StatsAccumulator:
    """Running return and length of the episode being recorded."""

    def __init__(self) -> None:
        self.total_reward = 0.0
        self.num_steps = 0

    def add(self, reward: float) -> None:
        r = float(reward)
        if not math.isfinite(r):  # a NaN reward would poison every figure downstream
            raise ValueError(f"non-finite reward {reward!r} at transition {self.num_steps}")
        self.total_reward += r
        self.num_steps += 1

    def finish(self, success: bool | None) -> EpisodeStats:
        """Figures for the finished episode; `success=None` (environment has no notion of it) counts as False."""
        return EpisodeStats(r=self.total_reward, l=self.num_steps, s=bool(success))


def apply_to_episode(episode: study_pb2.Episode, stats: EpisodeStats) -> study_pb2.Episode:
    """Copies the figures onto the stored episode: `total_reward`, `num_steps`, `metadata["success"]`."""
    episode.total_reward = float(stats.r)
    episode.num_steps = int(stats.l)
    episode.metadata.update({SUCCESS_KEY: bool(stats.s)})
    return episode


def stats_of_episode(episode: study_pb2.Episode) -> EpisodeStats:
    """The figures as stored on an episode (success False when the metadata has none)."""
    success = False
    if SUCCESS_KEY in episode.metadata.fields:
        success = bool(episode.metadata[SUCCESS_KEY])
    return EpisodeStats(r=float(episode.total_reward), l=int(episode.num_steps), s=success)

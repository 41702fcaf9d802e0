"""Episode statistics: the exact `info["episode"]` entry consumers read, and the figures on the episode."""

from __future__ import annotations

import json
import math

import pytest

from pipelines.episodes import stats
from protos.rlds_creator import study_pb2


def test_episode_info_has_exactly_the_keys_consumers_read():
    info = stats.episode_info(stats.EpisodeStats(r=3.5, l=12, s=True))
    assert info == {"episode": {"r": 3.5, "l": 12, "s": True, "mask": True}}
    # Plain JSON types (a numpy scalar here would break JSON export and some trainers' batching).
    assert json.loads(json.dumps(info)) == info
    assert type(info["episode"]["l"]) is int and type(info["episode"]["r"]) is float


def test_accumulator_sums_rewards_and_counts_transitions():
    acc = stats.StatsAccumulator()
    for r in (0.0, 1.5, -0.5, 10):
        acc.add(r)
    figures = acc.finish(success=None)  # environment without a notion of success -> False
    assert figures == stats.EpisodeStats(r=11.0, l=4, s=False)
    assert acc.finish(True).s is True


def test_non_finite_reward_is_refused():
    acc = stats.StatsAccumulator()
    with pytest.raises(ValueError, match="transition 0"):
        acc.add(math.nan)


def test_stats_from_info_follows_the_mask_rules():
    assert stats.stats_from_info({}) is None
    assert stats.stats_from_info({"episode": {"r": 1, "l": 2, "s": 1, "mask": False}}) is None
    # A missing mask counts as true.
    assert stats.stats_from_info({"episode": {"r": 1, "l": 2, "s": 1}}) == stats.EpisodeStats(1.0, 2, True)


def test_figures_on_the_episode_round_trip():
    episode = study_pb2.Episode(id="e")
    stats.apply_to_episode(episode, stats.EpisodeStats(r=-2.25, l=7, s=True))
    assert episode.total_reward == -2.25 and episode.num_steps == 7
    assert episode.metadata["success"] is True
    assert stats.stats_of_episode(episode) == stats.EpisodeStats(-2.25, 7, True)
    assert stats.stats_of_episode(study_pb2.Episode()).s is False

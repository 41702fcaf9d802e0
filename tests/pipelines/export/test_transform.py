"""Per-episode transforms on real recorded episodes: end-of-episode cut, tag fields, stripping, statistics."""

from __future__ import annotations

import pytest

from pipelines.episodes import open_episode
from pipelines.episodes.stats import stats_from_info
from pipelines.exporters.transform import (
    InconsistentEpisode,
    MissingStatistic,
    NoTransition,
    TransformOptions,
    cut_point,
    step_tag_labels,
    transform_episode,
)
from protos.rlds_creator import study_pb2
from tests.pipelines.export.export_data import ExportData


def steps_of(data: ExportData, episode: study_pb2.Episode):
    with open_episode(episode, data.data_dir) as reader:
        return list(reader), reader.metadata


def test_step_tag_labels_cover_the_selection(export_data: ExportData) -> None:
    labels = step_tag_labels([*export_data.procgen, *export_data.nethack])
    assert labels == ("door", "goal", "jump")


def test_uncut_episode_keeps_every_step_and_the_stored_statistics(export_data: ExportData) -> None:
    episode = export_data.procgen[1]
    steps, meta = steps_of(export_data, episode)
    options = TransformOptions(step_tag_labels=("goal", "jump"))
    out = transform_episode(4, episode, steps, options, meta)
    assert out.num_steps == len(steps) == episode.num_steps + 1
    assert out.meta.episode_index == 4 and out.meta.episode_id == episode.id
    assert out.meta.episode_length == episode.num_steps
    assert out.meta.episode_return == pytest.approx(episode.total_reward)
    assert out.meta.episode_success is bool(episode.metadata["success"])
    assert [s.tags["tag:jump"] for s in out.steps] == [i == 4 for i in range(len(steps))]
    assert not any(s.tags["tag:goal"] for s in out.steps)
    # info["episode"] on the final step only, agreeing with what the recorder put in the finishing
    # transition's info (which the export leaves out of info/json: one home for the statistics).
    masks = [s.episode["mask"] for s in out.steps]
    assert masks.index(True) == len(steps) - 1 and masks.count(True) == 1
    assert stats_from_info(steps[-2].info).l == episode.num_steps == out.steps[-1].episode["l"]
    assert "episode" not in out.steps[-2].info
    last = out.steps[-1]
    assert last.is_last and last.action is None and (last.reward, last.discount) == (0.0, 0.0)
    assert last.keys == [] and last.info == {}
    assert [s.keys for s in out.steps[:-1]] == [list(s.keys) for s in steps[:-1]]  # step i's own action
    assert [s.reward for s in out.steps[:-1]] == [s.reward for s in steps[:-1]]


def test_cut_at_the_first_end_tag_is_a_truncation(export_data: ExportData) -> None:
    episode = export_data.procgen[0]  # "goal" on steps 5 and 7
    assert cut_point(episode, ["goal", "nope"]) == (5, "goal")
    steps, meta = steps_of(export_data, episode)
    options = TransformOptions(end_of_episode_tags=("goal",), step_tag_labels=("goal", "jump"))
    out = transform_episode(0, episode, steps, options, meta)
    assert out.num_steps == 6
    last = out.steps[-1]
    # The final step of a cut follows the one rule: padding action, reward 0, discount 0, not terminal.
    assert last.is_last and not last.is_terminal and last.discount == 0.0 and last.reward == 0.0
    assert last.action is None and out.steps[4].discount == 1.0
    assert last.tags["tag:goal"] and last.observation is steps[5].observation
    assert not any(s.is_last for s in out.steps[:-1])
    assert out.meta.episode_length == 5 and out.meta.truncated_by_tag == "goal"
    assert out.meta.episode_return == pytest.approx(sum(s.reward for s in steps[:5]))
    assert out.steps[5].episode == {
        "r": pytest.approx(out.meta.episode_return),
        "l": 5,
        "s": False,
        "mask": True,
    }
    assert "episode" not in out.steps[4].info


def test_cut_at_step_0_leaves_no_transition(export_data: ExportData) -> None:
    episode = study_pb2.Episode()
    episode.CopyFrom(export_data.procgen[0])
    episode.step_metadata[0].tags.add(label="stop")
    steps, meta = steps_of(export_data, episode)
    with pytest.raises(NoTransition, match="step 0"):
        transform_episode(0, episode, steps, TransformOptions(end_of_episode_tags=("stop",)), meta)


def test_ui_episode_length_counts_transitions(export_data: ExportData) -> None:
    episode = export_data.ui[0]
    steps, meta = steps_of(export_data, episode)
    out = transform_episode(0, episode, steps, TransformOptions(), meta)
    last_action = steps[-1].action
    placeholder = last_action is not None and last_action.type != 0
    assert out.num_steps == len(steps) + (1 if placeholder else 0)
    assert out.meta.episode_length == out.num_steps - 1 == out.steps[-1].episode["l"]
    assert out.meta.environment_id == "android-ui"
    assert out.steps[-1].action is None and all(s.action is not None for s in out.steps[:-1])
    assert all(s.discount == 1.0 for s in out.steps[:-1]) and not out.steps[-1].is_terminal


def test_end_tag_absent_leaves_the_episode_whole(export_data: ExportData) -> None:
    episode = export_data.procgen[1]
    steps, meta = steps_of(export_data, episode)
    out = transform_episode(0, episode, steps, TransformOptions(end_of_episode_tags=("goal",)), meta)
    assert out.num_steps == len(steps) and out.meta.truncated_by_tag == ""


def test_strip_keeps_ids_and_statistics_only(export_data: ExportData) -> None:
    episode = export_data.procgen[0]
    steps, meta = steps_of(export_data, episode)
    assert any(s.image for s in steps) and episode.tags and episode.notes
    out = transform_episode(0, episode, steps, TransformOptions(strip_internal_metadata=True), meta)
    # Stripped: no keys or info; the frames stay for the writers (TFDS stores them as the observation).
    assert all(s.keys is None and s.info is None for s in out.steps)
    assert out.meta.tags is None and out.meta.notes is None
    d = out.meta.to_dict()
    assert "tags" not in d and "notes" not in d
    assert d["episode_id"] == episode.id and d["episode_length"] == episode.num_steps
    assert out.steps[-1].episode["mask"]
    unstripped = transform_episode(0, episode, steps, TransformOptions(), meta)
    assert unstripped.meta.tags == ["good run"] and unstripped.meta.notes == "reached the ledge"


def test_missing_statistic_is_an_error_naming_the_episode(export_data: ExportData) -> None:
    episode = study_pb2.Episode()
    episode.CopyFrom(export_data.nethack[1])
    steps, meta = steps_of(export_data, episode)
    # Return and length can be derived from the steps; success cannot once the store lacks it and the
    # steps' info no longer carries info["episode"].
    episode.ClearField("total_reward")
    episode.ClearField("num_steps")
    derived = transform_episode(0, episode, steps, TransformOptions(), meta)
    assert derived.meta.episode_length == len(steps) - 1
    assert derived.meta.episode_return == pytest.approx(sum(s.reward for s in steps))
    del episode.metadata["success"]
    for s in steps:
        s.info.pop("episode", None)
    with pytest.raises(MissingStatistic, match=episode.id):
        transform_episode(0, episode, steps, TransformOptions(), meta)


def test_store_and_data_disagreeing_on_length_is_an_error(export_data: ExportData) -> None:
    episode = study_pb2.Episode()
    episode.CopyFrom(export_data.nethack[0])
    steps, meta = steps_of(export_data, episode)
    episode.num_steps = len(steps) + 5
    with pytest.raises(InconsistentEpisode, match="store says"):
        transform_episode(0, episode, steps, TransformOptions(), meta)

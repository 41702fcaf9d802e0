"""UI episodes through `open_episode`, over a real convert-ui output of the DroidBot fixture run."""

from __future__ import annotations

import pytest

from pipelines import convert, ui_records
from pipelines.episodes import open_episode
from pipelines.episodes.ui import UiEpisodeReader
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2


@pytest.fixture(scope="module")
def converted(tmp_path_factory, fixtures_dir):
    out = tmp_path_factory.mktemp("ui") / "out"
    assert convert.run([str(fixtures_dir / "droidbot"), str(out), "--shards", "2"]) == 0
    refs = ui_records.index_records(str(out))
    assert refs, "convert-ui produced no episodes from the DroidBot fixture"
    return out, refs


def ui_episode(ref, shard: str) -> study_pb2.Episode:
    """How the store holds an imported UI episode (no storage; where the record is, in the metadata)."""
    episode = study_pb2.Episode(id="ui1", study_id="s", environment_id="ui")
    episode.metadata.update(
        {"kind": "ui", "ui_record": {"shard": shard, "offset": ref.offset, "episode_id": ref.episode_id}}
    )
    return episode


def test_ui_episode_steps_match_the_record(converted):
    out, refs = converted
    ref = max(refs, key=lambda r: r.num_steps)
    record = ui_records.read_episode(ref.shard, ref.offset)
    with open_episode(ui_episode(ref, ref.shard), out) as reader:
        assert isinstance(reader, UiEpisodeReader)
        assert len(reader) == ref.num_steps == len(record.episode.time_steps)
        assert reader.metadata["episode_id"] == ref.episode_id and reader.metadata["format"] == "ui"
        steps = list(reader)
    for i, step in enumerate(steps):
        assert step.observation == record.episode.time_steps[i].observation
        assert step.action == record.actions[i]
        assert step.image == (bytes(record.episode.time_steps[i].observation.screenshot) or None)
        assert step.reward == 0.0 and step.keys == []
        assert step.info.get("index", 0) == record.step_info[i].index
        assert step.info.get("screenshot_path", "") == record.step_info[i].screenshot_path
        assert step.is_first == (i == 0) and step.is_last == (i == len(steps) - 1) and not step.is_terminal
    assert any(s.image for s in steps)


def test_relative_shard_paths_resolve_under_the_data_dir(converted):
    out, refs = converted
    ref = refs[0]
    relative = str(out.name + "/" + ref.shard.rsplit("/", 1)[1])
    with open_episode(ui_episode(ref, relative), out.parent) as reader:
        assert len(reader) == ref.num_steps


def test_wrong_record_or_missing_shard_is_named(converted):
    out, refs = converted
    ref = refs[0]
    wrong = ui_episode(ref, ref.shard)
    wrong.metadata["ui_record"]["episode_id"] = "someone-else"
    with pytest.raises(StepmarkError, match="expected 'someone-else'"):
        open_episode(wrong, out)
    with pytest.raises(StepmarkError, match="shard not found"):
        open_episode(ui_episode(ref, "nope.tfrecord"), out)
    no_data = study_pb2.Episode(id="x", study_id="s", session_id="se")
    with pytest.raises(StepmarkError, match="no step data"):
        open_episode(no_data, out)

"""Operations: undo/redo act on the replayed episode and say what they changed; segment tags; palettes;
deleting an episode removes its own files (recorded Procgen episodes) and keeps convert-ui shards."""

from __future__ import annotations

from pathlib import Path

import pytest

from annotator.operations import Operations, ref_of
from pipelines.episodes.layout import resolve
from pipelines.episodes.removal import episode_files
from pipelines.store import PermissionDenied, open_store
from protos.rlds_creator import client_pb2, study_pb2
from tests.annotator.annotator_data import ALICE, BOB, build_env_data, import_ui_fixtures, ui_import_available


@pytest.fixture
def data(tmp_path):
    return build_env_data(tmp_path / "data", episodes=2, max_steps=8)


def open_replay(ops: Operations, episode: study_pb2.Episode) -> None:
    ops.replay_episode(client_pb2.ReplayEpisodeRequest(ref=ref_of(episode)))


def step_labels(ops: Operations) -> dict[int, list[str]]:
    return {i: [t.label for t in m.tags] for i, m in ops._refresh().step_metadata.items() if len(m.tags)}


def test_undo_and_redo_act_on_the_episode_on_screen_and_name_the_change(data) -> None:
    a, b = data.episodes
    ops = Operations(data.repo, data.data_dir, ALICE)
    open_replay(ops, a)
    ops.add_step_tag(client_pb2.AddStepTagRequest(index=2, tag="jump"))
    open_replay(ops, b)
    ops.add_step_tag(client_pb2.AddStepTagRequest(index=5, tag="land"))
    open_replay(ops, a)  # back on A: the newest change (in B) is not this episode's
    result = ops.undo()
    assert result and result.message == f"Undid: tag 'jump' added to step 2 (episode {a.id[:6]}…)"
    assert step_labels(ops) == {}
    again = ops.undo()
    assert not again and again.message == "Nothing of yours to undo on this episode"
    assert [t.label for t in data.repo.get_episode(ref_of(b)).step_metadata[5].tags] == ["land"]
    redo = ops.redo()
    assert redo.message.startswith("Redid: tag 'jump' added to step 2") and step_labels(ops) == {2: ["jump"]}
    assert ops.redo().message == "Nothing of yours to redo on this episode"


def test_a_restored_tag_keeps_its_author(data) -> None:
    a = data.episodes[0]
    bob, alice = Operations(data.repo, data.data_dir, BOB), Operations(data.repo, data.data_dir, ALICE)
    open_replay(bob, a)
    open_replay(alice, a)
    bob.add_step_tag(client_pb2.AddStepTagRequest(index=1, tag="bobs"))
    # alice created the study (and recorded the episode): she may remove bob's tag; bob may not remove hers
    alice.add_step_tag(client_pb2.AddStepTagRequest(index=3, tag="alices"))
    with pytest.raises(PermissionDenied):
        data.repo.remove_step_tag(ref_of(a), 3, "alices", BOB)
    assert alice.remove_step_tag(client_pb2.RemoveStepTagRequest(index=1, tag="bobs")).success
    assert alice.undo().message.startswith("Undid: tag 'bobs' removed from step 1")
    restored = [e for e in data.repo.audit_log(ref_of(a)) if e.action == "undo"][0]
    assert restored.after["user"] == BOB


def test_segment_tags_through_operations(data) -> None:
    ops = Operations(data.repo, data.data_dir, ALICE)
    open_replay(ops, data.episodes[0])
    assert ops.add_segment_tag(2, 5, "run") == 4
    assert step_labels(ops) == {i: ["run"] for i in range(2, 6)}
    assert ops.undo().message.startswith("Undid: tag 'run' added to steps 2–5 (4 steps)")
    assert step_labels(ops) == {}
    with pytest.raises(Exception, match="out of range"):
        ops.add_segment_tag(0, 10_000, "run")


def test_palette_and_reviewers_through_operations(data) -> None:
    alice, bob = Operations(data.repo, data.data_dir, ALICE), Operations(data.repo, data.data_dir, BOB)
    assert alice.palette(data.study.id) == []
    assert alice.set_palette(data.study.id, ["jump", "fall"]) == ["jump", "fall"]
    with pytest.raises(PermissionDenied):
        bob.set_palette(data.study.id, ["x"])
    alice.set_reviewers(data.study.id, [BOB])
    assert bob.reviewers(data.study.id) == [BOB] and bob.set_palette(data.study.id, ["x"]) == ["x"]
    assert bob.can_review(ref_of(data.episodes[0]))


def test_delete_removes_the_episode_files(data) -> None:
    a, b = data.episodes
    folder = resolve(data.data_dir, a.storage.environment_logger.tag_directory)
    assert folder.is_dir() and any(folder.iterdir())
    ops = Operations(data.repo, data.data_dir, ALICE)
    open_replay(ops, a)  # an open reader must not keep the files
    plan = ops.files_of(ref_of(a))
    assert plan.remove == [folder.resolve()] and plan.keep == []
    result = ops.delete_with_files(ref_of(a))
    assert result.success and result.removed == [folder.resolve()] and result.problems == []
    assert not folder.exists() and folder.parent.exists()
    other = resolve(data.data_dir, b.storage.environment_logger.tag_directory)
    assert other.is_dir() and any(other.iterdir())  # the other episode is untouched
    assert (Path(data.data_dir) / "stepmark.db").exists()
    # through the protocol as well
    assert ops.delete_episode(client_pb2.DeleteEpisodeRequest(ref=ref_of(b))).success
    assert not other.exists()


def test_delete_refused_leaves_files(data) -> None:
    a = data.episodes[0]
    folder = resolve(data.data_dir, a.storage.environment_logger.tag_directory)
    with pytest.raises(PermissionDenied):
        Operations(data.repo, data.data_dir, BOB).delete_with_files(ref_of(a))
    assert folder.is_dir()


def test_files_outside_the_data_directory_are_kept(data, tmp_path) -> None:
    a = data.episodes[0]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    episode = study_pb2.Episode()
    episode.CopyFrom(a)
    episode.storage.environment_logger.tag_directory = str(outside)
    plan = episode_files(episode, data.data_dir)
    assert plan.remove == [] and "outside the data directory" in plan.keep[0]


@pytest.mark.skipif(not ui_import_available(), reason="convert-ui/import-ui not available")
def test_deleting_a_ui_episode_keeps_the_shard_and_says_where(tmp_path, fixtures_dir) -> None:
    data_dir = tmp_path / "data"
    study = import_ui_fixtures(data_dir, fixtures_dir)
    ops = Operations(open_store(None, data_dir), data_dir, ALICE)
    episode = ops.repo.list_episodes(study_id=study.id)[0]
    shard = Path(episode.metadata["ui_record"]["shard"])
    result = ops.delete_with_files(ref_of(episode))
    assert result.success and result.removed == [] and shard.exists()
    assert str(shard) in result.kept[0] and "convert-ui shard" in result.kept[0]

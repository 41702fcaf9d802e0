"""The annotator's service layer over a real SQLite store, real envlogger episodes recorded in Procgen by the
recorder, and the protocol's OperationRequest/OperationResponse dispatch."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import numpy as np
import pytest

from annotator.operations import (
    EpisodeFilter,
    OperationError,
    Operations,
    humanize_duration,
    parse_ref_key,
    ref_key,
    ref_of,
)
from annotator.step_data import to_data
from pipelines.episodes import open_episode
from pipelines.store import open_store
from protos.rlds_creator import client_pb2, study_pb2
from tests.annotator.annotator_data import ALICE, BOB, ENV_ID, build_env_data, procgen_study_spec
from tests.pg_fixture import pg_url, postgres_server  # noqa: F401 - pytest fixtures (PostgreSQL test)

Completed = study_pb2.Episode.STATE_COMPLETED


@pytest.fixture(scope="module")
def env_data(tmp_path_factory):
    return build_env_data(tmp_path_factory.mktemp("annotator_ops"), episodes=3)


@pytest.fixture()
def alice(env_data) -> Operations:
    return Operations(env_data.repo, env_data.data_dir, ALICE)


def op(ops: Operations, **kwargs) -> client_pb2.OperationResponse:
    return ops.handle(client_pb2.OperationRequest(**kwargs))


# -- studies ------------------------------------------------------------------------------------------------


def test_save_study_creates_then_updates_and_only_creator_edits(env_data):
    alice = Operations(env_data.repo, env_data.data_dir, ALICE)
    spec = procgen_study_spec()
    spec.name = "Second study"
    response = op(alice, save_study=client_pb2.SaveStudyRequest(study=spec))
    assert response.WhichOneof("type") == "save_study"
    created = alice.last_saved_study
    assert created.id and created.creator.email == ALICE

    created.description = "edited by alice"
    created.creator.email = "mallory@example.com"  # read-only: ignored
    op(alice, save_study=client_pb2.SaveStudyRequest(study=created))
    stored = env_data.repo.get_study(created.id)
    assert stored.description == "edited by alice"
    assert stored.creator.email == ALICE

    bob = Operations(env_data.repo, env_data.data_dir, BOB)
    stored.description = "edited by bob"
    refused = op(bob, save_study=client_pb2.SaveStudyRequest(study=stored))
    assert refused.WhichOneof("type") == "error"
    assert "save_study" in refused.error.mesg
    assert env_data.repo.get_study(created.id).description == "edited by alice"

    refused = op(bob, enable_study=client_pb2.EnableStudyRequest(study_id=created.id, enable=False))
    assert refused.WhichOneof("type") == "error"
    done = op(alice, enable_study=client_pb2.EnableStudyRequest(study_id=created.id, enable=False))
    assert done.enable_study.study_id == created.id and done.enable_study.enabled is False
    done = op(alice, enable_study=client_pb2.EnableStudyRequest(study_id=created.id, enable=True))
    assert done.enable_study.enabled is True

    mine = op(alice, set_studies=client_pb2.SetStudiesRequest()).set_studies.studies
    assert created.id in {s.id for s in mine}
    assert not op(bob, set_studies=client_pb2.SetStudiesRequest()).set_studies.studies


def test_save_study_rejects_duplicate_environment_ids(alice):
    spec = procgen_study_spec()
    spec.environment_specs.add().CopyFrom(spec.environment_specs[0])
    response = op(alice, save_study=client_pb2.SaveStudyRequest(study=spec))
    assert response.WhichOneof("type") == "error"
    assert "unique" in response.error.mesg


def test_select_study_and_unknown_study(alice, env_data):
    response = op(alice, select_study=client_pb2.SelectStudyRequest(study_id=env_data.study.id))
    assert response.select_study.study.name == env_data.study.name
    missing = op(alice, select_study=client_pb2.SelectStudyRequest(study_id="no-such-study"))
    assert missing.WhichOneof("type") == "error" and "no-such-study" in missing.error.mesg


# -- episodes -----------------------------------------------------------------------------------------------


def test_episode_listing_metadata_and_filters(alice, env_data):
    listed = alice.episodes(EpisodeFilter(study_id=env_data.study.id))
    keys = [ref_key(ref_of(m.episode)) for m in listed.episodes]
    assert set(keys) == {ref_key(ref_of(e)) for e in env_data.episodes}
    meta = listed.episodes[0]
    assert meta.status == "Completed"
    assert meta.duration.endswith("s")
    assert meta.can_delete is True
    assert meta.env.id == ENV_ID and meta.study.id == env_data.study.id
    assert not Operations(env_data.repo, env_data.data_dir, BOB).episodes().episodes[0].can_delete
    assert not alice.episodes(EpisodeFilter(env_id="no-such-env")).episodes
    assert len(alice.episodes(EpisodeFilter(states=[Completed])).episodes) == len(env_data.episodes)
    assert not alice.episodes(EpisodeFilter(states=[study_pb2.Episode.STATE_REJECTED])).episodes


def test_replay_episode_and_steps_match_the_stored_episode(alice, env_data):
    episode = env_data.episodes[0]
    response = op(alice, replay_episode=client_pb2.ReplayEpisodeRequest(ref=ref_of(episode)))
    replay = response.replay_episode
    reader = open_episode(env_data.repo.get_episode(ref_of(episode)), env_data.data_dir)
    assert len(replay.step_rewards) == len(reader)
    assert list(replay.step_rewards) == pytest.approx([reader.step(i).reward for i in range(len(reader))])
    assert sum(replay.step_rewards) == pytest.approx(episode.total_reward)
    assert replay.episode.episode.id == episode.id

    step = op(alice, replay_step=client_pb2.ReplayStepRequest(index=2)).replay_step
    expected = reader.step(2)
    assert step.index == 2
    assert step.image == expected.image and step.image[:2] == b"\xff\xd8"
    assert step.reward == pytest.approx(expected.reward)
    assert [i.name for i in step.observation.images] == ["observation/image"]
    assert step.action.HasField("json_encoded")
    assert np.asarray(eval(step.action.json_encoded)).shape == np.asarray(expected.action).shape  # noqa: S307

    past_end = op(alice, replay_step=client_pb2.ReplayStepRequest(index=len(reader)))
    assert past_end.WhichOneof("type") == "error" and "out of range" in past_end.error.mesg
    reader.close()


def test_tagging_notes_state_audit_and_undo(alice, env_data):
    episode = env_data.episodes[1]
    ref = ref_of(episode)
    op(alice, replay_episode=client_pb2.ReplayEpisodeRequest(ref=ref))

    added = op(alice, add_step_tag=client_pb2.AddStepTagRequest(index=4, tag=" jump ")).add_step_tag
    assert (added.index, added.tag, added.success) == (4, "jump", True)
    again = op(alice, add_step_tag=client_pb2.AddStepTagRequest(index=4, tag="jump")).add_step_tag
    assert again.success is False
    assert list(op(alice, replay_step=client_pb2.ReplayStepRequest(index=4)).replay_step.tags) == ["jump"]
    assert op(alice, add_episode_tag=client_pb2.AddEpisodeTagRequest(tag="good")).add_episode_tag.success
    notes = op(alice, update_replay_episode=client_pb2.UpdateReplayEpisodeRequest(notes="falls at step 9"))
    assert notes.update_replay_episode.success
    alice.set_episode_state(study_pb2.Episode.STATE_REJECTED)

    stored = env_data.repo.get_episode(ref)
    assert [t.label for t in stored.step_metadata[4].tags] == ["jump"]
    assert [t.label for t in stored.tags] == ["good"]
    assert stored.notes == "falls at step 9"
    assert stored.state == study_pb2.Episode.STATE_REJECTED
    assert "jump" in alice.recent_tags(env_data.study.id)
    assert [m.episode.id for m in alice.episodes(EpisodeFilter(tag="jump")).episodes] == [episode.id]
    assert [m.episode.id for m in alice.episodes(EpisodeFilter(notes_query="STEP 9")).episodes] == [
        episode.id
    ]

    log = alice.audit_log(ref)
    actions = [e.action for e in log]
    assert actions[:4] == ["episode.state", "episode.notes", "episode.tag.add", "step.tag.add"]
    assert log[0].user == ALICE and log[0].after == {"state": "STATE_REJECTED"}
    assert log[3].step_index == 4

    undone = alice.undo()
    assert undone is not None
    assert env_data.repo.get_episode(ref).state == study_pb2.Episode.STATE_COMPLETED
    alice.undo()  # the notes
    assert env_data.repo.get_episode(ref).notes == ""
    removed = op(alice, remove_step_tag=client_pb2.RemoveStepTagRequest(index=4, tag="jump")).remove_step_tag
    assert removed.success
    removed = op(alice, remove_episode_tag=client_pb2.RemoveEpisodeTagRequest(tag="good")).remove_episode_tag
    assert removed.success
    final = env_data.repo.get_episode(ref)
    assert not final.tags and 4 not in {i for i, m in final.step_metadata.items() if len(m.tags)}


def test_tag_operations_need_an_open_episode_and_a_label(env_data):
    fresh = Operations(env_data.repo, env_data.data_dir, ALICE)
    response = op(fresh, add_step_tag=client_pb2.AddStepTagRequest(index=0, tag="x"))
    assert response.WhichOneof("type") == "error"
    assert "no episode is being replayed" in response.error.mesg
    op(fresh, replay_episode=client_pb2.ReplayEpisodeRequest(ref=ref_of(env_data.episodes[0])))
    blank = op(fresh, add_episode_tag=client_pb2.AddEpisodeTagRequest(tag="  "))
    assert blank.WhichOneof("type") == "error" and "non-empty" in blank.error.mesg
    assert fresh.handle(client_pb2.OperationRequest()).error.mesg.startswith("empty OperationRequest")


def test_delete_only_own_episodes(tmp_path):
    data = build_env_data(tmp_path, episodes=1, max_steps=5)
    ref = ref_of(data.episodes[0])
    bob = Operations(data.repo, data.data_dir, BOB)
    refused = op(bob, delete_episode=client_pb2.DeleteEpisodeRequest(ref=ref))
    assert refused.WhichOneof("type") == "error" and "may not delete" in refused.error.mesg
    alice = Operations(data.repo, data.data_dir, ALICE)
    done = op(alice, delete_episode=client_pb2.DeleteEpisodeRequest(ref=ref)).delete_episode
    assert done.success and done.ref.episode_id == ref.episode_id
    assert not alice.episodes().episodes
    assert alice.audit_log(ref)[0].action == "episode.delete"


# -- recording ----------------------------------------------------------------------------------------------


def test_record_an_episode_through_the_protocol(tmp_path):
    repo = open_store(None, tmp_path)
    study = repo.create_study(procgen_study_spec(max_steps=6), ALICE)
    ops = Operations(repo, tmp_path, ALICE)
    assert op(ops, action=client_pb2.ActionRequest(keys=["d"])).WhichOneof("type") == "error"
    op(ops, select_study=client_pb2.SelectStudyRequest(study_id=study.id))
    quality = op(
        ops, set_quality=client_pb2.SetQualityRequest(quality=client_pb2.SetQualityRequest.QUALITY_LOW)
    )
    assert quality.WhichOneof("type") is None
    selected = op(ops, select_environment=client_pb2.SelectEnvironmentRequest(env_id=ENV_ID))
    assert selected.select_environment.env.id == ENV_ID
    assert ops.last_step.image[:2] == b"\xff\xd8"
    assert "ArrowLeft" in ops.key_map()
    camera = op(ops, set_camera=client_pb2.SetCameraRequest(index=0)).set_camera
    assert camera.index == 0 and camera.name == ops.cameras()[0]
    bad_camera = op(ops, set_camera=client_pb2.SetCameraRequest(index=len(ops.cameras())))
    assert bad_camera.WhichOneof("type") == "error"
    assert op(ops, set_fps=client_pb2.SetFpsRequest(fps=10)).WhichOneof("type") == "set_fps"

    kinds = []
    for _ in range(6):
        response = op(ops, action=client_pb2.ActionRequest(keys=["ArrowRight"]))
        kinds.append(response.WhichOneof("type"))
    assert kinds == ["step"] * 5 + ["confirm_save"]
    assert op(ops, action=client_pb2.ActionRequest(keys=["d"])).WhichOneof("type") == "confirm_save"
    saved = op(ops, save_episode=client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True))
    episode = saved.save_episode.episode.episode
    assert episode.state == Completed and episode.num_steps == 6
    stored = repo.get_episode(ref_of(episode))
    assert stored.user.email == ALICE and stored.metadata["kind"] == "env"
    reader = open_episode(stored, tmp_path)
    assert len(reader) == 7 and reader.step(0).keys == ["ArrowRight"]
    reader.close()

    # the next episode started at once; stopping keeps it as cancelled once it has steps
    op(ops, action=client_pb2.ActionRequest(keys=["ArrowLeft"]))
    kept = ops.close_recorder()
    assert kept is not None and kept.state == study_pb2.Episode.STATE_CANCELLED
    assert op(ops, set_fps=client_pb2.SetFpsRequest(fps=-1)).WhichOneof("type") == "error"


def test_an_idle_episode_is_abandoned_and_the_next_one_starts(tmp_path):
    repo = open_store(None, tmp_path)
    study = repo.create_study(procgen_study_spec(max_steps=50), ALICE)
    ops = Operations(repo, tmp_path, ALICE)
    op(ops, select_study=client_pb2.SelectStudyRequest(study_id=study.id))
    op(ops, select_environment=client_pb2.SelectEnvironmentRequest(env_id=ENV_ID))
    for _ in range(3):
        assert op(ops, action=client_pb2.ActionRequest(keys=["ArrowRight"])).WhichOneof("type") == "step"
    assert ops.last_abandoned is None
    ops.recorder.idle_timeout = -1.0  # from here on every moment counts as "no input for too long"
    woke = op(ops, action=client_pb2.ActionRequest(keys=["ArrowRight"]))
    assert woke.WhichOneof("type") == "step" and woke.step.episode_steps == 0  # a fresh episode, input not applied
    abandoned = ops.last_abandoned
    assert abandoned.state == study_pb2.Episode.STATE_ABANDONED and abandoned.num_steps == 3
    assert repo.get_episode(ref_of(abandoned)).state == study_pb2.Episode.STATE_ABANDONED
    ops.recorder.idle_timeout = 300.0
    assert op(ops, action=client_pb2.ActionRequest(keys=["ArrowRight"])).step.episode_steps == 1
    ops.close_recorder()


# -- concurrency: two annotators on one episode, in two processes ------------------------------------------


def _annotate(store_url: str | None, data_dir: str, key: str, user: str, count: int, barrier) -> None:
    repo = open_store(store_url, data_dir)
    ops = Operations(repo, data_dir, user)
    ops.replay_episode(client_pb2.ReplayEpisodeRequest(ref=parse_ref_key(key)))
    barrier.wait(timeout=60)
    for i in range(count):
        ops.add_step_tag(client_pb2.AddStepTagRequest(index=i % 5, tag=f"{user.split('@')[0]}-{i}"))
        ops.add_episode_tag(client_pb2.AddEpisodeTagRequest(tag=f"{user.split('@')[0]}-ep-{i}"))
        ops.update_replay_episode(client_pb2.UpdateReplayEpisodeRequest(notes=f"{user} note {i}"))


def two_annotators(repo, store_url: str | None, data_dir: Path, episode: study_pb2.Episode) -> None:
    """Alice and Bob tag and annotate one episode at the same time from two processes; nothing is lost."""
    key = ref_key(ref_of(episode))
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    count = 12
    procs = [
        ctx.Process(target=_annotate, args=(store_url, str(data_dir), key, user, count, barrier))
        for user in (ALICE, BOB)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    stored = repo.get_episode(ref_of(episode))
    step_labels = {t.label for m in stored.step_metadata.values() for t in m.tags}
    for name in ("alice", "bob"):
        assert {f"{name}-{i}" for i in range(count)} <= step_labels
        assert {f"{name}-ep-{i}" for i in range(count)} <= {t.label for t in stored.tags}
    notes = [e for e in repo.audit_log(ref_of(episode)) if e.action == "episode.notes"]
    assert len(notes) == 2 * count  # every note written was recorded, none overwritten unseen
    assert stored.notes == notes[0].after["notes"]  # the final notes are the last change logged


def test_two_annotators_in_two_processes_lose_nothing(env_data):
    two_annotators(env_data.repo, None, env_data.data_dir, env_data.episodes[2])


@pytest.mark.postgres
def test_two_annotators_lose_nothing_on_postgresql(tmp_path, request):
    url = request.getfixturevalue("pg_url")  # a fresh database on the throwaway server (tests/pg_fixture.py)
    data = build_env_data(tmp_path, episodes=1, max_steps=8, store_url=url)
    two_annotators(data.repo, url, data.data_dir, data.episodes[0])


# -- small pieces -------------------------------------------------------------------------------------------


def test_to_data_splits_images_from_json():
    frame = np.zeros((16, 16, 3), np.uint8)
    data = to_data({"rgb": frame, "pos": np.array([1.5, 2.0]), "n": np.int64(3)}, "observation")
    assert [i.name for i in data.images] == ["observation/rgb"]
    assert data.images[0].image[:4] == b"\x89PNG"
    assert data.json_encoded == '{"pos": [1.5, 2.0], "n": 3}'
    assert to_data(np.int64(4)).json_encoded == "4"
    assert not to_data(frame).HasField("json_encoded")


def test_durations_and_refs():
    assert humanize_duration(5) == "5s"
    assert humanize_duration(125) == "2m 5s"
    assert humanize_duration(3720) == "1h 2m"
    ref = parse_ref_key("s/t/e")
    assert (ref.study_id, ref.session_id, ref.episode_id) == ("s", "t", "e")
    with pytest.raises(OperationError):
        parse_ref_key("only/two")


def test_reader_paths_are_under_the_data_dir(env_data):
    assert all((Path(env_data.data_dir) / e.storage.environment_logger.tag_directory).is_dir()
               for e in env_data.episodes)  # fmt: skip


def test_notes_update_refuses_a_stale_editor(env_data):
    from annotator.operations import NotesConflict

    ref = ref_of(env_data.episodes[0])
    alice = Operations(env_data.repo, env_data.data_dir, ALICE)
    bob = Operations(env_data.repo, env_data.data_dir, BOB)
    for ops in (alice, bob):
        ops.replay_episode(client_pb2.ReplayEpisodeRequest(ref=ref))
    seen = alice.replay.episode.notes
    bob.update_replay_episode(client_pb2.UpdateReplayEpisodeRequest(notes="bob's note"), expected=seen)
    with pytest.raises(NotesConflict):
        alice.update_replay_episode(client_pb2.UpdateReplayEpisodeRequest(notes="alice's"), expected=seen)
    assert env_data.repo.get_episode(ref).notes == "bob's note"
    alice.update_replay_episode(client_pb2.UpdateReplayEpisodeRequest(notes="alice's"), expected="bob's note")
    assert env_data.repo.get_episode(ref).notes == "alice's"


def test_can_delete_in_listings_matches_the_store(tmp_path):
    from annotator.recorder import record_batch

    repo = open_store(None, tmp_path)
    study = repo.create_study(procgen_study_spec(max_steps=3), ALICE)
    (episode,) = record_batch(repo, tmp_path, study.id, ENV_ID, 1, "random", user=BOB, seed=1, progress=False)
    for user in (ALICE, BOB, "carol@example.com"):
        listed = Operations(repo, tmp_path, user).episodes().episodes[0]
        assert listed.can_delete == repo.can_delete(episode, user), user
    assert [Operations(repo, tmp_path, u).episodes().episodes[0].can_delete for u in (ALICE, BOB, "c")] == [
        True, True, False
    ]  # fmt: skip

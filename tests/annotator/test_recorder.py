"""The recorder over real Procgen games, a real SQLite store and real envlogger files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import envlogger
import numpy as np
import pytest

from annotator.recorder import Recorder, record_batch
from pipelines.episodes import layout, open_episode, publish, stats
from pipelines.errors import StepmarkError
from pipelines.store import StudyDisabled
from protos.rlds_creator import client_pb2, study_pb2
from tests.pipelines.episodes.helpers import (
    CREATOR,
    USER,
    family_spec,
    jpeg_size,
    make_study,
    new_store,
    procgen_spec,
    same_figures,
)

State = study_pb2.Episode.State
REPO_ROOT = Path(__file__).resolve().parents[2]
KEY_CYCLE = [["ArrowRight"], ["ArrowUp"], ["ArrowLeft"], ["ArrowDown"], []]


class FakeClock:
    """Time the test controls (idle timeouts, async fps) - the recorder takes any monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path):
    repo = new_store(tmp_path)
    yield repo, tmp_path
    repo.close()


def play_until_confirm(rec: Recorder, limit: int = 500) -> list[list[str]]:
    """Presses keys until the episode ends; returns the keys pressed per step."""
    pressed = []
    for i in range(limit):
        keys = KEY_CYCLE[i % len(KEY_CYCLE)]
        pressed.append(keys)
        resp = rec.act(keys)
        if isinstance(resp, client_pb2.ConfirmSaveResponse):
            assert resp.mark_as_completed
            return pressed
        assert resp.episode_steps == i + 1
    raise AssertionError("episode did not end")


def test_sync_recording_round_trip(store):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=40))
    rec = Recorder(repo, data, study.id, "maze", USER, seed=3)
    first = rec.start()
    assert isinstance(first, client_pb2.StepResponse)
    assert first.episode_index == 0 and first.episode_steps == 0 and jpeg_size(first.image) == (64, 64)
    pressed = play_until_confirm(rec)
    assert rec.awaiting_save
    with pytest.raises(StepmarkError, match="answer the save confirmation"):
        rec.act(["ArrowUp"])
    response = rec.save(client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True))
    saved = response.episode.episode
    assert response.episode.status == "Completed" and response.episode.can_delete
    assert response.episode.env.id == "maze" and response.episode.study.id == study.id

    stored = repo.get_episode(
        client_pb2.EpisodeRef(study_id=study.id, session_id=saved.session_id, episode_id=saved.id)
    )
    assert stored.state == State.STATE_COMPLETED and stored.user.email == USER
    assert stored.num_steps == len(pressed)
    assert stored.metadata["kind"] == "env" and stored.metadata["env_family"] == "procgen"
    final = layout.episode_paths(data, study.id, saved.session_id, "maze", saved.id).final
    assert (final / layout.EPISODE_FILE).is_file() and not (final / layout.PENDING_FILE).exists()
    assert not layout.temp_folders(data)

    with open_episode(stored, data) as reader:
        steps = list(reader)
    assert len(steps) == stored.num_steps + 1
    assert [s.keys for s in steps[:-1]] == pressed
    assert all(jpeg_size(s.image) == (64, 64) for s in steps)
    assert sum(s.reward for s in steps) == pytest.approx(stored.total_reward)
    # Stats: on the finished transition's info, and the same figures on the episode.
    last = steps[-2]
    figures = stats.stats_from_info(last.info)
    assert same_figures(figures, stats.stats_of_episode(stored))
    assert figures.l == len(pressed) and last.info["episode"]["mask"] is True
    assert all("episode" not in s.info for s in steps[:-2])
    assert steps[-1].is_last and steps[-1].is_terminal == (last.discount == 0.0)
    # The episode metadata written with the files.
    with envlogger.Reader(str(final)) as raw:
        assert raw.episode_metadata()[0] == {
            "agent_id": USER, "episode_id": saved.id, "env_id": "maze", "study_id": study.id,
            "session_id": saved.session_id,
        }  # fmt: skip
    rec.close()


def test_success_comes_from_the_environment(store):
    repo, data = store
    study = make_study(repo, procgen_spec("jump", "jumper", max_steps=150))
    episodes = record_batch(repo, data, study.id, "jump", 4, user=USER, seed=0, progress=False)
    assert len(episodes) == 4
    for e in episodes:
        with open_episode(e, data) as reader:
            info = reader.step(len(reader) - 2).info
        figures = stats.stats_from_info(info)
        assert same_figures(figures, stats.stats_of_episode(e))
        # jumper: success is completing the level, which is the only reward (10).
        assert figures.s == (e.total_reward > 0) == bool(info["level_complete"])
    assert any(stats.stats_of_episode(e).s for e in episodes)


@pytest.mark.parametrize(
    ("accept", "mark", "state"),
    [
        (True, True, State.STATE_COMPLETED),
        (True, False, State.STATE_CANCELLED),
        (False, False, State.STATE_REJECTED),
    ],
)
def test_save_flow_states(store, accept, mark, state):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=6))
    with Recorder(repo, data, study.id, "maze", USER, seed=1) as rec:
        rec.start()
        play_until_confirm(rec)
        episode = rec.save(
            client_pb2.SaveEpisodeRequest(accept=accept, mark_as_completed=mark)
        ).episode.episode
    assert episode.state == state
    listed = repo.list_episodes(study_id=study.id)
    assert [e.id for e in listed] == [episode.id]
    with open_episode(listed[0], data) as reader:  # rejected episodes keep their files too
        assert len(reader) == 7


def test_user_ends_episode_early_last_transition_is_a_truncation(store):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=0))  # no step limit: the user decides
    with Recorder(repo, data, study.id, "maze", USER, seed=2) as rec:
        rec.start()
        for _ in range(5):
            assert isinstance(rec.act(["ArrowRight"]), client_pb2.StepResponse)
        episode = rec.save(client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True)).episode.episode
    assert episode.num_steps == 5 and episode.state == State.STATE_COMPLETED
    with open_episode(episode, data) as reader:
        steps = list(reader)
    assert len(steps) == 6
    assert steps[4].info["episode"] == {"r": episode.total_reward, "l": 5, "s": False, "mask": True}
    assert steps[4].discount == 1.0 and steps[5].is_last and not steps[5].is_terminal


def test_gamepad_input_is_recorded_with_its_controller(store):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=0))
    with Recorder(repo, data, study.id, "maze", USER, seed=2) as rec:
        rec.start()
        pad = client_pb2.GamepadInput(id="Xbox 360 Controller (XInput STANDARD GAMEPAD)")
        pad.axes[0] = 1.0  # stick right
        rec.act([], pad)
        rec.act(["ArrowLeft"])
        expected = [rec.env.action_from_input(["ArrowRight"]), rec.env.action_from_input(["ArrowLeft"])]
        episode = rec.save(
            client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=False)
        ).episode.episode
    assert episode.controller_id == pad.id
    assert repo.get_episode(repo.ref(episode)).controller_id == pad.id
    with open_episode(episode, data) as reader:
        actions = [int(s.action) for s in list(reader)[:-1]]
    assert actions == expected and expected[0] != expected[1]


def test_cancel_and_second_episode_index(store):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=0))
    with Recorder(repo, data, study.id, "maze", USER, seed=2) as rec:
        rec.start()
        assert rec.cancel() is None  # nothing happened: nothing registered, no files left
        assert not layout.temp_folders(data) and repo.list_episodes(study_id=study.id) == []
        assert rec.start().episode_index == 0
        rec.act(["ArrowLeft"])
        cancelled = rec.cancel()
        assert cancelled.state == State.STATE_CANCELLED and cancelled.num_steps == 1
        assert rec.start().episode_index == 1
        with pytest.raises(StepmarkError, match="already being recorded"):
            rec.start()


def test_idle_episode_is_abandoned(store):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=0))
    clock = FakeClock()
    with Recorder(repo, data, study.id, "maze", USER, idle_timeout=60, clock=clock) as rec:
        rec.start()
        clock.now += 30
        rec.act(["ArrowUp"])
        clock.now += 59
        assert rec.abandon_if_idle() is None
        abandoned = rec.abandon_if_idle(clock.now + 2)
        assert abandoned.state == State.STATE_ABANDONED and abandoned.num_steps == 1
        assert not rec.in_episode
        # An idle episode without any step is dropped, not registered.
        rec.start()
        assert rec.abandon_if_idle(clock.now + 1000) is None
    assert [e.state for e in repo.list_episodes(study_id=study.id)] == [State.STATE_ABANDONED]


def test_disabled_study_is_refused(store):
    repo, data = store
    study = make_study(repo, procgen_spec())
    rec = Recorder(repo, data, study.id, "maze", USER)
    repo.enable_study(study.id, False, CREATOR)
    with pytest.raises(StudyDisabled, match="disabled"):
        rec.start()
    assert repo.list_sessions(study_id=study.id) == []
    rec.close()


def test_study_disabled_while_recording_refuses_the_save_and_leaves_no_files(store):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=0))
    with Recorder(repo, data, study.id, "maze", USER) as rec:
        rec.start()
        rec.act(["ArrowUp"])
        repo.enable_study(study.id, False, CREATOR)
        with pytest.raises(StudyDisabled):
            rec.save(client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True))
        assert not rec.in_episode
    assert repo.list_episodes(study_id=study.id) == []
    assert not layout.temp_folders(data) and not layout.pending_folders(data)
    assert not any(p.is_dir() for p in data.glob("*/*/maze/*"))


def test_unknown_study_env_or_storage(store):
    repo, data = store
    study = make_study(repo, procgen_spec())
    with pytest.raises(StepmarkError, match="no environment 'nope'.*maze"):
        Recorder(repo, data, study.id, "nope", USER)
    with pytest.raises(StepmarkError, match="not found"):
        Recorder(repo, data, "missing", "maze", USER)
    with pytest.raises(StepmarkError, match="unknown episode storage"):
        Recorder(repo, data, study.id, "maze", USER, storage="hdf5")


def test_async_environment_steps_on_tick_at_fps(store):
    repo, data = store
    study = make_study(repo, procgen_spec(sync=False, max_steps=0))
    clock = FakeClock()
    with Recorder(repo, data, study.id, "maze", USER, clock=clock) as rec:
        rec.start()
        assert rec.set_fps(client_pb2.SetFpsRequest(fps=10)) == client_pb2.SetFpsResponse()
        resp = rec.act(["ArrowRight"])  # async: remembers the keys, does not step
        assert resp.episode_steps == 0
        assert rec.tick(clock.now + 0.05) is None  # before 1/fps
        assert rec.tick(clock.now + 0.1).episode_steps == 1
        assert rec.tick(clock.now + 0.15) is None
        assert rec.tick(clock.now + 0.2).episode_steps == 2
        rec.act([])
        assert rec.tick(clock.now + 0.3).episode_steps == 3
        episode = rec.save(
            client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=False)
        ).episode.episode
    with open_episode(episode, data) as reader:
        assert [s.keys for s in reader][:3] == [["ArrowRight"], ["ArrowRight"], []]


def test_quality_and_camera_passthroughs(store):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=0))
    with Recorder(
        repo, data, study.id, "maze", USER, quality=client_pb2.SetQualityRequest.QUALITY_LOW
    ) as rec:
        low = rec.start().image
        high = rec.set_quality(
            client_pb2.SetQualityRequest(quality=client_pb2.SetQualityRequest.QUALITY_HIGH)
        )
        assert len(high.image) > len(low)
        assert rec.set_camera(client_pb2.SetCameraRequest(index=0)) == client_pb2.SetCameraResponse(
            index=0, name="main"
        )
        with pytest.raises(StepmarkError, match="camera index 3"):
            rec.set_camera(client_pb2.SetCameraRequest(index=3))
        with pytest.raises(StepmarkError, match="fps"):
            rec.set_fps(client_pb2.SetFpsRequest(fps=-1))
        rec.act(["ArrowUp"])
        episode = rec.cancel()
    with open_episode(episode, data) as reader:
        assert reader.step(0).image == low and len(reader.step(1).image) == len(high.image)


def test_pickle_storage_recording(store):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=8))
    [episode] = record_batch(
        repo, data, study.id, "maze", 1, user=USER, seed=4, progress=False, storage="pickle"
    )
    assert episode.storage.WhichOneof("type") == "pickle"
    assert (
        episode.storage.pickle.path.endswith("/episode.pkl")
        and not Path(episode.storage.pickle.path).is_absolute()
    )
    with open_episode(episode, data) as reader:
        assert len(reader) == episode.num_steps + 1
        assert reader.step(len(reader) - 2).info["episode"]["l"] == episode.num_steps


def test_record_batch_with_noop_policy_and_step_cap(store):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=0))
    episodes = record_batch(
        repo, data, study.id, "maze", 2, policy="noop", user=USER, max_steps=7, progress=False
    )
    assert [e.num_steps for e in episodes] == [7, 7]
    assert len({e.session_id for e in episodes}) == 1
    with open_episode(episodes[0], data) as reader:
        assert all(int(s.action) == 4 for s in list(reader)[:-1])  # procgen's no-op combo
    with pytest.raises(StepmarkError, match="unknown policy"):
        record_batch(repo, data, study.id, "maze", 1, policy="greedy", user=USER)


def test_background_writer_records_the_same_episode(store):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=0))
    figures = []
    for background in (False, True):
        with Recorder(repo, data, study.id, "maze", USER, seed=0, background_writer=background) as rec:
            rec.start()
            pressed = play_until_confirm(rec)
            episode = rec.save_episode(client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True))
        assert episode.state == State.STATE_COMPLETED
        with open_episode(episode, data) as reader:
            steps = list(reader)
        figures.append(
            (
                [s.keys for s in steps],
                [bytes(s.image) for s in steps],
                [s.observation["image"].tobytes() for s in steps],
                [s.reward for s in steps],
            )
        )
        assert figures[-1][0][:-1] == pressed
    assert figures[0] == figures[1]


def test_dead_background_writer_fails_the_save_and_leaves_nothing(store):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=0))
    with Recorder(repo, data, study.id, "maze", USER, seed=0, background_writer=True) as rec:
        rec.start()
        for _ in range(5):
            rec.act(["ArrowRight"])
        pid = rec._writer_process.pid
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(StepmarkError, match=f"writer process {pid} died"):
            for _ in range(500):  # the steps fill the pipe, or the save finds no one to close the files
                rec.act(["ArrowRight"])
            rec.save(client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True))
        assert not rec.in_episode
        assert layout.temp_folders(data) == [] and repo.list_episodes(study_id=study.id) == []
        # The next episode gets a new writer process.
        rec.start()
        rec.act(["ArrowRight"])
        episode = rec.save_episode(client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True))
    assert episode.num_steps == 1 and rec._writer_process is None
    with open_episode(episode, data) as reader:
        assert len(reader) == 2


@pytest.mark.parametrize("background", [False, True])
def test_saves_without_waiting_are_registered_in_order(store, background):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=6))
    with Recorder(repo, data, study.id, "maze", USER, seed=0, background_writer=background) as rec:
        ids = []
        for _ in range(3):
            rec.start()
            play_until_confirm(rec)
            ids.append(rec._current.proto.id)
            request = client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True)
            assert rec.save_episode(request, wait=False) is None
        done = rec.publish_closed(wait=True)
        rec.start()
        play_until_confirm(rec)
        ids.append(rec._current.proto.id)
        rec.save_episode(client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True), wait=False)
    # close() registered the last one.
    assert [e.id for e in done] == ids[:3]
    listed = repo.list_episodes(study_id=study.id)
    assert sorted(e.id for e in listed) == sorted(ids) and layout.temp_folders(data) == []
    for episode in listed:
        assert episode.state == State.STATE_COMPLETED and episode.num_steps == 6
        with open_episode(episode, data) as reader:
            assert len(reader) == 7 and reader.step(5).info["episode"]["l"] == 6


def test_writer_death_with_closes_in_flight_registers_nothing_it_did_not_finish(store):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=6))
    with Recorder(repo, data, study.id, "maze", USER, seed=0, background_writer=True) as rec:
        rec.start()
        play_until_confirm(rec)
        first = rec.save_episode(client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True))
        rec.start()
        play_until_confirm(rec)
        rec.save_episode(client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True), wait=False)
        pid = rec._writer_process.pid
        os.kill(pid, signal.SIGKILL)
        # Whether the child closed the second episode before it died or not, nothing unfinished is kept.
        try:
            done = rec.publish_closed(wait=True)
        except StepmarkError as exc:
            assert f"writer process {pid} died" in str(exc)
            done = []
    listed = {e.id for e in repo.list_episodes(study_id=study.id)}
    assert listed == {first.id} | {e.id for e in done}
    assert layout.temp_folders(data) == []
    for episode in repo.list_episodes(study_id=study.id):
        with open_episode(episode, data) as reader:
            assert len(reader) == 7


# ----- killed recordings --------------------------------------------------------------------------------
CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from pipelines.store import open_store
    from annotator.recorder import Recorder
    from protos.rlds_creator import client_pb2

    data, study, mode, background = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "background"
    repo = open_store(None, data)
    rec = Recorder(repo, data, study, "maze", "killed@example.com", seed=0, background_writer=background,
                   flush_steps=True)
    rec.start()
    if mode == "before-first-step":
        print(f"READY {rec._writer_process.pid if background else 0}", flush=True)
        time.sleep(600)
    for i in range(20):
        rec.act(["ArrowRight"])
        if i == 10 and not background:  # the writer's once-a-second flush, now: 10 transitions reach the file
            rec._current.writer._backend._data_writer.flush()
    if mode == "mid-episode":
        writer_pid = rec._writer_process.pid if background else 0
        print(f"READY {writer_pid}", flush=True)
        time.sleep(600)
    # Die between the files being complete (renamed to the final folder) and registration.
    repo.add_episode = lambda episode: os.kill(os.getpid(), signal.SIGKILL)
    rec.save(client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True))
    """
)


def run_child(data: Path, study_id: str, mode: str, writer: str) -> int:
    """Runs CHILD until it is killed; returns the pid of its writer process (0: it wrote in-process)."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    writer_pid = 0
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data), study_id, mode, writer],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=REPO_ROOT,
    )
    try:
        if mode in ("mid-episode", "before-first-step"):
            ready, pid = proc.stdout.readline().split()
            assert ready == "READY"
            writer_pid = int(pid)
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    return writer_pid


def writer_exits(pid: int) -> bool:
    """True once the orphaned writer process is gone (or a zombie waiting for init to reap it)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


WRITERS = ["in-process", "background"]


def test_sigkill_before_the_first_step_leaves_nothing_behind(store):
    """kill -9 of a recorder before its first step: the next start deletes the folder that holds no step (it
    used to keep `<id>.tmp-PID/` with only its started marker "for inspection" forever)."""
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=0))
    writer_pid = run_child(data, study.id, "before-first-step", "background")
    assert writer_pid > 0 and writer_exits(writer_pid)
    [temp] = layout.temp_folders(data)
    assert (temp / publish.STARTED_FILE).is_file()
    with Recorder(repo, data, study.id, "maze", USER) as rec:
        rec.start()
        assert rec.recovery.deleted == [temp] and rec.recovery.registered == [] and rec.recovery.skipped == []
        rec.cancel()
    assert layout.temp_folders(data) == [] and repo.list_episodes(study_id=study.id) == []


def test_sigkill_mid_episode_with_the_writer_process_is_registered_as_abandoned(store):
    """The writer child closes the files of a killed recorder; the next start registers the steps it holds."""
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=0))
    writer_pid = run_child(data, study.id, "mid-episode", "background")
    assert writer_pid > 0 and writer_exits(writer_pid)  # end of its input: it closes the files and stops
    assert repo.list_episodes(study_id=study.id) == []
    [temp] = layout.temp_folders(data)
    assert (temp / publish.STARTED_FILE).is_file() and not (temp / layout.PENDING_FILE).exists()
    with Recorder(repo, data, study.id, "maze", USER) as rec:
        rec.start()
        [episode] = rec.recovery.registered
        assert rec.recovery.deleted == [] and rec.recovery.skipped == []
        rec.cancel()
    assert not temp.exists()
    assert episode.state == State.STATE_ABANDONED and episode.user.email == "killed@example.com"
    # 20 presses: the last transition is held back for the save flow, so 19 reached the files.
    assert episode.num_steps == 19 and episode.metadata["interrupted"] is True
    with open_episode(episode, data) as reader:
        assert len(reader) == 20
        assert [reader.step(i).keys for i in range(3)] == [["ArrowRight"]] * 3
    [stored] = repo.list_episodes(study_id=study.id)
    assert stored.id == episode.id and stored.state == State.STATE_ABANDONED


def test_sigkill_mid_episode_in_process_salvages_the_steps_flushed(store):
    """Files never closed: envlogger's reader sees no episode in them (no index). Recovery copies the steps
    flushed before the kill into a closed episode (ABANDONED) and moves the files, every byte, to the
    quarantine folder; it never deletes them (they used to stay "kept for inspection", reported forever)."""
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=0))
    run_child(data, study.id, "mid-episode", "in-process")
    [temp] = layout.temp_folders(data)
    sizes = {p.relative_to(temp): p.stat().st_size for p in temp.rglob("*") if p.is_file()}
    del sizes[Path(publish.STARTED_FILE)]  # the recorder's marker: it becomes the registered episode
    report = publish.recover_abandoned(repo, data)
    [episode] = report.registered
    [(folder, moved, why)] = report.quarantined
    assert folder == temp and not temp.exists() and "files never closed" in why
    assert {p: (moved / p).stat().st_size for p in sizes} == sizes  # the originals, as they were
    assert episode.state == State.STATE_ABANDONED and episode.metadata["salvaged"] is True
    assert episode.metadata["quarantine"] == moved.relative_to(data).as_posix()
    with open_episode(episode, data) as reader:
        # The first frame and the 10 transitions flushed (the 9 after it were still in the writer's chunk).
        assert len(reader) == 11 == episode.num_steps + 1
        assert [reader.step(i).keys for i in range(10)] == [["ArrowRight"]] * 10


@pytest.mark.parametrize("writer", WRITERS)
def test_sigkill_before_registration_is_recovered_as_abandoned(store, writer):
    repo, data = store
    study = make_study(repo, procgen_spec(max_steps=0))
    run_child(data, study.id, "before-registration", writer)
    assert repo.list_episodes(study_id=study.id) == []
    [folder] = layout.pending_folders(data)
    report = publish.recover_abandoned(repo, data)
    [episode] = report.registered
    assert episode.state == State.STATE_ABANDONED and episode.num_steps == 20
    assert episode.metadata["recovered"] is True and episode.metadata["intended_state"] == "STATE_COMPLETED"
    assert episode.user.email == "killed@example.com"
    assert (folder / layout.EPISODE_FILE).is_file() and not layout.pending_folders(data)
    with open_episode(episode, data) as reader:
        assert len(reader) == 21 and reader.step(19).info["episode"]["l"] == 20
    # Idempotent: nothing left to do.
    again = publish.recover_abandoned(repo, data)
    assert again.registered == [] and again.deleted == []
    np.testing.assert_equal(len(repo.list_episodes(study_id=study.id)), 1)


# ----- every environment family records and reads back ---------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("family", ["procgen", "atari", "nethack", "robosuite", "robodesk"])
def test_each_family_records_a_short_episode_and_reads_it_back(store, family):
    repo, data = store
    spec = family_spec(family, max_steps=3, env_id=f"fam-{family}", atari="Pong")
    study = make_study(repo, spec)
    with Recorder(repo, data, study.id, spec.id, USER, seed=0) as rec:
        rec.start()
        assert rec.env.family == family
        observation_keys = set(rec.env.observation_spec())
        if len(rec.env.cameras) > 1:  # a second camera: later frames come from it
            assert rec.set_camera(client_pb2.SetCameraRequest(index=1)).name == rec.env.cameras[1]
        rng = np.random.default_rng(0)
        while not isinstance(
            rec.step_action(rec.env.sample_action(rng), ["x"]), client_pb2.ConfirmSaveResponse
        ):
            pass
        episode = rec.save(client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True)).episode.episode
    assert episode.num_steps == 3 and episode.metadata["env_family"] == family
    with open_episode(episode, data) as reader:
        steps = list(reader)
    assert len(steps) == 4
    for s in steps:
        assert set(s.observation) == observation_keys
        assert jpeg_size(s.image)[0] > 0
    assert same_figures(stats.stats_from_info(steps[2].info), stats.stats_of_episode(episode))
    assert [s.keys for s in steps] == [["x"], ["x"], ["x"], []]
    tag_dir = data / episode.storage.environment_logger.tag_directory
    with envlogger.Reader(str(tag_dir)) as raw:
        assert set(raw.observation_spec()) == observation_keys
        assert len(raw.episodes[0]) == 4


def test_idle_async_episode_is_abandoned_by_the_clock_that_steps_it(store):
    """An async environment keeps stepping while nobody plays: its ticks end an idle episode as ABANDONED."""
    repo, data = store
    study = make_study(repo, procgen_spec(sync=False, max_steps=0))  # no step limit: it would never end
    clock = FakeClock()
    with Recorder(repo, data, study.id, "maze", USER, idle_timeout=60, clock=clock) as rec:
        rec.start()
        rec.set_fps(client_pb2.SetFpsRequest(fps=1))
        rec.act(["ArrowRight"])
        steps = [rec.tick(clock.now + t) for t in range(1, 61)]  # a minute of ticks, input at the start
        assert all(isinstance(r, client_pb2.StepResponse) for r in steps) and rec.in_episode
        assert rec.tick(clock.now + 61) is None and not rec.in_episode
        assert rec.last_episode.state == State.STATE_ABANDONED and rec.last_episode.num_steps == 60
        assert rec.tick(clock.now + 62) is None  # nothing runs until the next start()
    [episode] = repo.list_episodes(study_id=study.id)
    assert episode.state == State.STATE_ABANDONED and episode.num_steps == 60

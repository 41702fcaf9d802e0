"""AppTest of the Record page: play a synchronous Procgen environment with the on-screen keys, see frame and
reward after each step, then the save dialog (accept/reject, completed or cancelled)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from annotator.views.record import shortcut_for
from pipelines.episodes import open_episode
from pipelines.store import open_store
from protos.rlds_creator import study_pb2
from tests.annotator.annotator_data import ALICE, ENV_ID, procgen_study_spec

APP = "../../annotator/app.py"
State = study_pb2.Episode


def record_page(tmp_path, monkeypatch, max_steps: int = 4):
    repo = open_store(None, tmp_path)
    study = repo.create_study(procgen_study_spec(max_steps=max_steps), ALICE)
    monkeypatch.setenv("STEPMARK_DATA", str(tmp_path))
    monkeypatch.setenv("STEPMARK_USER", ALICE)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("views/record.py").run()
    assert at.selectbox(key="rec_study").value == study.id
    assert at.selectbox(key="rec_env").value == ENV_ID
    return repo, study, at


def key_button(at: AppTest, key: str):
    return at.button(key=f"rec_key_{key!r}")


def test_play_and_save_completed_then_reject_the_next(tmp_path, monkeypatch):
    repo, study, at = record_page(tmp_path, monkeypatch)
    at.selectbox(key="rec_quality").set_value("high")
    at.button(key="rec_start").click().run()
    assert not at.exception
    assert at.get("image")[0].captions == ["episode 0 · step 0"]
    assert key_button(at, "ArrowRight").proto.shortcut == "right"  # a keyboard key presses it
    for n in range(1, 4):
        key_button(at, "ArrowRight").click().run()
        assert at.get("image")[0].captions == [f"episode 0 · step {n}"]
        assert at.metric[1].value == str(n)
    key_button(at, "d").click().run()  # the 4th step ends the episode (max_episode_steps)
    assert "The episode has ended" in at.warning[0].value
    # the dialog shows the step count, not the reward of the step before the last (it looked like the final one)
    assert [(m.label, m.value) for m in at.metric] == [("Steps", "4")]
    assert at.checkbox(key="rec_completed").value is True
    at.button(key="rec_accept").click().run()
    (saved,) = repo.list_episodes(study_id=study.id)
    assert saved.state == State.STATE_COMPLETED and saved.num_steps == 4
    assert any(t.value.startswith(f"Episode {saved.id} saved as Completed") for t in at.toast)
    reader = open_episode(saved, tmp_path)
    assert [reader.step(i).keys for i in range(4)] == [["ArrowRight"]] * 3 + [["d"]]
    reader.close()

    # the next episode starts at once; this one is rejected
    assert at.get("image")[0].captions == ["episode 1 · step 0"]
    for _ in range(4):
        at.button(key="rec_noop").click().run()
    at.button(key="rec_reject").click().run()
    states = sorted(e.state for e in repo.list_episodes(study_id=study.id))
    assert states == [State.STATE_COMPLETED, State.STATE_REJECTED]


def test_mark_not_completed_is_cancelled_and_stop_keeps_partial(tmp_path, monkeypatch):
    repo, study, at = record_page(tmp_path, monkeypatch, max_steps=2)
    at.button(key="rec_start").click().run()
    key_button(at, "ArrowLeft").click().run()
    key_button(at, "ArrowLeft").click().run()
    at.checkbox(key="rec_completed").set_value(False)
    at.button(key="rec_accept").click().run()
    assert [e.state for e in repo.list_episodes(study_id=study.id)] == [State.STATE_CANCELLED]
    key_button(at, "ArrowUp").click().run()
    at.button(key="rec_cancel").click().run()
    assert at.button(key="rec_start")  # back to the start panel
    states = [e.state for e in repo.list_episodes(study_id=study.id)]
    assert states == [State.STATE_CANCELLED, State.STATE_CANCELLED]
    assert [e.num_steps for e in repo.list_episodes(study_id=study.id)] == [2, 1]


def test_disabled_studies_are_not_offered(tmp_path, monkeypatch):
    repo = open_store(None, tmp_path)
    study = repo.create_study(procgen_study_spec(), ALICE)
    repo.enable_study(study.id, False, ALICE)
    monkeypatch.setenv("STEPMARK_DATA", str(tmp_path))
    monkeypatch.setenv("STEPMARK_USER", ALICE)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("views/record.py").run()
    assert "No enabled study" in at.info[0].value


def test_keyboard_shortcuts_for_keys():
    assert shortcut_for("ArrowLeft") == "Left"
    assert shortcut_for(" ") == "Space"
    assert shortcut_for("d") == "D"
    assert shortcut_for("r") is None and shortcut_for("c") is None  # reserved by Streamlit
    assert shortcut_for("<") is None


def test_async_environment_steps_on_its_clock_and_a_press_is_a_tap(tmp_path, monkeypatch):
    import time

    repo = open_store(None, tmp_path)
    spec = procgen_study_spec(max_steps=50)
    spec.environment_specs[0].sync = False
    study = repo.create_study(spec, ALICE)
    monkeypatch.setenv("STEPMARK_DATA", str(tmp_path))
    monkeypatch.setenv("STEPMARK_USER", ALICE)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("views/record.py").run()
    at.button(key="rec_start").click().run()
    at.slider(key="rec_fps").set_value(20).run()
    before = int(at.metric[1].value)  # ticks so far (no key held: no-op steps)
    time.sleep(0.06)  # > 1/fps, so this run's tick steps, with the key pressed in it
    key_button(at, "ArrowRight").click().run()
    for _ in range(2):
        time.sleep(0.06)  # the next ticks step with nothing held: the press was a tap
        at.run()
    assert int(at.metric[1].value) == before + 3
    at.button(key="rec_cancel").click().run()
    (episode,) = repo.list_episodes(study_id=study.id)
    reader = open_episode(episode, tmp_path)
    keys = [reader.step(i).keys for i in range(before + 3)]
    assert keys == [[]] * before + [["ArrowRight"], [], []]
    reader.close()


def test_an_idle_episode_is_reported_as_abandoned(tmp_path, monkeypatch):
    repo, study, at = record_page(tmp_path, monkeypatch, max_steps=20)
    at.button(key="rec_start").click().run()
    for _ in range(2):
        key_button(at, "ArrowRight").click().run()
    at.session_state["_ops"].recorder.idle_timeout = -1.0  # every moment now counts as idle
    key_button(at, "ArrowRight").click().run()
    assert not at.exception
    (abandoned,) = repo.list_episodes(study_id=study.id, states=[State.STATE_ABANDONED])
    assert abandoned.num_steps == 2
    assert f"episode {abandoned.id} (2 steps) saved as abandoned" in at.warning[0].value
    assert at.get("image")[0].captions == ["episode 1 · step 0"]

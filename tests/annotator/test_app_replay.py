"""AppTest of the Replay page on environment episodes recorded in Procgen: scrubbing, tagging, notes, state,
undo, and two annotator sessions on the same episode."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from annotator.operations import ref_key, ref_of
from pipelines.episodes import open_episode
from pipelines.store import open_store
from protos.stepmark import ui_episode_pb2
from tests.annotator.annotator_data import ALICE, BOB, build_env_data, import_ui_fixtures

APP = "../../annotator/app.py"


@pytest.fixture(scope="module")
def env_data(tmp_path_factory):
    return build_env_data(tmp_path_factory.mktemp("app_replay"), episodes=2, max_steps=20)


def open_replay(data, user: str, episode, monkeypatch, step: int = 0) -> AppTest:
    """A browser session of `user`, who types their name into the sidebar (no --user given)."""
    monkeypatch.setenv("STEPMARK_DATA", str(data.data_dir))
    monkeypatch.delenv("STEPMARK_USER", raising=False)
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert "Tell us who you are" in at.info[0].value
    at.sidebar.text_input(key="typed_user").set_value(user).run()
    at.switch_page("views/replay.py")
    at.query_params["episode"] = ref_key(ref_of(episode))
    at.query_params["step"] = str(step)
    return at.run()


def button(at: AppTest, label: str):
    return next(b for b in at.button if b.label == label)


def state_box(at: AppTest):
    return next(s for s in at.selectbox if s.label == "State")


def step_tags_shown(at: AppTest) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("Tags on this step"))


def test_scrub_and_show_an_environment_step(env_data, monkeypatch):
    episode = env_data.episodes[0]
    at = open_replay(env_data, ALICE, episode, monkeypatch, step=3)
    assert not at.exception
    assert at.session_state["replay_step"] == 3
    # the table's step count, and the final observation the scrubber also shows
    assert any(f"· {episode.num_steps} steps + final observation ·" in c.value for c in at.caption)
    assert at.get("image")[0].captions == ["step 3"], "the frame is shown"
    assert at.metric[0].label == "Reward"
    assert at.get("vega_lite_chart"), "reward-per-step chart"

    at.button(key="replay_next").click().run()
    at.button(key="replay_next").click().run()
    assert at.session_state["replay_step"] == 5
    assert at.query_params["step"] == "5"
    at.button(key="replay_prev").click().run()
    assert at.session_state["replay_step"] == 4
    at.slider(key="replay_step").set_value(episode.num_steps).run()  # the final step
    assert at.button(key="replay_next").disabled
    assert at.query_params["step"] == str(episode.num_steps)


def test_tag_steps_and_episode_notes_state_and_undo(env_data, monkeypatch):
    episode = env_data.episodes[1]
    ref = ref_of(episode)
    at = open_replay(env_data, ALICE, episode, monkeypatch, step=2)
    at.text_input(key="step_tag_text").set_value("jump")
    button(at, "Tag step").click().run()
    assert not at.exception
    assert "Tagged step 2 'jump'" in [t.value for t in at.toast]
    assert step_tags_shown(at) == "Tags on this step: `jump`"
    assert [t.label for t in env_data.repo.get_episode(ref).step_metadata[2].tags] == ["jump"]

    # the recent tag is one click away on another step, and the tagged steps are offered as jumps
    at.button(key="replay_next").click().run()
    at.button(key="quick_step_jump").click().run()
    assert [t.label for t in env_data.repo.get_episode(ref).step_metadata[3].tags] == ["jump"]
    jump = at.selectbox(key="replay_jump")
    assert jump.options == ["step 2: jump", "step 3: jump"]
    jump.set_value(2).run()
    assert at.session_state["replay_step"] == 2

    at.text_input(key="episode_tag_text").set_value("hard level")
    button(at, "Tag episode").click().run()
    assert [t.label for t in env_data.repo.get_episode(ref).tags] == ["hard level"]
    notes_key = f"notes_{ref_key(ref)}"
    at.text_area(key=notes_key).set_value("agent stuck behind a wall").run()
    at.button(key="save_notes").click().run()
    assert env_data.repo.get_episode(ref).notes == "agent stuck behind a wall"
    state_box(at).set_value("Rejected").run()
    at.button(key="set_state").click().run()
    assert env_data.repo.get_episode(ref).state == 4  # STATE_REJECTED
    assert "State set to Rejected" in [t.value for t in at.toast]

    at.button(key="undo").click().run()
    assert env_data.repo.get_episode(ref).state == 1  # back to COMPLETED
    assert "Undid your last change" in [t.value for t in at.toast]

    at.button(key="rm_step_jump").click().run()  # on step 2
    stored = env_data.repo.get_episode(ref)
    assert 2 not in {i for i, m in stored.step_metadata.items() if len(m.tags)}
    assert step_tags_shown(at) == "Tags on this step: _none_"
    actions = [e.action for e in env_data.repo.audit_log(ref)]
    assert actions[:2] == ["step.tag.remove", "undo"]


def test_two_annotators_on_one_episode_lose_nothing(env_data, monkeypatch):
    episode = env_data.episodes[0]
    ref = ref_of(episode)
    alice = open_replay(env_data, ALICE, episode, monkeypatch, step=1)
    bob = open_replay(env_data, BOB, episode, monkeypatch, step=1)
    alice.text_input(key="step_tag_text").set_value("alice saw this")
    bob.text_input(key="step_tag_text").set_value("bob saw this")
    button(alice, "Tag step").click()
    button(bob, "Tag step").click()
    alice.run()
    bob.run()
    assert set(step_tags_shown(bob).split("`")[1::2]) == {"alice saw this", "bob saw this"}
    notes_key = f"notes_{ref_key(ref)}"
    alice.text_area(key=notes_key).set_value("alice: slow start").run()
    alice.button(key="save_notes").click().run()
    bob.run()  # bob's notes box now shows alice's notes instead of keeping a stale copy
    assert bob.text_area(key=notes_key).value == "alice: slow start"
    bob.text_area(key=notes_key).set_value("alice: slow start\nbob: fine after step 10").run()
    bob.button(key="save_notes").click().run()
    stored = env_data.repo.get_episode(ref)
    assert {t.label for t in stored.step_metadata[1].tags} == {"alice saw this", "bob saw this"}
    assert stored.notes == "alice: slow start\nbob: fine after step 10"
    assert [(e.user, e.action) for e in env_data.repo.audit_log(ref)][:2] == [
        (BOB, "episode.notes"),
        (ALICE, "episode.notes"),
    ]


def test_unknown_episode_is_reported(env_data, monkeypatch):
    monkeypatch.setenv("STEPMARK_DATA", str(env_data.data_dir))
    monkeypatch.setenv("STEPMARK_USER", ALICE)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("views/replay.py")
    at.query_params["episode"] = f"{env_data.study.id}/nosession/noepisode"
    at.run()
    assert not at.exception
    assert "Cannot open episode" in at.error[0].value


# -- UI episodes (DroidBot run from ../shared/fixtures, converted with convert-ui and imported) -------------


@pytest.fixture(scope="module")
def ui_data(tmp_path_factory, fixtures_dir):
    data_dir = tmp_path_factory.mktemp("app_replay_ui")
    study = import_ui_fixtures(data_dir, fixtures_dir)
    repo = open_store(None, data_dir)
    episode = repo.list_episodes(study_id=study.id)[0]
    return data_dir, repo, episode


def test_replay_a_ui_episode_with_boxes_grid_touch_and_object_table(ui_data, monkeypatch):
    data_dir, repo, episode = ui_data
    monkeypatch.setenv("STEPMARK_DATA", str(data_dir))
    monkeypatch.setenv("STEPMARK_USER", ALICE)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("views/replay.py")
    at.query_params["episode"] = ref_key(ref_of(episode))
    at.query_params["step"] = "1"
    at.run()
    assert not at.exception
    reader = open_episode(repo.get_episode(ref_of(episode)), data_dir)
    step = reader.step(1)
    action = next(m.value for m in at.markdown if m.value.startswith("**Action:**"))
    assert ui_episode_pb2.Action.Type.Name(step.action.type) in action
    assert f"({step.action.x}, {step.action.y})" in action
    objects = at.dataframe(key="ui_objects_1").value
    assert len(objects) == len(step.observation.objects)
    assert list(objects["text"]) == [o.text for o in step.observation.objects]
    picture = at.get("image")[0]
    assert picture.captions == ["step 1"]

    # every overlay option renders; a selected row is highlighted (state kept per step)
    for mode in ("actionable", "leaves", "none", "all"):
        at.radio(key="ui_boxes").set_value(mode).run()
        assert not at.exception
    at.toggle(key="ui_grid").set_value(True).run()
    at.toggle(key="ui_touch").set_value(False).run()
    at.session_state["ui_objects_1"] = {"selection": {"rows": [3], "columns": []}}
    at.run()
    assert not at.exception
    at.button(key="replay_next").click().run()
    assert at.dataframe(key="ui_objects_2").value.shape[0] == len(reader.step(2).observation.objects)
    reader.close()

    at.text_input(key="step_tag_text").set_value("login screen")
    button(at, "Tag step").click().run()
    assert [t.label for t in repo.get_episode(ref_of(episode)).step_metadata[2].tags] == ["login screen"]


def test_autoplay_runs_to_the_last_step_at_the_chosen_fps(env_data, monkeypatch):
    episode = env_data.episodes[1]
    at = open_replay(env_data, ALICE, episode, monkeypatch, step=episode.num_steps - 4)
    at.sidebar.slider(key="autoplay_fps").set_value(30)
    at.sidebar.toggle(key="autoplay").set_value(True).run()
    assert not at.exception
    assert at.session_state["replay_step"] == episode.num_steps  # the final RLDS step
    assert at.query_params["step"] == str(episode.num_steps)


def test_concurrent_note_edits_are_never_silently_overwritten(env_data, monkeypatch):
    episode = env_data.episodes[1]
    ref = ref_of(episode)
    notes_key = f"notes_{ref_key(ref)}"
    alice = open_replay(env_data, ALICE, episode, monkeypatch)
    bob = open_replay(env_data, BOB, episode, monkeypatch)
    before = env_data.repo.get_episode(ref).notes
    alice.text_area(key=notes_key).set_value("alice: the jump at 5 is late").run()
    bob.text_area(key=notes_key).set_value("bob: fine").run()  # both editing at once
    alice.button(key="save_notes").click().run()
    assert env_data.repo.get_episode(ref).notes == "alice: the jump at 5 is late"

    bob.button(key="save_notes").click().run()  # refused: alice's note would be lost unseen
    assert env_data.repo.get_episode(ref).notes == "alice: the jump at 5 is late"
    warning = bob.warning[0].value
    assert warning.startswith(f"{ALICE} changed the notes") and "alice: the jump at 5 is late" in warning
    assert bob.text_area(key=notes_key).value == "bob: fine"  # bob's text is kept for him to merge
    bob.text_area(key=notes_key).set_value("alice: the jump at 5 is late\nbob: fine").run()
    bob.button(key="save_notes").click().run()
    assert env_data.repo.get_episode(ref).notes == "alice: the jump at 5 is late\nbob: fine"
    assert "Notes saved" in [t.value for t in bob.toast]
    assert before != env_data.repo.get_episode(ref).notes


# -- regressions found driving the annotator in a browser ---------------------------------------------------


def test_jumping_to_the_same_tagged_step_twice(env_data, monkeypatch):
    """The jump menu clears after each jump: left on 'step 2' it showed a stale step and choosing step 2 again
    after moving away did nothing."""
    episode = env_data.episodes[0]
    env_data.repo.add_step_tag(ref_of(episode), 2, "twice", ALICE)
    at = open_replay(env_data, ALICE, episode, monkeypatch, step=5)
    at.selectbox(key="replay_jump").set_value(2).run()
    assert at.session_state["replay_step"] == 2
    assert at.selectbox(key="replay_jump").value is None, "the menu does not keep showing the last jump"
    at.button(key="replay_next").click().run()
    at.button(key="replay_next").click().run()
    assert at.session_state["replay_step"] == 4
    at.selectbox(key="replay_jump").set_value(2).run()
    assert at.session_state["replay_step"] == 2


def test_state_box_shows_the_stored_state_after_undo_and_other_annotators(env_data, monkeypatch):
    """The State box showed the annotator's last choice even after the store changed (undo, someone else)."""
    episode = env_data.episodes[0]
    ref = ref_of(episode)
    at = open_replay(env_data, ALICE, episode, monkeypatch)
    assert state_box(at).value == "Completed"
    state_box(at).set_value("Rejected").run()
    at.button(key="set_state").click().run()
    assert env_data.repo.get_episode(ref).state == 4
    at.button(key="undo").click().run()
    assert env_data.repo.get_episode(ref).state == 1
    assert state_box(at).value == "Completed", "the box follows the undo"
    keys = {state_box(at).key}
    assert at.button(key="set_state").disabled

    env_data.repo.set_episode_state(ref, 3, BOB)  # Bob marks it cancelled meanwhile
    at.run()
    assert state_box(at).value == "Cancelled"
    keys.add(state_box(at).key)
    env_data.repo.set_episode_state(ref, 1, BOB)
    at.run()
    assert state_box(at).value == "Completed"
    # a fresh box each time the stored state changes, never an earlier one: the browser keeps the value it last
    # showed in a box it has seen, whatever the server says
    assert len(keys | {state_box(at).key}) == 3
    env_data.repo.set_episode_state(ref, 1, BOB)


def test_save_notes_is_clickable_before_the_text_box_commits(env_data, monkeypatch):
    """A text area sends its text when it loses focus, which is the click on Save itself: a Save button
    disabled until then swallowed that first click."""
    episode = env_data.episodes[0]
    at = open_replay(env_data, ALICE, episode, monkeypatch)
    assert not at.button(key="save_notes").disabled
    at.button(key="save_notes").click().run()  # nothing changed: said so, nothing written
    assert "Notes unchanged" in [t.value for t in at.toast]


def test_autoplay_turns_itself_off_at_the_end_and_the_final_step_says_it_has_no_action(env_data, monkeypatch):
    episode = env_data.episodes[0]
    at = open_replay(env_data, ALICE, episode, monkeypatch, step=episode.num_steps - 2)
    at.sidebar.slider(key="autoplay_fps").set_value(30)
    at.sidebar.toggle(key="autoplay").set_value(True).run()
    assert at.session_state["replay_step"] == episode.num_steps
    assert at.sidebar.toggle(key="autoplay").value is False, "Play is off once the last step is reached"
    assert "none: the final observation has no action" in [c.value for c in at.caption]
    at.button(key="replay_prev").click().run()  # stepping back does not start playing again
    assert at.session_state["replay_step"] == episode.num_steps - 1


def test_notes_box_after_leaving_the_page_and_coming_back_shows_the_stored_notes(env_data, monkeypatch):
    """Found in chromium: after visiting another page and coming back, the notes box was empty (Streamlit drops
    a widget's state when its page is left) while the page still believed it showed the stored notes, so
    'Save notes' would have erased them."""
    episode = env_data.episodes[0]
    ref = ref_of(episode)
    env_data.repo.set_notes(ref, "kept across pages", ALICE)
    notes_key = f"notes_{ref_key(ref)}"
    at = open_replay(env_data, ALICE, episode, monkeypatch, step=3)
    assert at.text_area(key=notes_key).value == "kept across pages"
    at.switch_page("views/episodes.py").run()
    at.switch_page(
        "views/replay.py"
    )  # back, as the browser's Back button does: the URL names episode and step
    at.query_params["episode"] = ref_key(ref)
    at.query_params["step"] = "3"
    at.run()
    assert at.text_area(key=notes_key).value == "kept across pages"
    assert at.session_state["replay_step"] == 3, "the step comes back from the URL too (the slider was reset)"
    at.button(key="save_notes").click().run()
    assert env_data.repo.get_episode(ref).notes == "kept across pages"

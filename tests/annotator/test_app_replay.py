"""AppTest of the Replay page around the browser step player, on episodes recorded in Procgen and a converted UI
episode: the player is mounted for the episode and the URL's step, the page follows the step the player reports,
notes and state with two annotator sessions, and what comes back after visiting another page.

Keys, frames and tags are the player's (browser) side: tests/e2e/test_annotator_browser.py drives them in chromium.
"""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from annotator.operations import ref_key, ref_of
from annotator.plain import md_unescape
from pipelines.store import open_store
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


def player_key(episode) -> str:
    return f"player_{ref_key(ref_of(episode))}"


def header(at: AppTest) -> str:
    return md_unescape(at.caption[0].value)


def test_the_player_is_mounted_at_the_urls_step_and_the_page_follows_the_step_it_reports(env_data, monkeypatch):
    episode = env_data.episodes[0]
    at = open_replay(env_data, ALICE, episode, monkeypatch, step=3)
    assert not at.exception
    assert at.session_state[player_key(episode)]["step"] == 3
    assert at.query_params["step"] == "3"
    assert "Completed" in header(at) and f"{episode.num_steps} steps + final observation" in header(at)
    at.session_state[player_key(episode)] = {"step": 7}  # the browser reports the step on screen
    at.run()
    assert at.query_params["step"] == "7"
    at.session_state[player_key(episode)] = {"step": 10_000}  # never beyond the episode
    at.run()
    assert at.query_params["step"] == str(episode.num_steps)


def test_two_annotators_on_one_episode_lose_nothing(env_data, monkeypatch):
    episode = env_data.episodes[0]
    ref = ref_of(episode)
    alice = open_replay(env_data, ALICE, episode, monkeypatch, step=1)
    bob = open_replay(env_data, BOB, episode, monkeypatch, step=1)
    notes_key = f"notes_{ref_key(ref)}"
    alice.text_area(key=notes_key).set_value("alice: slow start").run()
    alice.button(key="save_notes").click().run()
    bob.run()  # bob's notes box now shows alice's notes instead of keeping a stale copy
    assert bob.text_area(key=notes_key).value == "alice: slow start"
    bob.text_area(key=notes_key).set_value("alice: slow start\nbob: fine after step 10").run()
    bob.button(key="save_notes").click().run()
    stored = env_data.repo.get_episode(ref)
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


@pytest.fixture(scope="module")
def ui_data(tmp_path_factory, fixtures_dir):
    data_dir = tmp_path_factory.mktemp("app_replay_ui")
    study = import_ui_fixtures(data_dir, fixtures_dir)
    repo = open_store(None, data_dir)
    episode = repo.list_episodes(study_id=study.id)[0]
    return data_dir, repo, episode


def test_a_ui_episode_opens_in_the_player(ui_data, monkeypatch):
    data_dir, repo, episode = ui_data
    monkeypatch.setenv("STEPMARK_DATA", str(data_dir))
    monkeypatch.setenv("STEPMARK_USER", ALICE)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("views/replay.py")
    at.query_params["episode"] = ref_key(ref_of(episode))
    at.query_params["step"] = "2"
    at.run()
    assert not at.exception
    assert at.session_state[player_key(episode)]["step"] == 2
    assert f"{episode.num_steps} steps" in header(at)


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
    assert md_unescape(bob.warning[0].value).startswith(f"{ALICE} changed the notes")
    assert "alice: the jump at 5 is late" in [t.value for t in bob.text]  # theirs, as plain text
    assert bob.text_area(key=notes_key).value == "bob: fine"  # bob's text is kept for him to merge
    bob.text_area(key=notes_key).set_value("alice: the jump at 5 is late\nbob: fine").run()
    bob.button(key="save_notes").click().run()
    assert env_data.repo.get_episode(ref).notes == "alice: the jump at 5 is late\nbob: fine"
    assert "Notes saved" in [t.value for t in bob.toast]
    assert before != env_data.repo.get_episode(ref).notes


def test_state_box_and_header_show_the_stored_state_after_undo_and_other_annotators(env_data, monkeypatch):
    """The State box showed the annotator's last choice even after the store changed (undo, someone else)."""
    episode = env_data.episodes[0]
    ref = ref_of(episode)
    at = open_replay(env_data, ALICE, episode, monkeypatch)
    assert state_box(at).value == "Completed"
    state_box(at).set_value("Rejected").run()
    at.button(key="set_state").click().run()
    assert env_data.repo.get_episode(ref).state == 4
    assert "Rejected" in header(at), "the header shows the new state in the same run"
    env_data.repo.undo_last(ALICE, ref=ref)  # what the player's Undo does through its route
    at.session_state[player_key(episode)] = {"step": 0, "changed": "undo"}
    at.run()
    assert state_box(at).value == "Completed", "the box follows the undo"
    assert "Completed" in header(at)
    keys = {state_box(at).key}
    assert at.button(key="set_state").disabled

    env_data.repo.set_reviewers(env_data.study.id, [BOB], ALICE)  # a reviewer may change others' states
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


def test_leaving_the_page_and_coming_back_keeps_episode_step_and_notes(env_data, monkeypatch):
    """Found in chromium: after visiting another page and coming back, the notes box was empty (Streamlit drops
    a widget's state when its page is left) while the page still believed it showed the stored notes, so
    'Save notes' would have erased them; and the episode and step were gone with the URL."""
    episode = env_data.episodes[0]
    ref = ref_of(episode)
    env_data.repo.set_notes(ref, "kept across pages", ALICE)
    notes_key = f"notes_{ref_key(ref)}"
    at = open_replay(env_data, ALICE, episode, monkeypatch, step=3)
    at.session_state[player_key(episode)] = {"step": 6}
    at.run()
    assert at.text_area(key=notes_key).value == "kept across pages"
    at.switch_page("views/episodes.py").run()
    at.query_params.clear()  # the sidebar link carries no episode
    at.switch_page("views/replay.py").run()
    assert at.query_params["episode"] == ref_key(ref) and at.query_params["step"] == "6"
    assert at.text_area(key=notes_key).value == "kept across pages"
    at.button(key="save_notes").click().run()
    assert env_data.repo.get_episode(ref).notes == "kept across pages"


def test_untrusted_names_are_shown_as_plain_text(env_data, monkeypatch):
    hostile = "**x** <img src=x onerror=alert(1)> :material/delete:"
    episode = env_data.episodes[1]
    study = env_data.repo.get_study(env_data.study.id)
    study.name = hostile
    env_data.repo.save_study(study, ALICE)
    try:
        at = open_replay(env_data, ALICE, episode, monkeypatch)
        assert hostile in header(at)
        assert "<img" not in at.caption[0].value.replace("\\<", "")
    finally:
        study.name = "Coinrun practice"
        env_data.repo.save_study(study, ALICE)

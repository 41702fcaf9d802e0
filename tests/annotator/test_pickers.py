"""The Replay and Export pages' episode pickers on a study of 1,200 episodes: at most PICKER_SIZE options (the
newest), an id prefix or notes text finds any episode, and no call lists the study (the pages before offered
every episode of the store as an option)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from annotator.operations import PICKER_SIZE, Operations, ref_key, ref_of
from pipelines.store import Repository, open_store
from protos.rlds_creator import study_pb2
from tests.annotator.annotator_data import ALICE, ENV_ID, procgen_study_spec

APP = "../../annotator/app.py"
N = 1200


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A study of N registered episodes (rows only: the pickers never open one); one has notes."""
    data_dir = tmp_path_factory.mktemp("pickers")
    repo = open_store(None, data_dir)
    study = repo.create_study(procgen_study_spec(), ALICE)
    session = repo.create_session(study.id, ALICE)
    episodes = []
    for i in range(N):
        e = study_pb2.Episode(id=f"ep{i:05d}", study_id=study.id, session_id=session.id, environment_id=ENV_ID,
                              state=study_pb2.Episode.STATE_COMPLETED, num_steps=10)  # fmt: skip
        e.user.email = ALICE
        e.metadata.update({"kind": "env"})
        episodes.append(e)
    added = repo.add_episodes(episodes)
    repo.set_notes(Repository.ref(added[17]), "the agent gets STUCK at the ladder", ALICE)
    yield data_dir, repo, added
    repo.close()


@pytest.fixture
def no_listing(big, monkeypatch):
    """Listing a whole study fails the test (what the pickers did before)."""

    def refuse(*args, **kwargs):
        raise AssertionError("a picker listed every episode")

    monkeypatch.setattr(Repository, "list_episodes", refuse)


def test_find_episodes_is_bounded_and_finds_by_id_and_notes(big, no_listing):
    data_dir, repo, added = big
    ops = Operations(repo, data_dir, ALICE)
    newest = [m.episode.id for m in ops.find_episodes("").episodes]
    assert newest == [f"ep{i:05d}" for i in range(N - 1, N - 1 - PICKER_SIZE, -1)]
    assert [m.episode.id for m in ops.find_episodes("ep0003").episodes] == [f"ep0003{i}" for i in range(10)]
    assert [m.episode.id for m in ops.find_episodes("stuck at").episodes] == ["ep00017"]
    assert ops.find_episodes("no such thing").episodes == []


def _page(big, monkeypatch, page: str) -> AppTest:
    data_dir, _, _ = big
    monkeypatch.setenv("STEPMARK_DATA", str(data_dir))
    monkeypatch.setenv("STEPMARK_USER", ALICE)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page(page)
    return at.run()


def test_replay_picker_offers_at_most_a_page_and_searches(big, no_listing, monkeypatch):
    _, _, added = big
    at = _page(big, monkeypatch, "views/replay.py")
    assert not at.exception, at.exception
    assert len(at.selectbox(key="replay_pick").options) == PICKER_SIZE
    at.text_input(key="replay_find").set_value("ep00999").run()
    options = at.selectbox(key="replay_pick").options
    assert len(options) == 1 and options[0].endswith("ep00999")
    at.selectbox(key="replay_pick").set_value(ref_key(ref_of(added[999]))).run()
    assert at.query_params["episode"] == ref_key(ref_of(added[999]))


def test_export_picker_keeps_the_handed_over_selection_and_offers_a_page(big, no_listing, monkeypatch):
    _, _, added = big
    data_dir = big[0]
    monkeypatch.setenv("STEPMARK_DATA", str(data_dir))
    monkeypatch.setenv("STEPMARK_USER", ALICE)
    at = AppTest.from_file(APP, default_timeout=120).run()
    handed = [ref_key(ref_of(e)) for e in added[:300]]  # "Export selected" on the Episodes page
    at.session_state["export_refs"] = [*handed, "nostudy/nosession/gone"]
    at.switch_page("views/export.py")
    at.run()
    assert not at.exception, at.exception
    pick = at.multiselect(key="export_pick")
    assert pick.value == handed  # the episode that is gone is left out
    assert len(pick.options) == 300 + PICKER_SIZE
    assert "300 episode(s) selected, from 1 study(ies)" in [c.value for c in at.caption]
    at.text_input(key="export_find").set_value("stuck").run()
    options = at.multiselect(key="export_pick").options  # labels; ep00017 is chosen already: no new option
    assert len(options) == 300 and options[17].endswith("· ep00017")


def test_files_of_reads_only_the_episodes_with_files(big, no_listing):
    """Deleting one episode checks for shared files against the study's episodes that have files (storage
    columns, streamed), not a listing of the whole study; a folder another episode uses is kept."""
    data_dir, repo, _ = big
    study_id = repo.list_studies()[0].id
    session = repo.list_sessions(study_id)[0]
    for folder in ("shared/dir", "own/dir"):
        (data_dir / folder).mkdir(parents=True)
    registered = []
    for i, folder in enumerate(("shared/dir", "shared/dir", "own/dir")):
        e = study_pb2.Episode(study_id=study_id, session_id=session.id, environment_id=ENV_ID, num_steps=3,
                              state=study_pb2.Episode.STATE_COMPLETED)  # fmt: skip
        e.user.email = ALICE
        e.storage.environment_logger.tag_directory = folder
        e.storage.environment_logger.index = i
        registered.append(repo.add_episode(e))
    ops = Operations(repo, data_dir, ALICE)
    shared = ops.files_of(ref_of(registered[0]))
    assert shared.remove == [] and shared.keep == [f"{(data_dir / 'shared/dir').resolve()} is shared with another "
                                                   "episode: not removed"]  # fmt: skip
    own = ops.files_of(ref_of(registered[2]))
    assert own.remove == [(data_dir / "own/dir").resolve()] and own.keep == []
    assert sum(1 for _ in repo.iter_stored(study_id)) == 3  # of 1,203 episodes


def test_tag_options_are_read_once_for_every_session_of_a_server(big, monkeypatch):
    """The Episodes page's Tag filter options read every tag of each study; each reload of the page is a new
    session, so they are kept per store for all sessions (TAGS_TTL_S), not per session."""
    import streamlit as st

    data_dir, repo, added = big
    repo.add_episode_tag(ref_of(added[5]), "ladder", ALICE)
    calls: list[str] = []
    original = Repository.recent_tags

    def counted(self, study_id, limit=10):  # noqa: ANN001, ANN202
        calls.append(study_id)
        return original(self, study_id, limit=limit)

    monkeypatch.setattr(Repository, "recent_tags", counted)
    st.cache_data.clear()  # the page runs as a script: its cached function is not this module's
    monkeypatch.setenv("STEPMARK_DATA", str(data_dir))
    monkeypatch.setenv("STEPMARK_USER", ALICE)
    for _ in range(2):  # two browser sessions (a reload)
        at = AppTest.from_file(APP, default_timeout=120).run()
        assert not at.exception, at.exception
        assert "ladder" in at.selectbox(key="f_tag").options
    assert len(calls) == 1

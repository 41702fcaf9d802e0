"""AppTest of team work in the annotator: the Episodes page's work queue (progress, Next episode, done, skip,
settings) and the Quality page (figures equal to the store's, plots, agreement tables, adjudication)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from streamlit.testing.v1 import AppTest

from annotator.operations import ref_key, ref_of
from annotator.plain import md_unescape
from pipelines.store import open_store, queue
from protos.rlds_creator import client_pb2
from tests.annotator.annotator_data import ALICE, BOB, build_env_data, import_ui_fixtures

APP = "../../annotator/app.py"


@pytest.fixture(scope="module")
def data(tmp_path_factory, fixtures_dir):
    env = build_env_data(tmp_path_factory.mktemp("app_quality"), episodes=2, max_steps=12)
    ui_study = import_ui_fixtures(env.data_dir, fixtures_dir)
    return env, ui_study


def open_app(data_dir, user: str, monkeypatch) -> AppTest:
    monkeypatch.setenv("STEPMARK_DATA", str(data_dir))
    monkeypatch.setenv("STEPMARK_USER", user)
    return AppTest.from_file(APP, default_timeout=180).run()


def frame(at: AppTest, column: str):
    """The table with this column (AppTest keeps the key of selectable tables only)."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def episodes_of(at: AppTest, study_id: str) -> AppTest:
    at.selectbox(key="f_study").set_value(study_id).run()
    return at


def add_label(at: AppTest, repo, episode, user: str, step: int, label: str) -> AppTest:
    """What the Label page's player does in the browser (its route calls the same store function; the page in
    chromium: tests/e2e/test_team_browser.py), then the page is drawn again."""
    queue.set_step_label(repo, episode.id, user, step, label)
    return at.run()


def test_queue_label_page_agreement_and_adjudication(data, monkeypatch):
    env, _ = data
    first, second = env.episodes
    at = episodes_of(open_app(env.data_dir, ALICE, monkeypatch), env.study.id)
    # No work queue yet: the panel says so and hands nothing out (its creator gets the settings).
    assert not at.get("progress") and not [b for b in at.button if b.key == "q_next"]
    assert any("has no work queue" in md_unescape(c.value) for c in at.caption)

    # The study's creator sets overlap 2.
    at.number_input(key="q_overlap").set_value(2).run()
    at.button(key="q_save").click().run()
    assert queue.get_queue(env.repo, env.study.id).overlap == 2
    assert "0 of 4 labellings done" in at.get("progress")[0].proto.text

    # Next episode opens the Label page on the first episode; Alice labels step 2 and is done.
    at.button(key="q_next").click().run()
    assert at.title[0].value == "Label"
    assert any(ref_key(ref_of(first)) in md_unescape(c.value) for c in at.caption)
    assert at.session_state[f"label_player_{ref_key(ref_of(first))}"]["step"] == 0  # the player, at step 0
    add_label(at, env.repo, first, ALICE, 2, "jump")
    assert queue.user_labels(env.repo, first.id, ALICE) == {2: ["jump"]}
    assert any("you had labelled 1 step(s)" in md_unescape(c.value) for c in at.caption)
    at.button(key="label_done").click().run()  # done, and the next episode is taken
    assert [(a.episode_id, a.state) for a in queue.assignments(env.repo, env.study.id, ALICE)] == [
        (first.id, "done"), (second.id, "open")
    ]  # fmt: skip
    assert any(ref_key(ref_of(second)) in md_unescape(c.value) for c in at.caption)

    # Bob (not the creator: no settings) gets the first episode and sees none of Alice's labels.
    at = episodes_of(open_app(env.data_dir, BOB, monkeypatch), env.study.id)
    assert not [e for e in at.number_input if e.key == "q_overlap"]
    at.button(key="q_next").click().run()
    assert any(ref_key(ref_of(first)) in md_unescape(c.value) for c in at.caption)
    assert any("you had labelled 0 step(s)" in md_unescape(c.value) for c in at.caption)  # none of Alice's
    add_label(at, env.repo, first, BOB, 4, "fall")
    add_label(at, env.repo, first, BOB, 2, "jump")
    at.button(key="label_done").click().run()
    at.button(key="label_skip").click().run()  # the second episode: given back
    assert [a.state for a in queue.assignments(env.repo, env.study.id, BOB)] == ["done"]
    # Labels of the queue are kept apart: the shared step tags are untouched.
    assert not env.repo.get_episode(client_pb2.EpisodeRef(episode_id=first.id)).step_metadata

    at = episodes_of(open_app(env.data_dir, BOB, monkeypatch), env.study.id)
    assert not [d for d in at.dataframe if "done by" in d.value.columns]  # off: no per-episode rows read
    at.toggle(key="q_show_rows").set_value(True).run()
    rows = frame(at, "done by")
    assert rows["done"].tolist() == ["2 of 2", "0 of 2"] and rows["done by"].tolist()[0] == f"{ALICE}, {BOB}"
    assert rows["in progress by"].tolist() == ["", ALICE]
    assert "2 of 4 labellings done · 1 of 2 episodes complete" in at.get("progress")[0].proto.text

    # Quality page: figures are the store's; Alice said {2: jump}, Bob {2: jump, 4: fall}.
    at.switch_page("views/quality.py").run()
    assert at.title[0].value == "Quality"
    at.selectbox(key="quality_study").set_value(env.study.id).run()
    figures = dict(zip(*[frame(at, "figure")[c] for c in ("figure", "value")], strict=True))
    assert figures["episodes in the study"] == len(env.repo.list_episodes(study_id=env.study.id)) == 2
    assert figures["labellings done"] == 2 and figures["disputed steps"] == 1
    assert figures["steps labelled by 2+ annotators"] == first.num_steps + 1
    assert len(at.get("image")) == 9  # the study's plots (PNG images), agreement ones included
    assert "Disagreements (1)" in [h.value for h in at.subheader]
    disputes = frame(at, "majority")
    assert disputes[["step", "labels"]].values.tolist() == [[4, f"{ALICE}: -; {BOB}: fall"]]
    # each disputed step links to itself in Replay (the page reads `episode` and `step` from the URL's query)
    link = urlsplit(disputes["open"].tolist()[0])
    assert link.path == "replay"
    assert parse_qs(link.query) == {"episode": [ref_key(ref_of(first))], "step": ["4"]}

    at.selectbox(key="adj_pick").set_value(f"{first.id}/4").run()
    at.multiselect(key=f"adj_labels_{first.id}/4").set_value(["fall"]).run()
    at.button(key="adj_save").click().run()
    tags = env.repo.get_episode(client_pb2.EpisodeRef(episode_id=first.id)).step_metadata
    assert [t.label for t in tags[4].tags] == ["fall"]  # the consensus is now the step's tags
    assert frame(at, "majority")["consensus"].tolist() == ["fall"]
    assert frame(at, "figure").set_index("figure").loc["tags (episode and step)", "value"] == 1


def test_quality_page_shows_ui_plots_of_an_imported_study(data, monkeypatch):
    env, ui_study = data
    at = open_app(env.data_dir, ALICE, monkeypatch)
    at.switch_page("views/quality.py").run()
    at.selectbox(key="quality_study").set_value(ui_study.id).run()
    figures = frame(at, "figure")
    values = dict(zip(figures["figure"], figures["value"], strict=True))
    with open_store(None, env.data_dir) as repo:
        listed = repo.list_episodes(study_id=ui_study.id)
    assert values["UI episodes"] == len(listed) == values["of which UI episodes"]
    assert values["steps"] == sum(e.num_steps for e in listed)
    assert "Agreement" in [h.value for h in at.header]


def test_a_field_consensus_is_confirmed_as_plain_text(data, monkeypatch):
    """An annotator's text adjudicated on the Quality page is confirmed (st.toast, which renders Markdown)
    escaped: shown as typed, never as formatting or a link."""
    from annotator.plain import md_escape
    from pipelines.store import field_values
    from pipelines.store.field_defs import parse_text

    env, ui_study = data
    with open_store(None, env.data_dir) as repo:
        field_values.define(repo, ui_study.id, parse_text("fields: [{name: note, scope: step, kind: text}]", "f.yaml"),
                            ALICE)  # fmt: skip
        (episode, *_) = repo.list_episodes(study_id=ui_study.id)
        typed = "**bold** [click](http://example.com/x) :red[alarm]"
        field_values.set_value(repo, ref_of(episode), "note", ALICE, typed, step=0)
        field_values.set_value(repo, ref_of(episode), "note", BOB, "something else entirely", step=0)
    at = open_app(env.data_dir, ALICE, monkeypatch)
    at.switch_page("views/quality.py").run()
    at.selectbox(key="quality_study").set_value(ui_study.id).run()
    pick = next(o for o in at.selectbox(key="field_adj_pick").options if o.startswith("note · "))
    at.selectbox(key="field_adj_pick").set_value(pick).run()
    at.text_input(key=f"field_adj_{pick}").set_value(f'"{typed}"').run()
    at.button(key="field_adj_save").click().run()
    assert not at.exception
    (toast,) = [t.value for t in at.toast if "Consensus of note" in md_unescape(t.value)]
    assert toast == md_escape(f'Consensus of note: "{typed}"')

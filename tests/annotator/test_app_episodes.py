"""AppTest of the Episodes page: the table across studies (Procgen episodes + imported UI traces), filters,
notes search, selection for replay/export/delete, permissions and the per-episode audit log."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from annotator.operations import ref_key, ref_of
from annotator.plain import md_unescape
from pipelines.episodes.layout import resolve
from pipelines.store import open_store
from protos.rlds_creator import study_pb2
from tests.annotator.annotator_data import ALICE, BOB, build_env_data, import_ui_fixtures

APP = "../../annotator/app.py"
TABLE = "episodes_table"


@pytest.fixture(scope="module")
def data(tmp_path_factory, fixtures_dir):
    env = build_env_data(tmp_path_factory.mktemp("app_episodes"), episodes=3, max_steps=15)
    ui_study = import_ui_fixtures(env.data_dir, fixtures_dir)
    first = ref_of(env.episodes[0])
    env.repo.add_step_tag(first, 3, "crash", ALICE)
    env.repo.set_notes(first, "Agent Falls into the pit", ALICE)
    env.repo.set_episode_state(ref_of(env.episodes[1]), study_pb2.Episode.STATE_REJECTED, ALICE)
    return env, ui_study


def episodes_page(data_dir, user: str, monkeypatch) -> AppTest:
    monkeypatch.setenv("STEPMARK_DATA", str(data_dir))
    monkeypatch.setenv("STEPMARK_USER", user)
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert at.title[0].value == "Episodes"  # the default page
    return at


def table(at: AppTest):
    return at.dataframe(key=TABLE).value


def test_table_and_filters(data, monkeypatch):
    env, ui_study = data
    at = episodes_page(env.data_dir, ALICE, monkeypatch)
    rows = table(at)
    ui_episodes = open_store(None, env.data_dir).list_episodes(study_id=ui_study.id)
    assert len(rows) == 3 + len(ui_episodes)
    first = rows[rows["episode"] == ref_key(ref_of(env.episodes[0]))].iloc[0]
    assert first["user"] == ALICE and first["environment"] == "coinrun" and first["kind"] == "env"
    assert first["status"] == "Completed" and first["steps"] == env.episodes[0].num_steps
    assert first["success"] in ("yes", "no") and first["duration"].endswith("s")
    assert set(rows[rows["kind"] == "ui"]["study"]) == {ui_study.name}

    at.selectbox(key="f_study").set_value(env.study.id).run()
    assert len(table(at)) == 3
    at.multiselect(key="f_status").set_value(["Rejected"]).run()
    assert table(at)["episode"].tolist() == [ref_key(ref_of(env.episodes[1]))]
    at.multiselect(key="f_status").set_value([]).run()
    at.selectbox(key="f_tag").set_value("crash").run()
    assert table(at)["episode"].tolist() == [ref_key(ref_of(env.episodes[0]))]
    at.selectbox(key="f_tag").set_value("(any)").run()
    at.text_input(key="f_notes").set_value("falls INTO").run()
    assert table(at)["episode"].tolist() == [ref_key(ref_of(env.episodes[0]))]
    at.text_input(key="f_notes").set_value("nothing like this").run()
    assert "No episode matches" in at.info[0].value
    at.text_input(key="f_notes").set_value("").run()
    at.selectbox(key="f_env").set_value("coinrun").run()
    assert len(table(at)) == 3


def test_select_to_replay_export_and_see_the_audit_log(data, monkeypatch):
    env, _ = data
    at = episodes_page(env.data_dir, ALICE, monkeypatch)
    keys = table(at)["episode"].tolist()
    first = keys.index(ref_key(ref_of(env.episodes[0])))
    at.session_state[TABLE] = {"selection": {"rows": [first], "columns": []}}
    at.run()
    audit = at.dataframe[-1].value  # the audit log of the selected episode
    chooser = at.selectbox(key="audit_episode")  # named readably, not by its raw STUDY/SESSION/EPISODE key
    assert chooser.value == keys[first]
    assert chooser.options[first] == (
        f"{env.study.name} · {env.episodes[0].environment_id} · {env.episodes[0].num_steps} steps · "
        f"{ALICE} · {env.episodes[0].id}"
    )
    assert audit["action"].tolist()[:2] == ["episode.notes", "step.tag.add"]
    assert audit["who"].tolist()[0] == ALICE
    assert audit["step"].tolist()[1] == 3
    at.button(key="ep_replay").click().run()
    assert at.title[0].value == "Replay"
    assert at.query_params["episode"] == keys[first]

    at = episodes_page(env.data_dir, ALICE, monkeypatch)
    at.session_state[TABLE] = {"selection": {"rows": [0, 1], "columns": []}}
    at.run()
    assert at.button(key="ep_replay").disabled  # replay takes exactly one
    at.button(key="ep_export").click().run()
    assert at.title[0].value == "Export"
    assert at.multiselect(key="export_pick").value == keys[:2]


def test_delete_respects_permissions(tmp_path, monkeypatch):
    env = build_env_data(tmp_path, episodes=2, max_steps=5)
    at = episodes_page(env.data_dir, BOB, monkeypatch)
    at.session_state[TABLE] = {"selection": {"rows": [0], "columns": []}}
    at.run()
    assert "You may not delete 1 of them" in at.warning[0].value
    assert at.button(key="ep_delete").disabled

    at = episodes_page(env.data_dir, ALICE, monkeypatch)
    at.session_state[TABLE] = {"selection": {"rows": [0], "columns": []}}
    at.run()
    key = table(at)["episode"].tolist()[0]
    [episode] = [e for e in env.episodes if ref_key(ref_of(e)) == key]
    folder = resolve(env.data_dir, episode.storage.environment_logger.tag_directory).resolve()
    assert folder.is_dir()
    # the confirmation names the files that go with the episode
    assert "Also removes 1 folder(s) of episode files:" in [c.value for c in at.caption]
    assert str(folder) in [t.value for t in at.text]
    at.button(key="ep_delete").click().run()
    assert "Deleted 1 episode(s) and 1 folder(s) of files" in [t.value for t in at.toast]
    assert len(table(at)) == 1
    assert len(env.repo.list_episodes()) == 1
    assert not folder.exists()


def test_deleting_a_ui_episode_says_where_its_record_is_kept(tmp_path, monkeypatch, fixtures_dir):
    ui_study = import_ui_fixtures(tmp_path, fixtures_dir)
    [episode, *_] = open_store(None, tmp_path).list_episodes(study_id=ui_study.id)
    shard = episode.metadata["ui_record"]["shard"]
    at = episodes_page(tmp_path, ALICE, monkeypatch)
    row = table(at)["episode"].tolist().index(ref_key(ref_of(episode)))
    at.session_state[TABLE] = {"selection": {"rows": [row], "columns": []}}
    at.run()
    assert "Kept on disk:" in [c.value for c in at.caption]
    assert any(f"convert-ui shard {shard}" in t.value for t in at.text)
    at.button(key="ep_delete").click().run()
    assert any(f"convert-ui shard {shard}" in md_unescape(t.value) for t in at.toast)
    assert Path(shard).exists()


PAYLOAD = "**x** <img src=x onerror=alert(1)> :material/delete:"


def test_tags_notes_and_names_are_shown_verbatim(tmp_path, monkeypatch):
    env = build_env_data(tmp_path, episodes=1, max_steps=5)
    ref = ref_of(env.episodes[0])
    env.repo.add_episode_tag(ref, PAYLOAD, PAYLOAD)
    env.repo.set_notes(ref, PAYLOAD, PAYLOAD)
    at = episodes_page(env.data_dir, ALICE, monkeypatch)
    row = table(at).iloc[0]
    assert (row["tags"], row["notes"]) == (PAYLOAD, PAYLOAD)
    assert PAYLOAD in at.selectbox(key="f_tag").options
    audit = at.dataframe[-1].value
    assert audit["who"].tolist()[:2] == [PAYLOAD, PAYLOAD]
    for element in [*at.markdown, *at.caption, *at.info, *at.warning]:
        assert "**x**" not in element.value and ":material/" not in element.value


def test_the_table_pages_sorts_jumps_and_selects_across_pages(tmp_path, monkeypatch):
    """120 episodes: pages of 50 from the store (keyset: Next, Previous; a jump straight to page 3), every sort
    in both directions, filters back to page 1, and "select all" reaching episodes of other pages."""
    from tests.pipelines.store.conftest import env_episode, study_spec

    repo = open_store(None, tmp_path)
    study = repo.create_study(study_spec("Big"), ALICE)
    sessions = {u: repo.create_session(study.id, u) for u in (ALICE, BOB)}
    batch = []
    for i in range(120):
        e = env_episode(study.id, sessions[(ALICE, BOB)[i % 3 == 0]], num_steps=i % 17, reward=float(i % 5))
        batch.append(e)
    repo.add_episodes(batch)
    listed = [ref_key(ref_of(e)) for e in repo.list_episodes(study_id=study.id)]
    at = episodes_page(tmp_path, BOB, monkeypatch)
    assert "120 episode(s)" in [c.value for c in at.caption]
    assert table(at)["episode"].tolist() == listed[:50]
    at.button(key="ep_next").click().run()
    assert table(at)["episode"].tolist() == listed[50:100]
    at.button(key="ep_next").click().run()
    assert table(at)["episode"].tolist() == listed[100:]
    assert "Showing 101–120 of 120, by registration" in [c.value for c in at.caption]
    assert at.button(key="ep_next").disabled
    at.button(key="ep_prev").click().run()
    assert table(at)["episode"].tolist() == listed[50:100]

    at = episodes_page(tmp_path, BOB, monkeypatch)  # a fresh session: no cursor known, page 3 by one jump
    at.number_input(key="ep_page").set_value(3).run()
    assert table(at)["episode"].tolist() == listed[100:]

    by_steps = sorted(repo.list_episodes(study_id=study.id), key=lambda e: (e.num_steps, e.id), reverse=True)
    at.selectbox(key="f_sort").set_value("steps").run()
    at.toggle(key="f_desc").set_value(True).run()
    assert at.number_input(key="ep_page").value == 1  # a new order starts on its first page
    assert table(at)["episode"].tolist() == [ref_key(ref_of(e)) for e in by_steps[:50]]
    at.button(key="ep_next").click().run()
    assert table(at)["episode"].tolist() == [ref_key(ref_of(e)) for e in by_steps[50:100]]

    at.checkbox(key="f_mine").check().run()  # Bob's own: every third episode
    assert "40 episode(s)" in [c.value for c in at.caption] and len(table(at)) == 40
    at.checkbox(key="f_mine").uncheck().run()
    at.checkbox(key="ep_all").check().run()
    assert any(md_unescape(c.value).startswith("Selected: 120 — ") for c in at.caption)
    assert "You may not delete 80 of them" in at.warning[0].value  # Bob owns 40 and did not create the study
    at.button(key="ep_export").click().run()
    assert at.title[0].value == "Export"
    assert sorted(at.session_state["export_refs"]) == sorted(listed)


def test_filter_by_the_failed_episodes_of_an_evaluation_run(tmp_path, monkeypatch):
    """The sample UI study with two runs: "perfect" repeats every recorded action, "one-off" misses one tap of
    the step-folder episode: filtered by "one-off" the table lists that episode alone, by "perfect" none."""
    from pipelines.evaluation import runs
    from tests.pipelines.evaluation.helpers import import_samples, recorded_actions, write_predictions

    data_dir = tmp_path / "data"
    repo = open_store(None, data_dir)
    study = import_samples(repo, data_dir, ALICE)
    steps = recorded_actions(repo, data_dir, study.id)
    folder = next(row for row, _, _ in steps if row.source_key == "ui:step_folders/yelp_bookmarks")
    perfect = write_predictions(tmp_path / "perfect.jsonl", steps)
    runs.evaluate(repo, study.id, str(perfect), "perfect", ALICE)
    off = write_predictions(tmp_path / "off.jsonl", steps, {(folder.id, 1): {"action_type": "navigate_back"}})
    assert runs.evaluate(repo, study.id, str(off), "one-off", ALICE)["matched"] == len(steps) - 1

    at = episodes_page(data_dir, ALICE, monkeypatch)
    assert len(table(at)) == 7  # every episode of the study, the single screens too
    assert at.selectbox(key="f_run").disabled  # no study chosen: no run to choose
    at.selectbox(key="f_study").set_value(study.id).run()
    assert at.selectbox(key="f_run").options == ["(any)", "one-off", "perfect"]
    at.selectbox(key="f_run").set_value("one-off").run()
    assert table(at)["episode"].tolist() == [f"{study.id}/{folder.session_id}/{folder.id}"]
    at.selectbox(key="f_run").set_value("perfect").run()
    assert "No episode matches" in at.info[0].value
    at.selectbox(key="f_run").set_value("(any)").run()
    assert len(table(at)) == 7


def test_ui_episodes_have_no_reward_or_success_columns(data, monkeypatch):
    """A study of UI episodes shows no reward or success; an environment study keeps them; a page of both shows
    them for the environment episodes only (UI cells empty)."""
    env, ui_study = data
    at = episodes_page(env.data_dir, ALICE, monkeypatch)
    mixed = table(at)
    assert {"total reward", "success"} <= set(mixed.columns)
    ui_rows = mixed[mixed["kind"] == "ui"]
    assert len(ui_rows) and ui_rows["total reward"].isna().all() and (ui_rows["success"] == "").all()
    env_rows = mixed[mixed["kind"] == "env"]
    assert env_rows["total reward"].notna().all() and env_rows["success"].isin(["yes", "no"]).all()
    at.selectbox(key="f_study").set_value(ui_study.id).run()
    assert "total reward" not in table(at).columns and "success" not in table(at).columns
    at.selectbox(key="f_study").set_value(env.study.id).run()
    assert {"total reward", "success"} <= set(table(at).columns)


def test_the_tags_column_counts_step_tags_too(data, monkeypatch):
    env, _ = data
    second = ref_of(env.episodes[2])
    env.repo.add_segment_tag(second, 1, 3, "slow", BOB)
    env.repo.add_episode_tag(second, "hard", BOB)
    at = episodes_page(env.data_dir, ALICE, monkeypatch)
    rows = table(at).set_index("episode")
    assert rows.loc[ref_key(ref_of(env.episodes[0])), "tags"] == "1 step tag on 1 step"  # "crash" on step 3
    assert rows.loc[ref_key(second), "tags"] == "hard; 3 step tags on 3 steps"
    assert rows.loc[ref_key(ref_of(env.episodes[1])), "tags"] == ""


def test_every_episode_has_a_title_beside_its_id(data, monkeypatch):
    """UI: the app (and the goal, when the trace has one); environment: environment, seed and start date."""
    env, ui_study = data
    at = episodes_page(env.data_dir, ALICE, monkeypatch)
    rows = table(at).set_index("episode")
    first = env.repo.get_episode(ref_of(env.episodes[0]))
    started = first.start_time.ToDatetime().strftime("%Y-%m-%d %H:%M:%S UTC")
    assert rows.loc[ref_key(ref_of(first)), "title"] == f"coinrun · seed 3 · {started}"
    ui = open_store(None, env.data_dir).list_episodes(study_id=ui_study.id)
    assert ui and all(rows.loc[ref_key(ref_of(e)), "title"] == "com.yelp.android" for e in ui)  # droidbot: no goal
    at.selectbox(key="f_study").set_value(env.study.id).run()
    at.session_state[TABLE] = {"selection": {"rows": [0], "columns": []}}
    at.run()
    at.button(key="ep_replay").click().run()
    assert at.title[0].value == "Replay"
    assert md_unescape(at.subheader[0].value) in set(table_titles(env))


def table_titles(env) -> list[str]:
    from annotator.operations import episode_title

    return [episode_title(env.repo.get_episode(ref_of(e))) for e in env.episodes]


def test_a_goal_becomes_the_ui_episodes_title(tmp_path):
    """convert-ui records carry `goal` (AndroidControl, AITW): the import keeps it (bounded) in the episode's
    metadata, the title shows it after the app."""
    from annotator.operations import episode_title
    from pipelines import ui_import
    from protos.stepmark import ui_episode_pb2

    record = ui_episode_pb2.UiEpisode(episode_id="e1", app_package="com.android.settings", source="android_control",
                                      goal="Turn on airplane mode")  # fmt: skip
    header = ui_import.record_header(record.SerializeToString(), "shard", 0)
    assert (header.app_package, header.goal) == ("com.android.settings", "Turn on airplane mode")
    repo = open_store(None, tmp_path)
    study = ui_import.find_or_create_study(repo, "UI", ALICE)
    session = repo.create_session(study.id, ALICE)
    stored = repo.add_episode(ui_import.ui_episode(study.id, session, header))
    assert episode_title(repo.get_episode(ref_of(stored))) == "com.android.settings — Turn on airplane mode"
    long = ui_import.ui_episode(study.id, session, replace(header, goal="x" * 2000))
    assert len(long.metadata["goal"]) == ui_import.MAX_GOAL and len(episode_title(long)) <= 120

"""AppTest of the Studies page and of who is annotating (sidebar prompt) over a real SQLite store."""

from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest

from annotator.plain import md_unescape
from pipelines.store import open_store
from protos.rlds_creator import study_pb2
from tests.annotator.annotator_data import ALICE, BOB

APP = "../../annotator/app.py"


@pytest.fixture()
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPMARK_DATA", str(tmp_path))
    monkeypatch.delenv("STEPMARK_STORE", raising=False)
    return tmp_path


def studies_page(user: str | None, monkeypatch) -> AppTest:
    if user:
        monkeypatch.setenv("STEPMARK_USER", user)
    else:
        monkeypatch.delenv("STEPMARK_USER", raising=False)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("views/studies.py")
    return at.run()


def test_the_annotator_asks_who_is_annotating(data_dir, monkeypatch):
    at = studies_page(None, monkeypatch)
    assert at.info[0].value.startswith("Tell us who you are")
    assert at.title[0].value == "stepmark annotator"
    at.sidebar.text_input(key="typed_user").set_value("carol@example.com").run()
    at.switch_page("views/studies.py").run()
    assert at.title[0].value == "Studies"
    assert any("carol@example.com" in md_unescape(c.value) for c in at.sidebar.caption)


def test_create_a_study_with_a_procgen_environment_then_edit_and_disable(data_dir, monkeypatch):
    at = studies_page(ALICE, monkeypatch)
    assert "No study yet" in at.info[0].value
    assert at.selectbox(key="study_pick").value == "+ New study"
    at.text_input(key="s_new_name").set_value("Coin collecting")
    at.text_area(key="s_new_desc").set_value("Collect the coin in CoinRun")
    at.text_input(key="s_new_env_id").set_value("coinrun-easy")
    assert at.selectbox(key="s_new_env_family").value == "procgen"
    games = at.selectbox(key="s_new_env_procgen_id").options
    assert "coinrun" in games and "bigfish" in games  # the valid ids of the installed procgen
    at.selectbox(key="s_new_env_procgen_id").set_value("coinrun")
    at.selectbox(key="s_new_env_pg_mode").set_value("DISTRIBUTION_HARD")
    at.number_input(key="s_new_env_max").set_value(50)
    at.button(key="s_new_env_add").click().run()
    assert "coinrun-easy · Procgen coinrun · sync · max 50" in [t.value for t in at.text]
    at.button(key="s_new_save").click().run()
    assert not at.exception
    assert "Study “Coin collecting” saved" in [md_unescape(t.value) for t in at.toast]

    repo = open_store(None, data_dir)
    (study,) = repo.list_studies()
    assert study.creator.email == ALICE and study.description == "Collect the coin in CoinRun"
    env = study.environment_specs[0]
    assert (env.id, env.procgen.id, env.max_episode_steps) == ("coinrun-easy", "coinrun", 50)
    assert env.procgen.distribution_mode == study_pb2.EnvironmentSpec.Procgen.DISTRIBUTION_HARD
    assert at.selectbox(key="study_pick").value == study.id
    assert at.dataframe[0].value["name"].tolist() == ["Coin collecting"]

    # edit: another environment family (Atari) and a new description
    prefix = f"s_{study.id}_"
    at.text_area(key=f"{prefix}desc").set_value("Two games now")
    at.selectbox(key=f"{prefix}env_family").set_value("atari").run()
    at.text_input(key=f"{prefix}env_id").set_value("pong")
    games = at.selectbox(key=f"{prefix}env_atari_id").options
    assert len(games) > 10  # the ROMs shipped with ale-py
    at.selectbox(key=f"{prefix}env_atari_id").set_value(games[0])
    at.button(key=f"{prefix}env_add").click().run()
    at.button(key=f"{prefix}save").click().run()
    study = repo.get_study(study.id)
    assert study.description == "Two games now"
    assert [e.WhichOneof("type") for e in study.environment_specs] == ["procgen", "atari"]

    at.button(key=f"toggle_{study.id}").click().run()
    assert repo.get_study(study.id).state == study_pb2.StudySpec.STATE_DISABLED
    assert "Study disabled" in [t.value for t in at.toast]
    at.button(key=f"toggle_{study.id}").click().run()
    assert repo.get_study(study.id).state == study_pb2.StudySpec.STATE_ENABLED


def test_only_the_creator_edits(data_dir, monkeypatch):
    repo = open_store(None, data_dir)
    spec = study_pb2.StudySpec(name="Alice's study")
    spec.environment_specs.add(id="coin", sync=True).procgen.id = "coinrun"
    study = repo.create_study(spec, ALICE)
    at = studies_page(BOB, monkeypatch)
    at.selectbox(key="study_pick").set_value(study.id).run()
    assert f"Only the creator ({ALICE})" in md_unescape(at.info[0].value)
    assert not [b for b in at.button if b.key and b.key.startswith(f"s_{study.id}_")]
    assert not [b for b in at.button if b.key == f"toggle_{study.id}"]


def test_duplicate_environment_id_is_refused_in_the_form(data_dir, monkeypatch):
    at = studies_page(ALICE, monkeypatch)
    at.text_input(key="s_new_name").set_value("Dup")
    for _ in range(2):
        at.text_input(key="s_new_env_id").set_value("same")
        at.button(key="s_new_env_add").click().run()
    assert "already used" in at.error[0].value


def test_oidc_login_names_the_annotator_when_configured(data_dir, monkeypatch):
    monkeypatch.setenv("STEPMARK_USER", "ignored-when-login-is-configured")
    at = AppTest.from_file(APP, default_timeout=120)
    at.secrets["auth"] = {
        "redirect_uri": "http://127.0.0.1:8501/oauth2callback",
        "cookie_secret": "s3cret",
        "client_id": "stepmark",
        "client_secret": "x",
        "server_metadata_url": "https://accounts.example.com/.well-known/openid-configuration",
    }
    at.user = {"is_logged_in": False}
    at.run()
    assert [b.label for b in at.sidebar.button] == ["Log in"]
    assert at.info[0].value.startswith("Tell us who you are")
    at.user = {"is_logged_in": True, "email": "dana@example.com", "name": "Dana"}
    at.run()
    assert any("Signed in as **dana@example.com**" in md_unescape(c.value) for c in at.sidebar.caption)
    assert at.title[0].value == "Episodes"


def test_added_environment_is_checked_and_the_form_starts_afresh(data_dir, monkeypatch):
    """Found in the browser: after 'Add environment' the form kept the last id and name (the next Add was
    refused as a duplicate), and a spec that cannot be built (unknown robot) was accepted, failing only at the
    first recording."""
    at = studies_page(ALICE, monkeypatch)
    at.text_input(key="s_new_name").set_value("Two envs")
    at.text_input(key="s_new_env_id").set_value("maze")
    at.text_input(key="s_new_env_name").set_value("Maze")
    at.selectbox(key="s_new_env_procgen_id").set_value("maze")
    at.button(key="s_new_env_add").click().run()
    assert not at.exception and not at.error
    assert at.text_input(key="s_new_env_id").value == ""
    assert at.text_input(key="s_new_env_name").value == ""
    assert at.selectbox(key="s_new_env_family").value == "procgen", "the family is kept"

    at.selectbox(key="s_new_env_family").set_value("robosuite").run()
    at.text_input(key="s_new_env_id").set_value("arm")
    at.text_input(key="s_new_env_rs_robots").set_value("NoSuchRobot")
    at.button(key="s_new_env_add").click().run()
    error = md_unescape(at.error[0].value)
    assert "Environment 'arm' cannot be used" in error and "NoSuchRobot" in error
    assert at.text_input(key="s_new_env_id").value == "arm", "a refused form keeps what was typed"
    assert [t.value for t in at.text] == ["maze · Procgen maze · sync · max 1000"]

    at.button(key="s_new_save").click().run()
    (study,) = open_store(None, data_dir).list_studies()
    assert [e.id for e in study.environment_specs] == ["maze"]


PAYLOAD = "**x** <img src=x onerror=alert(1)> :material/delete:"


def test_untrusted_text_is_shown_verbatim(data_dir, monkeypatch):
    """A study name, description, instructions, creator and environment id with Markdown, HTML and an icon
    shortcode: every place that shows them shows the characters, nothing interpreted."""
    repo = open_store(None, data_dir)
    spec = study_pb2.StudySpec(name=PAYLOAD, description=PAYLOAD, instructions=PAYLOAD)
    spec.environment_specs.add(id="e" + PAYLOAD[:20], sync=True).procgen.id = "coinrun"
    study = repo.create_study(spec, PAYLOAD)
    repo.set_palette(study.id, [PAYLOAD], PAYLOAD)
    repo.set_reviewers(study.id, [PAYLOAD], PAYLOAD)
    at = studies_page(BOB, monkeypatch)
    at.selectbox(key="study_pick").set_value(study.id).run()
    assert not at.exception
    # Markdown elements carry the escaped text: read back, it is the payload; nothing in it is live Markdown
    assert md_unescape(at.subheader[0].value) == PAYLOAD
    assert PAYLOAD in md_unescape(at.caption[0].value) and PAYLOAD in md_unescape(at.info[0].value)
    for element in [*at.subheader, *at.caption, *at.info, *at.markdown, *at.sidebar.caption]:
        assert "**x**" not in element.value and not re.search(r"(?<!\\)<img", element.value)
        assert ":material/" not in element.value
    # plain-text elements and tables show it as it is
    texts = [t.value for t in at.text]
    assert texts.count(PAYLOAD) == 2  # description and instructions
    assert any(t.startswith("e**x** <img") for t in texts)  # the environment id
    assert at.dataframe[0].value["name"].tolist() == [PAYLOAD]
    assert at.dataframe[1].value["label"].tolist() == [PAYLOAD]
    assert at.dataframe[2].value["reviewer"].tolist() == [PAYLOAD]
    assert f"{PAYLOAD} ({study.id})" in at.selectbox(key="study_pick").options


def test_a_user_name_is_shown_verbatim_in_the_sidebar(data_dir, monkeypatch):
    at = studies_page(PAYLOAD, monkeypatch)
    [who] = [c.value for c in at.sidebar.caption if c.value.startswith("Annotating as")]
    assert md_unescape(who) == f"Annotating as **{PAYLOAD}**"
    assert "**x**" not in who and ":material/" not in who


def test_palette_and_reviewers_are_edited_on_the_studies_page(data_dir, monkeypatch):
    repo = open_store(None, data_dir)
    spec = study_pb2.StudySpec(name="Palette study")
    spec.environment_specs.add(id="coin", sync=True).procgen.id = "coinrun"
    study = repo.create_study(spec, ALICE)
    at = studies_page(ALICE, monkeypatch)
    at.selectbox(key="study_pick").set_value(study.id).run()
    assert any(c.value.startswith("No palette yet") for c in at.caption)
    at.text_area(key=f"palette_{study.id}").set_value("jump\n fall \n\ngoal")
    at.button(key=f"palette_save_{study.id}").click().run()
    assert not at.exception and not at.error
    assert repo.get_palette(study.id) == ["jump", "fall", "goal"]
    assert at.dataframe[1].value["key"].tolist() == ["1", "2", "3"]
    assert "Palette saved (3 labels)" in [t.value for t in at.toast]

    at.text_area(key=f"palette_{study.id}").set_value("\n".join(f"l{i}" for i in range(10)))
    at.button(key=f"palette_save_{study.id}").click().run()
    assert "at most 9 labels" in md_unescape(at.error[0].value)
    assert repo.get_palette(study.id) == ["jump", "fall", "goal"]

    at.text_area(key=f"reviewers_{study.id}").set_value(BOB)
    at.button(key=f"reviewers_save_{study.id}").click().run()
    assert repo.list_reviewers(study.id) == [BOB]

    # bob, a reviewer, may edit the palette but not the reviewers; carol may do neither
    bob = studies_page(BOB, monkeypatch)
    bob.selectbox(key="study_pick").set_value(study.id).run()
    assert bob.text_area(key=f"palette_{study.id}").value == "jump\nfall\ngoal"
    assert not [t for t in bob.text_area if t.key == f"reviewers_{study.id}"]
    carol = studies_page("carol@example.com", monkeypatch)
    carol.selectbox(key="study_pick").set_value(study.id).run()
    assert not [t for t in carol.text_area if t.key and t.key.startswith("palette_")]


def test_the_chosen_study_is_kept_across_pages(data_dir, monkeypatch):
    repo = open_store(None, data_dir)
    first = repo.create_study(study_pb2.StudySpec(name="First"), ALICE)
    second = repo.create_study(study_pb2.StudySpec(name="Second"), ALICE)
    at = studies_page(ALICE, monkeypatch)
    assert at.selectbox(key="study_pick").value == first.id
    at.selectbox(key="study_pick").set_value(second.id).run()
    at.switch_page("views/episodes.py").run()
    at.switch_page("views/studies.py").run()
    assert at.selectbox(key="study_pick").value == second.id

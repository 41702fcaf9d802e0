"""AppTest of the Record page: the study/environment/settings form and the live recorder it mounts.

The recording itself (keys, frames, save flow) runs over the WebSocket route: tests/annotator/test_live_recording.py
drives that route and tests/e2e/test_record_browser.py the whole page in chromium.
"""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from annotator.live.component import LiveConfig
from annotator.recorder import QUALITY_HIGH, QUALITY_MEDIUM, default_quality
from annotator.views.record import LIVE_KEY
from annotator.web import context
from pipelines.store import open_store
from tests.annotator.annotator_data import ALICE, ENV_ID, procgen_study_spec

APP = "../../annotator/app.py"


def record_page(tmp_path, monkeypatch, spec=None):
    repo = open_store(None, tmp_path)
    study = repo.create_study(spec or procgen_study_spec(), ALICE)
    monkeypatch.setenv("STEPMARK_DATA", str(tmp_path))
    monkeypatch.setenv("STEPMARK_USER", ALICE)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("views/record.py").run()
    assert at.selectbox(key="rec_study").value == study.id
    assert at.selectbox(key="rec_env").value == ENV_ID
    return repo, study, at


def test_default_quality_is_high_for_small_frames():
    assert default_quality((64, 64, 3)) == QUALITY_HIGH  # Procgen
    assert default_quality((128, 128, 3)) == QUALITY_HIGH
    assert default_quality((210, 160, 3)) == QUALITY_MEDIUM  # Atari


def test_start_mounts_the_live_recorder_with_a_token_for_this_annotator(tmp_path, monkeypatch):
    _, study, at = record_page(tmp_path, monkeypatch)
    assert at.selectbox(key="rec_quality").value == "auto"  # high for frames up to 128 px
    assert not at.slider  # a sync environment has no clock to set
    at.button(key="rec_start").click().run()
    assert not at.exception
    config = at.session_state[LIVE_KEY]
    assert isinstance(config, LiveConfig)
    assert (config.study, config.env, config.quality, config.fps) == (study.id, ENV_ID, "auto", None)
    assert context.verify(config.token).user == ALICE
    assert at.selectbox(key="live_quality").value == "auto"
    # a changed setting reaches the mounted recorder (its data), the connection stays (same session id)
    at.selectbox(key="live_quality").set_value("low").run()
    assert at.session_state[LIVE_KEY].quality == "low"
    assert at.session_state[LIVE_KEY].session == config.session


def test_async_environment_offers_the_fps(tmp_path, monkeypatch):
    spec = procgen_study_spec()
    spec.environment_specs[0].sync = False
    _, _, at = record_page(tmp_path, monkeypatch, spec)
    assert at.slider(key="rec_fps").value == 15
    at.slider(key="rec_fps").set_value(30).run()
    at.button(key="rec_start").click().run()
    assert at.session_state[LIVE_KEY].fps == 30.0


def test_disabled_studies_are_not_offered(tmp_path, monkeypatch):
    repo = open_store(None, tmp_path)
    study = repo.create_study(procgen_study_spec(), ALICE)
    repo.enable_study(study.id, False, ALICE)
    monkeypatch.setenv("STEPMARK_DATA", str(tmp_path))
    monkeypatch.setenv("STEPMARK_USER", ALICE)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("views/record.py").run()
    assert "No enabled study" in at.info[0].value

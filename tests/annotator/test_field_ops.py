"""The pages' service layer for study fields (annotator/field_ops.py): the Studies page's YAML round trip and the
Quality page's tables and adjudication, over a real store."""

from __future__ import annotations

import pytest

from annotator import field_ops
from annotator.operations import Operations, ref_of
from pipelines.store import InvalidSpec, PermissionDenied
from pipelines.store import field_values as fv
from tests.annotator.annotator_data import ALICE, BOB, build_env_data


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return build_env_data(tmp_path_factory.mktemp("field_ops"), episodes=1, max_steps=6)


def test_yaml_round_trip_tables_and_adjudication(env):
    lead = Operations(env.repo, env.data_dir, env.study.creator.email)
    assert field_ops.fields_text(lead, env.study.id) == "fields: []\n"
    text = "fields:\n- {name: ok, scope: step, kind: choice, options: [yes, no], guideline: 'Is *this* right?'}\n"
    field_ops.save_fields(lead, env.study.id, text)
    again = field_ops.fields_text(lead, env.study.id)
    assert "options:\n  - 'yes'\n  - 'no'" in again and "guideline: Is *this* right?" in again
    assert [d.name for d in field_ops.save_fields(lead, env.study.id, again)] == ["ok"]  # what it shows loads back
    with pytest.raises(InvalidSpec, match="^the fields: fields.0..kind"):
        field_ops.save_fields(lead, env.study.id, "fields: [{name: x, scope: step, kind: colour}]")
    with pytest.raises(PermissionDenied):
        field_ops.save_fields(Operations(env.repo, env.data_dir, BOB), env.study.id, text)

    (episode,) = env.episodes[:1]
    for user, values in ((ALICE, ["yes", "no"]), (BOB, ["yes", "yes"])):
        for step, value in enumerate(values):
            fv.set_value(env.repo, ref_of(episode), "ok", user, value, step=step)
    fields = field_ops.agreement(lead, env.study.id)
    tables = field_ops.agreement_tables(fields)
    assert tables["fields"].to_dict("records")[0] | {"alpha": None} == {
        "field": "ok", "kind": "choice", "metric": "nominal", "units": 2, "alpha": None, "similarity": None,
        "disputed": 1,
    }  # fmt: skip
    (dispute,) = tables["disputes"].to_dict("records")
    assert (dispute["step"], dispute["values"], dispute["consensus"]) == ("1", f"{ALICE}: no; {BOB}: yes", None)
    assert field_ops.adjudicate(lead, episode.id, "ok", 1, 1, "yes") == "yes"
    assert field_ops.agreement_tables(field_ops.agreement(lead, env.study.id))["disputes"]["consensus"].tolist() == ["yes"]
    field_ops.save_fields(lead, env.study.id, "fields: []")
    assert field_ops.removed_fields(lead, env.study.id) == ["ok"]


def test_quality_page_shows_the_review_of_suggestions(tmp_path, monkeypatch):
    """The Quality page's table of suggestions per field and source is `field_ops.review_table` of the store's
    figures (pipelines/store/field_review.py)."""
    import pandas as pd
    from streamlit.testing.v1 import AppTest

    from pipelines.store import field_review, open_store
    from tests.pipelines.store.test_field_review import MODEL, build

    data = tmp_path / "data"
    with open_store(None, data) as repo:
        study_id = build(repo, tmp_path)
        expected = field_ops.review_table(field_review.study_field_review(repo, study_id))
    monkeypatch.setenv("STEPMARK_DATA", str(data))
    monkeypatch.setenv("STEPMARK_USER", "lead")
    at = AppTest.from_file("../../annotator/app.py", default_timeout=180).run()
    at.switch_page("views/quality.py").run()
    at.selectbox(key="quality_study").set_value(study_id).run()
    assert not at.exception
    (shown,) = [d.value for d in at.dataframe if "alpha with the source" in d.value.columns]
    pd.testing.assert_frame_equal(shown.reset_index(drop=True), expected, check_dtype=False)
    assert shown.iloc[0]["source"] == MODEL and shown.iloc[0]["accepted"] == 2
    assert "Review of suggestions" in [h.value for h in at.subheader]

"""AppTest of the Studies page's fields editor (issue 26) over a real SQLite store: the creator saves YAML, a bad
file is refused in plain words, a removed field is named, and an annotator without the right only reads."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from annotator.plain import md_unescape
from pipelines.store import field_values, open_store
from protos.rlds_creator import study_pb2
from tests.annotator.annotator_data import ALICE, BOB
from tests.annotator.test_app_studies import data_dir, studies_page  # noqa: F401 (the fixture is used)

FIELDS = """fields:
  - {name: action_correct, scope: step, kind: choice, options: [yes, no, unsure], keys: [y, n, u]}
  - {name: note, scope: step, kind: text, guideline: "**not** markdown"}
"""


def test_fields_are_edited_on_the_studies_page(data_dir, monkeypatch):  # noqa: F811
    repo = open_store(None, data_dir)
    spec = study_pb2.StudySpec(name="Fields study")
    spec.environment_specs.add(id="coin", sync=True).procgen.id = "coinrun"
    study = repo.create_study(spec, ALICE)
    at: AppTest = studies_page(ALICE, monkeypatch)
    at.selectbox(key="study_pick").set_value(study.id).run()
    assert at.text_area(key=f"fields_{study.id}").value == "fields: []\n"
    at.text_area(key=f"fields_{study.id}").set_value(FIELDS)
    at.button(key=f"fields_save_{study.id}").click().run()
    assert not at.exception and not at.error
    assert [d.name for d in field_values.definitions(repo, study.id)] == ["action_correct", "note"]
    assert "Fields saved (2)" in [t.value for t in at.toast]

    at.text_area(key=f"fields_{study.id}").set_value("fields: [{name: x, scope: step, kind: choice}]")
    at.button(key=f"fields_save_{study.id}").click().run()
    assert md_unescape(at.error[0].value) == "the fields: fields[0] (x): a choice field needs options"
    at.text_area(key=f"fields_{study.id}").set_value(FIELDS.split("  - {name: note")[0])
    at.button(key=f"fields_save_{study.id}").click().run()
    assert any("Removed (their values are kept and exported): note" in md_unescape(c.value) for c in at.caption)

    bob = studies_page(BOB, monkeypatch)
    bob.selectbox(key="study_pick").set_value(study.id).run()
    assert not [t for t in bob.text_area if t.key == f"fields_{study.id}"]
    assert any("action_correct" in c.value for c in bob.code)

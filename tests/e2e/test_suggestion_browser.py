"""A model's suggestion accepted in chromium (issue 33): a study whose UI episode (converted from
../shared/fixtures/droidbot) has a suggestion imported as source `model:demo-vlm@1`; the annotator opens the
player, accepts it with one key (Enter), and a Parquet export read with `datasets` and pyarrow says the value
was `accepted` from that model (`field:<name>:source`); the Quality page shows the review of suggestions."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from pipelines import export
from pipelines.store import field_review, open_store
from pipelines.store import field_values as fv
from pipelines.store.field_defs import parse_text
from tests.annotator.annotator_data import ALICE, import_ui_fixtures
from tests.e2e.browser import annotate_server, wait_idle
from tests.e2e.test_annotator_browser import open_replay, wait_store
from tests.e2e.test_fields_browser import focused_field, form_title

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
MODEL = "model:demo-vlm@1"
FIELDS = """
fields:
  - {name: instruction, scope: step, kind: text}
  - {name: action_correct, scope: step, kind: choice, options: [yes, no, unsure], keys: [y, n, u]}
"""
SUGGESTED = "open the settings"


@pytest.fixture(scope="module")
def server(tmp_path_factory, fixtures_dir):
    data_dir = tmp_path_factory.mktemp("e2e_suggestion")
    study = import_ui_fixtures(data_dir, fixtures_dir)
    repo = open_store(None, data_dir)
    fv.define(repo, study.id, parse_text(FIELDS, "fields.yaml"), ALICE)
    (episode,) = repo.list_episodes(study_id=study.id)
    model = data_dir / "model.jsonl"
    model.write_text(json.dumps({"episode": episode.id, "step": 2, "field": "instruction", "value": SUGGESTED,
                                 "source": MODEL}) + "\n")  # fmt: skip
    fv.import_values(repo, study.id, model, ALICE)
    with annotate_server(data_dir, "--user", ALICE) as url:
        yield url, data_dir, repo, study, episode
    repo.close()


def test_accept_a_model_suggestion_with_enter_and_find_it_in_the_export(server, browser, tmp_path):
    url, data_dir, repo, study, episode = server
    page = open_replay(browser, url, episode, 2)
    form_title(page, 2)
    page.locator(".sm-frame").click()
    page.keyboard.press("f")  # focus the form: the first field holds the model's suggestion
    assert focused_field(page) == "instruction"
    assert page.locator('.sm-fields input[data-field="instruction"]').input_value() == SUGGESTED
    page.keyboard.press("Enter")  # one key keeps it

    def alices() -> dict:
        return {(v.field, v.step): (v.value, v.origin) for v in fv.values(repo, [episode.id], user=ALICE).get(episode.id, [])}

    wait_store(lambda: alices().get(("instruction", 2)) == (SUGGESTED, "accepted"))
    assert list(alices()) == [("instruction", 2)]  # nothing else was saved
    page.close()

    out = tmp_path / "parquet"
    request = export.ExportRequest(data_dir=str(data_dir), out=str(out), format="parquet", study_id=study.id)
    assert not export.export_episodes(request).dead_letters
    files = sorted(str(p) for p in (out / "data").rglob("*.parquet"))
    datasets = pytest.importorskip("datasets")
    rows = [r for r in datasets.load_dataset("parquet", data_files=files, split="train",
                                              cache_dir=str(tmp_path / "hf"))]  # fmt: skip
    (step2,) = [r for r in rows if r["step_index"] == 2]
    assert (step2["field:instruction"], step2["field:instruction:origin"], step2["field:instruction:source"]) == (
        SUGGESTED, "accepted", MODEL)  # fmt: skip
    assert [r["step_index"] for r in rows if r["field:instruction:source"]] == [2]  # no value elsewhere
    table = pq.read_table(out / "data")
    assert "field:instruction:source" in table.schema.names
    by_step = dict(zip(table.column("step_index").to_pylist(), table.column("field:instruction:source").to_pylist(),
                       strict=True))  # fmt: skip
    assert by_step[2] == MODEL

    (review,) = field_review.study_field_review(repo, study.id)
    assert (review.source, review.suggestions, review.accepted, review.unseen) == (MODEL, 1, 1, 0)
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.goto(url + "quality")
    page.get_by_role("heading", name="Review of suggestions", exact=True).wait_for(timeout=90_000)
    wait_idle(page)
    page.close()

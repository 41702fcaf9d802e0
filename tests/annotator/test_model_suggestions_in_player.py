"""A model's suggestions from `stepmark suggest` reach the player's form under their author, and keeping one
saves the value as `accepted` (field routes in process, over a store holding the converted DroidBot run)."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.testclient import TestClient

from annotator.operations import ref_key, ref_of
from annotator.web import context, field_routes, guard
from pipelines.store import field_values as fv
from pipelines.store import open_store
from pipelines.store.field_defs import parse_text
from stepmark.cli import main
from tests.annotator.annotator_data import ALICE, import_ui_fixtures

pytestmark = pytest.mark.slow


def test_a_model_suggestion_is_offered_and_accepted(tmp_path, fixtures_dir) -> None:
    study = import_ui_fixtures(tmp_path, fixtures_dir)
    lead = study.creator.email
    with open_store(None, tmp_path) as repo:
        fv.define(repo, study.id, parse_text("fields:\n - {name: instruction, scope: step, kind: text}\n", "f"), lead)
        (episode,) = repo.list_episodes(study_id=study.id)
    assert main(["suggest", "--study", study.id, "--backend", "grounded-instructions", "--data", str(tmp_path),
                 "--user", lead, "--quiet"]) == 0  # fmt: skip
    app = Starlette(routes=field_routes.routes(context.Settings(data_dir=tmp_path, store=None, user=None)),
                    middleware=[Middleware(guard.OriginGuard, allowed_hosts=guard.LOOPBACK_NAMES)])  # fmt: skip
    url = f"/api/fields/{ref_key(ref_of(episode))}/steps/1"
    auth = {"X-Stepmark-Token": context.mint(ALICE)}
    with TestClient(app, base_url="http://127.0.0.1:8501") as client:
        form = client.get(url, headers=auth).json()
        assert form["suggestions"] == {"instruction": [
            {"source": "model:grounded-instructions@1", "value": "Click on 'I'm New'"}]}  # fmt: skip
        reply = client.post(url, json={"field": "instruction", "value": "Click on 'I'm New'"}, headers=auth).json()
        assert reply["message"] == "Saved instruction on step 1 (accepted)"

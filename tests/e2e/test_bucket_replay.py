"""The annotator replays UI episodes whose converted records are in a bucket (moto's S3 server, its own
process): converted from and to `s3://`, imported with the URLs kept (nothing copied), replayed and tagged in
chromium. Frames come through the same storage layer as everything else, read once per episode (the annotator
keeps a bounded cache of open episodes), never per key press."""

from __future__ import annotations

from pathlib import Path

import pytest

from annotator.operations import ref_key, ref_of
from pipelines.store import open_store
from stepmark.cli import main
from tests.e2e.browser import annotate_server
from tests.e2e.test_annotator_browser import FRAME_STEP_JS, player_message, stored_step_tags
from tests.object_store import Bucket

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "ui"


def _gets(bucket: Bucket, key: str) -> int:
    """GET requests the S3 server has logged for one object so far."""
    return bucket.server.log.read_text(errors="replace").count(f"GET /{bucket.name}/{key}")


def test_replay_and_tag_an_episode_imported_from_a_bucket(s3: Bucket, browser, tmp_path: Path, capsys) -> None:
    s3.upload_tree(SAMPLES, "traces")
    assert main(["convert-ui", s3.url("traces"), s3.url("episodes"), "--quiet"]) == 0
    data = tmp_path / "data"
    assert main(["import-ui", s3.url("episodes"), "--study", "From a bucket", "--data", str(data)]) == 0
    study = capsys.readouterr().out.strip().splitlines()[-1]
    repo = open_store(None, data)
    episode = max(repo.list_episodes(study_id=study), key=lambda e: e.num_steps)
    shard = episode.metadata["ui_record"]["shard"]
    assert shard.startswith(s3.url("episodes/")) and not list(data.rglob("*.tfrecord"))  # nothing copied
    key = shard[len(f"s3://{s3.name}/") :]

    with annotate_server(data, "--user", "alice@example.com") as url:  # AWS_* reach it from the environment
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.goto(f"{url}replay?episode={ref_key(ref_of(episode))}&step=0")
        page.locator(".sm-frame").wait_for(timeout=60_000)
        page.wait_for_function(f"() => ({FRAME_STEP_JS})() === 0", timeout=60_000)
        opened = _gets(s3, key)
        assert opened >= 1  # the record was read from the bucket
        page.locator(".sm-frame").click()
        last = int(episode.num_steps) - 1
        for step in range(1, last + 1):
            page.keyboard.press("ArrowRight")
            page.wait_for_function(f"() => ({FRAME_STEP_JS})() === {step}", timeout=30_000)
        assert _gets(s3, key) == opened  # every frame of the episode from the one read: none per key press
        page.locator(".sm-step-input").fill("seen in a bucket")
        page.get_by_role("button", name="Tag step").click()
        player_message(page, f"Tagged step {last}")
        page.close()
    assert stored_step_tags(repo, episode) == {last: ["seen in a bucket"]}

"""Team work in a real browser: the Label page over a queued episode and the Quality page's plots and
agreement, served by `stepmark annotate` (Debian chromium through Playwright). With STEPMARK_SCREENSHOTS=DIR
the two pages are saved as DIR/label.png and DIR/quality.png."""

from __future__ import annotations

import re

import pytest

from pipelines.store import queue
from pipelines.store.queue import QueueConfig
from protos.rlds_creator import client_pb2
from tests.annotator.annotator_data import ALICE, BOB, build_env_data
from tests.e2e.browser import annotate_server, wait_idle
from tests.e2e.test_annotator_browser import FRAME_STEP_JS, shot

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def team_server(tmp_path_factory):
    env = build_env_data(tmp_path_factory.mktemp("e2e_team"), episodes=3, max_steps=20)
    repo = env.repo
    queue.set_queue(repo, QueueConfig(env.study.id, overlap=2), ALICE)
    answers = {ALICE: {3: "jump", 7: "fall", 12: "coin"}, BOB: {3: "jump", 9: "fall", 12: "coin", 15: "jump"}}
    for user, labels in answers.items():
        taken = queue.next_episode(repo, env.study.id, user)
        for step, label in labels.items():
            queue.set_step_label(repo, taken.episode_id, user, step, label)
        queue.mark_done(repo, taken.episode_id, user, snapshot=False)
    held = queue.next_episode(repo, env.study.id, ALICE)  # Alice's next one, open on the Label page
    queue.set_step_label(repo, held.episode_id, ALICE, 0, "start")
    with annotate_server(env.data_dir, "--user", ALICE) as url:
        yield url, env


def test_label_and_quality_pages(team_server, browser):
    url, env = team_server
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.goto(url + "label")
    page.wait_for_function(f"() => ({FRAME_STEP_JS})() === 0", timeout=60_000)
    chips = page.locator(".sm-step-chips .sm-chip span")
    chips.filter(has_text="start").wait_for(timeout=30_000)  # her own label, nobody else's
    assert page.locator(".sm-tags-title").inner_text() == "Your labels on step"
    assert page.locator(".sm-ep-section").is_hidden()  # labels are per step; no episode tags here
    # A label typed in the player lands on the step on screen, among her own labels only.
    page.locator(".sm-frame").click()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    page.locator(".sm-step-input").fill("ledge")
    page.get_by_role("button", name="Tag step").click()
    page.locator(".sm-message").filter(has_text="Labelled step 3").wait_for(timeout=30_000)
    held = next(a for a in queue.assignments(env.repo, env.study.id, ALICE) if a.state == "open")
    assert queue.user_labels(env.repo, held.episode_id, ALICE) == {0: ["start"], 3: ["ledge"]}
    shared = env.repo.get_episode(client_pb2.EpisodeRef(episode_id=held.episode_id)).step_metadata
    assert 3 not in shared  # the shared step tags are untouched
    wait_idle(page)
    shot(page, "label")

    page.goto(url + "quality")
    page.get_by_role("heading", name="Agreement", exact=True).wait_for(timeout=90_000)
    page.get_by_text(re.compile(r"steps of 1 episode\(s\), annotators .* Krippendorff's alpha")).wait_for()
    wait_idle(page)
    assert page.locator('[data-testid="stImage"] img').count() >= 9
    shot(page, "quality")

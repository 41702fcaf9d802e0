"""Team work in a real browser: the Label page over a queued episode and the Quality page's plots and
agreement, served by `stepmark annotate` (Debian chromium through Playwright). With STEPMARK_SCREENSHOTS=DIR
the two pages are saved as DIR/label.png and DIR/quality.png.

The pages follow the team: they open on the study the annotator last worked on (not the first study), a study
without a work queue says so and hands out nothing, and Quality shows an episode two people just finished
without anyone touching the page."""

from __future__ import annotations

import re

import pytest

from pipelines.store import open_store, queue
from pipelines.store.queue import QueueConfig
from protos.rlds_creator import client_pb2
from tests.annotator.annotator_data import ALICE, BOB, build_env_data, procgen_study_spec
from tests.e2e.browser import annotate_server, wait_idle
from tests.e2e.test_annotator_browser import FRAME_STEP_JS, shot

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ANSWERS = {ALICE: {3: "jump", 7: "fall", 12: "coin"}, BOB: {3: "jump", 9: "fall", 12: "coin", 15: "jump"}}


@pytest.fixture(scope="module")
def team_server(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("e2e_team")
    # The first study of the list has no work queue: the pages must not open on it.
    spec = procgen_study_spec()
    spec.name = "A study without a queue"
    open_store(None, data_dir).create_study(spec, BOB)
    env = build_env_data(data_dir, episodes=3, max_steps=20)
    repo = env.repo
    queue.set_queue(repo, QueueConfig(env.study.id, overlap=2), ALICE)
    for user, labels in ANSWERS.items():
        taken = queue.next_episode(repo, env.study.id, user)
        for step, label in labels.items():
            queue.set_step_label(repo, taken.episode_id, user, step, label)
        if user == ALICE:
            queue.mark_done(repo, taken.episode_id, user, snapshot=False)  # Bob finishes his while Quality is open
    held = queue.next_episode(repo, env.study.id, ALICE)  # Alice's next one, open on the Label page
    queue.set_step_label(repo, held.episode_id, ALICE, 0, "start")
    with annotate_server(env.data_dir, "--user", ALICE) as url:
        yield url, env


def test_label_and_quality_pages(team_server, browser):
    url, env = team_server
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.goto(url + "label")
    # The study she works on, not the first of the list.
    page.wait_for_function(f"() => ({FRAME_STEP_JS})() === 0", timeout=60_000)
    study_box = page.locator('[data-testid="stSelectbox"]').filter(has=page.get_by_text("Study", exact=True))
    assert study_box.locator("input").input_value() == env.study.name
    held = next(a for a in queue.assignments(env.repo, env.study.id, ALICE) if a.state == "open")
    episode = env.repo.get_episode(client_pb2.EpisodeRef(episode_id=held.episode_id))
    # Steps counted as everywhere else: the transitions, the final observation named as such.
    page.get_by_text(f"{episode.num_steps} steps + final observation").wait_for(timeout=30_000)
    chips = page.locator(".sm-step-chips .sm-chip span")
    chips.filter(has_text="start").wait_for(timeout=30_000)  # her own label, nobody else's
    assert page.locator(".sm-tags-title").inner_text() == "Your labels on step"
    assert page.locator(".sm-ep-section").is_hidden()  # labels are per step; no episode tags here
    # A label typed in the player lands on the step on screen, among her own labels only.
    page.locator(".sm-frame").click()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    page.get_by_label("Tag for the step on screen").fill("ledge")  # the tag box has a name
    page.get_by_role("button", name="Tag step").click()
    page.locator(".sm-message").filter(has_text="Labelled step 3").wait_for(timeout=30_000)
    assert queue.user_labels(env.repo, held.episode_id, ALICE) == {0: ["start"], 3: ["ledge"]}
    shared = env.repo.get_episode(client_pb2.EpisodeRef(episode_id=held.episode_id)).step_metadata
    assert 3 not in shared  # the shared step tags are untouched
    wait_idle(page)
    shot(page, "label")

    # A study without a work queue says so and hands out nothing.
    study_box.locator("input").click()
    page.get_by_role("option", name="A study without a queue").click()
    page.get_by_text(re.compile("This study has no work queue")).wait_for(timeout=30_000)
    assert page.get_by_role("button", name=re.compile("Next episode")).count() == 0

    page.goto(url + "quality")
    page.get_by_role("heading", name="Agreement", exact=True).wait_for(timeout=90_000)
    quality_box = page.locator('[data-testid="stSelectbox"]').filter(has=page.get_by_text("Study", exact=True))
    assert quality_box.locator("input").input_value() == env.study.name  # where she works, again
    page.get_by_text(re.compile("No episode is done by two or more annotators yet")).wait_for(timeout=30_000)
    # Bob finishes the episode Alice finished: the page shows their agreement without being touched.
    bobs = next(a for a in queue.assignments(env.repo, env.study.id, BOB) if a.state == "open")
    queue.mark_done(env.repo, bobs.episode_id, BOB, snapshot=False)
    page.get_by_text(re.compile(r"steps of 1 episode\(s\), annotators .* Krippendorff's alpha")).wait_for(
        timeout=60_000
    )
    # Every agreement figure is explained where it is shown.
    for explained in ("Alpha is 1 when", "With majority: steps where more than half", "Cohen's kappa per label"):
        page.get_by_text(re.compile(re.escape(explained))).first.wait_for(timeout=30_000)
    wait_idle(page)
    assert page.locator('[data-testid="stImage"] img').count() >= 9
    shot(page, "quality")

"""Episodes people can tell apart, in chromium against `stepmark annotate` (issue 35 item 4): the Episodes table
shows no reward or success for UI episodes and counts step tags in its tags column, the Quality page's disputed
steps link to the step in Replay, and the player offers no ✕ on a tag the viewer may not remove (a refusal is one
short line). The tables are read through the grid's accessible cells (the data grid draws on a canvas)."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest

from annotator.operations import ref_key, ref_of
from pipelines.store import queue
from pipelines.store.queue import QueueConfig
from tests.annotator.annotator_data import ALICE, BOB, build_env_data, import_ui_fixtures
from tests.e2e.browser import annotate_server, choose_option, wait_idle
from tests.e2e.test_annotator_browser import FRAME_STEP_JS, open_replay, player_message, stored_step_tags

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory, fixtures_dir):
    """Alice's UI study and environment study (a queue of overlap 2: Alice and Bob disagree on step 4 of the
    first episode), Alice's tags on the first episode; the annotator serves Bob, who may not review it."""
    data_dir = tmp_path_factory.mktemp("e2e_episode_list")
    ui_study = import_ui_fixtures(data_dir, fixtures_dir)
    env = build_env_data(data_dir, episodes=2, max_steps=12)
    repo = env.repo
    queue.set_queue(repo, QueueConfig(env.study.id, overlap=2), ALICE)
    for user, labels in {ALICE: {2: "jump"}, BOB: {2: "jump", 4: "fall"}}.items():
        taken = queue.next_episode(repo, env.study.id, user)
        for step, label in labels.items():
            queue.set_step_label(repo, taken.episode_id, user, step, label)
        queue.mark_done(repo, taken.episode_id, user, snapshot=False)
    first = ref_of(env.episodes[0])
    repo.add_segment_tag(first, 3, 4, "alices", ALICE)
    repo.add_episode_tag(first, "hard", ALICE)
    with annotate_server(data_dir, "--user", BOB) as url:
        yield url, env, ui_study


def grid(page, index: int = 0) -> list[dict[str, str]]:
    """The rows of the page's `index`-th data frame as its accessible cells give them (header -> text)."""
    frame = page.locator('[data-testid="stDataFrame"]').nth(index)
    frame.locator('[role="gridcell"]').first.wait_for(state="attached", timeout=30_000)
    headers = frame.locator('[role="columnheader"]').all_inner_texts()
    rows = []
    for row in frame.locator('tbody [role="row"]').all():
        rows.append(dict(zip(headers, row.locator('[role="gridcell"]').all_inner_texts(), strict=True)))
    return rows


def headers(page, index: int = 0) -> list[str]:
    frame = page.locator('[data-testid="stDataFrame"]').nth(index)
    frame.locator('[role="columnheader"]').first.wait_for(state="attached", timeout=30_000)
    return frame.locator('[role="columnheader"]').all_inner_texts()


def test_episodes_table_outcomes_and_tags(server, browser):
    url, env, ui_study = server
    # wide enough for every column: the grid's accessible cells are those of the columns in view
    page = browser.new_page(viewport={"width": 2600, "height": 1000})
    page.goto(url)
    wait_idle(page)
    rows = {r["episode"]: r for r in grid(page)}
    first = rows[ref_key(ref_of(env.episodes[0]))]
    assert first["tags"] == "hard; 2 step tags on 2 steps"  # the episode's tag, and the segment's two
    assert first["title"].startswith("coinrun · seed 3 · ")  # a title beside the id
    assert first["success"] in ("yes", "no") and first["total reward"] != ""
    ui_rows = [r for r in rows.values() if r["kind"] == "ui"]
    assert ui_rows and all(r["total reward"] == "" and r["success"] == "" for r in ui_rows)

    choose_option(page, "Study", ui_study.name)
    page.wait_for_function(
        "() => ![...document.querySelectorAll('[data-testid=stDataFrame] [role=gridcell]')]"
        ".some((c) => c.textContent === 'coinrun')",
        timeout=30_000,
    )
    wait_idle(page)
    shown = headers(page)
    assert "kind" in shown and "total reward" not in shown and "success" not in shown
    choose_option(page, "Study", env.study.name)
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=stDataFrame] [role=columnheader]')]"
        ".some((c) => c.textContent === 'total reward')",
        timeout=30_000,
    )
    assert "success" in headers(page)
    page.close()


def test_a_disputed_step_links_to_that_step_in_replay(server, browser):
    url, env, _ = server
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.goto(url + "quality")
    page.get_by_role("heading", name=re.compile("Disagreements")).wait_for(timeout=90_000)
    wait_idle(page)
    disputes = grid(page, page.locator('[data-testid="stDataFrame"]').count() - 1)
    assert [(r["step"], r["labels"]) for r in disputes] == [("4", f"{ALICE}: -; {BOB}: fall")]
    link = disputes[0]["open"]
    target = page.evaluate("(href) => new URL(href, location.href).href", link)
    episode = next(e for e in env.episodes if e.id == disputes[0]["episode"])
    page.goto(target)  # where the link's click goes (the grid draws it on a canvas)
    page.wait_for_function(f"() => ({FRAME_STEP_JS})() === 4", timeout=60_000)
    assert page.locator(".sm-stepno").first.inner_text().strip().startswith("step 4 of")
    assert parse_qs(urlsplit(page.url).query)["episode"] == [ref_key(ref_of(episode))]
    page.close()


def test_no_remove_button_on_a_tag_the_viewer_may_not_remove(server, browser):
    url, env, _ = server
    episode = env.episodes[0]
    page = open_replay(browser, url, episode, step=3)
    step_chips = page.locator(".sm-step-chips .sm-chip")
    step_chips.filter(has_text="alices").wait_for(timeout=30_000)
    assert step_chips.filter(has_text="alices").locator("button").count() == 0  # Alice's, on her episode
    ep_chips = page.locator(".sm-ep-chips .sm-chip")
    assert ep_chips.filter(has_text="hard").locator("button").count() == 0
    # Bob's own tag on the same step has its ✕, and it removes it
    page.get_by_label("Tag for the step on screen").fill("bobs")
    page.get_by_role("button", name="Tag step").click()
    player_message(page, "Tagged step 3")
    step_chips.filter(has_text="bobs").locator("button").click()
    player_message(page, "Removed from step 3")
    assert stored_step_tags(env.repo, episode)[3] == ["alices"]
    # a removal refused all the same (as when the rights changed since the page was drawn: sent through the
    # player as its ✕ would) says so in one short line, and the tag stays
    page.evaluate(
        "() => [...window.__stepmarkPlayers.values()][0].player"
        ".change({op: 'remove', scope: 'step', step: 3, label: 'alices'})"
    )
    player_message(page, "^Not saved: ")
    message = page.locator(".sm-message").inner_text()
    assert message == "Not saved: You may not remove another annotator's tag 'alices': ask a reviewer"
    step_chips.filter(has_text="alices").wait_for(timeout=30_000)  # shown again, from the store
    assert stored_step_tags(env.repo, episode)[3] == ["alices"]
    page.close()

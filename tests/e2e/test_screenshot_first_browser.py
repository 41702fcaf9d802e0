"""A converted Android-in-the-Zoo episode (screenshot-first: detector boxes, chain-of-action-thought texts) in
the step player, in chromium against `stepmark annotate`: the step's texts are on screen beside it, as plain
text (markup in a trace stays characters), they change when the player steps forward, and a palette key tags
the step on screen."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipelines import convert, ui_import
from pipelines.store import open_store
from tests.annotator.annotator_data import ALICE
from tests.e2e.browser import annotate_server
from tests.e2e.test_annotator_browser import FRAME_STEP_JS, open_replay, stored_step_tags, wait_store
from tests.pipelines.screenshot_first import aitz_steps, build_aitz, build_gui_odyssey

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MARKUP = '<img src=x onerror="window.__pwned=1"> **not bold** <b>not a tag</b>'
# The texts panel, read from the player's shadow DOM: {"step": whose texts, name: [label, text, child elements]}.
TEXTS_JS = f"""() => {{
  ({FRAME_STEP_JS})();
  const root = window.__smFrame.getRootNode();
  const box = root.querySelector('.sm-texts');
  const out = {{step: box.dataset.step}};
  for (const row of box.querySelectorAll('.sm-step-text')) {{
    const [b, span] = row.children;
    out[row.dataset.text] = [b.textContent, span.textContent, span.children.length];
  }}
  return out;
}}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("e2e_screenshot_first")
    steps = aitz_steps()
    steps[1]["coat_action_think"] = MARKUP
    build_aitz(data_dir / "in", steps)
    build_gui_odyssey(data_dir / "in" / "odyssey")
    assert convert.run([str(data_dir / "in"), str(data_dir / "converted"), "--quiet", "--runner=FnApiRunner"]) == 0
    repo = open_store(None, data_dir)
    study = ui_import.import_ui(repo, str(data_dir / "converted"), "AitZ", ALICE)
    repo.set_palette(study.id, ["good", "bad"], ALICE)
    episodes = {e.id: e for e in repo.list_episodes(study_id=study.id)}
    by_steps = {e.num_steps: e for e in episodes.values()}  # AitZ: 4 screens, GUI-Odyssey: 6
    with annotate_server(data_dir, "--user", ALICE) as url:
        yield url, data_dir, by_steps, steps


def texts_on_screen(page, step: int) -> dict:
    page.wait_for_function(f"(step) => ({FRAME_STEP_JS})() === step && ({TEXTS_JS})().step === String(step)",
                           arg=step, timeout=60_000)  # fmt: skip
    texts = page.evaluate(TEXTS_JS)
    assert texts.pop("step") == str(step)
    return texts


def test_step_texts_beside_the_step_change_with_it_and_the_step_takes_a_tag(server, browser):
    url, data_dir, by_steps, steps = server
    episode = next(e for n, e in by_steps.items() if n < 5)
    page = open_replay(browser, url, episode, 0)
    first = texts_on_screen(page, 0)
    assert first == {
        "screen_description": ["Screen description: ", steps[0]["coat_screen_desc"], 0],
        "action_thought": ["Action thought: ", steps[0]["coat_action_think"], 0],
        "action_description": ["Action description: ", "press the home button", 0],
        "action_result": ["Action result: ", steps[0]["coat_action_result"], 0],
    }
    # Beside the screenshot: the texts panel is on screen with the frame (in the viewport, to its right).
    frame, texts = page.locator(".sm-frame").bounding_box(), page.locator(".sm-texts").bounding_box()
    viewport = page.viewport_size
    assert texts["x"] >= frame["x"] + frame["width"] and texts["y"] + 40 < viewport["height"]
    assert texts["y"] < frame["y"] + frame["height"]
    page.locator(".sm-frame").click()
    page.keyboard.press("ArrowRight")
    second = texts_on_screen(page, 1)
    assert second["action_description"][1] == "scroll up"
    assert second["action_thought"][1] == MARKUP and second["action_thought"][2] == 0  # characters, not markup
    assert page.evaluate("() => window.__pwned === undefined")
    folder = os.environ.get("STEPMARK_SCREENSHOTS")  # e.g. docs/screenshots: what an annotator sees
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / "replay_aitz_texts.png"))
    page.keyboard.press("1")  # palette "good" on the step on screen
    repo = open_store(None, data_dir)
    wait_store(lambda: stored_step_tags(repo, episode) == {1: ["good"]})
    page.close()


def test_a_screenshot_only_episode_replays_with_its_instructions(server, browser):
    """GUI-Odyssey: no hierarchy, so no objects; the screenshot is painted, the touch point drawn, and the step's
    texts (`low_level_instruction`, `description`, `intention`) are beside it, changing with the step."""
    url, _, by_steps, _ = server
    episode = next(e for n, e in by_steps.items() if n >= 5)
    page = open_replay(browser, url, episode, 0)
    assert texts_on_screen(page, 0) == {
        "instruction": ["Instruction: ", "Open the DuckDuckGo app.", 0],
        "screen_description": ["Screen description: ", "The home screen with app icons.", 0],
        "action_thought": ["Action thought: ", "I open DuckDuckGo to search for the event.", 0],
    }
    page.wait_for_function(f"() => ({FRAME_STEP_JS})() === 0 && window.__smFrame.dataset.shown === '0'")
    page.locator(".sm-frame").click()
    page.keyboard.press("ArrowRight")
    assert texts_on_screen(page, 1) == {"instruction": ["Instruction: ", "Type the event to search for.", 0]}
    page.close()

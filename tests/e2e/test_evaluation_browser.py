"""An evaluation run in the step player, in chromium against `stepmark annotate`: chosen on the Replay page, the
run's predicted touch point is a second ring (its own style) at the predicted pixel of the screenshot, read
from the element's position; steps whose prediction has no point say in plain text what was predicted."""

from __future__ import annotations

import json

import pytest

from pipelines import convert, ui_import
from pipelines.evaluation import runs
from pipelines.store import open_store
from tests.annotator.annotator_data import ALICE
from tests.e2e.browser import annotate_server, choose_option
from tests.e2e.test_annotator_browser import FRAME_STEP_JS, open_replay
from tests.pipelines.screenshot_first import AITZ_ID, AITZ_SIZE, build_aitz

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PREDICTED = {
    0: {"action_type": "navigate_home"},
    1: {"action_type": "scroll", "direction": "up"},  # AitZ's "scroll up" is AndroidControl's down: failed
    2: {"action_type": "click", "x": 200, "y": 330},  # beside the recorded tap (164, 299): matched
    3: {"action_type": "status", "goal_status": "complete"},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("e2e_evaluation")
    build_aitz(data_dir / "in")
    assert convert.run([str(data_dir / "in"), str(data_dir / "converted"), "--quiet", "--runner=FnApiRunner"]) == 0
    repo = open_store(None, data_dir)
    study = ui_import.import_ui(repo, str(data_dir / "converted"), "AitZ", ALICE)
    (episode,) = repo.list_episodes(study_id=study.id)
    lines = [json.dumps({"episode": AITZ_ID, "step": i, "action": a}) for i, a in PREDICTED.items()]
    (data_dir / "agent.jsonl").write_text("\n".join(lines) + "\n")
    assert runs.evaluate(repo, study.id, str(data_dir / "agent.jsonl"), "agent", ALICE)["matched"] == 3
    with annotate_server(data_dir, "--user", ALICE) as url:
        yield url, episode


def marker(page) -> dict | None:
    return page.evaluate(
        f"""() => {{
      ({FRAME_STEP_JS})();
      const root = window.__smFrame.getRootNode();
      const m = root.querySelector('.sm-predicted'), c = root.querySelector('.sm-canvas');
      const note = root.querySelector('.sm-eval');
      const r = m.getBoundingClientRect(), k = c.getBoundingClientRect();
      return {{hidden: m.hidden, failed: m.classList.contains('sm-failed'), note: note.textContent,
               x: r.x + r.width / 2, y: r.y + r.height / 2, cx: k.x, cy: k.y, cw: k.width, ch: k.height,
               border: getComputedStyle(m).borderTopStyle, step: Number(window.__smFrame.dataset.step)}};
    }}"""
    )


def wait_note(page, text: str) -> dict:
    """The marker once the player's evaluation line says `text` (it is redrawn when the step's frame paints)."""
    page.wait_for_function(
        f"""(text) => {{ ({FRAME_STEP_JS})();
            return window.__smFrame.getRootNode().querySelector('.sm-eval').textContent === text; }}""",
        arg=text, timeout=60_000,
    )
    return marker(page)


def test_the_predicted_touch_point_is_drawn_at_the_predicted_pixel(server, browser):
    url, episode = server
    page = open_replay(browser, url, episode, 2)
    assert marker(page)["hidden"]  # no run chosen: nothing drawn
    choose_option(page, "Evaluation run", "agent")
    page.wait_for_function(f"() => ({FRAME_STEP_JS})() === 2", timeout=60_000)
    page.locator(".sm-predicted").wait_for(state="visible", timeout=60_000)
    m = marker(page)
    assert m["step"] == 2 and not m["hidden"] and not m["failed"] and m["border"] == "dashed"
    # the ring's centre is the predicted pixel (200, 330) of the 270x600 screenshot, as shown on the page
    assert abs(m["x"] - (m["cx"] + 200 / AITZ_SIZE[0] * m["cw"])) <= 1.5
    assert abs(m["y"] - (m["cy"] + 330 / AITZ_SIZE[1] * m["ch"])) <= 1.5
    assert m["note"] == "Run agent: predicted click (200, 330): matched"

    page.locator(".sm-frame").click(position={"x": 5, "y": 5})
    page.keyboard.press("ArrowLeft")
    m = wait_note(page, "Run agent: predicted scroll up: failed (direction)")
    assert m["hidden"] and m["step"] == 1
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    m = wait_note(page, "Run agent: predicted status complete: matched")
    assert m["hidden"] and m["step"] == 3
    page.close()

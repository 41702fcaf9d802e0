"""End to end in a real browser: `stepmark annotate` over fixture UI traces (converted and imported here), Debian
chromium driven by Playwright. Open a UI episode, step forward twice with the keyboard, tag the step, reload,
and find the tag on screen and in the store.

With STEPMARK_SCREENSHOTS=DIR the main pages are also saved as PNGs into DIR (docs/screenshots for the README).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from annotator.launch import free_port
from annotator.operations import ref_key, ref_of
from pipelines.store import open_store
from tests.annotator.annotator_data import ALICE, build_env_data, import_ui_fixtures

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
TAG = "e2e checkout button"


def wait_healthy(url: str, process: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"stepmark annotate exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + "_stcore/health", timeout=2) as r:
                if r.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"annotator not healthy at {url} after {timeout}s")


@pytest.fixture(scope="module")
def server(tmp_path_factory, fixtures_dir):
    data_dir = tmp_path_factory.mktemp("e2e")
    study = import_ui_fixtures(data_dir, fixtures_dir)
    if os.environ.get("STEPMARK_SCREENSHOTS"):
        build_env_data(data_dir, episodes=2, max_steps=40)  # environment episodes for the screenshots too
    port = free_port()
    log = (data_dir / "annotate.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stepmark",
            "annotate",
            "--data",
            str(data_dir),
            "--port",
            str(port),
            "--user",
            ALICE,
        ],  # fmt: skip
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=Path(__file__).resolve().parents[2],
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_healthy(url, process)
        yield url, data_dir, study
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield b
        b.close()


def shot(page, name: str) -> None:
    folder = os.environ.get("STEPMARK_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        wait_idle(page)
        page.wait_for_function(  # widgets still loading show as grey skeletons
            '() => !document.querySelector(\'[data-testid="stSkeleton"], [data-stale="true"]\')',
            timeout=30_000,
        )
        page.wait_for_timeout(800)  # let images and charts paint
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def wait_idle(page) -> None:
    """Until Streamlit has finished the current run (its status widget says 'Running...' meanwhile)."""
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=30_000
    )


def step_shown(page) -> int:
    return int(re.search(r"step=(\d+)", page.url).group(1))


def test_tag_a_ui_step_from_the_keyboard_and_find_it_after_reload(server, browser):
    url, data_dir, study = server
    repo = open_store(None, data_dir)
    episode = repo.list_episodes(study_id=study.id)[0]
    key = ref_key(ref_of(episode))
    page = browser.new_page(viewport={"width": 1500, "height": 1000})

    page.goto(url)
    page.get_by_role("heading", name="Episodes").wait_for(timeout=60_000)
    page.get_by_text(study.name).first.wait_for(state="attached")  # a cell of the (canvas) table
    wait_idle(page)
    shot(page, "episodes")

    page.get_by_role("link", name="Replay").click()  # the sidebar navigation
    page.locator('[data-testid="stSelectbox"]').filter(has_text="Episode").first.click()
    page.get_by_role("option", name=re.compile(re.escape(episode.id[:8]))).click()
    page.get_by_text("Tags on this step").wait_for(timeout=60_000)
    assert f"episode={key}" in page.url.replace("%2F", "/")
    page.get_by_text("Action:").wait_for()
    wait_idle(page)
    shot(page, "replay_ui")
    page.get_by_role("heading", name="Replay").click()  # focus the page, not an input
    for expected in (1, 2):
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => location.search.includes('step={expected}')", timeout=30_000)
        wait_idle(page)
    assert step_shown(page) == 2
    page.get_by_text("step 2", exact=True).first.wait_for()  # the screenshot's caption

    page.get_by_placeholder("tag this step").fill(TAG)
    page.get_by_role("button", name="Tag step").click()
    page.get_by_text(f"Tagged step 2 '{TAG}'").wait_for(timeout=30_000)
    wait_idle(page)

    page.reload()
    page.get_by_text("Tags on this step").wait_for(timeout=60_000)
    wait_idle(page)
    assert step_shown(page) == 2
    page.get_by_text(TAG, exact=True).first.wait_for(timeout=30_000)
    shot(page, "replay_ui_tagged")

    stored = repo.get_episode(ref_of(episode))
    assert [t.label for t in stored.step_metadata[2].tags] == [TAG]
    entry = repo.audit_log(ref_of(episode))[0]
    assert (entry.user, entry.action, entry.step_index, entry.after) == (
        ALICE,
        "step.tag.add",
        2,
        {"label": TAG},
    )
    page.close()


def test_state_box_shows_the_stored_state_after_an_undo(server, browser):
    """A browser-only bug: the State box kept showing the annotator's last choice after an undo put the stored
    state back (the server's widget value was right, the page was not)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    url, data_dir, study = server
    repo = open_store(None, data_dir)
    episode = repo.list_episodes(study_id=study.id)[-1]
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.goto(f"{url}replay?episode={ref_key(ref_of(episode))}&step=0")
    page.get_by_text("Tags on this step").wait_for(timeout=60_000)
    wait_idle(page)
    box = page.locator('[data-testid="stSelectbox"]').filter(has=page.get_by_text("State", exact=True))
    assert box.locator("input").input_value() == "Completed"
    option = page.get_by_role("option", name="Rejected", exact=True)
    for _ in range(3):  # a click that lands while the page is still settling may not open the list
        box.locator("input").click()
        try:
            option.wait_for(timeout=5_000)
            break
        except PlaywrightTimeout:
            page.keyboard.press("Escape")
    option.click()
    wait_idle(page)
    page.get_by_role("button", name="Set state").click()
    page.get_by_text("State set to Rejected").wait_for(timeout=30_000)
    wait_idle(page)
    assert repo.get_episode(ref_of(episode)).state == 4  # STATE_REJECTED
    page.get_by_role("button", name="Undo my last change").click()
    page.get_by_text("Undid your last change").wait_for(timeout=30_000)
    wait_idle(page)
    assert repo.get_episode(ref_of(episode)).state == 1  # STATE_COMPLETED again
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=\"stSelectbox\"] input')]"
        ".some(i => i.getAttribute('aria-label') === 'State' && i.value === 'Completed')",
        timeout=10_000,
    )
    assert page.get_by_role("button", name="Set state").is_disabled()
    page.close()


@pytest.mark.skipif(
    not os.environ.get("STEPMARK_SCREENSHOTS"), reason="only when making the README screenshots"
)
def test_screenshots_of_the_other_pages(server, browser):
    url, data_dir, _ = server
    repo = open_store(None, data_dir)
    env_episode = next(e for e in repo.list_episodes() if e.metadata["kind"] == "env")
    repo.add_step_tag(ref_of(env_episode), 10, "jump", ALICE)
    repo.add_step_tag(ref_of(env_episode), 25, "fall", ALICE)
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.goto(f"{url}replay?episode={ref_key(ref_of(env_episode))}&step=10")
    page.get_by_text("Reward per step").wait_for(timeout=60_000)
    wait_idle(page)
    shot(page, "replay_env")
    for path, heading in (("studies", "Studies"), ("export", "Export"), ("record", "Record")):
        page.goto(url + path)
        page.get_by_role("heading", name=heading).wait_for(timeout=60_000)
        wait_idle(page)
        if path == "record":
            page.get_by_role("button", name="Start recording").click()
            page.get_by_text("Steps so far").wait_for(timeout=60_000)
            for n in range(1, 6):
                page.keyboard.press("ArrowRight")
                page.get_by_text(f"episode 0 · step {n}").wait_for(timeout=30_000)
        shot(page, path)
    page.close()

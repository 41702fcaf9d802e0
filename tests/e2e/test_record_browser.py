"""End to end in a real browser: `stepmark annotate` and the live recorder on the Record page, Debian chromium
driven by Playwright. Key presses become actions in order; Esc pauses; Enter starts the next episode; a closed
tab, a stopped server (SIGTERM) and a killed one (SIGKILL) all leave the steps recorded as an ABANDONED episode
whose files can be read, also after a restart. Counts, never times.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from annotator.launch import free_port
from pipelines.episodes import layout, open_episode
from pipelines.store import open_store
from protos.rlds_creator import study_pb2
from tests.annotator.annotator_data import ALICE, procgen_study_spec
from tests.e2e.browser import wait_healthy, wait_idle

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

State = study_pb2.Episode.State
KEYS = ["ArrowRight", "ArrowUp", "ArrowLeft", "ArrowDown", "d"]
REPO_ROOT = Path(__file__).resolve().parents[2]


class Server:
    """`stepmark annotate` on a free port over one data directory (restartable)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.process: subprocess.Popen | None = None
        self.url = ""
        self.starts = 0

    def start(self) -> None:
        port = free_port()
        self.starts += 1
        log = (self.data_dir / f"annotate-{self.starts}.log").open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stepmark",
                "annotate",
                "--data",
                str(self.data_dir),
                "--port",
                str(port),
                "--user",
                ALICE,
            ],  # fmt: skip
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
        )
        log.close()
        self.url = f"http://127.0.0.1:{port}/"
        wait_healthy(self.url, self.process)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def study_data(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("record")
    repo = open_store(None, data_dir)
    study = repo.create_study(procgen_study_spec(max_steps=0), ALICE)  # episodes end only when saved
    repo.close()
    return data_dir, study


@pytest.fixture(scope="module")
def server(study_data):
    srv = Server(study_data[0])
    srv.start()
    yield srv
    srv.stop()


def frame_attr(page, name: str) -> str:
    return page.locator(".lr-frame").get_attribute(f"data-{name}")


def wait_frame(page, state: str | None = None, step: int | None = None, episode: int | None = None) -> None:
    checks = []
    if state is not None:
        checks.append(f"f.dataset.state === '{state}'")
    if step is not None:
        checks.append(f"f.dataset.step === '{step}'")
    if episode is not None:
        checks.append(f"f.dataset.episode === '{episode}'")
    frame = page.locator(".lr-frame").element_handle(timeout=60_000)  # inside the component's shadow root
    page.wait_for_function(f"(f) => {' && '.join(checks)}", arg=frame, timeout=60_000)


def start_recording(browser, url: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}record")
    page.get_by_role("button", name="Start recording").click()
    page.locator(".lr-frame").wait_for(timeout=60_000)
    wait_frame(page, state="running", step=0)
    return page


def press(page, keys: list[str]) -> None:
    for key in keys:
        page.keyboard.press(key)
        page.wait_for_timeout(30)


def wait_episode(data_dir: Path, predicate, timeout: float = 60) -> study_pb2.Episode:
    """The first stored episode matching `predicate` (the server registers it a moment after the page goes)."""
    deadline = time.monotonic() + timeout
    while True:
        repo = open_store(None, data_dir)
        try:
            found = [e for e in repo.list_episodes() if predicate(e)]
        finally:
            repo.close()
        if found or time.monotonic() > deadline:
            assert found, "no such episode stored"
            return found[0]
        time.sleep(0.2)


def stored_keys(episode: study_pb2.Episode, data_dir: Path) -> list[list[str]]:
    with open_episode(episode, data_dir) as reader:
        assert len(reader) == episode.num_steps + 1
        return [reader.step(i).keys for i in range(episode.num_steps)]


def test_sync_presses_are_actions_in_order_esc_pauses_enter_starts_the_next(server, browser, study_data):
    data_dir, study = study_data
    page = start_recording(browser, server.url)
    assert page.locator(".lr-keys").inner_text().count("Arrow") == 4  # the key legend
    pressed = [KEYS[i % len(KEYS)] for i in range(30)]
    press(page, pressed)
    wait_frame(page, step=30)
    if folder := os.environ.get("STEPMARK_SCREENSHOTS"):  # docs/screenshots/record.png for the README
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / "record.png"), full_page=True)
    page.get_by_role("button", name="End episode…").click()
    page.get_by_role("button", name="Save episode").click()
    page.get_by_text("saved as Completed").wait_for(timeout=60_000)
    episode = wait_episode(data_dir, lambda e: e.state == State.STATE_COMPLETED)
    assert episode.num_steps == 30 and episode.study_id == study.id and episode.user.email == ALICE
    assert stored_keys(episode, data_dir) == [[k] for k in pressed]

    # Enter starts the next episode; Esc pauses: presses while paused are no actions.
    wait_frame(page, state="ready")
    page.keyboard.press("Enter")
    wait_frame(page, state="running", step=0, episode=1)
    page.keyboard.press("Escape")
    wait_frame(page, state="paused")
    press(page, ["ArrowRight"] * 3)
    page.keyboard.press("Escape")
    wait_frame(page, state="running")
    press(page, ["ArrowLeft"])
    wait_frame(page, step=1)
    page.get_by_role("button", name="End episode…").click()
    page.get_by_role("button", name="Reject episode").click()
    rejected = wait_episode(data_dir, lambda e: e.state == State.STATE_REJECTED)
    assert rejected.num_steps == 1 and stored_keys(rejected, data_dir) == [["ArrowLeft"]]
    page.close()


def test_gamepad_buttons_act_through_the_gamepad_api(server, browser, study_data):
    data_dir, _ = study_data
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # A standard-mapping pad whose d-pad right (button 15) the test presses and releases.
    page.add_init_script(
        """
        window.__pad = {id: "Test pad (STANDARD GAMEPAD)", index: 0, connected: true, mapping: "standard",
          axes: [0, 0, 0, 0], buttons: Array.from({length: 17}, () => ({pressed: false, value: 0}))};
        navigator.getGamepads = () => [window.__pad];
        window.__press = (i, down) => {
          window.__pad = {...window.__pad, buttons: window.__pad.buttons.map(
            (b, j) => j === i ? {pressed: down, value: down ? 1 : 0} : b)};
        };
        """
    )
    page.goto(f"{server.url}record")
    page.get_by_role("button", name="Start recording").click()
    page.locator(".lr-frame").wait_for(timeout=60_000)
    wait_frame(page, state="running", step=0)
    for n in range(1, 4):
        page.evaluate("() => window.__press(15, true)")
        wait_frame(page, step=n)
        page.evaluate("() => window.__press(15, false)")
        page.wait_for_timeout(50)
    page.get_by_role("button", name="Stop").click()
    page.get_by_role("button", name="Start recording").wait_for(timeout=60_000)
    episode = wait_episode(data_dir, lambda e: e.state == State.STATE_CANCELLED)
    assert episode.num_steps == 3 and episode.controller_id == "Test pad (STANDARD GAMEPAD)"
    with open_episode(episode, data_dir) as reader:
        assert [int(reader.step(i).action) for i in range(3)] == [7, 7, 7]  # Procgen RIGHT
    page.close()


def test_typing_in_a_text_box_never_acts(server, browser):
    page = start_recording(browser, server.url)
    wait_idle(page)
    box = page.locator("input").first  # the quality selectbox's text input
    box.click()
    page.keyboard.type("dd")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Escape")
    page.locator(".lr-recorder").click(position={"x": 5, "y": 5})  # focus back on the page
    press(page, ["ArrowUp"])
    wait_frame(page, step=1)
    assert frame_attr(page, "step") == "1"
    page.close()


def test_closed_tab_and_stopped_server_keep_abandoned_episodes_across_restarts(server, browser, study_data):
    data_dir, _ = study_data
    page = start_recording(browser, server.url)
    press(page, KEYS[:5])
    wait_frame(page, step=5)
    page.close()
    closed = wait_episode(data_dir, lambda e: e.state == State.STATE_ABANDONED and e.num_steps == 5)
    assert stored_keys(closed, data_dir) == [[k] for k in KEYS[:5]]

    # A server stopped (SIGTERM) mid-recording closes the recording as ABANDONED before it exits.
    page = start_recording(browser, server.url)
    press(page, KEYS[:4])
    wait_frame(page, step=4)
    server.stop(signal.SIGTERM)
    page.close()
    assert server.process.returncode is not None
    stopped = wait_episode(
        data_dir, lambda e: e.state == State.STATE_ABANDONED and e.num_steps == 4, timeout=5
    )
    assert stored_keys(stopped, data_dir) == [[k] for k in KEYS[:4]]

    # A restarted server still has both, files readable.
    server.start()
    for episode in (closed, stopped):
        kept = wait_episode(data_dir, lambda e, i=episode.id: e.id == i)
        assert kept.state == State.STATE_ABANDONED
        assert len(stored_keys(kept, data_dir)) == episode.num_steps


def test_killed_server_leaves_a_recording_the_next_start_registers(server, browser, study_data):
    data_dir, _ = study_data
    page = start_recording(browser, server.url)
    press(page, KEYS * 2)
    wait_frame(page, step=10)
    writers = psutil.Process(server.process.pid).children(recursive=True)
    server.stop(signal.SIGKILL)
    page.close()
    psutil.wait_procs(writers, timeout=60)  # the writer child closes the files when its input ends
    [temp] = [t for t in layout.temp_folders(data_dir) if layout.temp_pid(t) == server.process.pid]
    server.start()  # recovery registers it at start
    episode = wait_episode(data_dir, lambda e: "interrupted" in e.metadata.fields)
    assert not temp.exists() and episode.state == State.STATE_ABANDONED
    # The transition after the last frame is held back for the save flow: 9 of 10 reached the files.
    assert episode.num_steps == 9 and stored_keys(episode, data_dir) == [[k] for k in (KEYS * 2)[:9]]


def test_nethack_gets_esc_and_shift_esc_pauses(browser, tmp_path):
    """NetHack uses Esc itself (cancel a prompt, close a menu): while recording it, Esc is the game's action and
    Shift+Esc pauses; paused, Esc resumes as everywhere."""
    repo = open_store(None, tmp_path)
    spec = study_pb2.StudySpec(name="NetHack practice", description="NetHack by hand")
    env = spec.environment_specs.add(id="nethack", name="NetHack", sync=True, max_episode_steps=0)
    env.net_hack.id = "NetHackChallenge-v0"  # the full action set, Esc included (NetHackScore has no Esc)
    repo.create_study(spec, ALICE)
    repo.close()
    srv = Server(tmp_path)
    srv.start()
    try:
        page = start_recording(browser, srv.url)
        assert "Escape" in page.locator(".lr-keys").inner_text()
        page.keyboard.press("Escape")
        wait_frame(page, state="running", step=1)  # an action, not a pause
        page.keyboard.press("Shift+Escape")
        wait_frame(page, state="paused")
        press(page, ["k"] * 2)  # nothing while paused
        page.keyboard.press("Escape")
        wait_frame(page, state="running")
        press(page, ["Escape", "k"])
        wait_frame(page, step=3)
        page.get_by_role("button", name="End episode…").click()
        page.get_by_role("button", name="Save episode").click()
        page.get_by_text("saved as Completed").wait_for(timeout=60_000)
        episode = wait_episode(tmp_path, lambda e: e.state == State.STATE_COMPLETED)
        assert stored_keys(episode, tmp_path) == [["Escape"], ["Escape"], ["k"]]
        page.close()
    finally:
        srv.stop()

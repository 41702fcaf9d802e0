"""Live recording in a real browser: frames shown per second vs the set fps, and the server's memory.

Starts `stepmark annotate` over a fresh data dir with async Atari (Pong) and Procgen (coinrun) studies, opens the
Record page in Debian chromium (Playwright), starts a recording, holds ArrowRight down and counts, from the page,
the frames drawn (`data-shown`) and the steps recorded (`data-step`) over a window, at each fps. Then records 3
episodes one after another (tab closed at the end of each, so each is kept as ABANDONED) and prints the server's
RSS (and with its writer children) before, during and after each, once the session has ended.
Targets: frames shown >= 0.9 of the set fps up to 30; RSS after a session back near the level before it.

    .venv/bin/python bench/bench_browser_record.py [--seconds 6] [--fps 15 30] [--families atari procgen]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from annotator.launch import free_port  # noqa: E402
from pipelines.store import open_store  # noqa: E402
from protos.rlds_creator import study_pb2  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]  # fmt: skip
USER = "bench@example.com"


def make_studies(data_dir: Path) -> dict[str, str]:
    """One async study per family (episodes long enough not to end in the window): family -> study name."""
    repo = open_store(None, data_dir)
    names = {}
    for family in ("atari", "procgen"):
        spec = study_pb2.StudySpec(name=f"bench {family}", description="bench")
        env = spec.environment_specs.add(id=family, name=family, sync=False, max_episode_steps=0)
        if family == "atari":
            env.atari.id = "Pong"
        else:
            env.procgen.id = "coinrun"
        repo.create_study(spec, USER)
        names[family] = spec.name
    repo.close()
    return names


def rss_mb(pid: int) -> tuple[float, float]:
    """RSS of the server, and of the server with its children (writer processes), in MB."""
    proc = psutil.Process(pid)
    own = proc.memory_info().rss
    total = own + sum(c.memory_info().rss for c in proc.children(recursive=True) if c.is_running())
    return own / 2**20, total / 2**20


def frame_data(page) -> dict[str, str]:
    return page.locator(".lr-frame").evaluate("f => ({...f.dataset})")


def wait_state(page, state: str) -> None:
    frame = page.locator(".lr-frame").element_handle(timeout=120_000)
    page.wait_for_function(f"(f) => f.dataset.state === '{state}'", arg=frame, timeout=120_000)


def open_recording(browser, url: str, study: str, fps: int | None):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}record")
    page.get_by_role("combobox").first.wait_for(timeout=60_000)
    page.locator("[data-testid=stSelectbox]").first.click()
    page.get_by_role("option", name=study).click()
    if fps:
        slider = page.get_by_role("slider")
        slider.wait_for(timeout=30_000)
        slider.focus()
        slider.press("Home")  # 1 fps, then one step up per press
        for _ in range(fps - 1):
            slider.press("ArrowRight")
        page.wait_for_timeout(1000)
    page.get_by_role("button", name="Start recording").click()
    page.locator(".lr-frame").wait_for(timeout=120_000)
    wait_state(page, "paused")  # an async recording waits for the player
    page.keyboard.press("Enter")
    wait_state(page, "running")
    return page


def measure_fps(browser, url: str, study: str, fps: int, seconds: float) -> tuple[float, float]:
    page = open_recording(browser, url, study, fps)
    page.keyboard.down("ArrowRight")
    page.wait_for_timeout(1000)  # warm-up
    a = frame_data(page)
    t0 = time.perf_counter()
    page.wait_for_timeout(seconds * 1000)
    b = frame_data(page)
    elapsed = time.perf_counter() - t0
    page.keyboard.up("ArrowRight")
    page.close()
    shown = (int(b["shown"]) - int(a["shown"])) / elapsed
    steps = (int(b["step"]) - int(a["step"])) / elapsed
    return shown, steps


def wait_sessions_closed(data_dir: Path, count: int, timeout: float = 120) -> None:
    """Until `count` ABANDONED episodes are stored (each closed tab's session has ended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        repo = open_store(None, data_dir)
        n = sum(1 for e in repo.list_episodes() if e.state == study_pb2.Episode.STATE_ABANDONED)
        repo.close()
        if n >= count:
            return
        time.sleep(0.5)
    raise SystemExit(f"sessions did not close in {timeout}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--fps", type=int, nargs="+", default=[15, 30])
    parser.add_argument("--families", nargs="+", default=["atari", "procgen"])
    parser.add_argument("--memory-seconds", type=float, default=8.0)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    data_dir = Path(tempfile.mkdtemp(prefix="bench-browser-record-"))
    names = make_studies(data_dir)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    log = (data_dir / "annotate.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "stepmark", "annotate", "--data", str(data_dir), "--port",
                               str(port), "--user", USER], stdout=log, stderr=subprocess.STDOUT, cwd=REPO)  # fmt: skip
    try:
        from tests.e2e.test_annotator_browser import wait_healthy

        wait_healthy(url, server)
        at_start = rss_mb(server.pid)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            print(f"async recording, ArrowRight held, {args.seconds:g} s window (2 cores shared)")
            print(f"{'family':<8} {'set fps':>7} {'shown/s':>8} {'steps/s':>8} {'shown/set':>9}")
            for family in args.families:
                for fps in args.fps:
                    shown, steps = measure_fps(browser, url, names[family], fps, args.seconds)
                    print(f"{family:<8} {fps:>7} {shown:>8.1f} {steps:>8.1f} {shown / fps:>9.2f}")
            wait_sessions_closed(data_dir, len(args.families) * len(args.fps))
            time.sleep(1)
            base = rss_mb(server.pid)
            print(f"\nserver RSS (MB, own / with children), Procgen at 30 fps, {args.memory_seconds:g} s each")
            print(f"at server start: {at_start[0]:.0f}; after the fps runs above (imports, caches): "
                  f"{base[0]:.0f} / {base[1]:.0f}")  # fmt: skip
            closed = len(args.families) * len(args.fps)
            for i in range(3):
                page = open_recording(browser, url, names["procgen"], 30)
                page.keyboard.down("ArrowRight")
                page.wait_for_timeout(args.memory_seconds * 1000)
                during = rss_mb(server.pid)
                page.close()
                closed += 1
                wait_sessions_closed(data_dir, closed)
                time.sleep(1)
                after = rss_mb(server.pid)
                print(f"recording {i + 1}: during {during[0]:.0f} / {during[1]:.0f}, "
                      f"after {after[0]:.0f} / {after[1]:.0f}")  # fmt: skip
            browser.close()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


if __name__ == "__main__":
    main()

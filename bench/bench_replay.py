"""Replay where the annotator is: in chromium, with real key timing, against `stepmark annotate`.

Builds a fresh data dir (a 1,000-step Procgen episode recorded with the recorder, and a UI episode converted from
../shared/fixtures/droidbot), starts the annotator, and measures in Debian chromium (Playwright):
  - key -> frame: from the keydown event to the first paint after the player drew that step's frame, over
    N ArrowRight presses at a human pace and at a fast pace (p50/p95; target p95 < 50 ms), on both episodes;
  - steps/s achieved by autoplay at 5, 15 and 30 fps (target: the requested rate; printed as a ratio);
  - live updates: a tag posted in one browser until it is shown in another (polling interval 1 s; target < 2 s);
  - server RSS before and after.
All figures come from one run, side by side; nothing is asserted (this machine is shared and noisy).

    .venv/bin/python bench/bench_replay.py [--steps 1000] [--presses 100]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
FIXTURES = Path(os.environ.get("STEPMARK_FIXTURES", REPO.parent / "shared" / "fixtures"))
USER = "bench@example.com"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip

# Installed in the page: key -> paint latencies of ArrowRight presses, and a count of frames drawn.
PROBE_JS = """() => {
  let frame = null;
  for (const h of document.querySelectorAll('*')) {
    const f = h.shadowRoot && h.shadowRoot.querySelector('.sm-frame');
    if (f) { frame = f; break; }
  }
  const note = frame.querySelector('.sm-frame-note');
  window.__lat = []; window.__drawn = 0; window.__pending = [];
  // On window, capturing: runs before the player's own listener (on document) moves the step.
  window.addEventListener('keydown', e => {
    if (e.key === 'ArrowRight' && !e.repeat) window.__pending.push([e.timeStamp, Number(frame.dataset.step) + 1]);
  }, true);
  const check = () => {
    if (note.textContent) return;  // still loading
    window.__drawn++;
    const step = Number(frame.dataset.step);
    while (window.__pending.length && window.__pending[0][1] <= step) {
      const [t] = window.__pending.shift();
      requestAnimationFrame(() => window.__lat.push(performance.now() - t));
    }
  };
  new MutationObserver(check).observe(frame, {attributes: true, attributeFilter: ['data-step']});
  new MutationObserver(check).observe(note, {childList: true, characterData: true, subtree: true});
}"""


def pct(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def build(data_dir: Path, steps: int) -> tuple[str, str | None]:
    from annotator.operations import ref_key
    from annotator.recorder import record_batch
    from pipelines.store import open_store
    from protos.rlds_creator import study_pb2

    repo = open_store(None, data_dir)
    spec = study_pb2.StudySpec(name=f"bench {steps}")
    env = spec.environment_specs.add(id="coinrun", sync=True, max_episode_steps=steps)
    env.procgen.id = "coinrun"
    env.procgen.rand_seed = 1
    study = repo.create_study(spec, USER)
    (episode,) = record_batch(repo, data_dir, study.id, "coinrun", 1, "noop", user=USER, seed=1, progress=False)
    print(f"recorded a {episode.num_steps}-step Procgen episode", flush=True)
    ui = None
    try:
        from pipelines import convert, ui_import

        out = data_dir / "converted"
        convert.run([str(FIXTURES / "droidbot"), str(out), "--runner=FnApiRunner"])
        ui_study = ui_import.import_ui(repo, str(out), "bench ui", USER)
        ui = ref_key(repo.ref(repo.list_episodes(study_id=ui_study.id)[0]))
    except Exception as exc:  # noqa: BLE001 - the environment figures still stand
        print(f"UI episode not measured: {exc}", flush=True)
    return ref_key(repo.ref(episode)), ui


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def start_server(data_dir: Path) -> tuple[subprocess.Popen, str]:
    from annotator.launch import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepmark", "annotate", "--data", str(data_dir), "--port", str(port), "--user", USER],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    for _ in range(180):
        try:
            with urllib.request.urlopen(url + "_stcore/health", timeout=2) as r:
                if r.read() == b"ok":
                    return proc, url
        except OSError:
            time.sleep(0.5)
    raise SystemExit("annotator did not start")


def open_player(browser, url: str, key: str):
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.goto(f"{url}replay?episode={key}&step=0")
    page.locator(".sm-frame[data-step='0']").wait_for(timeout=120_000)
    page.wait_for_function(
        "() => [...document.querySelectorAll('*')].some(h => h.shadowRoot &&"
        " h.shadowRoot.querySelector('.sm-frame-note') && !h.shadowRoot.querySelector('.sm-frame-note').textContent)",
        timeout=60_000,
    )
    page.evaluate(PROBE_JS)
    page.locator(".sm-frame").click()
    return page


def key_to_frame(browser, url: str, key: str, presses: int, gap_ms: int) -> list[float]:
    page = open_player(browser, url, key)
    page.wait_for_timeout(1500)  # let the first prefetch settle, as a person would look at the first frame
    for _ in range(presses):
        page.keyboard.press("ArrowRight")
        page.wait_for_timeout(gap_ms)
    page.wait_for_timeout(500)
    values = page.evaluate("() => window.__lat")
    page.close()
    return values


def autoplay(browser, url: str, key: str, fps: int, seconds: float = 4.0) -> float:
    page = open_player(browser, url, key)
    page.locator(".sm-fps-input").fill(str(fps))
    page.locator(".sm-fps-input").dispatch_event("change")
    page.wait_for_timeout(1000)
    page.locator(".sm-frame").click()
    page.keyboard.press("Space")
    page.wait_for_timeout(500)  # past the start
    before = page.evaluate("() => window.__drawn")
    page.wait_for_timeout(seconds * 1000)
    drawn = page.evaluate("() => window.__drawn") - before
    page.keyboard.press("Space")
    page.close()
    return drawn / seconds


def live_update(browser, url: str, key: str) -> float:
    watcher = open_player(browser, url, key)
    actor = open_player(browser, url, key)
    label = f"live {time.time():.0f}"
    actor.locator(".sm-step-input").fill(label)
    start = time.perf_counter()
    actor.get_by_role("button", name="Tag step").click()
    watcher.locator(".sm-step-chips .sm-chip").filter(has_text=label).wait_for(timeout=30_000)
    elapsed = time.perf_counter() - start
    watcher.close()
    actor.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--presses", type=int, default=100)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        env_key, ui_key = build(data_dir, args.steps)
        proc, url = start_server(data_dir)
        try:
            rss_before = rss_mb(proc.pid)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
                rows = []
                for name, key in (("procgen 1,000 steps", env_key), ("UI (droidbot)", ui_key)):
                    if key is None:
                        continue
                    presses = args.presses if name.startswith("procgen") else 30
                    for gap in (100, 30):
                        values = key_to_frame(browser, url, key, presses, gap)
                        p50, p95 = pct(values)
                        rows.append((name, gap, len(values), presses, p50, p95))
                print("\nkey -> frame painted (target p95 < 50 ms)")
                print(f"{'episode':22} {'gap':>6} {'frames/presses':>15} {'p50 ms':>8} {'p95 ms':>8} {'p95/50ms':>9}")
                for name, gap, got, presses, p50, p95 in rows:
                    print(f"{name:22} {gap:>4}ms {got:>7}/{presses:<7} {p50:8.1f} {p95:8.1f} {p95 / 50:9.2f}")
                print("\nautoplay (target: the requested fps)")
                for fps in (5, 15, 30):
                    rate = autoplay(browser, url, env_key, fps)
                    print(f"  set {fps:2d} fps: {rate:5.1f} steps/s shown, ratio {rate / fps:.2f}")
                print(f"\nlive update to another browser: {live_update(browser, url, env_key):.2f} s (target < 2 s)")
                browser.close()
            print(f"\nserver RSS: {rss_before:.0f} MB at start, {rss_mb(proc.pid):.0f} MB after the runs")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()

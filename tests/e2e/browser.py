"""What the browser tests share: Debian chromium and its flags, waiting for the annotator to answer and for
Streamlit to finish a run, picking a select box's option."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


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


def wait_idle(page) -> None:
    """Until Streamlit has finished the current run (its status widget says 'Running...' meanwhile)."""
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=30_000
    )


def choose_option(page, label: str, option: str, kind: str = "stSelectbox", close: bool = False) -> None:
    """Pick an option of the Streamlit selectbox (or multiselect: `kind="stMultiSelect"`) labelled `label`; a
    click that lands while the page is still settling may not open the list, so it is tried again. `close`:
    press Escape afterwards (a multiselect's list stays open)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    box = page.locator(f'[data-testid="{kind}"]').filter(has=page.get_by_text(label, exact=True))
    choice = page.get_by_role("option", name=option, exact=True)
    for _ in range(5):
        box.locator("input").click()
        try:
            choice.wait_for(timeout=5_000)
            break
        except PlaywrightTimeout:
            page.keyboard.press("Escape")
    choice.click()
    if close:
        page.keyboard.press("Escape")


def stop(process: subprocess.Popen) -> None:
    """SIGTERM (the annotator closes live recordings then), SIGKILL if it has not exited after 20 s."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


@contextlib.contextmanager
def annotate_server(data_dir: Path, *args: str, port: int | None = None) -> Iterator[str]:
    """`stepmark annotate --data DATA_DIR ARGS` on a free loopback port, its output in DATA_DIR/annotate.log;
    yields its URL once healthy and stops it afterwards."""
    from annotator.launch import free_port

    port = port or free_port()
    with (Path(data_dir) / "annotate.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "stepmark", "annotate", "--data", str(data_dir), "--port", str(port), *args],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}/"
        try:
            wait_healthy(url, process)
            yield url
        finally:
            stop(process)

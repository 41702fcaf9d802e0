"""What the browser tests share: Debian chromium and its flags, waiting for the annotator to answer and for
Streamlit to finish a run."""

from __future__ import annotations

import subprocess
import time
import urllib.request

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

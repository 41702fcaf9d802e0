"""Browser tests: one chromium per test module (Playwright driving Debian's chromium, never a downloaded one)."""

from __future__ import annotations

import pytest

from tests.e2e.browser import CHROMIUM, CHROMIUM_FLAGS


@pytest.fixture(scope="module")
def browser():
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield b
        b.close()

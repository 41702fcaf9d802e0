"""Login as shipped: `stepmark annotate --login-config FILE` against a local OpenID provider (oidc-provider-mock on
127.0.0.1), in chromium. A logged-out visitor reaches no data; after logging in, a tag made in the player is
stored under the logged-in e-mail, in the store and in the audit log."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from annotator.launch import free_port
from annotator.operations import ref_key, ref_of
from annotator.web import identity
from pipelines.store import open_store
from tests.annotator.annotator_data import build_env_data
from tests.e2e.browser import CHROMIUM, CHROMIUM_FLAGS, annotate_server, stop
from tests.e2e.test_annotator_browser import FRAME_STEP_JS

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CAROL = "carol@example.com"
REPO = Path(__file__).resolve().parents[2]


def _wait_http(url: str, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{url}: the process exited with {process.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"nothing answered at {url}")


@pytest.fixture(scope="module")
def login_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("login")
    data = build_env_data(tmp / "data", episodes=1, max_steps=15)
    provider_port, port = free_port(), free_port()
    provider = subprocess.Popen(
        [sys.executable, "-m", "oidc_provider_mock", "--host", "127.0.0.1", "--port", str(provider_port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    issuer = f"http://127.0.0.1:{provider_port}"
    config = tmp / "login.toml"
    config.write_text(
        "[auth]\n"
        f'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
        f'cookie_secret = "{secrets.token_hex(16)}"\n'
        'client_id = "stepmark-annotator"\n'
        'client_secret = "not-a-real-secret"\n'
        f'server_metadata_url = "{issuer}/.well-known/openid-configuration"\n',
        encoding="utf-8",
    )
    try:
        _wait_http(issuer + "/.well-known/openid-configuration", provider)
        with annotate_server(data.data_dir, "--login-config", str(config), port=port) as url:
            yield url, data
    finally:
        stop(provider)


def test_log_in_with_openid_connect_then_tag_a_step_under_the_logged_in_email(login_server):
    playwright_api = pytest.importorskip("playwright.sync_api")
    url, data = login_server
    episode = data.episodes[0]
    key = ref_key(ref_of(episode))
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        # A remembered typed name (valid for this data folder's key) means nothing under OIDC login.
        remembered = identity.sign("mallory@example.com", identity.secret(str(data.data_dir)))
        page.context.add_cookies([{"name": identity.COOKIE, "value": remembered, "url": url}])
        page.goto(f"{url}replay?episode={key}&step=0")
        login = page.get_by_role("button", name="Log in")
        login.wait_for(timeout=60_000)
        # Logged out: no episode data on the page, no player, no token to call the routes with.
        assert page.locator(".sm-frame").count() == 0
        assert "Coinrun practice" not in page.content() and "mallory" not in page.content()
        login.click()
        page.locator("input[name=sub]").wait_for(timeout=30_000)  # the provider's own page
        page.locator("input[name=sub]").fill(CAROL)
        page.get_by_role("button", name="Authorize").click()
        page.get_by_text(f"Signed in as {CAROL}").wait_for(timeout=60_000)

        page.goto(f"{url}replay?episode={key}&step=0")
        page.wait_for_function(f"() => ({FRAME_STEP_JS})() === 0", timeout=60_000)
        page.locator(".sm-frame").click()
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowRight")
        page.locator(".sm-step-input").fill("seen by carol")
        page.get_by_role("button", name="Tag step").click()
        page.locator(".sm-message").filter(has_text="Tagged step 2").wait_for(timeout=30_000)
        browser.close()
    repo = open_store(None, data.data_dir)
    stored = repo.get_episode(ref_of(episode))
    assert [t.label for t in stored.step_metadata[2].tags] == ["seen by carol"]
    entry = repo.audit_log(ref_of(episode))[0]
    assert (entry.user, entry.action, entry.step_index) == (CAROL, "step.tag.add", 2)


def test_a_bad_login_configuration_is_refused_with_the_file_and_key_named(tmp_path):
    config = tmp_path / "login.toml"
    config.write_text('[auth]\nredirect_uri = "http://127.0.0.1:1/oauth2callback"\ncookie_secret = "x"\n')
    result = subprocess.run(
        [sys.executable, "-m", "stepmark", "annotate", "--data", str(tmp_path / "d"), "--login-config", str(config)],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0
    assert str(config) in result.stderr and "client_id" in result.stderr
    assert "Traceback" not in result.stderr

"""Issue 35 item 1: without --login-config the typed name survives a reload, a deep link and a new tab of the same
browser (a signed, HttpOnly cookie of the annotator's server); another browser, "not you?" and a tampered cookie
ask again. Real `stepmark annotate`, real chromium."""

from __future__ import annotations

import os
import re
import secrets
import stat
import time

import pytest

from annotator.operations import ref_key, ref_of
from annotator.web import identity
from pipelines.store import open_store
from tests.annotator.annotator_data import build_env_data
from tests.e2e.browser import annotate_server
from tests.e2e.test_annotator_browser import FRAME_STEP_JS

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DANA = "dana@example.com"
VIEWPORT = {"width": 1500, "height": 1000}


def _identity_cookie(context) -> dict | None:
    return next((c for c in context.cookies() if c["name"] == identity.COOKIE), None)


def _wait_cookie(context, present: bool, timeout: float = 30) -> dict | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cookie = _identity_cookie(context)
        if (cookie is not None) == present:
            return cookie
        time.sleep(0.2)
    raise AssertionError(f"the identity cookie was {'never set' if present else 'not cleared'}")


def _asked(page) -> None:
    """The page asks who is annotating (and shows no one's name)."""
    page.get_by_role("textbox", name="Your name or e-mail").wait_for(timeout=60_000)
    page.get_by_text(re.compile("Tell us who you are")).wait_for()
    page.get_by_text("Annotating as").wait_for(state="detached", timeout=30_000)


def _annotating_as(page, name: str) -> None:
    page.get_by_text("Annotating as").wait_for(timeout=60_000)
    assert name in page.locator('[data-testid="stSidebar"]').inner_text()
    page.get_by_role("textbox", name="Your name or e-mail").wait_for(state="detached", timeout=30_000)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = build_env_data(tmp_path_factory.mktemp("identity"), episodes=1, max_steps=15)
    with annotate_server(data.data_dir) as url:
        yield url, data


def test_a_typed_name_survives_reload_and_deep_link_until_not_you(server, browser):
    url, data = server
    episode = data.episodes[0]
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(url)
    _asked(page)
    name = page.get_by_role("textbox", name="Your name or e-mail")
    name.fill(DANA)
    name.press("Enter")
    _annotating_as(page, DANA)
    cookie = _wait_cookie(context, present=True)
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Lax", "/")
    assert DANA not in cookie["value"]  # signed, not the bare name a page could write
    key_file = data.data_dir / identity.SECRET_FILE
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600

    # A reload is a new Streamlit session: still Dana, no question.
    page.reload()
    _annotating_as(page, DANA)
    page.get_by_role("heading", name="Episodes", exact=True).wait_for(timeout=60_000)

    # A deep link in a new tab of the same browser opens its episode at its step at once, as Dana.
    link = context.new_page()
    link.goto(f"{url}replay?episode={ref_key(ref_of(episode))}&step=3")
    link.wait_for_function(f"() => ({FRAME_STEP_JS})() === 3", timeout=60_000)
    _annotating_as(link, DANA)
    link.get_by_label("Tag for the step on screen").fill("seen by dana")
    link.get_by_role("button", name="Tag step").click()
    link.locator(".sm-message").filter(has_text="Tagged step 3").wait_for(timeout=30_000)
    repo = open_store(None, data.data_dir)
    assert [t.label for t in repo.get_episode(ref_of(episode)).step_metadata[3].tags] == ["seen by dana"]
    entry = repo.audit_log(ref_of(episode))[0]
    assert (entry.user, entry.action, entry.step_index) == (DANA, "step.tag.add", 3)
    link.close()

    # Another browser (a new context: no cookie) is asked.
    other = browser.new_context(viewport=VIEWPORT)
    other_page = other.new_page()
    other_page.goto(url)
    _asked(other_page)
    other.close()

    # "not you?" forgets the name here and in the browser: asked again, after a reload too.
    page.get_by_role("button", name="not you?").click()
    _asked(page)
    _wait_cookie(context, present=False)
    page.reload()
    _asked(page)
    context.close()


def test_a_tampered_or_foreign_cookie_is_ignored(server, browser):
    url, data = server
    good = identity.sign(DANA, identity.secret(str(data.data_dir)))  # the server's own key: this one is valid
    payload, _, signature = good.rpartition(".")
    flipped = payload + "." + ("A" if signature[0] != "A" else "B") + signature[1:]
    foreign = identity.sign("mallory@example.com", secrets.token_bytes(32))  # signed with another key
    # Another name's payload with Dana's signature (the payload comes first, up to the first dot).
    swapped = foreign.split(".")[0] + good[len(good.split(".")[0]) :]
    for value in (flipped, foreign, swapped, "junk"):
        context = browser.new_context(viewport=VIEWPORT)
        context.add_cookies([{"name": identity.COOKIE, "value": value, "url": url}])
        page = context.new_page()
        page.goto(url)
        _asked(page)
        assert "mallory" not in page.content()
        context.close()
    # The valid one is taken (so the refusals above are the signature's doing, not a missing cookie).
    context = browser.new_context(viewport=VIEWPORT)
    context.add_cookies([{"name": identity.COOKIE, "value": good, "url": url}])
    page = context.new_page()
    page.goto(url)
    _annotating_as(page, DANA)
    context.close()

"""A study's own fields in chromium (issue 26): an annotator fills the fields of three steps of a UI episode
(converted from ../shared/fixtures/droidbot) with the keyboard only, reloads, and finds the values in the form,
in the store and in a Parquet export; a second annotator's values give the agreement the Quality page shows."""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest

from annotator.operations import ref_of
from pipelines import export
from pipelines.store import field_agreement, open_store
from pipelines.store import field_values as fv
from pipelines.store.field_defs import parse_text
from tests.annotator.annotator_data import ALICE, BOB, import_ui_fixtures
from tests.e2e.browser import annotate_server, wait_idle
from tests.e2e.test_annotator_browser import FRAME_STEP_JS, open_replay, player_message, wait_store

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
FIELDS = """
fields:
  - {name: instruction, scope: step, kind: text, guideline: "What the user asked for at <b>this</b> step"}
  - {name: action_correct, scope: step, kind: choice, options: [yes, no, unsure], keys: [y, n, u]}
  - {name: task_success, scope: episode, kind: boolean}
  - {name: problems, scope: segment, kind: multi_choice, options: [slow, loop]}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory, fixtures_dir):
    data_dir = tmp_path_factory.mktemp("e2e_fields")
    study = import_ui_fixtures(data_dir, fixtures_dir)
    repo = open_store(None, data_dir)
    fv.define(repo, study.id, parse_text(FIELDS, "fields.yaml"), ALICE)
    (episode,) = repo.list_episodes(study_id=study.id)
    model = data_dir / "model.jsonl"  # a model's instruction for step 1: a suggestion to accept with one key
    model.write_text(json.dumps({"episode": episode.id, "step": 1, "field": "instruction",
                                 "value": "open the settings", "source": "model-x"}) + "\n")  # fmt: skip
    fv.import_values(repo, study.id, model, ALICE)
    with annotate_server(data_dir, "--user", ALICE) as url:
        yield url, data_dir, repo, study, episode
    repo.close()


SENT_JS = """
window.smSent = [];
const smFetch = window.fetch;
window.fetch = function (url, options) {
  if (options && options.method === "POST" && String(url).includes("/api/fields/")) {
    window.smSent.push(`${JSON.parse(options.body).field}@${String(url).split("/").pop()}`);
  }
  return smFetch.apply(this, arguments);
};
"""


def form_title(page, step: int) -> None:
    page.locator(".sm-fields .sm-h").filter(has_text=re.compile(f"^Fields of step {step}$")).wait_for(timeout=30_000)


def focused_field(page) -> str | None:
    return page.evaluate("""() => {
      let a = document.activeElement;
      while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
      return a && a.dataset ? a.dataset.field || null : null;
    }""")


def alices(repo, episode) -> dict:
    return {(v.field, v.step): (v.value, v.origin) for v in fv.values(repo, [episode.id], user=ALICE).get(episode.id, [])}


def test_fill_three_steps_by_keyboard_reload_export_and_agreement(server, browser, tmp_path):
    url, data_dir, repo, study, episode = server
    page = open_replay(browser, url, episode, 0)
    form_title(page, 0)
    # text from the study's file is shown as text, never as markup
    assert page.locator(".sm-f-guideline").first.inner_text() == "What the user asked for at <b>this</b> step"
    assert page.locator(".sm-f-guideline b").count() == 0
    kb = page.keyboard
    page.locator(".sm-frame").click()
    kb.press("f")  # focus the form: the player's keys rest
    assert focused_field(page) == "instruction"
    kb.type("open the app drawer")  # typed text never moves the player (f, n, digits, space)
    kb.press("Enter")  # saves the text, next field
    assert focused_field(page) == "action_correct"
    kb.press("y")
    kb.press("Control+Enter")  # save and next step
    form_title(page, 1)
    assert page.evaluate(FRAME_STEP_JS) == 1 and focused_field(page) == "instruction"
    # step 1: the model's suggestion is in the box; Enter keeps it
    assert page.locator('.sm-fields input[data-field="instruction"]').input_value() == "open the settings"
    kb.press("Enter")
    kb.press("n")
    kb.press("Tab")
    assert focused_field(page) == "task_success"
    kb.press("y")  # the episode's field
    kb.press("Control+Enter")
    form_title(page, 2)
    kb.type("scroll down")
    kb.press("Tab")
    kb.press("u")
    kb.press("Control+Enter")
    form_title(page, 3)
    wait_store(lambda: len(alices(repo, episode)) == 7)
    assert alices(repo, episode) == {
        ("instruction", 0): ("open the app drawer", "scratch"), ("action_correct", 0): ("yes", "scratch"),
        ("instruction", 1): ("open the settings", "accepted"), ("action_correct", 1): ("no", "scratch"),
        ("task_success", -1): (True, "scratch"),
        ("instruction", 2): ("scroll down", "scratch"), ("action_correct", 2): ("unsure", "scratch"),
    }  # fmt: skip

    # After a reload the form shows the stored values of the step on screen
    page.wait_for_url(re.compile(r"[?&]step=3\b"), timeout=30_000)  # the URL names the step on screen
    page.reload()
    page.wait_for_function(f"() => ({FRAME_STEP_JS})() === 3", timeout=60_000)
    page.locator(".sm-frame").click()
    kb.press("ArrowLeft")
    form_title(page, 2)
    assert page.locator('.sm-fields input[data-field="instruction"]').input_value() == "scroll down"
    pressed = page.locator('.sm-fields [data-field="action_correct"] [aria-pressed="true"]')
    assert pressed.inner_text() == "u unsure"
    assert page.locator(".sm-f-note").first.inner_text() == "saved (scratch)"
    # Ctrl+Z undoes her last change (the choice on step 2), Ctrl+Shift+Z redoes it, as for tags
    kb.press("Control+z")
    player_message(page, "Undid: field 'action_correct' set to 'unsure' on step 2")
    wait_store(lambda: ("action_correct", 2) not in alices(repo, episode))
    kb.press("Control+Shift+z")
    wait_store(lambda: alices(repo, episode).get(("action_correct", 2)) == ("unsure", "scratch"))
    page.close()

    out = tmp_path / "parquet"
    request = export.ExportRequest(data_dir=str(data_dir), out=str(out), format="parquet", study_id=study.id,
                                   annotations="mine", user=ALICE)  # fmt: skip
    assert not export.export_episodes(request).dead_letters
    rows = sorted(pq.read_table(out / "data").to_pylist(), key=lambda r: r["step_index"])
    assert [r["field:instruction"] for r in rows[:4]] == ["open the app drawer", "open the settings", "scroll down", ""]
    assert [r["field:instruction:origin"] for r in rows[:3]] == ["scratch", "accepted", "scratch"]
    assert [r["field:action_correct"] for r in rows[:3]] == ["yes", "no", "unsure"]
    assert all(r["field:task_success"] is True for r in rows)

    # A second annotator: the Quality page shows the agreement the store computes
    for step, value in ((0, "yes"), (1, "yes"), (2, "unsure")):
        fv.set_value(repo, ref_of(episode), "action_correct", BOB, value, step=step)
    fv.set_value(repo, ref_of(episode), "instruction", BOB, "open app drawer", step=0)
    expected = {f.field: f for f in field_agreement.study_field_agreement(repo, study.id)}
    alpha = expected["action_correct"].alpha
    assert expected["action_correct"].units == 3 and alpha is not None
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.goto(url + "quality")
    page.get_by_role("heading", name="Study fields", exact=True).wait_for(timeout=90_000)
    page.get_by_text(
        f"action_correct (nominal): alpha {alpha:.3f} over 3 place(s) of {ALICE}, {BOB}; 1 disputed"
    ).wait_for(timeout=30_000)
    similarity = expected["instruction"].similarity
    page.get_by_text(re.compile(re.escape("instruction (normalised edit distance): alpha ")
                                + r".*" + re.escape(f"similarity {similarity:.3f} over 1 place(s)"))).wait_for(timeout=30_000)  # fmt: skip
    wait_idle(page)
    page.close()


def test_a_form_still_loading_takes_no_value(server, browser):
    """What you see is what you annotate: the form of step 13 is held back; the keys pressed meanwhile (F, text,
    Enter) save nothing, on no step; once the form of step 13 is on screen, the same keys save there."""
    url, _, repo, _, episode = server
    page = open_replay(browser, url, episode, 10)
    form_title(page, 10)
    held: list = []
    released: list = []

    def hold(route, request):
        if not released and request.method == "GET" and int(request.url.rsplit("/", 1)[1]) >= 12:
            held.append(route)
        else:
            route.continue_()

    fields_route = re.compile(r".*/api/fields/.*/steps/\d+$")
    page.route(fields_route, hold)
    page.locator(".sm-frame").click()
    kb = page.keyboard
    for _ in range(3):
        kb.press("ArrowRight")
    page.wait_for_function(f"() => ({FRAME_STEP_JS})() === 13", timeout=30_000)
    page.locator(".sm-fields .sm-h").filter(has_text="Fields of step 13 (loading…)").wait_for(timeout=30_000)
    kb.press("f")
    kb.type("typed while loading")
    kb.press("Enter")
    player_message(page, "Not saved: the form of the step on screen is still loading")
    page.wait_for_timeout(1000)  # a wrongly sent value would have reached the store by now
    assert not [k for k in alices(repo, episode) if 10 <= k[1] <= 13]
    released.append(True)
    for route in held:
        route.continue_()
    # Later requests go straight to the server: a route handler runs only while this thread is inside a
    # Playwright call, and the wait for the store below makes none (the save's POST hung there, 1 run in 4).
    page.unroute(fields_route, hold)
    form_title(page, 13)
    kb.press("f")
    assert page.locator('.sm-fields input[data-field="instruction"]').input_value() == ""
    assert focused_field(page) == "instruction"
    kb.type("the right step")
    kb.press("Enter")
    wait_store(lambda: alices(repo, episode).get(("instruction", 13)) == ("the right step", "scratch"))
    assert not [k for k in alices(repo, episode) if 10 <= k[1] <= 12]
    page.close()


def test_the_label_page_shows_only_the_annotators_own_values(server, browser):
    """The Label page's player carries the same form: Alice sees her own value on step 5 and not Bob's on
    step 4, and a choice she makes there by key is hers alone."""
    from pipelines.store import queue
    from pipelines.store.queue import QueueConfig

    url, _, repo, study, episode = server
    fv.set_value(repo, ref_of(episode), "instruction", BOB, "bob's words", step=4)
    fv.set_value(repo, ref_of(episode), "instruction", ALICE, "alice's words", step=5)
    queue.set_queue(repo, QueueConfig(study.id, overlap=2), ALICE)
    assert queue.next_episode(repo, study.id, ALICE).episode_id == episode.id
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.goto(url + "label")
    page.wait_for_function(f"() => ({FRAME_STEP_JS})() !== null", timeout=60_000)
    page.locator(".sm-frame").click()
    kb = page.keyboard
    kb.press("Home")
    page.wait_for_function(f"() => ({FRAME_STEP_JS})() === 0", timeout=60_000)
    for step in range(1, 5):  # one step at a time: a key pressed while a frame loads acts on the step shown
        kb.press("ArrowRight")
        page.wait_for_function(f"() => ({FRAME_STEP_JS})() === {step}", timeout=60_000)
    form_title(page, 4)
    assert page.locator('.sm-fields input[data-field="instruction"]').input_value() == ""
    kb.press("f")
    kb.press("Tab")
    kb.press("n")
    wait_store(lambda: alices(repo, episode).get(("action_correct", 4)) == ("no", "scratch"))
    kb.press("Escape")
    kb.press("ArrowRight")
    form_title(page, 5)
    assert page.locator('.sm-fields input[data-field="instruction"]').input_value() == "alice's words"
    assert not [v for v in fv.values(repo, [episode.id], user=BOB)[episode.id] if v.step == 4 and v.field != "instruction"]
    page.close()


def test_nothing_picked_saves_nothing_and_a_segment_is_cleared_from_inside_and_again_after_undo(server, browser):
    """Passing through a step (Ctrl+Enter) with no multi-choice option picked saves no value for it; from a step
    inside a saved segment, un-picking its option clears that segment (not an empty one-step slot); after Ctrl+Z
    brings it back, un-picking it again is saved again (what was sent before the undo is forgotten)."""
    url, _, repo, _, episode = server

    def problems() -> list:
        return [(v.step, v.end, v.value) for v in fv.values(repo, [episode.id], user=ALICE).get(episode.id, [])
                if v.field == "problems"]  # fmt: skip

    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    context.add_init_script(SENT_JS)  # what the player sends (the store also takes [] as no value: see the request)
    page = open_replay(browser, url, episode, 6, context=context)
    form_title(page, 6)
    kb = page.keyboard
    page.locator(".sm-frame").click()
    kb.press("f")
    kb.type("sixth")
    kb.press("Control+Enter")  # saves the text; the multi-choice field, nothing picked, saves nothing
    form_title(page, 7)
    kb.type("seventh")
    kb.press("Enter")  # sent after anything Ctrl+Enter sent (one queue): once it is stored, those are too
    wait_store(lambda: alices(repo, episode).get(("instruction", 7)) == ("seventh", "scratch"))
    # (and the text typed on step 6 went to step 6 only: not again to step 7 as its input left the form)
    assert problems() == [] and page.evaluate("() => window.smSent") == ["instruction@6", "instruction@7"]
    context.close()

    fv.set_value(repo, ref_of(episode), "problems", ALICE, ["slow"], step=7, end=9)
    page = open_replay(browser, url, episode, 8)
    kb = page.keyboard
    form_title(page, 8)
    slow = page.locator('.sm-fields [data-field="problems"] .sm-f-option').first
    assert slow.get_attribute("aria-pressed") == "true"  # the segment 7-9 holds step 8
    page.locator('.sm-fields [data-control][data-field="problems"]').focus()
    kb.press("1")  # un-pick "slow": nothing picked clears the saved segment
    player_message(page, "Cleared problems on steps 7–9")
    wait_store(lambda: problems() == [])
    kb.press("Escape")
    page.locator(".sm-frame").click()
    kb.press("Control+z")
    player_message(page, "Undid: field 'problems' cleared")
    wait_store(lambda: problems() == [(7, 9, ["slow"])])
    page.locator('.sm-fields [data-field="problems"] [aria-pressed="true"]').wait_for(timeout=30_000)  # shown again
    page.locator('.sm-fields [data-control][data-field="problems"]').focus()
    kb.press("1")  # the same change as before the undo: sent again
    wait_store(lambda: problems() == [])
    assert not [k for k in alices(repo, episode) if k[0] == "problems"]
    page.close()


EPISODE_FIELDS = """
fields:
  - {name: instruction, scope: step, kind: text}
  - {name: action_quality, scope: step, kind: choice, options: [good, bad, unsure], keys: [g, b, u]}
  - {name: task_success, scope: episode, kind: boolean}
"""


@pytest.fixture(scope="module")
def episode_server(tmp_path_factory, fixtures_dir):
    data_dir = tmp_path_factory.mktemp("e2e_episode_field")
    study = import_ui_fixtures(data_dir, fixtures_dir)
    repo = open_store(None, data_dir)
    fv.define(repo, study.id, parse_text(EPISODE_FIELDS, "fields.yaml"), ALICE)
    (episode,) = repo.list_episodes(study_id=study.id)
    with annotate_server(data_dir, "--user", ALICE) as url:
        yield url, repo, episode
    repo.close()


def field_shown(page, name: str) -> tuple[str, str]:
    """(the option pressed, the note) of a choice field in the form on screen."""
    row = page.locator(f'.sm-fields .sm-f-field[data-name="{name}"]')
    pressed = row.locator('[aria-pressed="true"]')
    return (pressed.inner_text() if pressed.count() else "", row.locator(".sm-f-note").inner_text())


def test_an_episode_value_shows_on_every_step_and_saving_another_field_keeps_it(episode_server, browser):
    """Issue 32: `task_success` (episode) set on step 0 shows, saved, on steps 1 and 2; saving `action_quality`
    on step 1 (Tab, g, Ctrl+Enter) sends no clear of it: the store still holds it, no `field.clear` is audited,
    and "saved" is shown only for what the store holds. Keys at a person's pace: each save answered first."""
    url, repo, episode = episode_server
    page = open_replay(browser, url, episode, 0)
    form_title(page, 0)
    kb = page.keyboard
    page.locator(".sm-frame").click()
    kb.press("f")
    kb.press("Tab")
    kb.press("Tab")
    assert focused_field(page) == "task_success"
    kb.press("y")
    player_message(page, "Saved task_success on the episode")
    kb.press("Control+Enter")
    form_title(page, 1)
    assert field_shown(page, "task_success") == ("y yes", "saved (scratch)")
    kb.press("Tab")
    assert focused_field(page) == "action_quality"
    kb.press("g")
    player_message(page, "Saved action_quality on step 1")
    kb.press("Control+Enter")
    form_title(page, 2)
    kb.press("Tab")
    kb.press("b")  # sent after whatever Ctrl+Enter on step 1 sent (one queue): once stored, those are too
    wait_store(lambda: alices(repo, episode).get(("action_quality", 2)) == ("bad", "scratch"))
    assert alices(repo, episode) == {("task_success", -1): (True, "scratch"), ("action_quality", 1): ("good", "scratch"),
                                     ("action_quality", 2): ("bad", "scratch")}  # fmt: skip
    assert "field.clear" not in [e.action for e in repo.audit_log(ref_of(episode))]
    player_message(page, "Saved action_quality on step 2")
    assert field_shown(page, "task_success") == ("y yes", "saved (scratch)")
    assert field_shown(page, "action_quality") == ("b bad", "saved (scratch)")
    kb.press("Escape")
    page.locator(".sm-frame").click()
    kb.press("ArrowLeft")
    form_title(page, 1)
    assert field_shown(page, "task_success") == ("y yes", "saved (scratch)")
    assert field_shown(page, "action_quality") == ("g good", "saved (scratch)")
    page.close()


def test_fast_keys_keep_the_episode_value_and_a_stale_form_changes_nothing(episode_server, browser):
    """The same keys as above pressed without waiting for any answer (each save still under way as the next step
    shows): the episode value is kept and shows, saved, once stored. Then the store changes behind the form (the
    value cleared elsewhere): a pick on the form that showed it is refused, nothing stored, and the form is read
    again, showing what the store holds."""
    url, repo, episode = episode_server
    fv.set_value(repo, ref_of(episode), "task_success", ALICE, None)
    clears = sum(e.action == "field.clear" for e in repo.audit_log(ref_of(episode)))
    page = open_replay(browser, url, episode, 5)
    form_title(page, 5)
    kb = page.keyboard
    page.locator(".sm-frame").click()
    for key in ("f", "Tab", "Tab", "y", "Control+Enter"):
        kb.press(key)
    form_title(page, 6)  # the form is on screen (the keys of a form still loading save nothing, by design)
    for key in ("Tab", "g", "Control+Enter"):
        kb.press(key)
    form_title(page, 7)
    kb.press("Tab")
    kb.press("b")
    wait_store(lambda: alices(repo, episode).get(("action_quality", 7)) == ("bad", "scratch"))
    assert alices(repo, episode).get(("task_success", -1)) == (True, "scratch")
    assert alices(repo, episode).get(("action_quality", 6)) == ("good", "scratch")
    assert sum(e.action == "field.clear" for e in repo.audit_log(ref_of(episode))) == clears
    form_title(page, 7)
    note = page.locator('.sm-fields .sm-f-field[data-name="task_success"] .sm-f-note')
    note.filter(has_text=re.compile("^saved \\(scratch\\)$")).wait_for(timeout=30_000)
    assert field_shown(page, "task_success") == ("y yes", "saved (scratch)")

    fv.set_value(repo, ref_of(episode), "task_success", ALICE, None)  # cleared elsewhere (another tab)
    page.locator('.sm-fields [data-control][data-field="task_success"]').focus()
    kb.press("n")
    player_message(page, "Not saved: .*task_success on the episode holds nothing by now, not true as shown")
    page.locator('.sm-fields [data-field="task_success"] [aria-pressed="true"]').wait_for(state="detached")
    assert field_shown(page, "task_success") == ("", "")
    assert ("task_success", -1) not in alices(repo, episode)
    page.close()

"""The quality report: its figures equal `stepmark inspect`'s and the store's on the real fixtures; the HTML
is self-contained and opens in chromium (STEPMARK_SCREENSHOTS=DIR: a screenshot goes to DIR/report.png)."""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest

from pipelines import convert
from pipelines.report.html import numbers, render
from pipelines.report.store_stats import import_folders, store_stats
from pipelines.report.ui_stats import UiStats, ui_stats
from pipelines.store import Repository, open_store, queue
from pipelines.store.queue import QueueConfig
from pipelines.ui_import import import_ui
from protos.rlds_creator import client_pb2, study_pb2
from stepmark.cli import main
from stepmark.cmd_convert import folder_summary
from tests.annotator.annotator_data import ALICE, BOB, build_env_data

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]  # fmt: skip


@pytest.fixture(scope="module")
def converted(tmp_path_factory, fixtures_dir) -> str:
    out = tmp_path_factory.mktemp("report") / "converted"
    assert convert.run([str(fixtures_dir), str(out), "--runner=FnApiRunner"]) in (0, None)
    return str(out)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Three recorded Procgen episodes; the first labelled by two annotators through the queue."""
    env = build_env_data(tmp_path_factory.mktemp("report_store"), episodes=3, max_steps=15)
    repo = env.repo
    first = client_pb2.EpisodeRef(episode_id=env.episodes[0].id)
    repo.add_episode_tag(first, "clean", ALICE)
    third = client_pb2.EpisodeRef(episode_id=env.episodes[2].id)
    repo.set_reviewers(env.study.id, [BOB], ALICE)  # Bob may change Alice's episodes' states
    repo.set_episode_state(third, study_pb2.Episode.STATE_REJECTED, BOB)
    queue.set_queue(repo, QueueConfig(env.study.id, overlap=2), ALICE)
    for user, steps in ((ALICE, (1, 2)), (BOB, (2, 5))):
        taken = queue.next_episode(repo, env.study.id, user)
        for step in steps:
            repo.add_step_tag(first, step, "jump", user)
            queue.set_step_label(repo, taken.episode_id, user, step, "jump")
        queue.mark_done(repo, taken.episode_id, user)
    return env


def html_numbers(page: str) -> dict[str, str]:
    return dict(re.findall(r'id="n-([a-z0-9-]+)">([^<]*)<', page))


def test_ui_figures_equal_inspect(converted: str) -> None:
    stats = ui_stats(converted)
    inspected = folder_summary(converted)
    assert (stats.episodes, stats.steps, stats.objects) == (
        inspected["episodes"], inspected["steps"], inspected["objects"]
    )  # fmt: skip
    assert stats.steps_with_screenshot == inspected["steps_with_screenshot"]
    assert dict(stats.actions) == inspected["actions"]
    assert stats.actions_with_target == inspected["actions_with_target"]
    assert dict(stats.apps.most_common(10)).keys() <= stats.apps.keys()
    assert {k: stats.apps[k] for k in inspected["app_packages"]} == inspected["app_packages"]
    assert sum(stats.dead_letters.values()) == inspected["dead_letters"]
    assert dict(stats.dead_letters) == inspected["dead_letters_by_reason"]
    assert sum(stats.objects_per_step) == stats.objects and len(stats.objects_per_step) == stats.steps
    assert sum(stats.object_types.values()) == stats.objects
    assert sum(map(sum, stats.actionable_grid)) <= stats.actionable
    assert sum(stats.screen_sizes.values()) == stats.steps
    assert 1 <= len(stats.samples) <= 3 and all(s.png.startswith(b"\x89PNG") for s in stats.samples)


def test_store_figures_equal_the_store(study) -> None:
    repo = study.repo
    stats = store_stats(repo, study.study.id)
    listed = repo.list_episodes(study_id=study.study.id)
    assert stats.episodes == len(listed) == 3
    assert stats.by_state == Counter(study_pb2.Episode.State.Name(e.state)[6:].lower() for e in listed)
    assert stats.by_state["rejected"] == 1 and stats.by_annotator == Counter({ALICE: 3})
    assert {k: list(v) for k, v in stats.lengths.items()} == {"coinrun": [e.num_steps for e in listed]}
    assert {k: list(v) for k, v in stats.returns.items()} == {"coinrun": [e.total_reward for e in listed]}
    tags = sum(len(e.tags) + sum(len(m.tags) for m in e.step_metadata.values()) for e in listed)
    assert sum(stats.tags_by_label.values()) == tags == 4  # clean + jump on steps 1, 2, 5
    assert stats.tags_by_annotator == Counter({ALICE: 3, BOB: 1})
    assert (stats.queue.slots_done, stats.queue.slots_total, stats.queue.episodes_complete) == (2, 6, 1)
    assert stats.agreement.units == listed[0].num_steps + 1
    assert len(stats.agreement.disagreements) == stats.agreement.disputed == 2  # steps 1 and 5


def test_ui_study_is_counted_by_aggregates(converted: str, tmp_path: Path) -> None:
    """A study of imported UI records: counted as UI episodes (no returns/lengths rows), its convert-ui folder
    found from the shards, and its tags counted per label and user; an INVALID session's episodes left out."""
    repo = open_store(None, tmp_path)
    spec = import_ui(repo, converted, "ui study", ALICE)
    listed = repo.list_episodes(study_id=spec.id)
    repo.add_step_tag(Repository.ref(listed[0]), 0, "tap", BOB)
    stats = store_stats(repo, spec.id)
    assert stats.episodes == stats.ui_episodes == len(listed) > 1
    assert stats.returns == {} and stats.lengths == {}
    assert stats.tags_by_label == Counter({"tap": 1}) and stats.tags_by_annotator == Counter({BOB: 1})
    assert import_folders(repo, spec.id, tmp_path) == [str(Path(converted).resolve())]
    repo.set_session_state(listed[0].session_id, study_pb2.Session.STATE_INVALID)
    stats = store_stats(repo, spec.id)
    assert stats.episodes == stats.ui_episodes == 0 and not stats.tags_by_label
    assert import_folders(repo, spec.id, tmp_path) == []


def test_report_command_writes_one_self_contained_file(converted: str, study, tmp_path: Path, capsys) -> None:
    out = tmp_path / "deep" / "report.html"
    argv = ["report", converted, "--study", study.study.id, "--data", str(study.data_dir), "--out", str(out)]
    code = main(argv)
    assert code == 0 and f"wrote {out}" in capsys.readouterr().out
    page = out.read_text()
    assert not re.search(r'\b(?:src|href)="(?!data:)', page)  # nothing loaded from elsewhere
    shown = html_numbers(page)
    expected = numbers(ui_stats(converted), store_stats(study.repo, study.study.id))
    assert shown.keys() == expected.keys()
    inspected = folder_summary(converted)
    assert shown["ui-episodes"] == str(inspected["episodes"])
    assert shown["ui-objects"] == str(inspected["objects"])
    assert shown["ui-dead-letters"] == str(inspected["dead_letters"])
    assert shown["study-episodes"] == "3" and shown["queue-done"] == "2" and shown["queue-total"] == "6"
    assert len(re.findall(r'<img alt="[^"]+" src="data:image/png;base64,', page)) >= 17
    assert main(["report", "--out", str(out)]) == 2


def test_report_of_an_imported_ui_study_plots_its_records(converted: str, tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    with open_store(None, data) as repo:
        ui_study = import_ui(repo, converted, "UI fixtures", ALICE)
    out = tmp_path / "ui.html"
    assert main(["report", "--study", ui_study.id, "--data", str(data), "--out", str(out)]) == 0
    shown = html_numbers(out.read_text())
    inspected = folder_summary(converted)
    assert shown["ui-episodes"] == shown["study-ui-episodes"] == shown["study-episodes"]
    assert shown["ui-episodes"] == str(inspected["episodes"]) and shown["ui-steps"] == str(inspected["steps"])


def test_text_from_data_is_escaped() -> None:
    page = render(UiStats(path="/data/<script>alert(1)</script>"), None)
    assert "<script>" not in page and "/data/&lt;script&gt;alert(1)&lt;/script&gt;" in page


@pytest.mark.e2e
@pytest.mark.slow
def test_report_opens_in_chromium(converted: str, study, tmp_path: Path) -> None:
    playwright_api = pytest.importorskip("playwright.sync_api")
    out = tmp_path / "report.html"
    ui = ui_stats(converted)
    out.write_text(render(ui, store_stats(study.repo, study.study.id)))
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(out.as_uri())
        images = page.eval_on_selector_all("img", "els => els.map(e => e.complete && e.naturalWidth > 0)")
        assert images and all(images)
        assert page.inner_text("#n-ui-episodes") == str(ui.episodes)
        folder = os.environ.get("STEPMARK_SCREENSHOTS")
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(Path(folder) / "report.png"), full_page=True)
        browser.close()


def _counting_json_reads(engine) -> list[int]:
    """Count every `json_extract` SQLite evaluates on this engine's new connections (each is one episode's JSON
    metadata read): a Python stand-in for the built-in, which an application-defined function overrides."""
    import json

    import sqlalchemy as sa

    calls = [0]

    def extract(document, *paths):  # noqa: ANN001, ANN202
        calls[0] += 1
        value = None if document is None else json.loads(document)
        for part in re.findall(r'"([^"]*)"|\.([A-Za-z_]\w*)', paths[0].removeprefix("$")):
            key = part[0] or part[1]
            value = value.get(key) if isinstance(value, dict) else None
        return json.dumps(value) if isinstance(value, (dict, list)) else value

    engine.dispose()
    sa.event.listen(engine, "connect", lambda conn, _: conn.create_function("json_extract", -1, extract))
    return calls


def test_report_reads_no_ui_episode_metadata(converted: str, tmp_path: Path) -> None:
    """The report's kinds come from `episodes.kind` (migration 8) and the import folders from one UI episode per
    import session: with 600 UI episodes the JSON of at most a few is read (the code before read every episode's
    metadata twice for the kinds and once for the folders: 1,800+ reads)."""
    repo = open_store(None, tmp_path)
    spec = import_ui(repo, converted, "ui study", ALICE)
    listed = repo.list_episodes(study_id=spec.id)
    session = repo.create_session(spec.id, BOB)
    more = []
    for i in range(600 - len(listed)):
        episode = study_pb2.Episode(study_id=spec.id, session_id=session.id, environment_id=listed[0].environment_id,
                                    state=study_pb2.Episode.STATE_COMPLETED, num_steps=3)  # fmt: skip
        episode.user.email = BOB
        meta = {"kind": "ui", "ui_record": {"shard": listed[0].metadata["ui_record"]["shard"], "offset": i,
                                            "episode_id": f"extra/{i}"}}  # fmt: skip
        episode.metadata.update(meta)
        more.append(episode)
    repo.add_episodes(more)
    calls = _counting_json_reads(repo.engine)
    stats = store_stats(repo, spec.id)
    folders = import_folders(repo, spec.id, tmp_path)
    assert stats.episodes == stats.ui_episodes == 600 and stats.returns == {} and stats.lengths == {}
    assert folders == [str(Path(converted).resolve())]
    assert 0 < calls[0] <= 4, calls  # the folders: one shard per session (2 sessions), nothing per episode


def test_recorded_episodes_have_kind_env(study) -> None:
    """The recorder's registration (pipelines/episodes/publish.py) sets `episodes.kind` on insert, as import-ui's
    does (both go through Repository), so the report's environment figures come from that column."""
    import sqlalchemy as sa

    with study.repo.engine.connect() as conn:
        kinds = conn.execute(sa.text("SELECT kind, count(*) FROM episodes GROUP BY kind")).all()
    assert [tuple(k) for k in kinds] == [("env", 3)]


def test_labels_from_the_data_are_drawn_as_text_not_maths() -> None:
    """A tag label, annotator or environment id with dollar signs is a name: matplotlib would parse it as maths
    (and fail on `$\\frac$`, taking the Quality page and the report down with it)."""
    from collections import Counter

    from pipelines.report.plots import Plot, bars, images

    figure = bars(Counter({"cost $\\frac$": 3, "price $5-$10": 2}), "tags")
    (image,) = images([Plot("tags", "Tags per label", figure)])
    assert image.png.startswith(b"\x89PNG")
    assert {t.get_text() for t in figure.findobj(lambda o: hasattr(o, "get_parse_math")) if not t.get_parse_math()} >= {
        "cost $\\frac$", "price $5-$10"}  # fmt: skip


def test_success_rate_reads_json_booleans_on_sqlite(tmp_path: Path) -> None:
    """`metadata.success` true/false is a verdict on SQLite too (its JSON path reads them back as 1/0): the
    Quality page's success rate per environment is not empty; a number or a string is no verdict."""
    env = build_env_data(tmp_path / "data", episodes=1, max_steps=6)
    repo, recorded = env.repo, env.episodes[0]
    session = repo.create_session(env.study.id, ALICE)
    copies = []
    for value in (True, True, False, 1, "true"):
        copy = study_pb2.Episode()
        copy.CopyFrom(recorded)
        copy.ClearField("id")
        copy.session_id = session.id
        copy.storage.pickle.path = f"{copy.storage.pickle.path}#{len(copies)}"  # not a duplicate source
        copy.metadata["success"] = value
        copies.append(copy)
    assert len(repo.add_episodes(copies, skip_existing_sources=False)) == 5
    listed = repo.list_episodes(study_id=env.study.id)
    values = [e.metadata.fields["success"] for e in listed if "success" in e.metadata.fields]
    verdicts = [v.bool_value for v in values if v.WhichOneof("kind") == "bool_value"]  # the recorder's too
    stats = store_stats(repo, env.study.id)
    assert stats.success == {"coinrun": (sum(verdicts), len(verdicts))}
    assert len(verdicts) == 4 and stats.success_rate["coinrun"] == pytest.approx(sum(verdicts) / len(verdicts))

"""The convert-ui pipeline: transforms under TestPipeline, and end-to-end runs on every layout built from the
real fixtures, with injected bad files."""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines import tfrecord, ui_records
from pipelines.beam_options import pipeline_options
from pipelines.convert import (
    DEAD,
    REPORT,
    ConvertShard,
    DiscoverEpisodes,
    DiscoveryReport,
    ShardWritten,
    run,
)
from pipelines.errors import StepmarkError
from pipelines.hierarchy import MAX_DEPTH, parse
from pipelines.traces import DeadLetter, EpisodeSource, discover, files, read_episode
from protos.stepmark import ui_episode_pb2
from tests.pipelines.test_traces import FAASOS, build_droidbot, build_rico_trace, build_step_folder, link

Action = ui_episode_pb2.Action


def test_default_runner_and_pass_through() -> None:
    opts = pipeline_options(["--direct_num_workers=2"])
    assert opts.view_as(StandardOptions).runner == "FnApiRunner"
    assert opts.view_as(DirectOptions).direct_num_workers == 2
    dask = "apache_beam.runners.dask.dask_runner.DaskRunner"
    assert pipeline_options([f"--runner={dask}"]).view_as(StandardOptions).runner == dask
    assert pipeline_options(["--runner", "DirectRunner"]).view_as(StandardOptions).runner == "DirectRunner"


def test_discover_transform(tmp_path: Path, fixtures_dir: Path) -> None:
    build_rico_trace(tmp_path / "trace", fixtures_dir, FAASOS[:2], {})
    link(fixtures_dir / "rico" / "336.jpg", tmp_path / "lonely.jpg")
    (tmp_path / "notes.txt").write_text("not a trace")
    with BeamTestPipeline(runner="FnApiRunner") as p:
        found = (
            p
            | beam.Create([str(tmp_path)])
            | beam.ParDo(DiscoverEpisodes()).with_outputs(DEAD, REPORT, main="sources")
        )
        assert_that(
            found.sources | "Ids" >> beam.Map(lambda s: (s.layout, s.episode_id, len(s.files))),
            equal_to([("rico_trace", "trace", 5)]),
            label="sources",
        )
        assert_that(
            found[DEAD] | "Reasons" >> beam.Map(lambda d: (d.reason, Path(d.source_path).name)),
            equal_to([("orphan_screenshot", "lonely.jpg")]),
            label="dead",
        )
        assert_that(
            found[REPORT], equal_to([DiscoveryReport(1, 1, (str(tmp_path / "notes.txt"),))]), label="report"
        )


def test_convert_shard_transform(tmp_path: Path, fixtures_dir: Path) -> None:
    empty = tmp_path / "in" / "empty.xml"
    empty.parent.mkdir()
    empty.write_bytes(b"")
    link(fixtures_dir / "rico" / "33600.json", tmp_path / "in" / "33600.json")
    link(fixtures_dir / "rico" / "33600.jpg", tmp_path / "in" / "33600.jpg")
    sources = [s for s in discover(str(tmp_path / "in")) if isinstance(s, EpisodeSource)]
    temp = tmp_path / "tmp"
    temp.mkdir()
    n_objects = len(parse((fixtures_dir / "rico" / "33600.json").read_bytes()).objects)
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = (
            p
            | beam.Create([(2, sources)])
            | beam.ParDo(ConvertShard(str(temp), progress=False)).with_outputs(DEAD, main="shards")
        )
        assert_that(
            out.shards | beam.Map(lambda s: (s.shard, s.episodes, s.steps, s.objects, s.layouts)),
            equal_to([(2, 1, 1, n_objects, (("single_screen", 1),))]),
            label="shards",
        )
        assert_that(
            out[DEAD] | "Reasons" >> beam.Map(lambda d: (d.episode_id, d.step, d.reason)),
            equal_to([("empty", 0, "empty"), ("empty", None, "no_steps")]),
            label="dead",
        )
    (shard,) = temp.glob("shard-00002-*.tfrecord")
    with open(shard, "rb") as f:
        ((_, data),) = list(tfrecord.iter_records(f))
    assert ui_episode_pb2.UiEpisode.FromString(data).episode_id == "33600"


# ------------------------------------------------------------------------------------------------ end to end


def convert(input_path: Path, output: Path, *extra: str) -> dict:
    # --follow-links: the inputs are symlinks to ../shared/fixtures, outside INPUT
    assert run([str(input_path), str(output), "--quiet", "--follow-links", *extra]) == 0
    return ui_records.read_summary(str(output))


def episodes(output: Path) -> dict[str, ui_episode_pb2.UiEpisode]:
    return {e.episode_id: e for e in ui_records.iter_episodes(str(output))}


def dead_letters(output: Path) -> list[DeadLetter]:
    return list(ui_records.read_dead_letters(str(output)))


def assert_nothing_lost(input_path: Path, output: Path) -> None:
    """Every step of every discovered episode is in the output or in the dead letters (a `bad_action` dead
    letter loses only the action: its step is in the output)."""
    expected = set()
    for s in discover(str(input_path)):
        if isinstance(s, EpisodeSource):
            n = read_episode(s, files.read_bytes).num_source_steps
            expected |= {(s.episode_id, i) for i in range(n)}
    converted = {(e.episode_id, info.index) for e in episodes(output).values() for info in e.step_info}
    dead = {
        (d.episode_id, d.step)
        for d in dead_letters(output)
        if d.step is not None and d.reason != "bad_action"
    }
    assert converted | dead == expected
    assert not converted & dead


def objects_per_step(e: ui_episode_pb2.UiEpisode) -> list[int]:
    return [len(ts.observation.objects) for ts in e.episode.time_steps]


def parser_objects(paths: list[str], drop_invisible: bool = False) -> list[int]:
    return [len(parse(files.read_bytes(p), drop_invisible=drop_invisible).objects) for p in paths]


def test_rico_trace_end_to_end(tmp_path: Path, fixtures_dir: Path) -> None:
    gestures = {sid: [] for sid in FAASOS}
    gestures["33603"] = [[720 / 1440, 1763 / 2560]]  # centre of the SIGN IN button
    gestures["33610"] = [[0.5, 0.77], [0.5, 0.6], [0.5, 0.27]]
    build_rico_trace(tmp_path / "in" / "faasos", fixtures_dir, FAASOS, gestures)
    summary = convert(tmp_path / "in", tmp_path / "out", "--shards", "2")
    assert (summary["episodes"], summary["steps"], summary["dead_letters"]) == (1, 7, 0)
    assert summary["episodes_by_layout"] == {"rico_trace": 1}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [  # one episode: one shard, not 2
        "dead_letters.jsonl", "episodes-00000-of-00001.tfrecord", "summary.json",
    ]  # fmt: skip
    e = episodes(tmp_path / "out")["faasos"]
    assert e.source == "rico_trace" and e.app_package == "com.done.faasos"
    json_paths = [str(tmp_path / "in" / "faasos" / "view_hierarchies" / f"{sid}.json") for sid in FAASOS]
    assert objects_per_step(e) == parser_objects(json_paths)
    assert summary["objects"] == sum(objects_per_step(e))
    tap = e.actions[1]
    target = e.episode.time_steps[1].observation.objects[tap.target_index]
    assert (tap.type, tap.x, tap.y, target.text) == (Action.TAP, 270, 661, "SIGN IN")
    swipe = e.actions[4]
    assert (swipe.type, swipe.x, swipe.y, swipe.end_x, swipe.end_y) == (Action.SWIPE, 270, 739, 270, 259)
    assert [a.type for i, a in enumerate(e.actions) if i not in (1, 4)] == [Action.ACTION_UNSPECIFIED] * 5
    obs = e.episode.time_steps[0].observation
    assert (obs.screen_width, obs.screen_height) == (540, 960)
    assert obs.screenshot == (fixtures_dir / "rico" / "33600.jpg").read_bytes()
    assert e.step_info[0].scale_x == pytest.approx(0.375)


def test_step_folder_end_to_end(tmp_path: Path, fixtures_dir: Path) -> None:
    actions = [
        '{"step": 0, "action": "tap", "x": 1296, "y": 2294, "space": "hierarchy"}',
        '{"step": 1, "action": "tap", "x": 0.7, "y": 0.896, "space": "normalized"}',
        '{"step": 2, "action": "back"}',
    ]
    folder = build_step_folder(tmp_path / "in" / "yelp", fixtures_dir, actions)
    summary = convert(tmp_path / "in", tmp_path / "out")
    assert (summary["episodes"], summary["steps"], summary["dead_letters"]) == (1, 3, 0)
    e = episodes(tmp_path / "out")["yelp"]
    assert objects_per_step(e) == parser_objects([str(folder / f"{i}.json") for i in range(3)])
    bookmarks = e.episode.time_steps[0].observation.objects[e.actions[0].target_index]
    assert bookmarks.resource_id == "com.yelp.android:id/hot_button_bookmarks"
    feed = e.episode.time_steps[1].observation.objects[e.actions[1].target_index]
    assert (e.actions[1].x, e.actions[1].y) == (1008, 2294)
    assert feed.resource_id == "com.yelp.android:id/hot_button_feed"
    assert e.actions[2].type == Action.BACK
    assert [i.screenshot_format for i in e.step_info] == ["jpeg"] * 3  # JPEG bytes in .png files
    assert json.loads(e.actions[0].raw_json)["x"] == 1296


def test_single_screens_end_to_end(tmp_path: Path, fixtures_dir: Path) -> None:
    summary = convert(fixtures_dir, tmp_path / "out", "--shards", "3")
    assert summary["episodes_by_layout"] == {"droidbot": 1, "single_screen": 51}
    got = episodes(tmp_path / "out")
    rico = sorted(p for p in (fixtures_dir / "rico").glob("*.json"))
    assert [
        len(got[f"rico/{p.stem}"].episode.time_steps[0].observation.objects) for p in rico
    ] == parser_objects([str(p) for p in rico])
    # Named after the app, not the system decor views that outnumber its objects; "android" when alone.
    assert got["rico/336"].app_package == "com.riversoft.android.mysword"
    assert got["rico/33638"].app_package == "android"
    dumps = sorted((fixtures_dir / "uiautomator").glob("*.xml"))
    for p in dumps:
        e = got[f"uiautomator/{p.stem}"]
        obs = e.episode.time_steps[0].observation
        screen = parse(p.read_bytes())
        assert len(obs.objects) == len(screen.objects)
        assert (obs.screen_width, obs.screen_height) == (screen.width, screen.height)
        assert not obs.screenshot and obs.xml == p.read_bytes()
        assert any(w.startswith("no screenshot") for w in e.step_info[0].warnings)
    assert summary["steps"] == 51 + 32
    assert summary["objects"] == sum(
        len(ts.observation.objects) for e in got.values() for ts in e.episode.time_steps
    )
    assert_nothing_lost(fixtures_dir, tmp_path / "out")


def test_droidbot_end_to_end(tmp_path: Path, fixtures_dir: Path) -> None:
    summary = convert(fixtures_dir / "droidbot" / "yelp", tmp_path / "out", "--shards", "1")
    assert (summary["episodes"], summary["steps"]) == (1, 32)
    assert summary["dead_letters_by_reason"] == {"missing_state": 3}
    e = episodes(tmp_path / "out")["yelp"]
    first = e.episode.time_steps[0].observation.objects[e.actions[0].target_index]
    assert (first.resource_id, first.text) == ("com.yelp.android:id/accept_button", "Yes, turn it on")
    assert all(a.type == Action.TAP and a.HasField("target_index") for a in e.actions)
    assert_nothing_lost(fixtures_dir / "droidbot" / "yelp", tmp_path / "out")


def test_bad_inputs_become_dead_letters(tmp_path: Path, fixtures_dir: Path) -> None:
    inp = tmp_path / "in"
    screens = inp / "screens"
    screens.mkdir(parents=True)
    (screens / "failed.xml").write_bytes(b"ERROR: could not get idle state.\n")
    (screens / "empty.json").write_bytes(b"")
    (screens / "deep.xml").write_bytes(
        b'<?xml version="1.0"?><hierarchy rotation="0">'
        + b'<node class="android.widget.FrameLayout" bounds="[0,0][10,10]">' * (MAX_DEPTH + 10)
        + b"</node>" * (MAX_DEPTH + 10)
        + b"</hierarchy>"
    )
    link(fixtures_dir / "rico" / "33600.json", screens / "cut.json")
    (screens / "cut.jpg").write_bytes((fixtures_dir / "rico" / "33600.jpg").read_bytes()[:9000])
    link(fixtures_dir / "rico" / "336.jpg", screens / "lonely.jpg")
    link(fixtures_dir / "rico" / "336.json", screens / "good.json")
    link(fixtures_dir / "rico" / "336.jpg", screens / "good.jpg")
    steps = build_step_folder(
        inp / "steps", fixtures_dir, ['{"step": 0, "action": "tap", "x": 1}', '{"step": 1, "action": "back"}']
    )
    (steps / "1.json").unlink()
    (steps / "1.json").write_text('{"views": [')  # a cut-off DroidBot state
    build_droidbot(inp / "run", fixtures_dir)

    summary = convert(inp, tmp_path / "out")
    dead = dead_letters(tmp_path / "out")
    by_file = {(Path(d.source_path).name, d.reason) for d in dead}
    assert {
        ("failed.xml", "failed_dump"),
        ("empty.json", "empty"),
        ("deep.xml", "too_deep"),
        ("cut.jpg", "bad_screenshot"),
        ("lonely.jpg", "orphan_screenshot"),
        ("actions.jsonl", "bad_action"),
        ("1.json", "malformed"),
    } <= by_file
    assert summary["dead_letters_by_reason"] == {
        "bad_action": 1, "bad_screenshot": 1, "empty": 1, "failed_dump": 1, "malformed": 1, "missing_state": 3,
        "no_steps": 4, "orphan_screenshot": 1, "too_deep": 1,
    }  # fmt: skip
    assert summary["dead_letters"] == len(dead) == 14
    for d in dead:  # every dead letter says what and where
        assert d.reason and d.exception and d.source_path.startswith(str(inp))
    got = episodes(tmp_path / "out")
    assert set(got) == {"screens/good", "steps", "run"}
    assert [i.index for i in got["steps"].step_info] == [0, 2]
    assert got["steps"].actions[0].type == Action.ACTION_UNSPECIFIED  # its action line was invalid
    assert_nothing_lost(inp, tmp_path / "out")


def test_output_is_committed_once(tmp_path: Path, fixtures_dir: Path) -> None:
    inp = fixtures_dir / "uiautomator"
    out = tmp_path / "out"
    convert(inp, out, "--shards", "2")
    assert not list(out.glob(".stepmark-tmp-*"))  # temporary files are gone
    with pytest.raises(StepmarkError, match="already holds a conversion"):
        run([str(inp), str(out), "--quiet"])
    summary = convert(inp, out, "--shards", "5", "--overwrite")
    assert sorted(p.name for p in out.glob("episodes-*")) == [
        f"episodes-0000{i}-of-00005.tfrecord" for i in range(5)
    ]
    assert summary["episodes"] == 10 and sum(s["episodes"] for s in summary["shards"]) == 10
    with pytest.raises(StepmarkError, match="no such file or folder"):
        run([str(tmp_path / "missing"), str(tmp_path / "o2"), "--quiet"])


def test_drop_invisible(tmp_path: Path, fixtures_dir: Path) -> None:
    summary = convert(fixtures_dir / "rico", tmp_path / "out", "--drop-invisible")
    rico = sorted(str(p) for p in (fixtures_dir / "rico").glob("*.json"))
    assert summary["objects"] == sum(parser_objects(rico, drop_invisible=True)) < sum(parser_objects(rico))
    assert summary["drop_invisible"] is True


def test_many_episodes_all_arrive(tmp_path: Path, fixtures_dir: Path) -> None:
    """Memory does not grow with the episode count (episodes are read, converted and written one at a time);
    here: 300 episodes across 4 shards, each exactly once."""
    inp = tmp_path / "in"
    for i in range(300):
        folder = inp / f"batch{i % 7}" / f"app{i}"
        link(fixtures_dir / "rico" / "33638.json", folder / "screen.json")
        link(fixtures_dir / "rico" / "33638.jpg", folder / "screen.jpg")
    summary = convert(inp, tmp_path / "out", "--shards", "4")
    assert (summary["episodes"], summary["steps"], summary["dead_letters"]) == (300, 300, 0)
    ids = [r.episode_id for r in ui_records.index_records(str(tmp_path / "out"))]
    assert sorted(ids) == sorted(f"batch{i % 7}/app{i}/screen" for i in range(300))
    assert all(s["episodes"] > 0 for s in summary["shards"])


def test_shard_written_is_small() -> None:
    """What crosses transform boundaries is a few numbers per shard, never episode bytes."""
    fields = ShardWritten.__dataclass_fields__
    assert set(fields) == {
        "shard",
        "temp_path",
        "episodes",
        "steps",
        "objects",
        "mismatched_steps",
        "layouts",
        "size_bytes",
    }


def test_output_inside_input_is_not_read_back(tmp_path: Path, fixtures_dir: Path) -> None:
    inp = tmp_path / "in"
    for sid in ("336", "33638"):
        link(fixtures_dir / "rico" / f"{sid}.json", inp / f"{sid}.json")
        link(fixtures_dir / "rico" / f"{sid}.jpg", inp / f"{sid}.jpg")
    first = convert(inp, inp / "converted")
    again = convert(inp, inp / "converted", "--overwrite")
    for summary in (first, again):
        assert (summary["discovered_episodes"], summary["episodes"], summary["dead_letters"]) == (2, 2, 0)
        assert summary["ignored_files"] == 0


def test_output_inside_input_spellings() -> None:
    from pipelines.convert import output_inside_input

    assert output_inside_input("/a/in", "/a/in/out") == ("/a/in/out",)
    assert output_inside_input("/a/in", "/a/out") == ()
    assert output_inside_input("gs://b/in", "gs://b/in/out") == ("gs://b/in/out",)
    assert output_inside_input("gs://b/in", "gs://b/inside") == ()

"""The five newest trace layouts (AitZ, GUI-Odyssey, AndroidControl JSON, LlamaTouch, DroidRun) converted from a
bucket into a bucket: the local S3 server of tests/object_store.py, reached by the same commands a user runs.
The README promises that pointing convert-ui at `s3://` changes nothing else; the episodes must be those of the
same conversion from a local folder, record for record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines import ui_records
from pipelines.step_text import step_texts
from stepmark.cli import main
from tests.object_store import Bucket, episodes_by_id
from tests.pipelines.record_writers import forest_from_dump
from tests.pipelines.screenshot_first import android_control_json, build_aitz, build_gui_odyssey
from tests.pipelines.test_droidrun import MACRO, build_trajectory
from tests.pipelines.test_llamatouch import EVENTS, build_trace
from tests.pipelines.test_llamatouch import episodes as read_episodes

#: Each layout's sample, as built below: (episode id, layout, steps, steps that carry objects).
EXPECTED = {
    "aitz/GOOGLE_APPS-523638528775825151": ("aitz", 4, 4),
    "odyssey/1062813046541960": ("gui_odyssey", 6, 0),
    "control/weather": ("android_control_json", 3, 3),
    "llamatouch/general/trace_18": ("llamatouch", 5, 5),
    "droidrun/trajectories/20250101_120000_ab12cd34": ("droidrun", 3, 3),
}


def build_samples(inp: Path, fixtures_dir: Path) -> None:
    """One sample trace of each of the five layouts, built from the published field lists as their own tests
    build them."""
    build_aitz(inp / "aitz")
    build_gui_odyssey(inp / "odyssey")
    (inp / "control").mkdir(parents=True)
    xml = (fixtures_dir / "uiautomator" / "fractal-forge_ui_controls.xml").read_bytes()
    forest = forest_from_dump(xml).SerializeToString()
    (inp / "control" / "weather.json").write_text(json.dumps(android_control_json([forest] * 3, n=3)))
    build_trace(inp / "llamatouch" / "general" / "trace_18", EVENTS)
    # one macro action more than the trajectory has states: a dead letter, in the bucket's output as in the local
    build_trajectory(
        inp / "droidrun" / "trajectories" / "20250101_120000_ab12cd34", [*MACRO, {"type": "WaitEvent"}]
    )


def _shape(episode) -> dict:
    """What a reader decides about an episode: its steps, their objects and texts, and which are screenshot-only."""
    return {
        "source": episode.source,
        "goal": episode.goal,
        "steps": len(episode.episode.time_steps),
        "objects": [
            [(o.android_class, o.text, o.name, o.type) for o in t.observation.objects]
            for t in episode.episode.time_steps
        ],
        "texts": [step_texts(episode, i) for i in range(len(episode.step_info))],
        "screenshot_only": [i.hierarchy_format == "none" for i in episode.step_info],
        "actions": [(a.type, a.x, a.y, a.text) for a in episode.actions],
    }


def _dead_letters(output: str, input_prefix: str) -> list[tuple]:
    def named(text: str) -> str:
        return text.replace(input_prefix.rstrip("/"), "INPUT")

    return sorted((d.episode_id, d.step, d.reason, named(d.source_path), named(d.exception))
                  for d in ui_records.read_dead_letters(output))  # fmt: skip


def test_the_five_newest_layouts_convert_from_a_bucket_into_a_bucket(
    s3: Bucket, tmp_path: Path, fixtures_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    inp = tmp_path / "in"
    build_samples(inp, fixtures_dir)
    assert main(["convert-ui", str(inp), str(tmp_path / "local"), "--quiet"]) == 0
    assert s3.upload_tree(inp, "traces") > 30
    traces = s3.url("traces")
    assert main(["convert-ui", traces, s3.url("episodes"), "--quiet"]) == 0

    local = read_episodes(tmp_path / "local")
    remote = {e.episode_id: e for e in ui_records.iter_episodes(s3.url("episodes"))}
    assert sorted(remote) == sorted(local) == sorted(EXPECTED)
    for episode_id, (layout, steps, with_objects) in EXPECTED.items():
        shape = _shape(remote[episode_id])
        assert shape == _shape(local[episode_id]), episode_id
        assert (shape["source"], shape["steps"]) == (layout, steps), episode_id
        assert sum(1 for objects in shape["objects"] if objects) == with_objects, episode_id
        assert shape["screenshot_only"] == [not with_objects] * steps, episode_id
    with_texts = {i for i, e in remote.items() if any(any(t.values()) for t in _shape(e)["texts"])}
    assert with_texts == set(EXPECTED) - {"llamatouch/general/trace_18"}  # LlamaTouch records no step text
    # Record for record (paths in the records spelled "INPUT"), and the same dead letters and summary counts.
    assert episodes_by_id(s3.url("episodes"), traces) == episodes_by_id(str(tmp_path / "local"), str(inp))
    dead = _dead_letters(s3.url("episodes"), traces)
    assert dead == _dead_letters(str(tmp_path / "local"), str(inp))
    assert [(d[0], d[2]) for d in dead] == [("droidrun/trajectories/20250101_120000_ab12cd34", "bad_action")]
    counts = (
        "discovered_episodes",
        "episodes",
        "steps",
        "objects",
        "dead_letters",
        "ignored_files",
        "episodes_by_layout",
    )
    remote_summary, local_summary = (
        ui_records.read_summary(out) for out in (s3.url("episodes"), str(tmp_path / "local"))
    )
    assert {k: remote_summary[k] for k in counts} == {k: local_summary[k] for k in counts}
    assert remote_summary["episodes_by_layout"] == {
        "aitz": 1, "gui_odyssey": 1, "android_control_json": 1, "llamatouch": 1, "droidrun": 1,
    }  # fmt: skip
    assert not [k for k in s3.keys("episodes/") if ".stepmark-tmp" in k]

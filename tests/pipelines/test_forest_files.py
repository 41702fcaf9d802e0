"""Single accessibility forests saved as `.pb` / `.textproto` beside a screenshot (AndroidEnv, AndroidWorld
tools), as single screens and as step folders, converted end to end. Forests are written from real dumps with
the android_env protos (tests/pipelines/record_writers.py)."""

from __future__ import annotations

import json
from pathlib import Path

from google.protobuf import text_format

from pipelines import ui_records
from pipelines.convert import run
from pipelines.hierarchy import parse
from protos.stepmark import ui_episode_pb2
from tests.pipelines.record_writers import forest_from_dump, png_from

Action = ui_episode_pb2.Action
FRACTAL = "fractal-forge_ui_controls.xml"
VISION = "visiontest_hierarchy.xml"


def test_forest_files_as_single_screens_and_step_folders(tmp_path: Path, fixtures_dir: Path) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    (inp / "screens").mkdir(parents=True)
    (inp / "episode").mkdir()
    fractal = forest_from_dump((fixtures_dir / "uiautomator" / FRACTAL).read_bytes())
    vision = forest_from_dump((fixtures_dir / "uiautomator" / VISION).read_bytes())
    shot = png_from(fixtures_dir / "rico" / "33600.jpg", 1080, 2400)
    (inp / "screens" / "home.pb").write_bytes(fractal.SerializeToString())
    (inp / "screens" / "home.png").write_bytes(shot)
    (inp / "screens" / "settings.textproto").write_text(text_format.MessageToString(vision))
    (inp / "screens" / "broken.pb").write_bytes(fractal.SerializeToString()[:999])
    (inp / "episode" / "0.textproto").write_text(text_format.MessageToString(fractal))
    (inp / "episode" / "0.png").write_bytes(shot)
    (inp / "episode" / "1.pb").write_bytes(vision.SerializeToString())
    (inp / "episode" / "1.png").write_bytes(shot)
    (inp / "episode" / "actions.jsonl").write_text(
        json.dumps({"step": 0, "action": "tap", "x": 270, "y": 1743})
    )
    assert run([str(inp), str(out), "--quiet", "--shards=1"]) == 0

    episodes = {e.episode_id: e for e in ui_records.iter_episodes(str(out))}
    assert sorted(episodes) == ["episode", "screens/home", "screens/settings"]
    home = episodes["screens/home"]
    assert home.source == "single_screen" and home.step_info[0].hierarchy_format == "a11y_forest"
    reference = parse((fixtures_dir / "uiautomator" / FRACTAL).read_bytes())
    objects = home.episode.time_steps[0].observation.objects
    assert [(o.id, o.grid_location, o.is_actionable) for o in objects] == [
        (o.id, o.grid_location, o.is_actionable) for o in reference.objects
    ]
    settings = episodes["screens/settings"]
    assert [w.num_objects for w in settings.step_info[0].windows] == [
        len(w.tree.nodes) for w in vision.windows
    ]
    assert json.loads(settings.episode.time_steps[0].observation.json)["windows"][1]["layer"] == 1
    episode = episodes["episode"]
    assert episode.source == "step_folder" and len(episode.episode.time_steps) == 2
    tap = episode.actions[0]
    target = episode.episode.time_steps[0].observation.objects[tap.target_index]
    assert tap.type == Action.TAP and target.content_desc == "Ocean"
    dead = list(ui_records.read_dead_letters(str(out)))
    assert sorted((d.reason, Path(d.source_path).name) for d in dead) == [
        ("malformed", "broken.pb"),
        ("no_steps", "broken.pb"),  # its one-screen episode is left with no step
    ]
    assert "AndroidAccessibilityForest" in dead[0].exception


def test_one_forest_file_as_input(tmp_path: Path, fixtures_dir: Path) -> None:
    forest = forest_from_dump((fixtures_dir / "uiautomator" / VISION).read_bytes())
    (tmp_path / "screen.pb").write_bytes(forest.SerializeToString())
    assert run([str(tmp_path / "screen.pb"), str(tmp_path / "out"), "--quiet", "--shards=1"]) == 0
    (episode,) = ui_records.iter_episodes(str(tmp_path / "out"))
    assert len(episode.episode.time_steps[0].observation.objects) == sum(
        len(w.tree.nodes) for w in forest.windows
    )
    assert any("no screenshot" in w for w in episode.step_info[0].warnings)

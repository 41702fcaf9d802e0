"""An episode whose `episode_length` claims more steps than its file holds (issue 32, item 9): the episode says
so in its warnings (`UiEpisode.metadata["warnings"]`, shown by `inspect --episode`), beside what the steps
present give. AITW TFRecords (one record per step; the missing ids are also a `missing_step` dead letter) and
Android-in-the-Zoo, whose steps repeat AITW's `episode_length`."""

from __future__ import annotations

from pathlib import Path

from pipelines import ui_records
from pipelines.convert import run
from stepmark.cli import main
from tests.pipelines.record_writers import write_tfrecord
from tests.pipelines.screenshot_first import AITZ_ID, aitz_steps, build_aitz
from tests.pipelines.test_aitw import step


def _convert(inp: Path, out: Path) -> dict:
    assert run([str(inp), str(out), "--quiet"]) == 0
    return {e.episode_id: e for e in ui_records.iter_episodes(str(out))}


def test_aitw_episode_cut_short_is_an_episode_warning(tmp_path: Path, fixtures_dir: Path, capsys) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    # The episode says 5 steps; the file holds steps 0 and 1 only (a shard cut short, a partial download).
    write_tfrecord(inp / "general-00000-of-00001", [step(fixtures_dir, "short", i, 5, "336", 5) for i in (0, 1)])
    episodes = _convert(inp, out)
    warning = "episode_length says 5 steps but the records hold 2: no record for step(s) 2, 3, 4"
    assert warning in episodes["short"].metadata["warnings"]
    assert len(episodes["short"].episode.time_steps) == 2
    assert [d.reason for d in ui_records.read_dead_letters(str(out))] == ["missing_step"]
    assert main(["inspect", str(out), "--episode", "short"]) == 0
    assert warning in capsys.readouterr().out


def test_aitw_episode_with_every_step_has_no_such_warning(tmp_path: Path, fixtures_dir: Path) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    write_tfrecord(inp / "general-00000-of-00001", [step(fixtures_dir, "whole", i, 2, "336", 5) for i in (0, 1)])
    episodes = _convert(inp, out)
    assert "episode_length" not in episodes["whole"].metadata.get("warnings", "")


def test_aitz_file_holding_fewer_steps_than_its_episode_length(tmp_path: Path) -> None:
    steps = aitz_steps()[:3]  # each step still says episode_length 4
    assert {s["episode_length"] for s in steps} == {4}
    build_aitz(tmp_path / "in", steps)
    episodes = _convert(tmp_path / "in", tmp_path / "out")
    (episode,) = episodes.values()
    assert len(episode.episode.time_steps) == 3
    warnings = episode.metadata["warnings"]
    assert "episode_length says 4 steps but " in warnings and f"{AITZ_ID}.json holds 3" in warnings
    whole = _convert_whole(tmp_path)
    assert "episode_length" not in whole.metadata.get("warnings", "")


def _convert_whole(tmp_path: Path):
    build_aitz(tmp_path / "whole")
    (episode,) = _convert(tmp_path / "whole", tmp_path / "whole_out").values()
    return episode

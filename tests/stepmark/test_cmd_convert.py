"""`stepmark convert-ui` and `stepmark inspect` through the real command line entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepmark.cli import main

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples" / "ui"


@pytest.fixture(scope="module")
def sample_output(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "ui-samples"
    assert main(["convert-ui", str(SAMPLES), str(out), "--quiet", "--shards", "2"]) == 0
    return out


def test_convert_ui_prints_a_summary(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["convert-ui", str(SAMPLES), str(out), "--shards", "2", "--direct_num_workers=1"]) == 0
    captured = capsys.readouterr()
    assert f"converted 7 of 7 episodes (17 steps, 610 objects) from {SAMPLES}" in captured.out
    assert "by layout: droidbot 1, rico_trace 1, single_screen 4, step_folder 1" in captured.out
    assert "dead letters: 3 (bad_action 1, missing_state 2)" in captured.out
    assert "counters: " in captured.out and "episodes=7" in captured.out
    assert "stepmark convert-ui: shard" in captured.err  # progress lines
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 7 and summary["runner"] == "FnApiRunner"


def test_convert_ui_errors_are_one_line(tmp_path: Path, capsys, sample_output: Path) -> None:
    assert main(["convert-ui", str(tmp_path / "nothing"), str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip().endswith("no such file or folder")
    assert main(["convert-ui", str(SAMPLES), str(sample_output), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("stepmark convert-ui: error:") and "--overwrite" in err and "\n" not in err


def test_output_that_cannot_be_a_folder_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    (tmp_path / "a-file").write_text("in the way")
    for output in (tmp_path / "a-file", tmp_path / "a-file" / "below"):
        assert main(["convert-ui", str(SAMPLES), str(output), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert "cannot create the output folder" in err and "Not a directory" in err and "\n" not in err


def test_inspect_folder(sample_output: Path, capsys) -> None:
    assert main(["inspect", str(sample_output)]) == 0
    text = capsys.readouterr().out
    assert f"{sample_output}: 7 episodes in 2 shard(s)" in text
    assert "steps: 17 (16 with a screenshot), objects: 610" in text
    assert "dead letters: 3 (missing_state 2, bad_action 1)" in text
    assert main(["inspect", str(sample_output), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["episodes_by_layout"] == {
        "single_screen": 4,
        "rico_trace": 1,
        "droidbot": 1,
        "step_folder": 1,
    }
    assert data["actions"]["SWIPE"] == 1
    # every tap/swipe of the samples lands on something a person can press (NEXT, not the pager behind it)
    assert data["target_resolution"]["rico_trace"] == {"actionable": 6, "non_actionable": 0, "unresolved": 0}
    assert data["target_resolution"]["droidbot"] == {"actionable": 3, "non_actionable": 0, "unresolved": 0}
    assert "targets of pointed actions, rico_trace: actionable 6 (100%), non-actionable 0 (0%)" in text


def test_inspect_one_shard(sample_output: Path, capsys) -> None:
    shard = sorted(sample_output.glob("episodes-*.tfrecord"))[0]
    assert main(["inspect", str(shard), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["shards"] == 1 and "dead_letters" not in data and 0 < data["episodes"] < 7


def test_inspect_episode(sample_output: Path, capsys) -> None:
    assert main(["inspect", str(sample_output), "--episode", "step_folders/yelp_bookmarks"]) == 0
    text = capsys.readouterr().out
    assert "episode step_folders/yelp_bookmarks (step_folder)" in text
    assert "TAP (1296,2294) -> object" in text and "'Bookmarks'" in text
    assert (
        main(
            [
                "inspect",
                str(sample_output),
                "--episode",
                "rico_trace/com.done.faasos",
                "--json",
                "--step",
                "4",
            ]
        )
        == 0
    )
    step = json.loads(capsys.readouterr().out)
    assert step["action"]["type"] == "SWIPE"
    shot = step["time_step"]["observation"]["screenshot"]
    assert shot == {
        "bytes": (SAMPLES / "rico_trace/com.done.faasos/screenshots/33610.jpg").stat().st_size,
        "format": "jpeg",
    }
    assert step["time_step"]["observation"]["json"]["bytes"] > 0
    assert main(["inspect", str(sample_output), "--episode", "nope"]) == 2
    assert "no episode 'nope'" in capsys.readouterr().err
    assert main(["inspect", str(sample_output), "--episode", "single_screens/avc_api27", "--step", "3"]) == 2
    assert "has steps 0..0, not 3" in capsys.readouterr().err

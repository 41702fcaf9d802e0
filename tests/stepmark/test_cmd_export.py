"""`stepmark export` from the command line: selection flags, Beam flags passed through, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines import export
from stepmark.cli import main
from tests.pipelines.export import readback
from tests.pipelines.export.export_data import NETHACK_ENV, PROCGEN_ENV, ExportData, build


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> ExportData:
    return build(tmp_path_factory.mktemp("cli-export") / "data", fixtures_dir, episodes=2, max_steps=8)


def test_export_by_episode_refs_with_beam_flags(data: ExportData, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    refs = [f"{e.study_id}/{e.session_id}/{e.id}" for e in data.procgen]
    argv = ["export", "--data", str(data.data_dir), "--out", str(out), "--end-of-episode-tag", "goal"]
    for r in refs:
        argv += ["--episode", r]
    # Unknown --flags are Beam options: both spellings reach the runner.
    argv += ["--runner", "FnApiRunner", "--direct_num_workers=1"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "export: 100.0%" in printed
    assert "exported 2 episode(s)" in printed and str(out) in printed
    read = readback.read_envlogger(out)
    assert [e["metadata"]["episode_id"] for e in read] == [e.id for e in data.procgen]
    assert read[0]["metadata"]["truncated_by_tag"] == "goal" and len(read[0]["records"]) == 6
    summary = json.loads((out / export.SUMMARY_FILE).read_text())
    assert summary["episodes"] == 2 and summary["format"] == "envlogger"


def test_study_with_two_environments_is_refused_in_one_line(data: ExportData, tmp_path: Path, capsys) -> None:
    code = main(
        ["export", "--data", str(data.data_dir), "--study", data.study_id, "--out", str(tmp_path / "o")]
    )
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("stepmark export: error:")
    assert PROCGEN_ENV in err and NETHACK_ENV in err and "--split-by-spec" in err
    assert not (tmp_path / "o").exists()


def test_split_by_spec_archive(data: ExportData, tmp_path: Path, capsys) -> None:
    out = tmp_path / "both.zip"
    argv = ["export", "--data", str(data.data_dir), "--study", data.study_id, "--split-by-spec", "--archive",
            "--strip-internal-metadata", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert out.is_file() and "(ZIP)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--state", "sleepy"], "unknown episode state 'sleepy'"),
        (["--episode", "only/two"], "is not STUDY/SESSION/EPISODE"),
        (["--tag", "never-used"], "no episodes to export"),
        ([], "nothing selected"),
        (["--study", "no-such-study"], "study 'no-such-study' not found"),
        (["--episode", "s1/sess/no-such-episode"], "episode s1/sess/no-such-episode not found"),
        # A mistyped export flag would otherwise reach Beam, which only logs that it discards it.
        (["--study", "x", "--strip-internal-metdata"], "unknown option(s) --strip-internal-metdata"),
        (["--study", "x", "--runner=NoSuchRunner"], "--runner=NoSuchRunner"),
        (["--study", "x", "--split", "train=0.9,val=0.2"], "add up to 1.1"),
        (["--study", "x", "--ui-objects", "padded:-3"], "--ui-objects 'padded:-3'"),
    ],
)
def test_bad_selections_are_one_line_errors(data: ExportData, tmp_path: Path, capsys, args, message) -> None:
    code = main(["export", "--data", str(data.data_dir), "--out", str(tmp_path / "o"), *args])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "extra", [["stray"], ["--runner", "FnApiRunner", "stray"], ["--direct_num_workers=1", "stray"]]
)
def test_stray_positional_arguments_are_refused(data: ExportData, tmp_path: Path, capsys, extra) -> None:
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "export",
                "--data",
                str(data.data_dir),
                "--study",
                data.study_id,
                "--out",
                str(tmp_path / "o"),
                *extra,
            ]
        )
    assert exc.value.code == 2 and "unrecognized arguments: stray" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_run_entry_point_takes_the_same_flags(data: ExportData, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    code = export.run(
        ["--data", str(data.data_dir), "--study", data.study_id, "--split-by-spec", "--out", str(out)]
    )
    assert code == 0
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted([PROCGEN_ENV, NETHACK_ENV])


def test_tfds_without_the_extra_is_a_clear_error(data: ExportData, tmp_path: Path) -> None:
    """Without TensorFlow Datasets installed (simulated: the import fails), --format tfds says what to install."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    code = (
        "import sys; sys.modules['tensorflow_datasets'] = None\n"
        "from stepmark.cli import main\n"
        f"sys.exit(main(['export', '--data', {str(data.data_dir)!r}, '--study', {data.study_id!r}, "
        f"'--split-by-spec', '--format', 'tfds', '--out', {str(tmp_path / 'o')!r}]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2
    assert "pip install -e '.[tfds]'" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_out_inside_a_file_or_empty_is_a_one_line_error(data: ExportData, tmp_path: Path, capsys) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    for out, message in [
        (a_file / "sub", "not a folder, so --out cannot be created inside it"),
        (tmp_path / "missing" / "sub", "the folder for --out does not exist"),
        (a_file, "already exists"),
        ("", "--out is empty"),
    ]:
        code = main(["export", "--data", str(data.data_dir), "--study", data.study_id, "--out", str(out)])
        err = capsys.readouterr().err.strip()
        assert code == 2 and message in err and len(err.splitlines()) == 1, (out, err)
    assert a_file.read_text() == "not a folder"


def test_empty_selection_says_what_the_filters_left_out(data: ExportData, tmp_path: Path, capsys) -> None:
    argv = ["export", "--data", str(data.data_dir), "--study", data.study_id, "--state", "abandoned"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no episodes to export" in err and len(err.splitlines()) == 1
    assert "1 rejected" in err and "--include-incomplete" in err  # the study's rejected episode, and the way
    assert not (tmp_path / "o").exists()


def test_parquet_with_splits_from_the_command_line(data: ExportData, tmp_path: Path, capsys) -> None:
    import pyarrow.parquet as pq

    out = tmp_path / "pq"
    refs = [f"{e.study_id}/{e.session_id}/{e.id}" for e in data.procgen]
    argv = ["export", "--data", str(data.data_dir), "--out", str(out), "--format", "parquet"]
    argv += ["--split", "train=0.5,test=0.5", "--split-seed", "1"]
    for r in refs:
        argv += ["--episode", r]
    assert main(argv) == 0
    table = pq.read_table(out / "data")
    assert set(table["episode_id"].to_pylist()) == {e.id for e in data.procgen}
    assert set(table["split"].to_pylist()) <= {"train", "test"}
    info = json.loads(table.schema.metadata[b"stepmark_export"])
    assert info["splits"]["seed"] == 1 and info["splits"]["fractions"] == {"train": 0.5, "test": 0.5}


def test_an_envlogger_export_prints_no_glog_lines(data: ExportData, tmp_path: Path) -> None:
    """envlogger's C++ writer logs INFO lines through glog ("Empty steps, nothing to do" on each writer close,
    after "Logging before InitGoogleLogging()"); a normal `stepmark export` keeps them out of stderr, whatever
    module first imports envlogger."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("GLOG_")}
    argv = ["export", "--data", str(data.data_dir), "--study", data.study_id, "--split-by-spec"]
    proc = subprocess.run(
        [sys.executable, "-m", "stepmark", *argv, "--out", str(tmp_path / "o")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "exported" in proc.stdout
    glog = [line for line in proc.stderr.splitlines() if "InitGoogleLogging" in line or line.startswith("I2")]
    assert not glog, proc.stderr

"""The command line under a careless operator (issue 13): arguments out of range, study specs that are FIFOs,
devices or sparse giants, and full or read-only disks. Each is one line naming the problem, a non-zero exit and
nothing half-written.

Full and read-only disks are real: a small tmpfs mounted for the test (skipped, with the reason printed, where
the machine does not allow mounting).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stepmark.cli import io_error_line, main
from tests.conftest import FIXTURES
from tests.pipelines.test_reliability_inputs import GIB, run_capped

RICO = FIXTURES / "rico"


def one_error_line(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    lines = err.splitlines()
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"stepmark {command}: error: ")
    return lines[0]


def rico_input(root: Path, count: int) -> Path:
    root.mkdir(parents=True)
    for src in sorted(RICO.glob("*.json"))[:count]:
        shutil.copyfile(src, root / src.name)
        shutil.copyfile(src.with_suffix(".jpg"), root / f"{src.stem}.jpg")
    return root


@contextlib.contextmanager
def small_disk(path: Path, size: str, *, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of `size` at `path` (read-only if asked); the test is skipped, saying why, if mounting fails."""
    path.mkdir(parents=True)
    options = f"size={size}" + (",ro" if read_only else "")
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
        )
    except FileNotFoundError:
        done = None
    if done is None or done.returncode != 0:
        reason = f"cannot mount a {size} tmpfs here: {done.stderr.strip() if done else 'no mount command'}"
        print(reason)
        pytest.skip(reason)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


# ---------------------------------------------------------------------------------------------------------
# Arguments


@pytest.mark.parametrize("seed", ["-1", str(2**32), str(-(2**70))])
def test_record_refuses_a_seed_out_of_range(capsys, tmp_path: Path, seed: str) -> None:
    code = main(["record", "--study", "s", "--env", "e", "--seed", seed, "--data", str(tmp_path / "d")])
    assert code == 2
    assert "--seed must be between 0 and 4294967295" in one_error_line(capsys, "record")
    assert not (tmp_path / "d").exists()


def test_convert_ui_refuses_an_unknown_runner_before_writing(capsys, tmp_path: Path) -> None:
    inp = rico_input(tmp_path / "in", 1)
    code = main(["convert-ui", str(inp), str(tmp_path / "out"), "--quiet", "--runner=NoSuchRunner"])
    assert code == 2
    assert "--runner=NoSuchRunner" in one_error_line(capsys, "convert-ui")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("shards", ["100000000", "10001", "0", "-3"])
def test_convert_ui_refuses_absurd_shard_counts(capsys, tmp_path: Path, shards: str) -> None:
    inp = rico_input(tmp_path / "in", 1)
    code = main(["convert-ui", str(inp), str(tmp_path / "out"), "--quiet", "--shards", shards])
    assert code == 2
    assert "--shards must be between 1 and 10000" in one_error_line(capsys, "convert-ui")
    assert not (tmp_path / "out").exists()


def test_convert_ui_writes_no_more_shards_than_episodes(capsys, tmp_path: Path) -> None:
    inp = rico_input(tmp_path / "in", 3)
    assert main(["convert-ui", str(inp), str(tmp_path / "out"), "--shards", "10000"]) == 0
    assert "3 episode(s) found: writing 3 shard(s), not 10000" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "out").glob("episodes-*")) == [
        f"episodes-0000{i}-of-00003.tfrecord" for i in range(3)
    ]
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["episodes"] == 3


# ---------------------------------------------------------------------------------------------------------
# Study specs that are not files, or far too large: refused without being read


def study_create_capped(spec: Path, data: Path) -> subprocess.CompletedProcess:
    """`stepmark study create SPEC` in a child with 2 GiB of address space and a wall-clock limit: a FIFO read
    would block forever, /dev/zero read whole would take all memory."""
    return run_capped(
        f"""
        import sys
        from stepmark.cli import main
        sys.exit(main(["study", "create", {str(spec)!r}, "--data", {str(data)!r}, "--user", "ann", "--no-check"]))
        """,
        address_space=2 * GIB,
        timeout=120,
    )


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "sparse", "folder"])
def test_spec_files_that_are_not_files_are_refused_unread(tmp_path: Path, kind: str) -> None:
    spec = tmp_path / "spec.yaml"
    if kind == "fifo":
        os.mkfifo(spec)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", spec)
    elif kind == "sparse":
        with open(spec, "wb") as f:
            f.truncate(3 * GIB)
    else:
        spec.mkdir()
    done = study_create_capped(spec, tmp_path / "data")
    assert done.returncode == 2, done.stderr[-2000:]
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"stepmark study: error: {spec}: ")
    expected = {
        "fifo": "a FIFO",
        "dev_zero": "a character device",
        "sparse": "larger than 1 MiB",
        "folder": "a folder",
    }
    assert expected[kind] in line


# ---------------------------------------------------------------------------------------------------------
# Full and read-only disks


def test_io_error_line_reads_errors_re_raised_as_text() -> None:
    beam_text = RuntimeError(
        "OSError: [Errno 28] No space left on device: '/out/.tmp/shard-1.tfrecord' [while running 'Write']"
    )
    assert (
        io_error_line(beam_text) == "/out/.tmp/shard-1.tfrecord: No space left on device (ENOSPC, errno 28)"
    )
    try:
        try:
            raise OSError(30, "Read-only file system", "/ro/x")
        except OSError as exc:
            raise ValueError("wrapped") from exc
    except ValueError as wrapped:
        assert io_error_line(wrapped) == "/ro/x: Read-only file system (EROFS, errno 30)"
    assert io_error_line(ValueError("not an I/O error")) is None
    tf_text = RuntimeError("/out/train.tfrecord-00000-of-00001; No space left on device")
    assert (
        io_error_line(tf_text)
        == "/out/train.tfrecord-00000-of-00001: No space left on device (ENOSPC, errno 28)"
    )


def test_convert_ui_on_a_full_disk(capsys, tmp_path: Path) -> None:
    inp = rico_input(tmp_path / "in", 12)  # about 6 MB of episodes
    with small_disk(tmp_path / "disk", "1m") as disk:
        code = main(["convert-ui", str(inp), str(disk / "out"), "--quiet", "--shards", "2"])
        assert code == 1
        line = one_error_line(capsys, "convert-ui")
        assert line.endswith("No space left on device (ENOSPC, errno 28)")
        assert f"{disk / 'out'}/" in line  # names the file it could not write
        assert list((disk / "out").iterdir()) == []  # no shard, no summary, no temporary folder


def test_convert_ui_to_a_read_only_disk(capsys, tmp_path: Path) -> None:
    inp = rico_input(tmp_path / "in", 1)
    with small_disk(tmp_path / "ro", "1m", read_only=True) as disk:
        code = main(["convert-ui", str(inp), str(disk / "out"), "--quiet"])
        assert code != 0
        line = one_error_line(capsys, "convert-ui")
        assert str(disk / "out") in line and "Read-only file system" in line


@pytest.fixture(scope="module")
def export_data(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path):
    from tests.pipelines.export.export_data import build

    return build(
        tmp_path_factory.mktemp("reliability-export") / "data", fixtures_dir, episodes=2, max_steps=8
    )


@pytest.mark.parametrize("fmt", ["envlogger", "parquet", "minari", pytest.param("tfds", marks=pytest.mark.tfds)])
def test_export_to_a_full_disk(capsys, tmp_path: Path, export_data, fmt: str) -> None:
    with small_disk(tmp_path / "disk", "64k") as disk:
        argv = ["export", "--data", str(export_data.data_dir), "--study", export_data.study_id]
        argv += ["--split-by-spec", "--format", fmt, "--out", str(disk / "out")]
        code = main(argv)
        assert code != 0
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err
        assert len(err.splitlines()) <= 3, err[-3000:]  # the export names each failed dataset at most
        assert "No space left on device" in err
        assert not list(disk.rglob("*summary*.json"))  # nothing that looks finished
        assert str(disk) in err  # the failed write names where it was writing


def test_export_to_a_read_only_disk(capsys, tmp_path: Path, export_data) -> None:
    with small_disk(tmp_path / "ro", "1m", read_only=True) as disk:
        argv = ["export", "--data", str(export_data.data_dir), "--study", export_data.study_id]
        argv += ["--split-by-spec", "--out", str(disk / "out")]
        code = main(argv)
        assert code != 0
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err and len(err.splitlines()) <= 3, err[-3000:]
        assert "Read-only file system" in err and str(disk) in err


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    """The command in a child process: a crash in native code (HDF5) fails the test instead of killing it."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([sys.executable, "-m", "stepmark", *argv], capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip


@pytest.mark.parametrize("size", ["200k", "600k", "950k"])
def test_minari_export_on_a_nearly_full_disk_is_one_line_not_a_crash(tmp_path: Path, export_data, size: str) -> None:
    """HDF5 hitting a full disk crashed the process (SIGSEGV after h5py tracebacks) at 200k and 600k here;
    episodes are now built in memory and written by Python, and main_data.hdf5 only after a free-space check."""
    with small_disk(tmp_path / "disk", size) as disk:
        done = run_cli("export", "--data", str(export_data.data_dir), "--study", export_data.study_id,
                       "--split-by-spec", "--format", "minari", "--out", str(disk / "out"))  # fmt: skip
        assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("stepmark export: error: "), done.stderr[-2000:]
        assert "No space left on device" in lines[0] and "errno 28" in lines[0] and str(disk) in lines[0]


def test_record_on_a_full_disk_is_one_line(tmp_path: Path) -> None:
    """SQLite words a full disk without a path or an errno, and the episode writer's Riegeli logged whole step
    records: each is now one line naming the file (or the database) and the errno."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: full\ndescription: x\ninstructions: x\nenvironment_specs:\n"
        "  - {id: coinrun, name: CoinRun, sync: true, max_episode_steps: 200,\n"
        "     procgen: {id: coinrun, distribution_mode: DISTRIBUTION_EASY, rand_seed: 7}}\n"
    )
    # The store fills first (the disk filled up once the study exists: the store's size grows with its schema, so
    # no fixed disk size keeps this case) / the episode files (or the store) fill later.
    for size, fill in (("1m", True), ("3m", False)):
        with small_disk(tmp_path / f"disk{size}", size) as disk:
            data = disk / "data"
            created = run_cli("study", "create", str(spec), "--data", str(data))
            assert created.returncode == 0, created.stderr[-2000:]
            study = created.stdout.strip().splitlines()[-1]
            if fill:
                _fill(disk)
            done = run_cli("record", "--data", str(data), "--study", study, "--env", "coinrun", "--episodes", "40",
                           "--policy", "random")  # fmt: skip
            assert done.returncode != 0
            lines = [x for x in done.stderr.replace("\r", "\n").splitlines() if x and not x.startswith("record ")]
            assert len(lines) == 1 and lines[0].startswith("stepmark record: error: "), done.stderr[-3000:]
            assert "No space left on device" in lines[0] and f"{data}/" in lines[0]  # names the file
            assert "errno 28" in lines[0] or "[Errno 28]" in lines[0]


def test_import_ui_on_a_full_disk_is_one_line(tmp_path: Path) -> None:
    converted = tmp_path / "converted"
    assert main(["convert-ui", str(rico_input(tmp_path / "in", 3)), str(converted), "--quiet"]) == 0
    with small_disk(tmp_path / "disk", "1m") as disk:
        data = disk / "data"
        assert run_cli("study", "list", "--data", str(data)).returncode == 0  # the store exists
        _fill(disk)
        done = run_cli("import-ui", str(converted), "--study", "s", "--data", str(data))
        assert done.returncode != 0
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("stepmark import-ui: error: "), done.stderr[-3000:]
        assert str(data / "stepmark.db") in lines[0] and "ENOSPC, errno 28" in lines[0]


def _fill(disk: Path) -> None:
    """Write zeros until the disk is full."""
    with open(disk / "fill", "wb", buffering=0) as f:  # unbuffered: nothing left to fail at close
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


def test_annotate_on_a_full_or_read_only_disk_says_so_before_starting(capsys, tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "1m") as disk:
        data = disk / "data"
        assert main(["study", "list", "--data", str(data)]) == 0  # a store that opens
        capsys.readouterr()
        _fill(disk)
        assert main(["annotate", "--data", str(data), "--port", "0"]) == 1
        line = one_error_line(capsys, "annotate")
        assert line.endswith(f"{data}: No space left on device (ENOSPC, errno 28)")
        (disk / "fill").unlink()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        assert main(["annotate", "--data", str(data), "--port", "0"]) == 1
        line = one_error_line(capsys, "annotate")
        assert line.endswith(f"{data}: Read-only file system (EROFS, errno 30)")


def test_convert_ui_of_records_on_a_full_disk_names_the_spill_file(capsys, tmp_path: Path) -> None:
    """Record bytes wait in a spill file of OUTPUT's temporary folder: a disk too small for them is one line
    naming that file, and nothing is left in OUTPUT."""
    from tests.pipelines.record_writers import example, feature_bytes, feature_ints, write_tfrecord

    inp = tmp_path / "in"
    inp.mkdir()
    records = [example({"episode_id": feature_ints(i), "accessibility_trees": feature_bytes(b""),
                        "screenshots": feature_bytes(b"\0" * (5 << 20))}) for i in range(2)]  # fmt: skip
    write_tfrecord(inp / "ac.tfrecord.gz", records)
    with small_disk(tmp_path / "disk", "2m") as disk:
        assert main(["convert-ui", str(inp), str(disk / "out"), "--quiet"]) == 1
        line = one_error_line(capsys, "convert-ui")
        assert ".spill: No space left on device (ENOSPC, errno 28)" in line and f"{disk / 'out'}/" in line
        assert list((disk / "out").iterdir()) == []

"""TFRecord inputs (AndroidControl, Android in the Wild) through the same guarded reader as every other trace
file (issue 22): FIFOs, devices, links out of INPUT, links to /dev/zero, symlink loops and dangling links are
dead letters with the reader's reason (`not_regular`, `outside_input`, `unreadable`) in the reason field, never a
hang or a read; remote filesystems still read through Beam's FileSystems. DroidBot layout files get the same
reasons. Conversions run in a child with its address space capped (tests.pipelines.test_reliability_inputs)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from pipelines.traces.files import ReadPolicy
from pipelines.traces.records import AitwStep, read_file_records
from tests.conftest import FIXTURES
from tests.pipelines.record_writers import frame, write_tfrecord
from tests.pipelines.test_aitw import step
from tests.pipelines.test_reliability_inputs import convert_capped


def aitw_episode(episode: str, screens=("336", "3360")) -> list[bytes]:
    n = len(screens)
    return [step(FIXTURES, episode, i, n, screen, 5 if i < n - 1 else 10) for i, screen in enumerate(screens)]


def hostile_records(inp: Path, outside: Path) -> None:
    write_tfrecord(inp / "good.tfrecord.gz", aitw_episode("good"))
    write_tfrecord(outside / "secret.tfrecord", aitw_episode("secret"), compress=False)
    os.mkfifo(inp / "fifo.tfrecord")
    os.mkfifo(inp / "fifo-00000-of-00001.gz")  # a release shard name
    os.symlink("/dev/zero", inp / "zero.tfrecord")
    os.symlink("/dev/zero", inp / "zero.tfrecord.gz")
    os.symlink(outside / "secret.tfrecord", inp / "out.tfrecord")
    os.symlink("loop.tfrecord", inp / "loop.tfrecord")
    os.symlink("a.tfr", inp / "b.tfr")
    os.symlink("b.tfr", inp / "a.tfr")
    os.symlink(outside / "gone.tfrecord", inp / "dangling.tfrecord")
    (inp / "sub").mkdir()
    os.symlink("../sub", inp / "sub" / "cycle")  # a folder loop: listed once, not followed forever


def dead_by_name(out: Path) -> dict[str, tuple[str, str]]:
    dead = {}
    for line in (out / "dead_letters.jsonl").read_text().splitlines():
        d = json.loads(line)
        dead.setdefault(Path(d["source_path"]).name, (d["reason"], d["exception"]))
    return dead


def test_hostile_tfrecord_files_are_dead_letters_with_the_readers_reasons(tmp_path: Path) -> None:
    inp, outside = tmp_path / "in", tmp_path / "outside"
    inp.mkdir()
    outside.mkdir()
    hostile_records(inp, outside)
    summary = convert_capped(inp, tmp_path / "out")  # 3 GiB of address space; the FIFOs would hang the old code
    dead = dead_by_name(tmp_path / "out")
    expected = {
        "fifo.tfrecord": "not_regular",
        "fifo-00000-of-00001.gz": "not_regular",
        "zero.tfrecord": "outside_input",
        "zero.tfrecord.gz": "outside_input",
        "out.tfrecord": "outside_input",
        "loop.tfrecord": "unreadable",
        "a.tfr": "unreadable",
        "b.tfr": "unreadable",
        "dangling.tfrecord": "unreadable",
    }
    for name, reason in expected.items():
        assert dead[name][0] == reason, (name, dead.get(name))
        assert name in dead[name][1]
    assert "symlink loop" in dead["loop.tfrecord"][1]
    assert summary["episodes"] == 1 and summary["dead_letters_by_reason"]["not_regular"] == 2
    assert "secret" not in (tmp_path / "out" / "dead_letters.jsonl").read_text().replace("secret.tfrecord", "")

    # --follow-links reads the link out of INPUT, never a device behind a link
    followed = convert_capped(inp, tmp_path / "followed", "--follow-links")
    dead = dead_by_name(tmp_path / "followed")
    assert followed["episodes"] == 2  # good + secret
    assert dead["zero.tfrecord"][0] == dead["zero.tfrecord.gz"][0] == "not_regular"
    assert "character device" in dead["zero.tfrecord"][1]
    assert "out.tfrecord" not in dead


def test_a_device_inside_input_named_as_a_tfrecord_is_not_read(tmp_path: Path) -> None:
    try:
        os.mknod(tmp_path / "null.tfrecord", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    except PermissionError:
        pytest.skip("mknod is not permitted here")
    (item,) = read_file_records(str(tmp_path / "null.tfrecord"), ReadPolicy((str(tmp_path),)))
    assert item.reason == "not_regular" and "character device" in item.exception


def test_a_remote_tfrecord_is_read_through_filesystems(memfs) -> None:
    records = aitw_episode("remote")
    memfs["memfs://bucket/in/steps.tfrecord"] = b"".join(frame(r) for r in records)
    items = list(read_file_records("memfs://bucket/in/steps.tfrecord", ReadPolicy(None)))
    assert [type(i) for i in items] == [AitwStep, AitwStep]
    assert {i.episode_id for i in items} == {"remote"}


@pytest.fixture
def memfs():
    from tests.pipelines.test_convert_filesystems import MemoryFileSystem

    MemoryFileSystem.OBJECTS.clear()
    yield MemoryFileSystem.OBJECTS
    MemoryFileSystem.OBJECTS.clear()


def test_droidbot_layout_files_that_are_fifos_or_devices_say_not_regular(tmp_path: Path) -> None:
    run = tmp_path / "in" / "yelp"
    shutil.copytree(FIXTURES / "droidbot" / "yelp", run)
    states = sorted((run / "states").glob("state_*.json"))
    events = sorted((run / "events").glob("event_*.json"))
    states[0].unlink()
    os.mkfifo(states[0])
    events[1].unlink()
    os.mkfifo(events[1])
    events[2].unlink()
    os.symlink("/dev/zero", events[2])
    convert_capped(tmp_path / "in", tmp_path / "out")
    dead = dead_by_name(tmp_path / "out")
    assert dead[states[0].name][0] == "not_regular"
    assert dead[events[1].name][0] == "not_regular"
    assert dead[events[2].name][0] == "outside_input"
    convert_capped(tmp_path / "in", tmp_path / "followed", "--follow-links")
    assert dead_by_name(tmp_path / "followed")[events[2].name][0] == "not_regular"

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

from pipelines.protowire import varint
from pipelines.traces.files import ReadPolicy
from pipelines.traces.records import AitwStep, read_file_records
from tests.conftest import FIXTURES
from tests.pipelines.record_writers import example, feature_bytes, feature_ints, frame, write_tfrecord
from tests.pipelines.test_aitw import step
from tests.pipelines.test_reliability_inputs import convert_capped, run_capped


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


# ---- memory bounded by what is kept: every count, length and size checked before anything is allocated ----


def raw_step(episode: str, step_id: int, length: int, width: int, height: int, channels: int, image: bytes) -> bytes:
    return example({
        "episode_id": feature_bytes(episode.encode()), "step_id": feature_ints(step_id),
        "episode_length": feature_ints(length), "image/encoded": feature_bytes(image),
        "image/height": feature_ints(height), "image/width": feature_ints(width),
        "image/channels": feature_ints(channels), "results/action_type": feature_ints(10),
    })  # fmt: skip


def forest_bytes(nodes: list[bytes]) -> bytes:
    """A serialized AndroidAccessibilityForest of one window holding `nodes` (serialized nodes), by hand."""
    tree = b"".join(b"\x0a" + varint(len(n)) + n for n in nodes)
    window = b"\x5a" + varint(len(tree)) + tree  # field 11 (tree)
    return b"\x0a" + varint(len(window)) + window  # field 1 (windows)


def node_bytes(unique_id: int, children: bytes = b"") -> bytes:
    out = b"\x08" + varint(unique_id)
    if children:
        out += b"\xca\x01" + varint(len(children)) + children  # field 25 (child_ids), packed
    return out


def test_counts_and_sizes_claimed_by_records_are_checked_before_allocating(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    tiny = b"\x00" * 12  # 2x2 RGB
    write_tfrecord(inp / "length.tfrecord.gz", [raw_step("len12", 0, 10**12, 2, 2, 3, tiny),
                                                raw_step("len7", 0, 2 * 10**7, 2, 2, 3, tiny)])  # fmt: skip
    write_tfrecord(inp / "ids.tfrecord.gz", [raw_step("ids", 2**62, 1, 2, 2, 3, tiny),
                                             raw_step("ids", -5, 1, 2, 2, 3, tiny)])  # fmt: skip
    big = b"\x00" * (60 << 20)  # 60 MB of pixels in a 60 KB gzip
    write_tfrecord(inp / "pixels.tfrecord.gz", [raw_step("huge", 0, 1, 10000, 5000, 4, big),
                                                raw_step("liar", 0, 1, 100, 100, 3, big)])  # fmt: skip
    del big
    png = (FIXTURES / "rico" / "336.jpg").read_bytes()
    repeated = forest_bytes([node_bytes(1, b"\x02" * (40 << 20)), node_bytes(2)])  # child 2 listed 40 M times
    empties = forest_bytes([b""] * 3_000_000)  # 6 MB on the wire, ~1 GB once parsed
    write_tfrecord(inp / "forests.tfrecord.gz", [
        example({"episode_id": feature_ints(7), "accessibility_trees": feature_bytes(repeated),
                 "screenshots": feature_bytes(png)}),
        example({"episode_id": feature_ints(8), "accessibility_trees": feature_bytes(empties),
                 "screenshots": feature_bytes(png)}),
    ])  # fmt: skip
    del repeated, empties
    many = b"\x0a" + varint(2 * 5_000_000) + b"\x0a\x00" * 5_000_000  # 5 M empty values in 10 MB
    write_tfrecord(inp / "many.tfrecord.gz", [
        example({"episode_id": feature_ints(9), "accessibility_trees": many, "screenshots": many}),
    ])  # fmt: skip
    del many
    summary = convert_capped(inp, tmp_path / "out", address_space=3 << 30)
    letters = [json.loads(line) for line in (tmp_path / "out" / "dead_letters.jsonl").read_text().splitlines()]
    by_episode = {}
    for d in letters:
        by_episode.setdefault(d["episode_id"], []).append((d["reason"], d["exception"]))
    # a claimed length is not a list to build: the step converts, the claim is named in a warning
    assert summary["episodes"] == 2 and "len12" not in by_episode and "len7" not in by_episode
    out_of_range = [d["reason"] for d in letters if "step_id" in d["exception"] and "out of range" in d["exception"]]
    assert out_of_range == ["bad_record", "bad_record"]
    (huge,) = by_episode["huge"]
    assert huge[0] == "too_large" and "10000x5000" in huge[1]
    (liar,) = by_episode["liar"]
    assert liar[0] == "bad_screenshot" and "100x100x3 needs 30000" in liar[1]
    assert by_episode["7"][0][0] == "too_large" and "child links" in by_episode["7"][0][1]
    assert by_episode["8"][0][0] == "too_large"
    # 5 M observations without a screenshot were 5 M dead letters (2.4 GB to build them): one, naming the count
    (many_steps,) = by_episode["9"]
    assert many_steps[0] == "bad_record" and "5000000 values" in many_steps[1]
    assert not any(d["reason"] == "internal_error" for d in letters)


def test_a_gzip_of_large_records_is_converted_record_by_record_not_all_at_once(tmp_path: Path) -> None:
    """8 AndroidControl records of 120 MB each (each under the 256 MiB record limit) in a 4 MB gzip: the runner
    used to keep every record's bytes until the grouping (12 x 200 MB: 11.3 GB RSS; under a cap all became one
    MemoryError). Their bytes now wait in a spill file of the temporary folder: under 3 GiB of address space
    each record is judged alone (its 120 MB screenshot is too large) and nothing is left in OUTPUT."""
    import zlib

    inp = tmp_path / "in"
    inp.mkdir()
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    with open(inp / "large.tfrecord.gz", "wb") as f:
        for i in range(8):
            record = example({"episode_id": feature_ints(500 + i), "accessibility_trees": feature_bytes(b""),
                              "screenshots": feature_bytes(b"\0" * (120 << 20))})  # fmt: skip
            f.write(comp.compress(frame(record)))
            del record
        f.write(comp.flush())
    assert (inp / "large.tfrecord.gz").stat().st_size < 8 << 20
    summary = convert_capped(inp, tmp_path / "out", address_space=3 << 30)
    assert summary["dead_letters_by_reason"]["too_large"] == 8, summary["dead_letters_by_reason"]
    assert set(summary["dead_letters_by_reason"]) == {"too_large", "no_steps"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "dead_letters.jsonl", "episodes-00000-of-00001.tfrecord", "summary.json"]  # no spill file left


def test_forest_bombs_are_refused_before_the_protobuf_parser_builds_them() -> None:
    """Empty nodes cost 2 bytes on the wire (7 in text) and hundreds once parsed; a packed child list 1 byte
    per id and 8 once parsed: counted first, under 1 GiB of address space (the old parse took 2.1 GB)."""
    done = run_capped(
        """
        import json
        from pipelines.hierarchy import HierarchyError, parse
        from tests.pipelines.test_reliability_records import forest_bytes, node_bytes
        bombs = {
            "a11y_forest": [forest_bytes([b""] * 3_000_000),
                            forest_bytes([node_bytes(1, b"\\x02" * (40 << 20)), node_bytes(2)])],
            "a11y_forest_text": [b"windows { tree { " + b"nodes{}" * 9_000_000 + b" } }",
                                 b"windows { tree { nodes { unique_id: 1 " + b"child_ids: 2 " * 4_000_000 + b"} } }"],
        }
        out = []
        for fmt, datas in bombs.items():
            for data in datas:
                try:
                    parse(data, fmt=fmt)
                    out.append("parsed")
                except HierarchyError as exc:
                    out.append(exc.reason)
        print(json.dumps(out))
        """,
        address_space=1 << 30,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["too_large"] * 4

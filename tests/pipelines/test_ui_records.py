"""Reading convert-ui output: TFRecord framing, random access by byte offset, refusing unfinished output."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from pipelines import tfrecord, ui_records
from pipelines.convert import run
from pipelines.errors import StepmarkError


def test_tfrecord_round_trip_and_offsets() -> None:
    payloads = [b"", b"a", b"x" * 70_000]
    buf = io.BytesIO(b"".join(tfrecord.encode(p) for p in payloads))
    got = list(tfrecord.iter_records(buf))
    assert [d for _, d in got] == payloads
    assert [o for o, _ in got] == [0, 16, 33]
    assert tfrecord.read_at(buf, 16) == (b"a", 33)


def test_tfrecord_matches_tensorflow_framing() -> None:
    # Length prefix little-endian, then the masked CRCs: Beam's reader checks both.
    record = tfrecord.encode(b"hello")
    assert record[:8] == (5).to_bytes(8, "little")
    assert len(record) == 8 + 4 + 5 + 4
    # Beam's own TFRecord coder must read what we write.
    from apache_beam.io.tfrecordio import _TFRecordUtil

    assert _TFRecordUtil.read_record(io.BytesIO(record)) == b"hello"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:-3], "truncated"),
        (lambda b: b[:12] + b"X" + b[13:], "data CRC mismatch"),
        (lambda b: b"\x07" + b[1:], "length CRC mismatch"),
        (  # a crafted length with a valid CRC: refused before allocating 2**62 bytes
            lambda b: (
                (2**62).to_bytes(8, "little")
                + tfrecord.masked_crc((2**62).to_bytes(8, "little")).to_bytes(4, "little")
                + b[12:]
            ),
            "claims",
        ),
    ],
)
def test_tfrecord_damage_is_reported(damage, message) -> None:
    data = damage(tfrecord.encode(b"hello world"))
    with pytest.raises(tfrecord.TFRecordError, match=message):
        list(tfrecord.iter_records(io.BytesIO(data), name="s.tfrecord"))


@pytest.fixture(scope="module")
def converted(tmp_path_factory, fixtures_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("out") / "ui"
    assert run([str(fixtures_dir / "rico"), str(out), "--shards", "3", "--quiet"]) == 0
    return out


def test_index_and_random_access(converted: Path, fixtures_dir: Path) -> None:
    refs = ui_records.index_records(str(converted))
    assert len(refs) == 41
    assert {r.episode_id for r in refs} == {p.stem for p in (fixtures_dir / "rico").glob("*.json")}
    assert {Path(r.shard).name for r in refs} <= {f"episodes-0000{i}-of-00003.tfrecord" for i in range(3)}
    for ref in refs[::7]:
        e = ui_records.read_episode(ref.shard, ref.offset)
        assert (e.episode_id, len(e.episode.time_steps), e.app_package, e.source) == (
            ref.episode_id, ref.num_steps, ref.app_package, ref.source,
        )  # fmt: skip
    one = refs[3]
    shard_refs = ui_records.index_records(one.shard)  # a single shard works too
    assert one in shard_refs
    with pytest.raises(StepmarkError, match="not the start of a TFRecord record"):
        ui_records.read_episode(one.shard, one.offset + 1)


def test_iter_and_find(converted: Path) -> None:
    ids = [e.episode_id for e in ui_records.iter_episodes(str(converted))]
    assert len(ids) == 41
    assert ui_records.find_episode(str(converted), "33600").episode_id == "33600"
    with pytest.raises(StepmarkError, match="no episode 'nope'"):
        ui_records.find_episode(str(converted), "nope")


def test_unfinished_output_is_refused(converted: Path, tmp_path: Path) -> None:
    partial = tmp_path / "partial"
    partial.mkdir()
    shard = next(converted.glob("episodes-*.tfrecord"))
    (partial / shard.name).write_bytes(shard.read_bytes())
    with pytest.raises(StepmarkError, match="no summary.json"):
        ui_records.index_records(str(partial))
    with pytest.raises(StepmarkError, match="no such file"):
        ui_records.index_records(str(tmp_path / "nowhere"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("these are notes, not a TFRecord shard")
    with pytest.raises(StepmarkError, match="not a convert-ui output folder"):
        ui_records.index_records(str(tmp_path / "other"))
    with pytest.raises(StepmarkError, match="not the start of a TFRecord record"):
        ui_records.index_records(str(tmp_path / "other" / "notes.txt"))

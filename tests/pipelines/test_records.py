"""TFRecord input files on their own: framing errors, gzip told by its bytes, and record classification, with
records written by the independent writer in record_writers.py."""

from __future__ import annotations

import gzip
import io
import struct
from pathlib import Path

import pytest

from pipelines import tfrecord
from pipelines.traces.model import DeadLetter, RecordEpisode
from pipelines.traces.records import AitwStep, read_file_records
from tests.pipelines.record_writers import example, feature_bytes, feature_ints, frame, write_tfrecord
from tests.pipelines.test_aitw import step


def _episode(episode_id: int) -> bytes:
    return example({"episode_id": feature_ints(episode_id), "accessibility_trees": feature_bytes(b"")})


def test_stream_framing_errors() -> None:
    good = frame(b"abc")
    assert [d for _, d in tfrecord.iter_stream(io.BytesIO(good + good))] == [b"abc", b"abc"]
    corrupt = good[:-1] + bytes([good[-1] ^ 1])
    out = list(tfrecord.iter_stream(io.BytesIO(corrupt + good)))
    assert isinstance(out[0][1], tfrecord.TFRecordError) and out[1] == (len(good), b"abc")  # reading goes on
    with pytest.raises(tfrecord.TFRecordError, match="truncated"):
        list(tfrecord.iter_stream(io.BytesIO(good + good[:-2])))
    with pytest.raises(tfrecord.TFRecordError, match="not the start"):
        list(tfrecord.iter_stream(io.BytesIO(b"x" * 20)))
    huge = struct.pack("<Q", 1 << 40)
    header = huge + struct.pack("<I", tfrecord.masked_crc(huge))
    with pytest.raises(tfrecord.TFRecordError, match="claims"):  # refused before reading 1 TiB
        list(tfrecord.iter_stream(io.BytesIO(header)))


def test_gzip_is_told_by_its_bytes_and_records_are_classified(tmp_path: Path, fixtures_dir: Path) -> None:
    records = [_episode(5), step(fixtures_dir, "e1", 0, 1, "336", 5), example({"other": feature_ints(1)})]
    write_tfrecord(tmp_path / "plain.tfrecord.gz", records, compress=False)  # a .gz name on plain bytes
    write_tfrecord(tmp_path / "packed-00000-of-00001", records, compress=True)
    for name in ("plain.tfrecord.gz", "packed-00000-of-00001"):
        items = list(read_file_records(str(tmp_path / name)))
        assert [type(i) for i in items] == [RecordEpisode, AitwStep, DeadLetter]
        assert items[0].episode_id == "5" and items[1].episode_id == "e1"
        assert items[2].reason == "bad_record" and "features: other" in items[2].exception


def test_damaged_files_are_dead_letters(tmp_path: Path) -> None:
    body = gzip.compress(frame(_episode(1)) * 3, mtime=0)
    (tmp_path / "corrupt.tfrecord.gz").write_bytes(
        body[:30] + bytes(x ^ 0xFF for x in body[30:60]) + body[60:]
    )
    items = list(read_file_records(str(tmp_path / "corrupt.tfrecord.gz")))
    assert items and isinstance(items[-1], DeadLetter) and items[-1].reason == "bad_record"
    assert "corrupt.tfrecord.gz" in items[-1].exception
    mistyped = example({"episode_id": feature_bytes(b"seven"), "accessibility_trees": feature_bytes(b"")})
    write_tfrecord(tmp_path / "typed.tfrecord", [mistyped], compress=False)
    (item,) = read_file_records(str(tmp_path / "typed.tfrecord"))
    assert item.reason == "bad_record" and "'episode_id' is a bytes_list" in item.exception
    (tmp_path / "junk.tfrecord").write_bytes(b"\x00" * 3)
    (item,) = read_file_records(str(tmp_path / "junk.tfrecord"))
    assert item.reason == "bad_record" and "truncated record header" in item.exception

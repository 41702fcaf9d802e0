"""Our Riegeli records writer against envlogger's own (C++ Riegeli) writer: uncompressed, the four shard files
are byte for byte the same for the same records (real exported episodes, and records of every size around
block and chunk boundaries); compressed, they read back record for record the same through envlogger.Reader;
without HighwayHash, the export falls back to envlogger's writer and says so once."""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipelines import export
from pipelines.episodes import open_episode
from pipelines.exporters import envlogger_writer, riegeli_records, riegeli_shard
from pipelines.exporters.riegeli_shard import SHARD_FILES, ShardOptions
from pipelines.exporters.transform import ExportEpisode, TransformOptions, transform_episode
from tests.pipelines.export import readback
from tests.pipelines.export.export_data import ExportData

# The spec's fixed first 64 bytes of every Riegeli/records file (doc/riegeli_records_file_format.md).
SIGNATURE = bytes.fromhex(
    "83af70d10d884a3f0000000000000000"
    "400000000000000091bac23c9287e1a9"
    "0000000000000000e19f13c0e9b1c372"
    "73000000000000000000000000000000"
)


def exported_episodes(data: ExportData) -> list[ExportEpisode]:
    """A Procgen episode, a UI episode, and a single-step episode (the Procgen one's first step alone)."""
    out = []
    for n, episode in enumerate([data.procgen[0], data.ui[0]]):
        with open_episode(episode, data.data_dir) as reader:
            steps, meta = list(reader), reader.metadata
        out.append(transform_episode(n, episode, steps, TransformOptions(step_tag_labels=("jump",)), meta))
    first = out[0]
    out.append(dataclasses.replace(first, meta=dataclasses.replace(first.meta, episode_index=2), steps=first.steps[:1]))
    return out


def envlogger_shard(folder: Path, records: list[Any], metadata: Any, options: ShardOptions, wire: bool) -> Path:
    """envlogger's own writer (messages parsed from our bytes, or `_WireData` as they are); its shard folder."""
    folder.mkdir()
    writer = envlogger_writer._Writer(str(folder), {}, options.envlogger_options())
    data = writer._data_writer
    for t, record in enumerate(records):
        assert data.add_step(record if wire else envlogger_writer.encode(tuple(record)), t == 0)
    data.set_episode_metadata(metadata if wire else envlogger_writer.encode(metadata))
    writer.close()
    (shard,) = [d for d in folder.iterdir() if d.is_dir()]
    return shard


def same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.asarray(a).dtype == np.asarray(b).dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


def test_an_empty_file_is_the_specs_signature() -> None:
    out = io.BytesIO()
    writer = riegeli_records.RecordsWriter(out, compression_level=3)
    assert writer.close() == 64 and out.getvalue() == SIGNATURE


@pytest.mark.parametrize("chunk_size", [1 << 20, 1 << 16, 1000])
def test_uncompressed_shards_of_real_episodes_are_byte_identical_to_envloggers(
    export_data: ExportData, tmp_path: Path, chunk_size: int
) -> None:
    options = ShardOptions(compression_level=None, chunk_size=chunk_size)
    for exported in exported_episodes(export_data):
        index = exported.meta.episode_index
        staging = tmp_path / f"ours{index}"
        result = envlogger_writer.write_episode_shard(exported, str(staging), options)
        theirs = envlogger_shard(
            tmp_path / f"theirs{index}", envlogger_writer.episode_records(exported), exported.meta.to_dict(), options,
            wire=False,
        )  # fmt: skip
        ours = staging / envlogger_writer.shard_name(index)
        assert sorted(p.name for p in ours.iterdir()) == sorted(SHARD_FILES)  # no temporary file left
        for name in SHARD_FILES:
            assert (ours / name).read_bytes() == (theirs / name).read_bytes(), (exported.meta.episode_id, name)
        assert result.num_bytes == sum((ours / name).stat().st_size for name in SHARD_FILES)
        assert result.num_steps == len(exported.steps)


def test_uncompressed_files_are_byte_identical_around_block_and_chunk_boundaries(tmp_path: Path) -> None:
    """Records of 0 bytes to > 64 KiB, few and many, in chunks of 1 byte to 1 MiB: block headers inside chunk
    headers, data and padding; empty records (chunks padded to one byte a record)."""
    rng = random.Random(7)
    metadata = envlogger_writer.serialize({"episode_id": "x", "tags": []})
    for trial in range(24):
        count = rng.choice([1, 3, 40, 700])
        largest = rng.choice([0, 2, 300, 20_000, 70_000])
        sizes = [rng.randint(0, largest) for _ in range(count)]
        records = [envlogger_writer.serialize(os.urandom(n)) if n else b"" for n in sizes]
        options = ShardOptions(compression_level=None, chunk_size=rng.choice([1, 100, 5000, 1 << 16, 1 << 20]))
        ours = tmp_path / f"ours{trial}"
        riegeli_shard.write_shard(str(ours), iter(records), metadata, options)
        wire = [envlogger_writer._WireData(r) for r in records]
        theirs = envlogger_shard(tmp_path / f"theirs{trial}", wire, envlogger_writer._WireData(metadata), options, True)
        for name in SHARD_FILES:
            assert (ours / name).read_bytes() == (theirs / name).read_bytes(), (trial, options, name)


def read_shard(staging: Path) -> list[dict[str, Any]]:
    envlogger_writer.write_dataset_metadata(str(staging), None, {})
    return readback.read_envlogger(staging)


def test_compressed_shards_read_back_like_envloggers_and_repeat_byte_for_byte(
    export_data: ExportData, tmp_path: Path
) -> None:
    episodes = exported_episodes(export_data)
    for exported in episodes:
        envlogger_writer.write_episode_shard(exported, str(tmp_path / "ours"))
        envlogger_writer.write_episode_shard(exported, str(tmp_path / "again"))
        envlogger_writer._write_shard_with_envlogger(
            envlogger_writer.episode_records(exported),
            exported.meta.to_dict(),
            str(tmp_path / "theirs" / envlogger_writer.shard_name(exported.meta.episode_index)),
            envlogger_writer.SHARD_OPTIONS,
        )
        envlogger_writer.write_episode_shard(exported, str(tmp_path / "plain"), ShardOptions(None))
    ours, theirs = read_shard(tmp_path / "ours"), read_shard(tmp_path / "theirs")
    assert [len(e["records"]) for e in ours] == [len(e.steps) for e in episodes]
    assert same(ours, theirs)
    assert same(ours, read_shard(tmp_path / "plain"))
    files = sorted((tmp_path / "ours").glob("*/*.riegeli"))
    assert len(files) == 4 * len(episodes)
    for path in files:
        relative = path.relative_to(tmp_path / "ours")
        assert path.read_bytes() == (tmp_path / "again" / relative).read_bytes(), relative
        if path.name == "steps.riegeli":  # zstd shrinks the records (Procgen frames: > 2x)
            assert path.stat().st_size < (tmp_path / "plain" / relative).stat().st_size
    ui = next(e for e in ours if e["metadata"]["kind"] == "ui")
    assert ui["metadata"]["tags"] == [] and ui["records"][0]["custom_data"]["keys"] == []


def test_a_failed_shard_leaves_no_file(tmp_path: Path) -> None:
    """A shard is written whole or not at all: each file under a temporary name, renamed once all four are
    complete; an error midway removes what was written."""

    def records():
        yield envlogger_writer.serialize({"step": 0})
        raise OSError("disk full (injected)")

    folder = tmp_path / "shard"
    with pytest.raises(OSError, match="injected"):
        riegeli_shard.write_shard(str(folder), records(), None, ShardOptions())
    assert not folder.exists() or not any(folder.iterdir())
    with pytest.raises(ValueError, match="at least one step"):
        riegeli_shard.write_shard(str(folder), iter([]), None, ShardOptions())
    assert not any(folder.iterdir())
    # Written twice (a retried bundle): the same four files, replaced.
    for _ in range(2):
        riegeli_shard.write_shard(str(folder), iter([b""]), None, ShardOptions())
        assert sorted(p.name for p in folder.iterdir()) == sorted(SHARD_FILES)


def test_without_highwayhash_the_export_uses_envloggers_writer(
    export_data: ExportData, tmp_path: Path, monkeypatch, caplog
) -> None:
    refs = [export_data.ref(e) for e in export_data.procgen]
    expected = readback.read_envlogger(_export(export_data, tmp_path / "ours", refs))
    monkeypatch.setattr(riegeli_records, "_hash_fn", [riegeli_records.HashUnavailable("no HighwayHash (test)")])
    monkeypatch.setattr(envlogger_writer, "_fallback_logged", [])
    with caplog.at_level(logging.WARNING, logger=envlogger_writer.__name__):
        out = _export(export_data, tmp_path / "fallback", refs)
    warnings = [r.getMessage() for r in caplog.records if r.name == envlogger_writer.__name__]
    assert warnings == ["envlogger export: shards written by envlogger's own Riegeli writer (no HighwayHash (test))"]
    assert same(readback.read_envlogger(out), expected)
    with pytest.raises(riegeli_records.HashUnavailable):
        riegeli_records.RecordsWriter(io.BytesIO())


def _export(data: ExportData, out: Path, refs: list) -> Path:
    summary = export.export_episodes(export.ExportRequest(data_dir=str(data.data_dir), out=str(out), refs=refs))
    assert summary.episodes == len(refs) and not summary.dead_letters
    return out


def test_a_library_without_highwayhash_is_refused_with_its_name(monkeypatch) -> None:
    import ctypes.util

    from envlogger.backends.python import riegeli_dataset_writer

    libc = ctypes.util.find_library("c")
    assert libc
    monkeypatch.setattr(riegeli_dataset_writer, "__file__", libc)
    with pytest.raises(riegeli_records.HashUnavailable, match="HighwayHash64_"):
        riegeli_records._load_hash()


def test_a_full_disk_fails_the_shard_cleanly(export_data: ExportData, tmp_path: Path) -> None:
    """The destination fills up while the steps are written: the error reaches the caller (the export then
    fails as a whole, naming the destination), and nothing is left in the shard folder. A real 64 KB tmpfs."""
    from tests.stepmark.test_cli_reliability import small_disk

    exported = exported_episodes(export_data)[0]
    records = [envlogger_writer.serialize(tuple(r)) for r in envlogger_writer.episode_records(exported)]
    records = records * (1 + (1 << 20) // sum(map(len, records)))  # > 1 MiB: several chunks
    with small_disk(tmp_path / "disk", "64k") as disk:
        folder = disk / "shard"
        with pytest.raises(OSError, match="No space left"):
            riegeli_shard.write_shard(str(folder), iter(records), None, ShardOptions(compression_level=None))
        assert not any(folder.iterdir())

"""AITW and AndroidControl TFRecords on a real distributed engine: grouping records by episode id (AITW steps,
duplicated AndroidControl episodes) across two Dask worker processes must give byte-identical shards and dead
letters to FnApiRunner."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from pipelines import ui_records
from pipelines.convert import run
from tests.pipelines.record_writers import (
    example,
    feature_bytes,
    feature_ints,
    forest_from_dump,
    png_from,
    write_tfrecord,
)
from tests.pipelines.test_aitw import step

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


@pytest.mark.slow
def test_dask_groups_aitw_steps_like_fnapi(tmp_path: Path, fixtures_dir: Path) -> None:
    distributed = pytest.importorskip("distributed")
    inp = tmp_path / "in"
    inp.mkdir()
    screens = ["336", "3360", "33603", "33605", "33608", "33610"]
    records: list[bytes] = []
    for e in range(4):  # four episodes of 3-5 steps; episode 3 misses step 1
        length = 3 + e % 3
        for i in range(length):
            if e == 3 and i == 1:
                continue
            kind = (4, 3, 5, 6, 10)[i]
            touch = (0.3 + 0.1 * i, 0.5) if kind == 4 else (-1.0, -1.0)
            records.append(
                step(
                    fixtures_dir,
                    f"episode-{e}",
                    i,
                    length,
                    screens[(e + i) % 6],
                    kind,
                    touch=touch,
                    lift=touch,
                )
            )
    # interleaved over three files, so every episode's steps come from several workers' reads
    for f in range(3):
        write_tfrecord(inp / f"general-0000{f}-of-00003", records[f::3])
    shot = png_from(fixtures_dir / "rico" / "33600.jpg", 540, 1200)
    forest = forest_from_dump((fixtures_dir / "uiautomator" / "fractal-forge_ui_controls.xml").read_bytes())
    def control(episode_id: int, goal: bytes) -> bytes:
        return example(
            {
                "episode_id": feature_ints(episode_id),
                "goal": feature_bytes(goal),
                "screenshots": feature_bytes(shot, shot),
                "accessibility_trees": feature_bytes(forest.SerializeToString(), forest.SerializeToString()),
                "actions": feature_bytes(json.dumps({"action_type": "click", "x": 135, "y": 872}).encode()),
                "step_instructions": feature_bytes(b"tap Ocean"),
            }
        )

    # episode 7 again in a second file, byte for byte (read once); episode 8 twice, differing (dead letters)
    write_tfrecord(inp / "android_control-00000-of-00002", [control(7, b"Pick a palette"), control(8, b"A")])
    write_tfrecord(inp / "android_control-00001-of-00002", [control(8, b"B"), control(7, b"Pick a palette")])

    assert run([str(inp), str(tmp_path / "fnapi"), "--shards", "3", "--quiet"]) == 0
    logging.getLogger("distributed").setLevel(logging.ERROR)
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    ) as cluster:
        argv = [str(inp), str(tmp_path / "dask"), "--shards", "3", "--quiet"]
        argv += [f"--runner={DASK_RUNNER}", f"--dask_client_address={cluster.scheduler_address}"]
        assert run(argv) == 0

    def shards(out: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(out.glob("episodes-*.tfrecord"))}

    assert shards(tmp_path / "fnapi") == shards(tmp_path / "dask")  # byte for byte
    episodes = {e.episode_id: e for e in ui_records.iter_episodes(str(tmp_path / "dask"))}
    assert sorted(episodes) == ["7", "episode-0", "episode-1", "episode-2", "episode-3"]
    assert [len(episodes[f"episode-{e}"].step_info) for e in range(4)] == [3, 4, 5, 2]

    def dead(out: Path) -> list[str]:
        return sorted((out / "dead_letters.jsonl").read_text().splitlines())

    assert dead(tmp_path / "fnapi") == dead(tmp_path / "dask")
    reasons = sorted(json.loads(line)["reason"] for line in dead(tmp_path / "dask"))
    assert reasons == ["duplicate_episode", "duplicate_episode", "missing_step"]
    assert "2 record(s) repeat" not in episodes["7"].metadata["warnings"]
    assert "1 record(s) repeat another record of this episode byte for byte" in episodes["7"].metadata["warnings"]
    for out in ("fnapi", "dask"):
        assert ui_records.read_summary(str(tmp_path / out))["discovered_episodes"] == 6

"""The same convert-ui pipeline on a real distributed engine: a local Dask cluster with two worker processes
must produce exactly what FnApiRunner produces."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from pipelines import ui_records
from pipelines.convert import run
from tests.pipelines.test_traces import FAASOS, build_droidbot, build_rico_trace, build_step_folder, link

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


@pytest.mark.slow
def test_dask_cluster_gives_the_same_episodes(tmp_path: Path, fixtures_dir: Path) -> None:
    distributed = pytest.importorskip("distributed")
    inp = tmp_path / "in"
    build_rico_trace(inp / "faasos", fixtures_dir, FAASOS, {"33603": [[0.5, 0.6887]], "33600": [[0.2, 0.3]]})
    build_step_folder(inp / "steps", fixtures_dir, ['{"step": 0, "action": "back"}', "{broken"])
    build_droidbot(inp / "run", fixtures_dir)
    for sid in ("336", "33638"):
        link(fixtures_dir / "rico" / f"{sid}.json", inp / "screens" / f"{sid}.json")
        link(fixtures_dir / "rico" / f"{sid}.jpg", inp / "screens" / f"{sid}.jpg")
    link(fixtures_dir / "uiautomator" / "banjen_ui_hierarchy.xml", inp / "screens" / "banjen.xml")
    (inp / "screens" / "empty.xml").write_bytes(b"")

    assert run([str(inp), str(tmp_path / "fnapi"), "--shards", "3", "--quiet", "--follow-links"]) == 0
    logging.getLogger("distributed").setLevel(logging.ERROR)
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    ) as cluster:
        argv = [str(inp), str(tmp_path / "dask"), "--shards", "3", "--quiet", "--follow-links"]
        argv += [f"--runner={DASK_RUNNER}", f"--dask_client_address={cluster.scheduler_address}"]
        assert run(argv) == 0

    def shards(out: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(out.glob("episodes-*.tfrecord"))}

    fn, dk = shards(tmp_path / "fnapi"), shards(tmp_path / "dask")
    assert list(fn) == [f"episodes-0000{i}-of-00003.tfrecord" for i in range(3)]
    assert fn == dk  # byte for byte: same episodes, same shards, same order
    ids = {e.episode_id for e in ui_records.iter_episodes(str(tmp_path / "dask"))}
    assert ids == {"faasos", "steps", "run", "screens/336", "screens/33638", "screens/banjen"}

    def dead(out: Path) -> list[str]:
        return sorted((out / "dead_letters.jsonl").read_text().splitlines())

    assert dead(tmp_path / "fnapi") == dead(tmp_path / "dask")
    assert {json.loads(line)["reason"] for line in dead(tmp_path / "dask")} == {
        "bad_action", "empty", "missing_state", "no_steps",
    }  # fmt: skip
    s_fn, s_dk = (
        ui_records.read_summary(str(tmp_path / "fnapi")),
        ui_records.read_summary(str(tmp_path / "dask")),
    )
    assert s_dk["runner"] == DASK_RUNNER and s_fn["runner"] == "FnApiRunner"
    for key in ("episodes", "steps", "objects", "dead_letters_by_reason", "episodes_by_layout", "shards"):
        assert s_fn[key] == s_dk[key], key
    assert not list((tmp_path / "dask").glob(".stepmark-tmp-*"))

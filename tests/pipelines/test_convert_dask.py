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


def _count_conversions() -> None:
    """Run on each Dask worker: ConvertShard notes, per task, the episodes it converted (`_conversions`)."""
    from pipelines import convert

    if hasattr(convert, "_conversions"):
        return
    convert._conversions = []
    process = convert.ConvertShard.process

    def counted(self, element):
        from distributed.worker import thread_state

        key = getattr(thread_state, "key", None)  # the Dask task running this bundle
        for out in process(self, element):
            if isinstance(out, convert.ShardWritten):
                convert._conversions.append((str(key), out.episodes))
            yield out

    convert.ConvertShard.process = counted


def _conversions() -> list:
    from pipelines import convert

    return list(convert._conversions)


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

    assert run([str(inp), str(tmp_path / "fnapi"), "--shards", "5", "--quiet", "--follow-links"]) == 0
    logging.getLogger("distributed").setLevel(logging.ERROR)
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.run(_count_conversions)
        argv = [str(inp), str(tmp_path / "dask"), "--shards", "5", "--quiet", "--follow-links"]
        argv += [f"--runner={DASK_RUNNER}", f"--dask_client_address={cluster.scheduler_address}"]
        with distributed.get_task_stream(client) as tasks:
            assert run(argv) == 0
        conversions = client.run(_conversions)
    # Every shard was converted in a task of its own, which any worker can run. GroupByShard used to shuffle
    # into the 3 partitions of its input (INPUT's one-element Create + the TFRecord branch): the 4 shards that
    # get episodes here made 3 tasks. Now the shard slots add 8 (4 per worker thread; the shards' keys, hashed
    # by Dask, land in 4 different partitions of the 11). The task stream confirms where each task ran.
    # (Which worker runs which task is the scheduler's choice: not asserted, so the test cannot flake.)
    ran_on = {str(t["key"]): t["worker"] for t in tasks.data}
    notes = [(w, key, n) for w, noted in conversions.items() for key, n in noted]
    assert sorted(n for _, _, n in notes) == [1, 1, 1, 3], notes  # 4 shards written, 6 episodes
    assert len({key for _, key, _ in notes}) == 4, notes  # one task per shard
    assert all(ran_on[key] == w for w, key, _ in notes)

    def shards(out: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(out.glob("episodes-*.tfrecord"))}

    fn, dk = shards(tmp_path / "fnapi"), shards(tmp_path / "dask")
    assert list(fn) == [f"episodes-0000{i}-of-00005.tfrecord" for i in range(5)]
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


def test_the_pipeline_reads_no_side_input(tmp_path: Path) -> None:
    """Beam's DaskRunner computes a side input's whole upstream again inside the task that reads it
    (`DaskBagWindowedIterator`): through Count.Globally's default, INPUT was discovered a second time."""
    import apache_beam as beam

    from pipelines.convert import ConvertUiTraces, Summary, WriteOutput

    pipeline = beam.Pipeline(runner="FnApiRunner")
    results = pipeline | ConvertUiTraces(str(tmp_path), str(tmp_path / "tmp"), 4, progress=False)
    results | WriteOutput(str(tmp_path / "out"), str(tmp_path / "tmp"), 4, Summary("in", "out", "r", False))
    with_side_inputs: list[str] = []

    class Visitor(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node) -> None:
            if node.side_inputs:
                with_side_inputs.append(node.full_label)

    pipeline.visit(Visitor())
    assert not with_side_inputs

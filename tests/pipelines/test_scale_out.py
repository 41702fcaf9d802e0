"""Scale-out as a user runs it: traces in a bucket, a Dask cluster of separate worker processes that share no
local path with the driver or each other, outputs in the bucket (tests/object_store.py starts the S3 server
and the cluster as processes of their own).

The workers have AWS credentials but no endpoint: a run that works proves Beam's `--s3_endpoint_url` reached
them inside the pipeline's DoFns. Outputs are compared with FnApiRunner runs, byte for byte where the format
allows it, and kill -9 at the worst moments leaves nothing a reader takes for a complete output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import storage
from stepmark.cli import main
from tests.object_store import Bucket, DaskCluster, episodes_by_id

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples" / "ui"
pytestmark = pytest.mark.slow


def _objects(bucket: Bucket, prefix: str) -> dict[str, bytes]:
    return {k[len(prefix) + 1 :]: bucket.get(k) for k in bucket.keys(prefix + "/")}


def _summary_without_run(data: bytes) -> dict:
    summary = json.loads(data)
    for key in ("runner", "output", "finished"):
        summary.pop(key)
    return summary


def _files_in(folders: list[Path]) -> list[str]:
    return sorted(str(p) for f in folders for p in f.rglob("*") if p.suffix in (".tfrecord", ".jsonl", ".parquet", ".riegeli", ".hdf5"))


def test_convert_ui_on_a_cluster_of_processes_reads_and_writes_only_the_bucket(
    s3: Bucket, dask_cluster: DaskCluster, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert s3.upload_tree(SAMPLES, "traces") > 20
    traces = s3.url("traces")
    assert main(["convert-ui", traces, s3.url("fnapi"), "--quiet"]) == 0
    flags = dask_cluster.runner_flags(s3.server)
    assert main(["convert-ui", traces, s3.url("dask"), "--shards", "4", "--quiet", *flags]) == 0
    assert "converted 7 of 7 episodes" in capsys.readouterr().out

    fnapi, dask = _objects(s3, "fnapi"), _objects(s3, "dask")
    assert sorted(dask) == sorted(fnapi) == [
        "dead_letters.jsonl", *(f"episodes-0000{i}-of-00004.tfrecord" for i in range(4)), "summary.json"
    ]
    for name in fnapi:  # byte for byte: same input, another runner on other processes
        if name != "summary.json":
            assert dask[name] == fnapi[name], name
    assert _summary_without_run(dask["summary.json"]) == _summary_without_run(fnapi["summary.json"])
    # ... and record for record what a local conversion of the same traces gives.
    assert main(["convert-ui", str(SAMPLES), str(tmp_path / "local"), "--quiet"]) == 0
    assert episodes_by_id(s3.url("dask"), traces) == episodes_by_id(str(tmp_path / "local"), str(SAMPLES))
    # The workers converted it (they were handed the S3 flags) and kept nothing of it on their own disks.
    from distributed import Client

    with Client(dask_cluster.address, timeout=30) as client:
        settings = client.run(lambda: __import__("pipelines.storage", fromlist=["x"]).settings())
    assert len(settings) == 2 and all(f"--s3_endpoint_url={s3.server.endpoint}" in s for s in settings.values())
    assert _files_in(dask_cluster.folders) == []
    assert not s3.keys("dask/.stepmark-tmp")  # the temporary folder is gone


def test_export_on_a_cluster_to_the_bucket_equals_the_local_run(
    s3: Bucket, dask_cluster: DaskCluster, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """UI episodes imported from the bucket (the store keeps the URLs) are exported by the cluster's workers,
    reading their records from the bucket and writing the dataset there."""
    s3.upload_tree(SAMPLES, "traces")
    assert main(["convert-ui", s3.url("traces"), s3.url("episodes"), "--quiet"]) == 0
    data = tmp_path / "data"
    assert main(["import-ui", s3.url("episodes"), "--study", "bucket", "--data", str(data)]) == 0
    study = capsys.readouterr().out.strip().splitlines()[-1]
    flags = dask_cluster.runner_flags(s3.server)
    for fmt, extra in (("envlogger", []), ("parquet", []), ("minari", ["--ui-objects", "padded:64"])):
        name = f"{fmt}-v0"
        common = ["export", "--data", str(data), "--study", study, "--format", fmt, *extra]
        assert main([*common, "--out", str(tmp_path / name)]) == 0
        assert main([*common, "--out", s3.url(f"exports/{name}"), *flags]) == 0
        remote = _objects(s3, f"exports/{name}")
        local = {p.relative_to(tmp_path / name).as_posix(): p.read_bytes()
                 for p in (tmp_path / name).rglob("*") if p.is_file()}  # fmt: skip
        assert sorted(remote) == sorted(local), fmt
        for key in local:
            assert remote[key] == local[key], (fmt, key)
    assert _files_in(dask_cluster.folders) == []
    assert not [k for k in s3.keys("exports") if ".tmp-" in k]


_KILL_AT_MARKER = """
import os, signal, sys
from pipelines import storage
real_rename, real_write = storage.rename, storage.write_bytes
def at_marker(targets):
    if any(t.rsplit("/", 1)[-1] == sys.argv[1] for t in targets):
        os.kill(os.getpid(), signal.SIGKILL)  # everything else is published, the marker is not
def rename(sources, targets):
    at_marker(targets)
    return real_rename(sources, targets)
def write_bytes(path, data):
    at_marker([path])
    return real_write(path, data)
storage.rename, storage.write_bytes = rename, write_bytes
from stepmark.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _killed_at_marker(marker: str, argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _KILL_AT_MARKER, marker, *argv], capture_output=True, text=True,
                          timeout=600, cwd=REPO)  # fmt: skip


def test_kill_9_before_the_marker_leaves_nothing_a_reader_takes_for_complete(
    s3: Bucket, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    s3.upload_tree(SAMPLES, "traces")
    out = s3.url("episodes")
    killed = _killed_at_marker("summary.json", ["convert-ui", s3.url("traces"), out, "--quiet"])
    assert killed.returncode == -9, killed.stderr
    left = s3.keys("episodes/")
    assert any(k.endswith(".tfrecord") for k in left) and "episodes/summary.json" not in left
    for argv in (["inspect", out], ["import-ui", out, "--study", "x", "--data", str(tmp_path / "d")]):
        assert main(argv) == 2
        assert "no summary.json; the conversion is unfinished or failed" in capsys.readouterr().err
    # The next run to the same OUTPUT removes what the killed one left, without --overwrite.
    assert main(["convert-ui", s3.url("traces"), out]) == 0
    captured = capsys.readouterr()
    assert "removing what a killed conversion left" in captured.err
    assert "converted 7 of 7 episodes" in captured.out
    assert len([k for k in s3.keys("episodes/") if k.endswith(".tfrecord")]) == 4

    # An export killed between its data and its stepmark_export.json: the same.
    data = tmp_path / "data"
    assert main(["import-ui", out, "--study", "bucket", "--data", str(data)]) == 0
    study = capsys.readouterr().out.strip().splitlines()[-1]
    export = ["export", "--data", str(data), "--study", study, "--format", "parquet", "--out", s3.url("ds")]
    killed = _killed_at_marker("stepmark_export.json", export)
    assert killed.returncode == -9, killed.stderr
    assert s3.keys("ds/") and not storage.is_published(s3.url("ds"), "stepmark_export.json")
    assert main(export) == 0
    assert "removing" in capsys.readouterr().err
    assert "ds/stepmark_export.json" in s3.keys("ds/")
    assert not [k for k in s3.keys() if ".tmp-" in k or "owner" in k]  # nothing of the killed run is left


_KILL_MID_SHARD = """
import os, signal, sys
from pipelines import convert
real = convert.ConvertShard.process
def process(self, element):
    for n, out in enumerate(real(self, element)):
        yield out
    os.kill(os.getpid(), signal.SIGKILL)  # after the first shard's temporary file, before any commit
convert.ConvertShard.process = process
from stepmark.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_kill_9_mid_conversion_to_the_bucket(s3: Bucket, capsys: pytest.CaptureFixture) -> None:
    s3.upload_tree(SAMPLES, "traces")
    out = s3.url("episodes")
    killed = subprocess.run([sys.executable, "-c", _KILL_MID_SHARD, "convert-ui", s3.url("traces"), out, "--quiet"],
                            capture_output=True, text=True, timeout=600, cwd=REPO)  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    left = s3.keys("episodes/")
    assert left and all(k.startswith("episodes/.stepmark-tmp-") for k in left)  # only the temporary folder
    assert main(["inspect", out]) == 2
    assert "holds only an unfinished conversion (no summary.json)" in capsys.readouterr().err
    assert main(["convert-ui", s3.url("traces"), out, "--quiet"]) == 0
    assert not [k for k in s3.keys("episodes/") if ".stepmark-tmp-" in k]


@pytest.mark.tfds
def test_tfds_export_to_the_bucket_equals_the_local_one(s3: Bucket, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """TFDS writes its metadata only to local files (TensorFlow's file layer has no s3://): the shards are moved
    in the bucket and the metadata uploaded, and the dataset is the local export's, byte for byte."""
    pytest.importorskip("tensorflow_datasets")
    s3.upload_tree(SAMPLES, "traces")
    assert main(["convert-ui", s3.url("traces"), s3.url("episodes"), "--quiet"]) == 0
    data = tmp_path / "data"
    assert main(["import-ui", s3.url("episodes"), "--study", "bucket", "--data", str(data)]) == 0
    study = capsys.readouterr().out.strip().splitlines()[-1]
    common = ["export", "--data", str(data), "--study", study, "--format", "tfds"]
    assert main([*common, "--out", str(tmp_path / "tfds")]) == 0
    assert main([*common, "--out", s3.url("exports/tfds")]) == 0
    remote = _objects(s3, "exports/tfds")
    local = {p.relative_to(tmp_path / "tfds").as_posix(): p.read_bytes() for p in (tmp_path / "tfds").rglob("*") if p.is_file()}
    assert sorted(remote) == sorted(local) and "dataset_info.json" in remote
    assert all(remote[k] == local[k] for k in local)
    assert not [k for k in s3.keys() if ".tmp-" in k or "_work" in k]

"""convert-ui and export with their data in a bucket vs on local disk (same runner), and on a Dask cluster of
separate processes with 2 workers vs 1, side by side in one run.

    .venv/bin/python bench/bench_object_store.py [--copies 2] [--repeats 2] [--fixtures ../shared/fixtures]

The bucket is moto's S3 server on 127.0.0.1 (its own process; every byte goes over HTTP as with a real bucket,
without a network's latency). Input: the fixtures (41 Rico screens, 10 uiautomator dumps, the DroidBot run)
replicated `--copies` times, uploaded to the bucket and kept on disk. Each measurement alternates local and
bucket runs (`--repeats` of each) and prints the best time of each and their ratio:

- convert-ui, FnApiRunner: local INPUT -> local OUTPUT vs s3:// -> s3:// (target >= 0.7);
- export (envlogger) of the converted episodes, FnApiRunner: episodes and --out on disk vs in the bucket (>= 0.7);
- convert-ui s3:// -> s3:// on a Dask cluster (scheduler + N worker processes, each in its own folder, one thread
  each): 2 workers vs 1 (target >= 1.5), with the CPU seconds the scheduler and the S3 server spent.

Last, the per-screen cost (CPU seconds of the whole conversion per step, bytes per step) that
docs/scale_out.md turns into hours and bytes for Android in the Wild.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
from bench_pipeline import replicate  # noqa: E402 - this folder is on sys.path when a bench runs

from pipelines import storage  # noqa: E402
from stepmark.cli import main  # noqa: E402
from tests.object_store import (  # noqa: E402
    AWS_CREDENTIALS,
    free_port,
    start,
    start_dask_cluster,
    stop,
    wait_for_port,
)

DASK = "apache_beam.runners.dask.dask_runner.DaskRunner"


def quiet_main(argv: list[str]) -> str:
    """`stepmark ARGV` in this process; its standard output (the summary line) is returned."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    if code != 0:
        raise SystemExit(f"stepmark {' '.join(argv)} exited with {code}")
    return out.getvalue()


def timed(fn: Callable[[], object]) -> float:
    start_time = time.perf_counter()
    fn()
    return time.perf_counter() - start_time


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            times = p.cpu_times()
            total += times.user + times.system
            for child in p.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    c = child.cpu_times()
                    total += c.user + c.system
    return total


@contextlib.contextmanager
def s3_server(root: Path) -> Iterator[tuple[str, psutil.Process, Path]]:
    port = free_port()
    proc = start([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], root / "moto")
    try:
        wait_for_port(port, proc, root / "moto" / "log")
        yield f"http://127.0.0.1:{port}", psutil.Process(proc.pid), root / "moto" / "log"
    finally:
        stop(proc)


def requests_of(log: Path, fn: Callable[[], object]) -> int:
    """HTTP requests the S3 server logged while `fn` ran."""
    before = log.read_bytes().count(b"HTTP/1.1")
    fn()
    return log.read_bytes().count(b"HTTP/1.1") - before


def own_cpu() -> float:
    """CPU seconds of this process and its finished children (the conversion's forked workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


CPU: dict[str, float] = {}


def best_of(repeats: int, runs: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Each run `repeats` times, alternating; the best time of each (and its stepmark CPU time in `CPU`)."""
    best = {name: float("inf") for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            cpu = own_cpu()
            took = timed(run)
            if took < best[name]:
                best[name], CPU[name] = took, own_cpu() - cpu
    return best


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--fixtures", type=Path, default=REPO.parent / "shared" / "fixtures")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="stepmark-bench-objects-"))
    try:
        with s3_server(root) as (endpoint, server, log):
            os.environ.update({**AWS_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint})
            storage.configure(())
            import boto3

            boto3.client("s3").create_bucket(Bucket="bench")
            traces = replicate(args.fixtures, root / "traces", args.copies)
            copied = quiet_main(["copy", str(traces), "s3://bench/traces"])  # "copied N file(s), ..."
            files_up = int(copied.split()[1])
            print(f"input: {args.copies} copies of the fixtures, {files_up} files uploaded to the S3 server")
            run_id = iter(range(1_000_000))

            def convert(src: str, dst_root: str, *flags: str) -> str:
                dst = f"{dst_root}/conv-{next(run_id)}"
                return quiet_main(["convert-ui", src, dst, "--shards", str(args.shards), "--quiet", "--follow-links", *flags])

            local_out = str(root / "out")
            os.makedirs(local_out)
            requests = requests_of(log, lambda: convert("s3://bench/traces", "s3://bench/count"))
            print(f"convert-ui s3 -> s3: {requests} requests to the S3 server, {requests / files_up:.1f} per input file")
            server_before = cpu_seconds([server])
            times = best_of(
                args.repeats,
                {"local": lambda: convert(str(traces), local_out), "s3": lambda: convert("s3://bench/traces", "s3://bench/out")},
            )
            server_cpu = (cpu_seconds([server]) - server_before) / args.repeats
            summary = next(Path(local_out).glob("conv-*/summary.json")).read_bytes()
            steps = json.loads(summary)["steps"]
            episodes = json.loads(summary)["episodes"]
            print(
                f"convert-ui FnApiRunner, {episodes} episodes / {steps} steps: local {times['local']:.2f} s, "
                f"s3 {times['s3']:.2f} s -> s3/local throughput {times['local'] / times['s3']:.2f} (target >= 0.7); "
                f"stepmark's own CPU {CPU['local']:.2f} vs {CPU['s3']:.2f} s ({CPU['local'] / CPU['s3']:.2f}); "
                f"the S3 server used {server_cpu:.2f} CPU s per s3 run on the same 2 cores"
            )

            # export: the same converted episodes, imported once from disk and once from the bucket.
            quiet_main(["convert-ui", str(traces), f"{local_out}/episodes", "--quiet", "--follow-links"])
            quiet_main(["convert-ui", "s3://bench/traces", "s3://bench/episodes", "--quiet"])
            stores = {}
            for name, src in (("local", f"{local_out}/episodes"), ("s3", "s3://bench/episodes")):
                data = root / f"data-{name}"
                stores[name] = (data, quiet_main(["import-ui", src, "--study", name, "--data", str(data)]).strip().splitlines()[-1])

            def export(name: str) -> None:
                data, study = stores[name]
                out = f"{local_out}/export-{uuid.uuid4().hex[:8]}" if name == "local" else f"s3://bench/export-{uuid.uuid4().hex[:8]}"
                quiet_main(["export", "--data", str(data), "--study", study, "--format", "envlogger", "--out", out])

            times = best_of(args.repeats, {"local": lambda: export("local"), "s3": lambda: export("s3")})
            print(
                f"export envlogger FnApiRunner: local {times['local']:.2f} s, s3 {times['s3']:.2f} s -> "
                f"s3/local throughput {times['local'] / times['s3']:.2f} (target >= 0.7); "
                f"stepmark's own CPU {CPU['local']:.2f} vs {CPU['s3']:.2f} s ({CPU['local'] / CPU['s3']:.2f})"
            )

            # Dask: a cluster of separate processes, 1 worker then 2; S3 flags on the command line.
            env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
            env["PYTHONPATH"] = str(REPO)
            flags = [f"--runner={DASK}", f"--s3_endpoint_url={endpoint}"]
            dask_times, overhead = {}, {}
            for workers in (1, 2):
                cluster = start_dask_cluster(root / f"dask-{workers}", workers, env)
                try:
                    scheduler = psutil.Process(cluster.procs[0].pid)
                    cluster_flags = [*flags, f"--dask_client_address={cluster.address}"]
                    convert("s3://bench/traces", "s3://bench/dask-warm", *cluster_flags)  # workers import Beam once
                    before = (cpu_seconds([scheduler]), cpu_seconds([server]))
                    dask_times[workers] = best_of(
                        args.repeats, {"run": lambda f=cluster_flags: convert("s3://bench/traces", "s3://bench/dask", *f)}
                    )["run"]
                    after = (cpu_seconds([scheduler]), cpu_seconds([server]))
                    overhead[workers] = ((after[0] - before[0]) / args.repeats, (after[1] - before[1]) / args.repeats)
                finally:
                    for proc in reversed(cluster.procs):
                        stop(proc)
            print(
                f"convert-ui on Dask, s3 -> s3, --shards {args.shards}: 1 worker {dask_times[1]:.2f} s, 2 workers "
                f"{dask_times[2]:.2f} s -> 2 vs 1: {dask_times[1] / dask_times[2]:.2f} (target >= 1.5)"
            )
            for workers in (1, 2):
                sched, srv = overhead[workers]
                print(f"  {workers} worker(s): scheduler {sched:.2f} CPU s, S3 server {srv:.2f} CPU s per run")

            # Per-screen cost, for docs/scale_out.md.
            me = psutil.Process()
            before = cpu_seconds([me]) + cpu_seconds([server])
            quiet_main(["convert-ui", "s3://bench/traces", "s3://bench/cost", "--quiet"])
            used = cpu_seconds([me]) + cpu_seconds([server]) - before
            size = storage.total_size("s3://bench/cost")
            print(
                f"per screen (s3 -> s3, FnApiRunner, incl. the S3 server): {1000 * used / steps:.1f} CPU ms, "
                f"{size / steps / 1024:.0f} KiB of output"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main_bench()

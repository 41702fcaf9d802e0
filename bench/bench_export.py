"""Export throughput of every format against simply reading the same episodes, bytes on disk per format,
peak memory against dataset size, and 2 workers against 1 — side by side in one run.

    .venv/bin/python bench/bench_export.py [--episodes 6] [--steps 200] [--copies 8] [--repeats 2] [--no-tfds]
                                           [--no-dask]
    .venv/bin/python bench/bench_export.py --bytes [--episodes 6] [--steps 200] [--no-tfds]

Data: `--episodes` Procgen coinrun episodes of `--steps` steps recorded by the recorder (random policy, JPEG
frames in the custom data), registered `--copies` times in a small study and 3 x `--copies` times in a large
one (real files; many episodes without recording them all).
Figures, in one run:
- read: envlogger's own `Reader` decoding every step of every episode of the large study in a plain loop,
  what a training team runs on these files (the floor; the fastest of 3 runs at the start, and the fastest
  of 2 again right before each format's exports, which is the base of that format's ratios: other jobs on
  the machine come and go over the minutes a run takes). stepmark's own reader (`open_episode`: its own
  decoder, steps paired the RLDS way) is timed beside it and printed for reference ("own read");
- each format (envlogger, tfds, parquet, minari; the last three also with the lossy `--jpeg-frames`, which stores
  the recorded JPEG frames instead of the observation as recorded) on FnApiRunner with 1 worker, each export in a child process of
  its own, on the small and on the large study: throughput of the large export (the fastest of `--repeats`), the
  marginal throughput between the two (fixed costs — start-up, planning, the last step — cancel out), bytes
  on disk, and the child's peak RSS for the small and the large dataset (flat = memory bounded by episodes);
  wall, marginal and CPU ratios against the read;
- 2 workers against 1: FnApiRunner (`--direct_num_workers=2`, multi_processing) and a Dask LocalCluster with
  1 then 2 worker processes (envlogger), marginal throughputs.
`--bytes` measures only bytes per format, on two kinds of data recorded side by side with the random policy:
near-static frames (Procgen maze: the view hardly changes from step to step) and varied frames (Procgen
starpilot: a scrolling screen), each format with the observation as recorded (the default) and with the lossy
`--jpeg-frames`, as a ratio to the envlogger export of the same episodes.
Throughput is steps/s and MB/s (MB of the written dataset; for reading, MB of the episode files read). The
machine's cores are shared with other jobs: the CPU headroom line says how much of a second core was free.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipelines.episodes import open_episode  # noqa: E402
from pipelines.store import open_store  # noqa: E402
from protos.rlds_creator import study_pb2  # noqa: E402

USER = "bench@example.com"


def make_data(data_dir: Path, episodes: int, steps: int, copies: int) -> tuple[str, str]:
    """Records `episodes` episodes once, then registers them `copies` times in a small study and 3 x `copies`
    times in a large one (real files; many episodes without recording them all). Returns both study ids."""
    from annotator.recorder import record_batch

    with open_store(None, data_dir) as repo:
        ids = []
        recorded: list[study_pb2.Episode] = []
        for name, n in (("small", copies), ("large", 3 * copies)):
            spec = study_pb2.StudySpec(name=f"export bench {name}")
            env = spec.environment_specs.add(id="coinrun", name="CoinRun", sync=True, max_episode_steps=steps)
            env.procgen.id = "coinrun"
            study = repo.create_study(spec, USER)
            ids.append(study.id)
            if not recorded:
                recorded = record_batch(repo, data_dir, study.id, "coinrun", episodes, "random", user=USER,
                                        seed=1, progress=False)  # fmt: skip
                n -= 1
            session = repo.create_session(study.id, USER)
            copies_of = []
            for episode in recorded:
                for _ in range(n):
                    copy = study_pb2.Episode()
                    copy.CopyFrom(episode)
                    copy.ClearField("id")
                    copy.study_id, copy.session_id = study.id, session.id
                    copies_of.append(copy)
            repo.add_episodes(copies_of)
    return ids[0], ids[1]


def _burn(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def cpu_headroom(n: int = 15_000_000) -> float:
    """Speed-up of 2 processes over 1 on a pure-Python loop, right now: the ceiling for any 2-worker ratio
    (the machine's cores are shared; below ~1.8 another job holds a core)."""
    import multiprocessing

    start = time.perf_counter()
    _burn(n)
    _burn(n)
    serial = time.perf_counter() - start
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(_burn, [1, 1])  # start both processes first: only the work is timed
        start = time.perf_counter()
        pool.map(_burn, [n, n], chunksize=1)
        return serial / (time.perf_counter() - start)


def folder_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 1e6
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def read_all(
    data_dir: Path, study_id: str, repeats: int = 3, reader: str = "envlogger"
) -> tuple[float, int, float, float]:
    """(seconds, steps, MB of files read, CPU seconds) for reading every selected episode's steps in a loop:
    the fastest of `repeats` runs (the strongest baseline on a shared machine; file sizes are summed outside
    the timing).

    `reader="envlogger"`: envlogger's own `Reader` over each episode's files, every step decoded (what a
    training team runs on these files; the base of the export ratios). `reader="stepmark"`: `open_episode`,
    stepmark's reader (the same files, its own decoder, steps paired the RLDS way)."""
    import envlogger

    with open_store(None, data_dir) as repo:
        episodes = repo.list_episodes(study_id=study_id, states=[study_pb2.Episode.STATE_COMPLETED])
    read_mb = sum(folder_mb(data_dir / e.storage.environment_logger.tag_directory) for e in episodes)
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        steps = 0
        for episode in episodes:
            if reader == "envlogger":
                el = episode.storage.environment_logger
                with envlogger.Reader(str(data_dir / el.tag_directory)) as files:
                    for _ in files.episodes[el.index]:
                        steps += 1
            else:
                with open_episode(episode, data_dir) as steps_reader:
                    for _ in steps_reader:
                        steps += 1
        best, best_cpu = min(best, time.perf_counter() - start), min(best_cpu, time.process_time() - cpu)
    return best, steps, read_mb, best_cpu


CHILD = """
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from pipelines import export
def cpu():
    return sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))
start, cpu0 = time.perf_counter(), cpu()
summary = export.export_episodes(export.ExportRequest(data_dir={data!r}, out={out!r}, format={fmt!r},
                                                      study_id={study!r}, beam_args={beam_args!r},
                                                      jpeg_frames={jpeg!r}))
print(json.dumps({{"seconds": time.perf_counter() - start, "cpu": cpu() - cpu0, "steps": summary.steps,
                  "dead": len(summary.dead_letters), "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def timed_export(
    data_dir: Path, study_id: str, out: Path, fmt: str, beam_args: list[str]
) -> tuple[float, int, float, float, float]:
    """(seconds inside the export call, steps, MB written, peak RSS MB, CPU seconds of the call: the process
    and its worker processes) of one export in a child process."""
    import json
    import subprocess

    jpeg = fmt.endswith("+jpeg")  # the lossy --jpeg-frames, beside the default (the observation as recorded)
    code = CHILD.format(repo=str(REPO), data=str(data_dir), out=str(out), fmt=fmt.removesuffix("+jpeg"),
                        study=study_id, beam_args=beam_args, jpeg=jpeg)  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False)
    if done.returncode != 0:
        raise SystemExit(f"export {fmt} failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["dead"]:
        raise SystemExit(f"dead letters in the benchmark export ({fmt})")
    return result["seconds"], result["steps"], folder_mb(out), result["rss_mb"], result["cpu"]


def line(name: str, seconds: float, steps: int, mb: float, base: float | None = None) -> str:
    rate = steps / seconds
    text = f"{name:<34} {seconds:7.2f} s {rate:9.0f} steps/s {mb / seconds:7.1f} MB/s"
    if base is not None:
        text += f"   x{rate / base:.2f}"
    return text


def marginal(small: tuple[float, ...], large: tuple[float, ...]) -> tuple[float, float]:
    """Steps/s and MB/s of the extra work between the small and the large export: fixed costs (imports,
    planning, worker start-up, the last step) cancel out."""
    dt = large[0] - small[0]
    return (large[1] - small[1]) / dt, (large[2] - small[2]) / dt


BYTES_DATA = (("near-static frames", "maze"), ("varied frames", "starpilot"))


def bytes_per_format(work: Path, episodes: int, steps: int, tfds: bool) -> None:
    """Bytes on disk of every format (and of `--jpeg-frames`) against envlogger's, on the two kinds of data."""
    from annotator.recorder import record_batch
    from pipelines import export

    formats = ["envlogger", "parquet", "minari"] + (["tfds"] if tfds else [])
    for label, game in BYTES_DATA:
        data_dir = work / game
        with open_store(None, data_dir) as repo:
            spec = study_pb2.StudySpec(name=f"bytes {game}")
            env = spec.environment_specs.add(id=game, name=game, sync=True, max_episode_steps=steps)
            env.procgen.id = game
            study = repo.create_study(spec, USER)
            recorded = record_batch(repo, data_dir, study.id, game, episodes, "random", user=USER, seed=1,
                                    progress=False)  # fmt: skip
        n_steps = sum(e.num_steps for e in recorded)
        sizes: dict[str, float] = {}
        for fmt in formats:
            for jpeg in ((False, True) if fmt != "envlogger" else (False,)):
                out = work / f"{game}-{fmt}{'-jpeg' if jpeg else ''}-v0"
                export.export_episodes(export.ExportRequest(data_dir=str(data_dir), out=str(out), format=fmt,
                                                            study_id=study.id, jpeg_frames=jpeg))  # fmt: skip
                sizes[fmt + (" --jpeg-frames" if jpeg else "")] = folder_mb(out)
                shutil.rmtree(out, ignore_errors=True)
        base = sizes["envlogger"]
        print(f"{label} (Procgen {game}, {episodes} episodes, {n_steps} transitions, random policy):")
        for name, mb in sizes.items():
            print(f"  {name:<26} {mb:8.2f} MB   x{mb / base:5.2f} envlogger   {mb * 1e6 / n_steps:8.0f} B/step")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=6)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument(
        "--copies", type=int, default=8, help="registrations per episode in the small study (x3: large)"
    )
    ap.add_argument("--no-tfds", action="store_true", help="skip the TFDS export (needs the [tfds] extra)")
    ap.add_argument("--no-dask", action="store_true", help="skip the Dask LocalCluster runs")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each large export; the fastest counts")
    ap.add_argument("--bytes", action="store_true", help="only bytes per format, near-static and varied frames")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-export-"))
    if args.bytes:
        try:
            bytes_per_format(work, args.episodes, args.steps, not args.no_tfds)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    try:
        data_dir = work / "data"
        t0 = time.perf_counter()
        small, large = make_data(data_dir, args.episodes, args.steps, args.copies)
        print(f"recorded {args.episodes} episode(s), registered x{args.copies} and x{3 * args.copies} "
              f"in {time.perf_counter() - t0:.1f} s")  # fmt: skip
        seconds, steps, mb, _ = read_all(data_dir, large)
        print(
            f"large selection: {args.episodes * 3 * args.copies} episodes, {steps} steps, {mb:.1f} MB of files\n"
        )
        print(line("read (envlogger.Reader loop, large)", seconds, steps, mb))
        own, own_steps, _, _ = read_all(data_dir, large, reader="stepmark")
        print(line("read (stepmark open_episode, large)", own, own_steps, mb, base=steps / seconds))

        runs = [
            ("envlogger FnApiRunner 1 worker", "envlogger", ["--direct_num_workers=1"]),
            ("parquet FnApiRunner 1 worker", "parquet", ["--direct_num_workers=1"]),
            ("minari FnApiRunner 1 worker", "minari", ["--direct_num_workers=1"]),
            ("parquet --jpeg-frames 1 worker", "parquet+jpeg", ["--direct_num_workers=1"]),
            ("minari --jpeg-frames 1 worker", "minari+jpeg", ["--direct_num_workers=1"]),
        ]
        if not args.no_tfds:
            runs.append(("tfds FnApiRunner 1 worker", "tfds", ["--direct_num_workers=1"]))
            runs.append(("tfds --jpeg-frames 1 worker", "tfds+jpeg", ["--direct_num_workers=1"]))
        runs.append(("envlogger FnApiRunner 2 workers", "envlogger",
                     ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]))  # fmt: skip
        results: dict[str, tuple[float, float]] = {}
        walls: dict[str, float] = {}  # steps/s of the large export, fixed costs included
        cpus: dict[str, float] = {}  # CPU seconds of the large export (its worker processes included)
        sizes: dict[str, float] = {}
        memory: dict[str, tuple[float, float]] = {}

        reads: dict[str, tuple[float, float]] = {}  # per export: (steps/s, CPU s) of the read timed beside it
        own_reads: dict[str, float] = {}  # per export: steps/s of stepmark's own read timed beside it

        def measure(name: str, fmt: str, beam_args: list[str]) -> None:
            i = len(results)
            # The read is timed again right before each export (the other jobs on the machine come and go over
            # the minutes a run takes): each ratio compares two things measured within seconds of each other.
            near, _, _, near_cpu = read_all(data_dir, large, repeats=2)
            reads[name] = (steps / near, near_cpu)
            own_reads[name] = steps / read_all(data_dir, large, repeats=2, reader="stepmark")[0]
            # Folder names are Minari dataset ids (NAME-vN), which every format accepts.
            a = timed_export(data_dir, small, work / f"s{i}-v0", fmt, beam_args)
            b = timed_export(data_dir, large, work / f"l{i}-v0", fmt, beam_args)
            for _ in range(1, args.repeats):  # the fastest large export, as the read is the fastest of 3
                shutil.rmtree(work / f"l{i}-v0", ignore_errors=True)
                again = timed_export(data_dir, large, work / f"l{i}-v0", fmt, beam_args)
                b = min(b, again)
            print(line(f"export {name} (large)", *b[:3], base=reads[name][0]))
            results[name] = marginal(a, b)
            walls[name] = b[1] / b[0]
            cpus[name] = b[4]
            sizes[name], memory[name] = b[2], (a[3], b[3])
            print(f"{'':<36}marginal {results[name][0]:9.0f} steps/s {results[name][1]:7.1f} MB/s"
                  f"   {b[2]:.2f} MB on disk   peak RSS {a[3]:.0f} MB (small) {b[3]:.0f} MB (large)"
                  f"   read beside it {reads[name][0]:.0f} steps/s")  # fmt: skip
            shutil.rmtree(work / f"s{i}-v0", ignore_errors=True)
            shutil.rmtree(work / f"l{i}-v0", ignore_errors=True)

        for name, fmt, beam_args in runs:
            measure(name, fmt, beam_args)
        if not args.no_dask:
            from distributed import LocalCluster

            for n in (1, 2):
                with LocalCluster(n_workers=n, threads_per_worker=1, dashboard_address=None) as cluster:
                    dask_args = [
                        "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                        f"--dask_client_address={cluster.scheduler_address}",
                    ]
                    measure(f"envlogger Dask {n} worker(s)", "envlogger", dask_args)

        print("\nratios (marginal: fixed costs removed, unreliable when the shared cores are busy; wall: the large"
              " export with its fixed costs; cpu: CPU seconds of reading / of the large export, less sensitive to"
              " other jobs):")  # fmt: skip
        print(f"  CPU headroom now, 2 processes / 1: {cpu_headroom():.2f}  (ceiling for the 2-worker ratios)")
        el = "envlogger FnApiRunner 1 worker"
        for name, fmt, _ in runs:
            if "2 workers" in name:
                continue
            small_rss, large_rss = memory[name]
            base, base_cpu = reads[name]
            print(f"  export {fmt:<12} / read: marginal {results[name][0] / base:5.2f} wall "
                  f"{walls[name] / base:5.2f} cpu {base_cpu / cpus[name]:5.2f}   (wall / own read "
                  f"{walls[name] / own_reads[name]:5.2f})   bytes / envlogger: "
                  f"{sizes[name] / sizes[el]:5.2f}   peak RSS large / small (3x data): {large_rss / small_rss:5.2f}")  # fmt: skip
        two = "envlogger FnApiRunner 2 workers"
        print(f"  FnApiRunner 2 workers / 1 worker:  marginal {results[two][0] / results[el][0]:.2f} "
              f"wall {walls[two] / walls[el]:.2f}")  # fmt: skip
        if not args.no_dask:
            d1, d2 = "envlogger Dask 1 worker(s)", "envlogger Dask 2 worker(s)"
            print(f"  Dask 2 workers / 1 worker:         marginal {results[d2][0] / results[d1][0]:.2f} "
                  f"wall {walls[d2] / walls[d1]:.2f}")  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

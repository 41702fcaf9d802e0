"""Whole convert-ui pipeline on FnApiRunner vs the same conversion in a plain Python loop, side by side.

    .venv/bin/python bench/bench_pipeline.py [--copies 4] [--fixtures ../shared/fixtures]

Input: the fixtures (41 Rico screens, 10 uiautomator dumps, the 35-event DroidBot run) replicated `--copies`
times as symlinks (4 copies = 208 episodes, 332 steps). The loop does exactly the pipeline's work per episode:
read the layout, read + parse + assemble every step, serialize, append to a TFRecord file. Target: pipeline
throughput >= 0.5 of the loop's. Then peak RSS of the pipeline for N and 4N episodes (each in a fresh process),
to show memory does not grow with the number of episodes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipelines import tfrecord  # noqa: E402
from pipelines.convert import run  # noqa: E402
from pipelines.traces import EpisodeSource, discover, files, read_episode  # noqa: E402
from pipelines.ui_episode import convert_episode  # noqa: E402


def replicate(fixtures: Path, dst: Path, copies: int) -> Path:
    """`copies` copies of the fixture folders under dst/copy<i>/, as per-file symlinks (Beam's local
    filesystem does not descend into symlinked folders)."""
    for i in range(copies):
        for sub in ("rico", "uiautomator", "droidbot"):
            for src in sorted((fixtures / sub).rglob("*")):
                if src.is_file():
                    target = dst / f"copy{i}" / sub / src.relative_to(fixtures / sub)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.symlink(src, target)
    return dst


def plain_loop(inp: Path, out: Path) -> tuple[float, int, int]:
    """(seconds, episodes, steps) for the conversion in one Python loop."""
    start = time.perf_counter()
    episodes = steps = 0
    with open(out, "wb") as f:
        for source in discover(str(inp)):
            if not isinstance(source, EpisodeSource):
                continue
            result = convert_episode(read_episode(source, files.read_bytes), files.read_bytes)
            if result.episode is not None:
                f.write(tfrecord.encode(result.episode.SerializeToString(deterministic=True)))
                episodes += 1
                steps += len(result.episode.episode.time_steps)
    return time.perf_counter() - start, episodes, steps


def pipeline(inp: Path, out: Path, extra: list[str]) -> tuple[float, int, int]:
    start = time.perf_counter()
    run([str(inp), str(out), "--shards", "4", "--quiet", "--follow-links", *extra])  # symlinked fixtures
    seconds = time.perf_counter() - start
    summary = json.loads((out / "summary.json").read_text())
    return seconds, summary["episodes"], summary["steps"]


def peak_rss_mb(inp: Path, out: Path) -> float:
    """Peak RSS (MB) of a fresh process running the pipeline on `inp`."""
    code = (
        "import resource, sys; from pipelines.convert import run; "
        f"run([{str(inp)!r}, {str(out)!r}, '--quiet', '--follow-links']); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return int(proc.stdout.strip().splitlines()[-1]) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", type=Path, default=REPO.parent / "shared" / "fixtures")
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument(
        "--multi-process", action="store_true", help="also time FnApiRunner with 2 worker processes"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        inp = replicate(args.fixtures, tmp_path / "in", args.copies)
        # Warm the OS file cache and imports so neither side pays for them.
        plain_loop(inp, tmp_path / "warm.tfrecord")

        loop_s, loop_eps, loop_steps = plain_loop(inp, tmp_path / "loop.tfrecord")
        results = {"loop": (loop_s, loop_eps, loop_steps)}
        variants: dict[str, list[str]] = {"FnApiRunner (default, 1 worker)": []}
        if args.multi_process:
            variants["FnApiRunner, 2 worker processes"] = [
                "--direct_num_workers=2",
                "--direct_running_mode=multi_processing",
            ]
        for i, (name, extra) in enumerate(variants.items()):
            results[name] = pipeline(inp, tmp_path / f"out{i}", extra)

        print(f"input: {loop_eps} episodes, {loop_steps} steps ({args.copies} copies of the fixtures)")
        print(f"{'':36s} {'seconds':>8s} {'episodes/s':>11s} {'steps/s':>9s} {'vs loop':>8s}")
        for name, (secs, eps, steps) in results.items():
            assert (eps, steps) == (loop_eps, loop_steps), f"{name} converted {eps}/{steps}"
            ratio = (steps / secs) / (loop_steps / loop_s)
            print(f"{name:36s} {secs:8.2f} {eps / secs:11.1f} {steps / secs:9.1f} {ratio:8.2f}")
        default = results["FnApiRunner (default, 1 worker)"]
        ratio = (default[2] / default[0]) / (loop_steps / loop_s)
        print(f"pipeline/loop throughput ratio (default runner): {ratio:.2f} (target >= 0.5)")

        if not args.skip_memory:
            small = replicate(args.fixtures, tmp_path / "mem_n", args.copies)
            large = replicate(args.fixtures, tmp_path / "mem_4n", 4 * args.copies)
            n, n4 = peak_rss_mb(small, tmp_path / "mem_out_n"), peak_rss_mb(large, tmp_path / "mem_out_4n")
            print(
                f"peak RSS: {n:.0f} MB for {loop_eps} episodes, {n4:.0f} MB for {4 * loop_eps} episodes "
                f"(ratio {n4 / n:.2f}; flat memory means ~1.0)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

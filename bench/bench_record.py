"""Recording overhead and envlogger write throughput, measured side by side in one run.

(1) Procgen (coinrun, 64x64 observations, episodes capped at 500 steps, random policy): the same steps
    (same seeds, so the same actions and episodes) through
      - the raw `procgen` library (`ProcgenGym3Env.act/observe/get_info`),
      - bare `registry.create(spec).step(action)` (the `Environment` the recorder drives),
      - `record_batch` writing envlogger files in-process, and with its child writer process (default):
        JPEG of every frame, envlogger records, every episode closed and registered in SQLite.
    Timings include creating the environment (and, for `record_batch`, its session, recovery scan and
    writer process). Rounds are interleaved (the machine is shared) and the median ratio is reported,
    with CPU time (recording process + its children) next to wall time.
(2) Where a recorded step's time goes (us/step, real frames), per-episode boundary costs, and envlogger
    write throughput in MB/s and bytes on disk for several Riegeli options against a plain file.

    .venv/bin/python bench/bench_record.py [--episodes N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from annotator.envs import registry  # noqa: E402
from annotator.envs.render import encode_jpeg, encode_jpeg_pillow  # noqa: E402
from annotator.recorder import Recorder, record_batch  # noqa: E402
from pipelines.episodes import envlogger_store, fast_codec  # noqa: E402
from pipelines.episodes.base import custom_data, make_timestep  # noqa: E402
from pipelines.store import open_store  # noqa: E402
from protos.rlds_creator import client_pb2, study_pb2  # noqa: E402

GAME = "coinrun"
MAX_STEPS = 500
RAND_SEED = 11
POLICY_SEED = 0
RIEGELI_OPTIONS = [
    envlogger_store.WRITER_OPTIONS,
    "snappy,chunk_size:1M",
    "uncompressed,chunk_size:1M",
    "transpose,brotli:6,chunk_size:1M",  # envlogger's default
]


def env_spec() -> study_pb2.EnvironmentSpec:
    spec = study_pb2.EnvironmentSpec(id="bench", name="bench", sync=True, max_episode_steps=MAX_STEPS)
    spec.procgen.id = GAME
    spec.procgen.rand_seed = RAND_SEED
    return spec


def cpu_seconds() -> float:
    """CPU time of this process and of its reaped children (the writer process, once stopped)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class Run:
    """One variant's run: steady = first step to last episode closed (and registered); total = whole call."""

    def __init__(self) -> None:
        self.total = self.steady = self.cpu = 0.0
        self.steps = 0

    def __enter__(self) -> Run:
        self._cpu, self._start = cpu_seconds(), time.perf_counter()
        return self

    def begin(self) -> None:
        self._begin = time.perf_counter()

    def end(self) -> None:
        self.steady = time.perf_counter() - self._begin

    def __exit__(self, *exc: object) -> None:
        self.total = time.perf_counter() - self._start
        self.cpu = cpu_seconds() - self._cpu


def bare(episodes: int) -> Run:
    """The random policy's steps on the bare Environment, `episodes` episodes (what record_batch plays)."""
    with Run() as run:
        env = registry.create(env_spec(), seed=POLICY_SEED)
        rng = np.random.default_rng(POLICY_SEED)
        run.begin()
        for _ in range(episodes):
            env.reset()
            while not env.step(env.sample_action(rng)).last:
                run.steps += 1
            run.steps += 1
        run.end()
        env.close()
    return run


def raw_procgen(steps: int) -> Run:
    """The procgen library itself for the same number of steps and the same action sequence."""
    from procgen import ProcgenGym3Env

    with Run() as run:
        rng = np.random.default_rng(POLICY_SEED)
        env = ProcgenGym3Env(num=1, env_name=GAME, rand_seed=RAND_SEED, num_threads=0)
        run.begin()
        for _ in range(steps):
            env.act(np.array([rng.integers(15)], dtype=np.int32))
            env.observe()
            env.get_info()
        run.end()
        run.steps = steps
        env.close()
    return run


def recorded(episodes: int, background: bool) -> Run:
    """`record_batch` itself; its steady part is timed by a progress hook on the recorder's first step."""
    with tempfile.TemporaryDirectory() as d:
        repo = open_store(None, d)
        study = repo.create_study(study_pb2.StudySpec(name="bench", environment_specs=[env_spec()]), "b")
        original = Recorder.step_action
        with Run() as run:

            def first_step(self: Recorder, action: object, keys: tuple = ()) -> object:
                if not hasattr(run, "_begin"):
                    run.begin()
                return original(self, action, keys)

            Recorder.step_action = first_step  # type: ignore[method-assign]
            try:
                out = record_batch(
                    repo, d, study.id, "bench", episodes, user="bench@example.com", seed=POLICY_SEED,
                    progress=False, background_writer=background,
                )  # fmt: skip
                run.end()  # every episode closed and registered; what follows is stopping the writer
            finally:
                Recorder.step_action = original  # type: ignore[method-assign]
        run.steps = sum(e.num_steps for e in out)
        repo.close()
    return run


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def effective_cores() -> float:
    """How many CPUs this run really gets now: a busy loop alone vs two at once (the machine is shared).

    The writer process can only hide its work if this is well above 1.
    """
    import multiprocessing

    n = 3_000_000
    start = time.perf_counter()
    _spin(n)
    one = time.perf_counter() - start
    start = time.perf_counter()
    other = multiprocessing.get_context("fork").Process(target=_spin, args=(n,))
    other.start()
    _spin(n)
    other.join()
    return 2 * one / (time.perf_counter() - start)


def overhead(episodes: int, rounds: int) -> None:
    cores = (effective_cores(), effective_cores())
    print(
        f"(0) CPUs: {os.cpu_count()} online; effective for two busy processes right now: "
        f"{cores[0]:.2f} / {cores[1]:.2f} (1.0 = no second core to spare)"
    )
    print(
        f"(1) recording overhead: Procgen {GAME} 64x64, random policy, {episodes} episodes x {rounds} rounds "
        f"(max_episode_steps {MAX_STEPS}), same seeds for every variant"
    )
    bare(1)  # warm-up: imports, first game creation
    steps_per_round = bare(episodes).steps
    variants: dict[str, Callable[[], Run]] = {
        "raw procgen (act+observe+get_info)": lambda: raw_procgen(steps_per_round),
        "bare Environment.step": lambda: bare(episodes),
        "record_batch, in-process writer": lambda: recorded(episodes, False),
        "record_batch, writer process": lambda: recorded(episodes, True),
    }
    results: dict[str, list[Run]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            results[name].append(fn())
    steps = {name: {r.steps for r in rs} for name, rs in results.items()}
    assert len(set().union(*steps.values())) == 1, f"variants played different step counts: {steps}"
    n = steps_per_round
    base = results["bare Environment.step"]
    print(
        f"  {n} steps a round, us/step (median of {rounds}). steady: first step to last episode registered; "
        "whole: incl. setup (env, session, writer process start/stop); CPU: process + writer process, whole"
    )
    print(
        f"  {'':36s} {'steady':>7s} {'ratio':>6s} {'(min-max)':>11s} {'whole':>7s} {'ratio':>6s} {'CPU':>7s}"
    )
    for name, rs in results.items():
        steady = statistics.median(r.steady / n * 1e6 for r in rs)
        whole = statistics.median(r.total / n * 1e6 for r in rs)
        cpu = statistics.median(r.cpu / n * 1e6 for r in rs)
        ratios = [r.steady / b.steady for r, b in zip(rs, base, strict=True)]
        whole_ratio = statistics.median(r.total / b.total for r, b in zip(rs, base, strict=True))
        print(
            f"  {name:36s} {steady:7.1f} {statistics.median(ratios):5.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
            f" {whole:7.1f} {whole_ratio:5.2f}x {cpu:7.1f}"
        )
    print("  target: recorded / bare < 1.3x")
    print(f"  effective CPUs after the rounds: {effective_cores():.2f}")


def boundaries(actions: list[int], background: bool) -> tuple[float, float, int]:
    """(step seconds, seconds between episodes: save + register + next start, episodes), as record_batch
    saves: with the writer process the save does not wait for the files (registered when closed)."""
    with tempfile.TemporaryDirectory() as d:
        repo = open_store(None, d)
        study = repo.create_study(study_pb2.StudySpec(name="bench", environment_specs=[env_spec()]), "b")
        rec = Recorder(repo, d, study.id, "bench", "b@example.com", seed=0, background_writer=background)
        rec.start()
        between = 0.0
        request = client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True)
        start = time.perf_counter()
        for a in actions:
            if isinstance(rec.step_action(a), client_pb2.ConfirmSaveResponse):
                t = time.perf_counter()
                rec.save_episode(request, wait=not background)
                rec.publish_closed(wait=False)
                rec.start()
                between += time.perf_counter() - t
        t = time.perf_counter()
        rec.cancel()  # registers what is still closing, then the last episode
        between += time.perf_counter() - t
        elapsed = time.perf_counter() - start
        rec.close()
        episodes = len(repo.list_episodes(study_id=study.id))
        repo.close()
    return elapsed - between, between, episodes


def sample(n: int) -> list:
    env = registry.create(env_spec(), seed=0)
    env.reset()
    rng = np.random.default_rng(1)
    transitions = []
    for _ in range(n):
        t = env.step(env.sample_action(rng))
        transitions.append(t)
        if t.last:
            env.reset()
    env.close()
    return transitions


def best_of(fn: Callable[[], object], n: int, repeat: int = 5) -> float:
    """Microseconds per item, best of `repeat` runs (the machine is shared)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def components(n: int) -> list:
    from envlogger import step_data
    from envlogger.converters import codec
    from envlogger.proto import storage_pb2

    transitions = sample(n)
    frames = [t.observation["image"] for t in transitions]
    print("(2) where a recorded step's time goes (us/step, real frames; best of 5)")
    rows = {
        "JPEG 64x64 web_medium, Pillow preset (before)": lambda: [encode_jpeg_pillow(f) for f in frames],
        "JPEG 64x64 web_medium, simplejpeg (now)": lambda: [encode_jpeg(f) for f in frames],
    }
    jpegs = [encode_jpeg(f) for f in frames]
    inputs = [
        step_data.StepData(
            make_timestep(t.observation, t.reward, first=False, terminated=False, truncated=False),
            np.int64(3),
            custom_data(j, ["ArrowRight"], t.info),
        )
        for t, j in zip(transitions, jpegs, strict=True)
    ]
    wire = [fast_codec.serialize(x) for x in inputs]
    rows.update(
        {
            "record: envlogger codec.encode (envlogger's own)": lambda: [codec.encode(x) for x in inputs],
            "record: fast_codec.encode (before: message in place)": lambda: [
                fast_codec.encode(x) for x in inputs
            ],
            "record: fast_codec.serialize (now: wire bytes)": lambda: [
                fast_codec.serialize(x) for x in inputs
            ],
            "record: Data.FromString (the one parse, for add_step)": lambda: [
                storage_pb2.Data.FromString(w) for w in wire
            ],
        }
    )
    for name, fn in rows.items():
        print(f"    {name:52s} {best_of(fn, n):8.1f}")
    records = [fast_codec.encode(x) for x in inputs]
    for options in RIEGELI_OPTIONS:
        seconds = min(riegeli_write(records, options)[0] for _ in range(3))
        print(f"    {'Riegeli add_step + close [' + options + ']':52s} {seconds / n * 1e6:8.1f}")
    return records


def riegeli_write(records: list, options: str) -> tuple[float, int]:
    from envlogger.backends.python import riegeli_dataset_writer
    from envlogger.converters import codec

    with tempfile.TemporaryDirectory() as d:
        writer = riegeli_dataset_writer.RiegeliDatasetWriter()
        writer.init(
            data_dir=d, metadata=codec.encode({}), max_episodes_per_shard=10000, writer_options=options
        )
        start = time.perf_counter()
        for i, r in enumerate(records):
            writer.add_step(r, i == 0)
        writer.close()
        elapsed = time.perf_counter() - start
        size = sum(f.stat().st_size for f in Path(d).rglob("*") if f.is_file())
    return elapsed, size


def plain_write(payloads: list[bytes]) -> float:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "steps.bin"
        start = time.perf_counter()
        with path.open("wb") as f:
            for p in payloads:
                f.write(len(p).to_bytes(8, "little"))
                f.write(p)
            f.flush()
            os.fsync(f.fileno())  # riegeli's close() also syncs its files
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--episodes", type=int, default=10, help="episodes per round (coinrun: ~300 steps each)"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--component-steps", type=int, default=2000)
    args = parser.parse_args(argv)

    overhead(args.episodes, args.rounds)

    rng = np.random.default_rng(POLICY_SEED)
    actions = [int(a) for a in rng.integers(0, 15, args.component_steps)]
    records = components(args.component_steps)
    for background in (False, True):
        steps, between, episodes = boundaries(actions, background)
        label = "writer process" if background else "in-process writer"
        print(
            f"    between episodes, {label:18s} {between / episodes * 1e3:8.1f} ms/episode "
            f"(save, register, next start) = {between / len(actions) * 1e6:.1f} us/step over "
            f"{len(actions) / episodes:.0f}-step episodes"
        )

    print("(3) envlogger write throughput vs a plain file, same serialized step records")
    payloads = [r.SerializeToString() for r in records]
    mb = sum(len(p) for p in payloads) / 1e6
    plain = min(plain_write(payloads) for _ in range(3))
    print(f"  {len(records)} records, {mb:.1f} MB serialized")
    print(f"  {'plain file (length-prefixed, fsync)':44s} {mb / plain:7.1f} MB/s")
    for options in RIEGELI_OPTIONS:
        seconds, size = min(riegeli_write(records, options) for _ in range(3))
        print(
            f"  {'Riegeli [' + options + ']':44s} {mb / seconds:7.1f} MB/s  on disk {size / 1e6:5.2f} MB "
            f"({size / len(records) / 1e3:.1f} KB/step), {seconds / plain:.1f}x the plain file's time"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

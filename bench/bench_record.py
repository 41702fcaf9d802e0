"""Recording overhead and envlogger write throughput, measured side by side in one run.

(1) Procgen (coinrun, 64x64 observations): N steps of the bare `Environment.step` against N steps through
    the `Recorder` (JPEG of the 64x64 frame + envlogger write + episode registration at every episode end,
    files closed before the clock stops). Prints the ratio and where the recorder's time goes.
(2) envlogger write throughput in MB/s (Riegeli, our writer options and envlogger's default) against
    writing the same serialized step records to a plain file.

    .venv/bin/python bench/bench_record.py [--steps N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from annotator.envs import registry  # noqa: E402
from annotator.envs.render import encode_jpeg  # noqa: E402
from annotator.recorder import Recorder  # noqa: E402
from pipelines.episodes import envlogger_store, fast_codec  # noqa: E402
from pipelines.episodes.base import custom_data, make_timestep  # noqa: E402
from pipelines.store import open_store  # noqa: E402
from protos.rlds_creator import client_pb2, study_pb2  # noqa: E402

GAME = "coinrun"
ENVLOGGER_DEFAULT_OPTIONS = "transpose,brotli:6,chunk_size:1M"


def env_spec() -> study_pb2.EnvironmentSpec:
    spec = study_pb2.EnvironmentSpec(id="bench", name="bench", sync=True, max_episode_steps=0)
    spec.procgen.id = GAME
    spec.procgen.rand_seed = 11
    return spec


def bare_steps(actions: list[int], *, display: bool = False) -> float:
    """Bare steps; with `display`, also the JPEG a person playing without recording would be shown."""
    env = registry.create(env_spec(), seed=0)
    env.reset()
    start = time.perf_counter()
    for a in actions:
        last = env.step(a).last
        if display:
            encode_jpeg(env.render())
        if last:
            env.reset()
    elapsed = time.perf_counter() - start
    env.close()
    return elapsed


def recorded_steps(actions: list[int], data: Path) -> tuple[float, int, float]:
    """(seconds, episodes, seconds spent between episodes: closing, registering, opening the next)."""
    repo = open_store(None, data)
    study = repo.create_study(study_pb2.StudySpec(name="bench", environment_specs=[env_spec()]), "bench")
    rec = Recorder(repo, data, study.id, "bench", "bench@example.com", seed=0)
    rec.start()
    episodes = 0
    boundaries = 0.0
    start = time.perf_counter()
    for a in actions:
        if isinstance(rec.step_action(a), client_pb2.ConfirmSaveResponse):
            t = time.perf_counter()
            rec.save(client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True))
            episodes += 1
            rec.start()
            boundaries += time.perf_counter() - t
    t = time.perf_counter()
    rec.cancel()  # closes and registers the last episode: its files are complete inside the timing
    boundaries += time.perf_counter() - t
    elapsed = time.perf_counter() - start
    rec.close()
    repo.close()
    return elapsed, episodes + 1, boundaries


def components(n: int) -> dict[str, float]:
    """Microseconds per step of each part of a recorded step, measured on real frames."""
    from envlogger import step_data
    from envlogger.converters import codec

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
    out: dict[str, float] = {}
    start = time.perf_counter()
    jpegs = [encode_jpeg(t.observation["image"]) for t in transitions]
    out["JPEG encode (64x64, web_medium)"] = (time.perf_counter() - start) / n * 1e6
    inputs = [
        step_data.StepData(
            make_timestep(t.observation, t.reward, first=False, terminated=False, truncated=False),
            np.int64(3),
            custom_data(j, ["ArrowRight"], t.info),
        )
        for t, j in zip(transitions, jpegs, strict=True)
    ]
    encoders = {
        "envlogger codec.encode": codec.encode,
        "fast_codec.encode (what we write)": fast_codec.encode,
    }
    timings: dict[str, list[float]] = {name: [] for name in encoders}
    records: list = []
    for _ in range(3):  # alternate, keep the best: the machine is shared
        for name, encode in encoders.items():
            records = []  # free the previous round's records outside the timing
            start = time.perf_counter()
            records = [encode(x) for x in inputs]
            timings[name].append((time.perf_counter() - start) / n * 1e6)
    for name, values in timings.items():
        out[name] = min(values)
    for options in (envlogger_store.WRITER_OPTIONS, ENVLOGGER_DEFAULT_OPTIONS):
        seconds, _ = riegeli_write(records, options)
        out[f"Riegeli add_step+close [{options}]"] = seconds / n * 1e6
    return out


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
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args(argv)
    n = args.steps
    rng = np.random.default_rng(0)
    actions = [int(a) for a in rng.integers(0, 15, n)]

    print(f"(1) recording overhead: Procgen {GAME} 64x64, {n} random steps, same actions for each variant")
    bare_steps(actions[: min(200, n)])  # warm-up: imports, first game creation
    # The machine is shared: run the variants interleaved in rounds and report the median ratio.
    rounds = 5
    per = max(1, n // rounds)
    bare = rec = shown = between = 0.0
    episodes = 0
    ratios, play_ratios = [], []
    for r in range(rounds):
        chunk = actions[r * per : (r + 1) * per]
        with tempfile.TemporaryDirectory() as d:
            b = bare_steps(chunk)
            rs, eps, bnd = recorded_steps(chunk, Path(d))
            sh = bare_steps(chunk, display=True)
        bare, rec, shown, episodes = bare + b, rec + rs, shown + sh, episodes + eps
        between += bnd
        ratios.append(rs / b)
        play_ratios.append(rs / sh)
    m = per * rounds
    print(f"  bare env.step            {bare / m * 1e6:9.1f} us/step")
    print(f"  through the recorder     {rec / m * 1e6:9.1f} us/step  ({episodes} episodes registered)")
    print(
        f"  ratio recorder/bare      {np.median(ratios):9.2f}x   median of {rounds} rounds "
        f"(min {min(ratios):.2f}x, max {max(ratios):.2f}x; target < 1.3x)"
    )
    print(f"  overhead per step        {(rec - bare) / m * 1e3:9.3f} ms   (a frame at 15 fps is 66.7 ms)")
    print(f"  env.step + JPEG shown    {shown / m * 1e6:9.1f} us/step  (playing without recording)")
    print(
        f"  ratio recorder/playing   {np.median(play_ratios):9.2f}x   (what recording adds to an interactive step)"
    )
    print(
        f"  between episodes         {between / episodes * 1e3:9.1f} ms/episode (writer close + fsync, registration, "
        f"next writer) = {between / m * 1e6:.1f} us/step amortised"
    )
    print("  where a recorded step's extra time goes (us/step):")
    for name, us in components(min(n, 2000)).items():
        print(f"    {name:48s} {us:8.1f}")

    print("(2) envlogger write throughput vs a plain file, same serialized step records")
    from envlogger import step_data

    env = registry.create(env_spec(), seed=0)
    env.reset()
    records = []
    for _ in range(n):
        t = env.step(env.sample_action(rng))
        image = encode_jpeg(t.observation["image"])
        ts = make_timestep(t.observation, t.reward, first=False, terminated=False, truncated=False)
        records.append(fast_codec.encode(step_data.StepData(ts, np.int64(1), custom_data(image, [], t.info))))
        if t.last:
            env.reset()
    env.close()
    payloads = [r.SerializeToString() for r in records]
    mb = sum(len(p) for p in payloads) / 1e6
    plain = plain_write(payloads)
    print(f"  {n} records, {mb:.1f} MB serialized")
    print(f"  plain file (length-prefixed, fsync)          {mb / plain:9.1f} MB/s")
    for options in (envlogger_store.WRITER_OPTIONS, ENVLOGGER_DEFAULT_OPTIONS):
        seconds, size = riegeli_write(records, options)
        print(
            f"  envlogger Riegeli [{options}] {mb / seconds:9.1f} MB/s  "
            f"(on disk {size / 1e6:.1f} MB, {mb / plain / (mb / seconds):.1f}x slower than the file)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

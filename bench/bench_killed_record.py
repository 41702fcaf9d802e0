"""What surviving a SIGKILL costs the writers, measured side by side in one run.

The same Atari frames (Montezuma's Revenge, 210x160 RGB, JPEG of each frame as custom data) written as one
long episode by:
  - the envlogger writer flushing once a second (`envlogger_store.FLUSH_SECONDS`, the default) against the
    same writer flushing only on close (how it wrote before);
  - the pickle writer with its `steps.journal` (the default) against the same writer without it.
Rounds alternate (the machine is shared); the median ratio of wall times is printed.

    .venv/bin/python bench/bench_killed_record.py [--steps N] [--rounds R]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path, PurePosixPath

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from annotator.envs import registry  # noqa: E402
from annotator.envs.render import encode_jpeg  # noqa: E402
from pipelines.episodes import EnvSpecs, EpisodeMetadata, envlogger_store, pickle_store  # noqa: E402
from protos.rlds_creator import study_pb2  # noqa: E402

META = EpisodeMetadata(agent_id="bench", episode_id="e", env_id="mr", study_id="s", session_id="se")


def frames(n: int) -> tuple[EnvSpecs, list]:
    spec = study_pb2.EnvironmentSpec(id="mr", sync=True, atari=study_pb2.EnvironmentSpec.Atari(id="MontezumaRevenge"))
    env = registry.create(spec, seed=0)
    specs = EnvSpecs(env.observation_spec(), env.action_spec())
    first = env.reset()
    out = [(None, first.observation, 0.0, encode_jpeg(env.render()), first.info)]
    for _ in range(n):
        t = env.step(env.noop_action())
        out.append((env.noop_action(), t.observation, t.reward, encode_jpeg(env.render()), t.info))
    env.close()
    return specs, out


class _NoJournal(pickle_store.PickleEpisodeWriter):
    """The pickle writer as it was: steps kept in memory only until close."""

    def _record(self, data) -> None:
        self._steps.append(data)


def write(make, steps: list, repeat: int) -> float:
    """Seconds to write the frames `repeat` times over as one episode (long enough for several flushes)."""
    start = time.perf_counter()
    writer = make()
    _, obs, _, image, info = steps[0]
    writer.write_first(obs, image=image, info=info)
    for _ in range(repeat):
        for action, obs, reward, image, info in steps[1:]:
            writer.write_step(action, obs, reward, image=image, keys=[], info=info)
    writer.close(META)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="distinct frames (kept in memory)")
    parser.add_argument("--repeat", type=int, default=5, help="times they are written over in one episode")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    specs, steps = frames(args.steps)
    rel = PurePosixPath("s/se/mr/e")
    ratios: dict[str, list[float]] = {"envlogger": [], "pickle": []}
    per_step: dict[str, list[float]] = {k: [] for k in ("envlogger flush 1/s", "envlogger close only",
                                                         "pickle journal", "pickle no journal")}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            def folder(name: str) -> Path:
                return Path(tmp) / f"{name}-{r}"  # noqa: B023 - used at once

            def flushing() -> envlogger_store.EnvloggerEpisodeWriter:
                return envlogger_store.EnvloggerEpisodeWriter(folder("flush"), rel, specs)

            def close_only() -> envlogger_store.EnvloggerEpisodeWriter:
                writer = envlogger_store.EnvloggerEpisodeWriter(folder("close"), rel, specs)
                writer._backend._flush_scheduler = lambda _data: False  # noqa: SLF001 - the old behaviour
                return writer

            a, b = write(flushing, steps, args.repeat), write(close_only, steps, args.repeat)
            c = write(lambda: pickle_store.PickleEpisodeWriter(folder("journal"), rel, specs), steps, 1)
            d = write(lambda: _NoJournal(folder("plain"), rel, specs), steps, 1)
            ratios["envlogger"].append(a / b)
            ratios["pickle"].append(c / d)
            for key, t in zip(per_step, (a, b, c, d), strict=True):
                n = (len(steps) - 1) * (args.repeat if key.startswith("envlogger") else 1) + 1
                per_step[key].append(t / n * 1e6)
            for name in ("flush", "close", "journal", "plain"):
                shutil.rmtree(folder(name))
    print(f"{len(steps) - 1} Atari frames ({args.repeat}x over for envlogger), {args.rounds} rounds (median)")
    for key, values in per_step.items():
        print(f"  {key:<22} {statistics.median(values):8.1f} us/step")
    print(f"envlogger, flush once a second vs on close only: {statistics.median(ratios['envlogger']):.3f}x")
    print(f"pickle, with steps.journal vs without:          {statistics.median(ratios['pickle']):.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

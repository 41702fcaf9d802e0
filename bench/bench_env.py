"""Environment step speed per family: the library's own step against our `Environment.step`, side by side.

For each family: N steps of the underlying library object (gym3 / gymnasium / robosuite / RoboDesk) with
the same actions, then N steps through `annotator.envs` (truncation bookkeeping, observation copies,
JSON-friendly info), then the cost of showing a frame (`render()` + JPEG at medium quality). Prints
steps/s and the wrapper/bare ratio. Robosuite and RoboDesk render with OSMesa and take a while:
they run only when named.

    .venv/bin/python bench/bench_env.py [--steps N] [--families procgen,atari,nethack,robosuite,robodesk]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from annotator.envs import registry  # noqa: E402
from annotator.envs.base import Environment  # noqa: E402
from annotator.envs.render import encode_jpeg  # noqa: E402
from protos.rlds_creator import study_pb2  # noqa: E402


def spec_for(family: str) -> study_pb2.EnvironmentSpec:
    spec = study_pb2.EnvironmentSpec(id=f"bench-{family}", sync=True)
    if family == "procgen":
        spec.procgen.id = "coinrun"
        spec.procgen.rand_seed = 1
    elif family == "atari":
        spec.atari.id = "Breakout"
    elif family == "nethack":
        spec.net_hack.id = "NetHackScore-v0"
    elif family == "robosuite":
        spec.robosuite.id = "Lift"
    elif family == "robodesk":
        spec.robodesk.task = "open_slide"
    else:
        raise SystemExit(f"unknown family {family!r}")
    return spec


def bare_stepper(env: Environment) -> Callable[[Any], bool]:
    """A function stepping the library object under `env` directly; returns True when it must be reset."""
    raw = env._env  # noqa: SLF001 - the point is to bypass our layer
    if env.family == "procgen":

        def step(a: Any) -> bool:
            raw.act(np.array([a], dtype=np.int32))
            _, _, first = raw.observe()
            return False  # gym3 resets itself

        return step
    if env.family in ("atari", "nethack"):

        def step(a: Any) -> bool:
            _, _, terminated, truncated, _ = raw.step(a)
            if terminated or truncated:
                raw.reset()
            return False

        return step

    def step(a: Any) -> bool:  # robosuite, robodesk: old gym API, never done (limits disabled)
        raw.step(a)
        return False

    return step


def run(family: str, steps: int) -> None:
    env = registry.create(spec_for(family), seed=0, render_size=128 if family == "robosuite" else None)
    rng = np.random.default_rng(0)
    env.reset()
    actions = [env.sample_action(rng) for _ in range(steps)]

    step = bare_stepper(env)
    start = time.perf_counter()
    for a in actions:
        step(a)
    bare = time.perf_counter() - start

    env.reset()
    start = time.perf_counter()
    for a in actions:
        if env.step(a).last:
            env.reset()
    wrapped = time.perf_counter() - start

    frames = max(1, steps // 10)
    start = time.perf_counter()
    size = 0
    for _ in range(frames):
        size += len(encode_jpeg(env.render()))
    show = (time.perf_counter() - start) / frames
    shape = env.render().shape
    env.close()
    print(
        f"{family:10s} bare {steps / bare:9.1f} steps/s | ours {steps / wrapped:9.1f} steps/s | "
        f"ratio {wrapped / bare:5.2f}x | render+jpeg {show * 1000:7.2f} ms ({shape[1]}x{shape[0]}, "
        f"{size / frames / 1024:.1f} KB)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps per family (robot families: /20)")
    parser.add_argument("--families", default="procgen,atari,nethack")
    args = parser.parse_args(argv)
    for family in args.families.split(","):
        slow = family in ("robosuite", "robodesk")
        run(family, max(10, args.steps // 20) if slow else args.steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`stepmark record`: record episodes of a study's environment with a policy, no person needed."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from pipelines.errors import StepmarkError

#: Largest --seed: environments (Gymnasium, ALE, Procgen) take 32-bit unsigned seeds; numpy refuses negatives.
MAX_SEED = 2**32 - 1


def register(subparsers: argparse._SubParsersAction, parents: dict[str, argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "record",
        parents=[parents["store"]],
        help="record episodes of a study's environment with a policy (batch, with a progress bar)",
        description=(
            "Record N episodes of one environment of a study with a policy, save them as COMPLETED "
            "(envlogger files under --data, metadata in the store) and print a summary."
        ),
    )
    p.add_argument("--study", required=True, help="study id")
    p.add_argument("--env", required=True, dest="env_id", help="environment id within the study")
    p.add_argument("--episodes", type=int, default=1, help="number of episodes to record (default: 1)")
    p.add_argument("--policy", default="random", choices=("random", "noop"), help="action policy")
    p.add_argument("--seed", type=int, default=None, help="seed for the policy and the environment")
    p.add_argument(
        "--storage", default="envlogger", choices=("envlogger", "pickle"), help="episode file format"
    )
    p.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="truncate each episode after this many steps (default: the environment's max_episode_steps)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=record)


class _StopRequest:
    """Ctrl-C or SIGTERM asks the batch to stop at its next step (the recorder then registers what was
    saved and the unfinished episode as ABANDONED, leaving no temporary folder); a second one interrupts
    at once."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self) -> bool:
        return self.requested

    def _handle(self, signum: int, frame: object) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    @contextlib.contextmanager
    def installed(self) -> Iterator[_StopRequest]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def record(args: argparse.Namespace) -> int:
    from annotator.recorder import record_batch
    from pipelines.episodes.publish import open_store
    from pipelines.episodes.stats import stats_of_episode

    if args.episodes < 1:
        raise StepmarkError(f"--episodes must be >= 1, got {args.episodes}")
    if args.max_steps is not None and args.max_steps < 1:
        raise StepmarkError(f"--max-steps must be >= 1, got {args.max_steps}")
    if args.seed is not None and not 0 <= args.seed <= MAX_SEED:
        raise StepmarkError(f"--seed must be between 0 and {MAX_SEED} (2**32 - 1), got {args.seed}")
    data_dir = Path(args.data).expanduser().resolve()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StepmarkError(f"--data {args.data}: cannot create the data directory ({exc.strerror})") from exc
    if not os.access(data_dir, os.W_OK | os.X_OK):
        raise StepmarkError(f"--data {args.data}: the data directory is not writable")
    with open_store(args.store, data_dir) as repo, _StopRequest().installed() as stop:
        episodes = record_batch(
            repo,
            data_dir,
            args.study,
            args.env_id,
            args.episodes,
            policy=args.policy,
            user=args.user,
            seed=args.seed,
            progress=not args.no_progress,
            storage=args.storage,
            max_steps=args.max_steps,
            stop=stop,
        )
    print(f"recorded {len(episodes)} episode(s) of {args.env_id!r} in study {args.study!r} as {args.user}")
    print(f"{'episode':<34} {'steps':>6} {'return':>9} {'success':>7}  files")
    for e in episodes:
        storage = e.storage
        rel = (
            storage.environment_logger.tag_directory
            if storage.WhichOneof("type") == "environment_logger"
            else storage.pickle.path
        )
        figures = stats_of_episode(e)
        print(f"{e.id:<34} {figures.l:>6} {figures.r:>9.7g} {str(figures.s).lower():>7}  {rel}")
    total_steps = sum(e.num_steps for e in episodes)
    print(f"{total_steps} steps; files under {data_dir}")
    if stop.requested:
        print("interrupted: the unfinished episode (if it had steps) was saved as ABANDONED", file=sys.stderr)
        return 130
    return 0

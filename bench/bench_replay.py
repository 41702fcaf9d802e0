"""Replay speed and memory: is showing a step independent of the episode's length?

Records two Procgen episodes with the recorder (100 and 1,000 steps, envlogger storage) into a fresh data dir,
then, for each length, in its own process (so memory is per length):
  - 1st open: the first `Operations.replay_episode` in the process (imports included),
  - open: `Operations.replay_episode` again with a cold reader (reads every step's reward, keeps no frames),
  - step: `Operations.replay_step` at random indexes (server-side time to produce one step),
  - page: the Replay page's server-side script time (app.py records it) in Streamlit's AppTest after moving the
    slider; page scripts are compiled once, as the server does (AppTest alone would recompile every run),
  - UI: the same for a UI episode converted from ../shared/fixtures/droidbot (screenshot + boxes drawn),
and prints p50/p95 and RSS (before/after replaying, peak, peak with the page phase) side by side.
Targets: step and page p95 < 100 ms and open < 1 s at 1,000 steps; RSS growth independent of length.

    .venv/bin/python bench/bench_replay.py [--steps 100 1000] [--samples 200] [--page-samples 30]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
FIXTURES = Path(os.environ.get("STEPMARK_FIXTURES", REPO.parent / "shared" / "fixtures"))
USER = "bench@example.com"


def percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return statistics.median(ordered), p95


def build(data_dir: Path, lengths: list[int]) -> dict[str, str]:
    """One study per length (max_episode_steps = length) and one noop episode each; plus the UI import."""
    from annotator.operations import ref_key
    from annotator.recorder import record_batch
    from pipelines.store import open_store
    from protos.rlds_creator import study_pb2

    repo = open_store(None, data_dir)
    refs: dict[str, str] = {}
    for n in lengths:
        spec = study_pb2.StudySpec(name=f"bench {n}")
        env = spec.environment_specs.add(id="coinrun", sync=True, max_episode_steps=n)
        env.procgen.id = "coinrun"
        env.procgen.rand_seed = 1
        study = repo.create_study(spec, USER)
        t = time.perf_counter()
        (episode,) = record_batch(repo, data_dir, study.id, "coinrun", 1, "noop", user=USER, seed=1,
                                  progress=False)  # fmt: skip
        print(f"recorded {episode.num_steps} steps in {time.perf_counter() - t:.1f}s", flush=True)
        refs[str(n)] = ref_key(repo.ref(episode))
    try:
        from pipelines import convert, ui_import

        out = data_dir / "converted"
        convert.run([str(FIXTURES / "droidbot"), str(out), "--runner=FnApiRunner"])
        study = ui_import.import_ui(repo, str(out), "bench ui", USER)
        refs["ui"] = ref_key(repo.ref(repo.list_episodes(study_id=study.id)[0]))
    except Exception as exc:  # noqa: BLE001 - the env figures still stand
        print(f"UI episode not measured: {exc}", flush=True)
    return refs


def measure(data_dir: str, key: str, samples: int, page_samples: int) -> dict:
    """Runs in a child process: one episode, cold open, random steps, page renders, peak RSS."""
    from annotator import drawing
    from annotator.operations import Operations, episode_kind, parse_ref_key, ui_step_view
    from pipelines.store import open_store
    from protos.rlds_creator import client_pb2

    repo = open_store(None, data_dir)
    request = client_pb2.ReplayEpisodeRequest(ref=parse_ref_key(key))
    t = time.perf_counter()
    Operations(repo, data_dir, USER).replay_episode(request)  # first open in the process: imports included
    first_open_s = time.perf_counter() - t
    rss_start = rss_mb()
    ops = Operations(repo, data_dir, USER)  # a new reader cache: the episode is opened cold again
    t = time.perf_counter()
    opened = ops.replay_episode(request)
    open_s = time.perf_counter() - t
    n = len(opened.step_rewards)
    ui = episode_kind(opened.episode.episode) == "ui"
    rng = random.Random(0)
    step_ms = []
    for _ in range(samples):
        i = rng.randrange(n)
        t = time.perf_counter()
        response, step = ops.replay_step_with_data(i)
        if ui:  # the page draws the boxes too
            view = ui_step_view(step)
            drawing.render_step(view.image, view.objects, boxes="all", grid=True, touch=view.touch)
        step_ms.append((time.perf_counter() - t) * 1000)
    rss_steps = rss_mb()
    peak_before_page = rss_mb("VmHWM")

    page_ms = []
    if page_samples:
        import streamlit.testing.v1.app_test as app_test
        from streamlit.runtime.scriptrunner.script_cache import ScriptCache
        from streamlit.testing.v1 import AppTest

        # The server compiles each page script once (one ScriptCache per runtime); AppTest makes a new cache per
        # run and recompiles (~45 ms for the replay page). Share one cache so the figure is the server's.
        shared_cache = ScriptCache()
        app_test.ScriptCache = lambda: shared_cache

        os.environ["STEPMARK_DATA"] = data_dir
        os.environ["STEPMARK_USER"] = USER
        at = AppTest.from_file(str(REPO / "annotator" / "app.py"), default_timeout=120).run()
        at.switch_page("views/replay.py")
        at.query_params["episode"] = key
        at.run()
        for _ in range(page_samples):
            i = rng.randrange(n)
            if n > 1:
                at.slider(key="replay_step").set_value(i)
            at.run()
            assert not at.exception, at.exception
            page_ms.append(at.session_state["_render_seconds"] * 1000)  # the script run, server side
    return {
        "steps": n,
        "first_open_s": first_open_s,
        "open_s": open_s,
        "step_ms": percentiles(step_ms),
        "page_ms": percentiles(page_ms) if page_ms else None,
        "rss_mb_start": rss_start,
        "rss_mb_after_steps": rss_steps,
        "rss_mb_peak_replay": peak_before_page,
        "rss_mb_peak": rss_mb("VmHWM"),
    }


def rss_mb(field: str = "VmRSS") -> float:
    """Resident set size now (VmRSS) or this process's peak (VmHWM). Not ru_maxrss: on Linux that keeps the
    parent's peak across fork+exec, so a child would report the recording phase's memory."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--samples", type=int, default=200, help="random steps per episode")
    parser.add_argument("--page-samples", type=int, default=30, help="AppTest page renders per episode")
    parser.add_argument("--data", help="reuse/keep this data dir (default: a temporary one)")
    parser.add_argument("--child", nargs=2, metavar=("DATA", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child[0], args.child[1], args.samples, args.page_samples)))
        return 0

    data_dir = Path(args.data or tempfile.mkdtemp(prefix="bench_replay_"))
    refs = build(data_dir, args.steps)
    results = {}
    for label, key in refs.items():
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(data_dir), key, "--samples", str(args.samples),
             "--page-samples", str(args.page_samples)],  # fmt: skip
            capture_output=True, text=True, check=True, cwd=REPO,
        )  # fmt: skip
        results[label] = json.loads(out.stdout.strip().splitlines()[-1])

    print()
    print(f"{'episode':>9} {'steps':>6} {'1st open':>9} {'open':>7} {'step p50':>9} {'step p95':>9} "
          f"{'page p50':>9} {'page p95':>9} {'RSS before':>10} {'RSS after':>9} {'peak':>6} {'w/ page':>7}")  # fmt: skip
    for label, r in results.items():
        page = r["page_ms"] or (float("nan"), float("nan"))
        print(f"{label:>9} {r['steps']:>6} {r['first_open_s']:>8.2f}s {r['open_s']:>6.3f}s "
              f"{r['step_ms'][0]:>7.1f}ms {r['step_ms'][1]:>7.1f}ms {page[0]:>7.1f}ms {page[1]:>7.1f}ms "
              f"{r['rss_mb_start']:>8.0f}MB {r['rss_mb_after_steps']:>7.0f}MB {r['rss_mb_peak_replay']:>4.0f}MB "
              f"{r['rss_mb_peak']:>5.0f}MB")  # fmt: skip
    env = [r for label, r in results.items() if label != "ui"]
    if len(env) >= 2:
        small, big = env[0], env[-1]
        print()
        print(f"{big['steps']} vs {small['steps']} steps: open x{big['open_s'] / small['open_s']:.2f}, "
              f"step p95 x{big['step_ms'][1] / small['step_ms'][1]:.2f}, "
              f"RSS growth while replaying {big['rss_mb_after_steps'] - big['rss_mb_start']:.1f} MB vs "
              f"{small['rss_mb_after_steps'] - small['rss_mb_start']:.1f} MB")  # fmt: skip
        page95 = big["page_ms"][1] if big["page_ms"] else float("nan")
        print(
            f"targets at {big['steps']} steps: step p95 < 100 ms: {big['step_ms'][1] < 100}; "
            f"page p95 < 100 ms: {page95 < 100}; open < 1 s: {big['open_s'] < 1.0}"
        )
    print(f"data kept in {data_dir}" if args.data else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())

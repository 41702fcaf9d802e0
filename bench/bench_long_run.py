"""Peak memory of convert-ui on long DroidBot runs (issue 32 item 3), measured side by side in one run: runs of
1,000 and 4,000 events converted with record parts (what convert-ui does: `ui_episode.PART_BYTES`), and the
1,000-event run converted whole (parts switched off in the child process, as before).

    .venv/bin/python bench/bench_long_run.py [--events 1000 4000] [--no-whole]

Input (in a temporary folder): the fixture's yelp run (../shared/fixtures/droidbot/yelp, 35 events over 16 saved
states with their screenshots) with its events repeated, each repetition 200 s after the one before, up to N
events (about an hour of exploration for 1,000). Each conversion is a fresh `stepmark convert-ui` child; its
peak RSS and its converter worker's come from `getrusage`. Target: the conversion's peak (the largest of the
two) under 700 MB at 1,000 events, and flat from 1,000 to 4,000 events (ratio near 1).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
YELP = Path(os.environ.get("STEPMARK_FIXTURES", REPO.parent / "shared" / "fixtures")) / "droidbot" / "yelp"
TAG = "%Y-%m-%d_%H%M%S"
SHIFT = datetime.timedelta(seconds=200)  # the yelp events span 190 s

CHILD = """
import resource, sys, time
if sys.argv[3] == "whole":  # as before issue 32: the episode is one record, however long
    import pipelines.ui_episode as ue
    ue.PART_BYTES = 1 << 62
from stepmark.cli import main
start = time.monotonic()
code = main(["convert-ui", sys.argv[1], sys.argv[2], "--quiet", "--follow-links"])
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"RESULT {code} {own} {children} {time.monotonic() - start:.1f}")
"""


def make_run(folder: Path, events: int) -> Path:
    """The yelp run with its events repeated up to `events` (states linked, events rewritten with new tags)."""
    run = folder / "yelp_long"
    (run / "states").mkdir(parents=True)
    (run / "events").mkdir()
    for f in sorted((YELP / "states").iterdir()):
        os.symlink(f, run / "states" / f.name)
    originals = [json.loads(f.read_text()) for f in sorted((YELP / "events").glob("event_*.json"))]
    for n in range(events):
        rep, event = divmod(n, len(originals))
        record = dict(originals[event])
        tag = (datetime.datetime.strptime(record["tag"], TAG) + rep * SHIFT).strftime(TAG)
        record["tag"] = tag
        (run / "events" / f"event_{tag}.json").write_text(json.dumps(record))
    return run


def convert(inp: Path, out: Path, mode: str) -> tuple[float, float, float, dict]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(inp), str(out), mode], cwd=REPO, capture_output=True,
                          text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                                          "TF_CPP_MIN_LOG_LEVEL": "2"})  # fmt: skip
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{mode} run failed (rc {done.returncode}): {done.stderr[-2000:]}")
    _, code, own, children, seconds = line.split()
    summary = json.loads((out / "summary.json").read_text())
    return int(own) / 1024, int(children) / 1024, float(seconds), summary


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, nargs="+", default=[1000, 4000])
    parser.add_argument("--no-whole", action="store_true", help="skip the whole-record run (slow, ~2 GB)")
    args = parser.parse_args()
    runs = [("parts", n) for n in args.events] + ([] if args.no_whole else [("whole", min(args.events))])
    peaks: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode, n in runs:
            if not (Path(tmp) / f"in-{n}").exists():
                make_run(Path(tmp) / f"in-{n}", n)
            own, worker, seconds, summary = convert(Path(tmp) / f"in-{n}", Path(tmp) / f"out-{mode}-{n}", mode)
            written = sum(s["bytes"] for s in summary["shards"]) / 2**20
            peaks[(mode, n)] = max(own, worker)
            dead = {k: v for k, v in summary["dead_letters_by_reason"].items() if k != "missing_state"}
            print(f"{mode:>5} {n:5d} events: {summary['episodes']} episode(s), {summary['steps']:5d} steps, "
                  f"peak RSS pipeline {own:6.0f} MB, converter {worker:6.0f} MB, {seconds:6.1f} s, "
                  f"{written:.0f} MB written, "
                  f"other dead letters {dead or 'none'}")  # fmt: skip
    parted = sorted(n for mode, n in peaks if mode == "parts")
    if len(parted) > 1:
        lo, hi = parted[0], parted[-1]
        print(f"parts: peak {peaks[('parts', hi)]:.0f} MB at {hi} / {peaks[('parts', lo)]:.0f} MB at {lo} "
              f"= {peaks[('parts', hi)] / peaks[('parts', lo)]:.2f}x for {hi / lo:.0f}x the events")  # fmt: skip
    if ("whole", parted[0]) in peaks:
        print(f"at {parted[0]} events: parts / whole peak {peaks[('parts', parted[0])] / peaks[('whole', parted[0])]:.2f}x")


if __name__ == "__main__":
    main()

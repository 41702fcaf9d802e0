"""Peak memory of convert-ui on TFRecord inputs whose records are large (issue 22), measured side by side in one
run: record bytes spilled to the temporary folder (what convert-ui does) vs the same pipeline with the bytes
travelling between transforms (the spill switched off in the child process, as before issue 22).

    .venv/bin/python bench/bench_record_memory.py [--records 6] [--mb 100]

Input: one gzip file of N AndroidControl records whose screenshot is M MB of zeros (each record under the
256 MiB record limit, each screenshot over the 32 MiB one, so every episode ends as a `too_large` dead letter
either way). Each run is a fresh `stepmark convert-ui` child; its peak RSS (and its children's) comes from
`getrusage`. The dead letters must be the same in both runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.pipelines.record_writers import example, feature_bytes, feature_ints, frame  # noqa: E402

CHILD = """
import resource, sys, time
spill = sys.argv[3] == "spill"
if not spill:  # the pipeline as it was: record bytes travel between transforms
    import pipelines.convert_records as cr
    original = cr.ReadRecordInputs.__init__
    def no_spill(self, namespace, policy=cr.ANYWHERE, spill_dir=None):
        original(self, namespace, policy, None)
    cr.ReadRecordInputs.__init__ = no_spill
from stepmark.cli import main
start = time.monotonic()
code = main(["convert-ui", sys.argv[1], sys.argv[2], "--quiet"])
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"RESULT {code} {own} {children} {time.monotonic() - start:.1f}")
"""


def make_input(folder: Path, records: int, mb: int) -> Path:
    folder.mkdir(parents=True)
    path = folder / "large.tfrecord.gz"
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        for i in range(records):
            record = example({"episode_id": feature_ints(100 + i), "accessibility_trees": feature_bytes(b""),
                              "screenshots": feature_bytes(b"\0" * (mb << 20))})  # fmt: skip
            f.write(comp.compress(frame(record)))
        f.write(comp.flush())
    return path


def run(inp: Path, out: Path, mode: str) -> tuple[float, float, float, dict]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(inp), str(out), mode], cwd=REPO, capture_output=True,
                          text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})  # fmt: skip
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{mode} run failed (rc {done.returncode}): {done.stderr[-2000:]}")
    _, code, own, children, seconds = line.split()
    summary = json.loads((out / "summary.json").read_text())
    return int(own) / 1024, int(children) / 1024, float(seconds), summary["dead_letters_by_reason"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=6)
    parser.add_argument("--mb", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        inp = make_input(Path(tmp) / "in", args.records, args.mb)
        print(f"input: {args.records} records of {args.mb} MB in {inp.stat().st_size / 2**20:.1f} MB of gzip "
              f"({time.monotonic() - t0:.1f} s to write)")  # fmt: skip
        results = {mode: run(inp.parent, Path(tmp) / f"out-{mode}", mode) for mode in ("travel", "spill")}
    for mode, (own, children, seconds, dead) in results.items():
        print(f"{mode:>6}: peak RSS pipeline {own:7.0f} MB, largest child {children:7.0f} MB, {seconds:6.1f} s, "
              f"dead letters {dead}")  # fmt: skip
    travel, spill = results["travel"], results["spill"]
    assert travel[3] == spill[3], "the two runs must give the same dead letters"
    print(f"spill / travel: peak RSS {spill[0] / travel[0]:.2f}x, time {spill[2] / travel[2]:.2f}x")


if __name__ == "__main__":
    main()

"""`stepmark agreement` against the number of labelled episodes: wall time and peak RSS side by side.

Builds one SQLite store per size N (default 2,000, 20,000, 100,000): a study with a work queue (set through
the Repository API, as a lead would), N episodes of 10 steps each, every one done by two annotators of five
and one in ten by a third; their own step labels are bulk-inserted as bench/bench_store_scale.py `grow` does.
Labels are realistic: 7 labels, about 70% of steps left empty by everyone, one or two labels on the others,
and about 20% of steps disputed (an annotator adds, drops or swaps a label). Then runs
`stepmark agreement --study ID` on each under `/usr/bin/time -v` and prints wall time and peak RSS, with
ratios to the smallest size (flat memory: RSS ratios near 1; linear time: time ratios near the N ratios).
Nothing is asserted: figures are printed.

    .venv/bin/python bench/bench_agreement.py [--sizes 2000 20000 100000] [--keep DIR] [--json]

`--keep DIR` keeps the stores in DIR and reuses them (measure the same stores before and after a change).
`--json` also runs `stepmark agreement --json` (the output the Quality page and scripts read).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_store_scale import time_v  # noqa: E402 - this folder is on sys.path when a bench runs

USERS = [f"annotator{i}@example.com" for i in range(5)]
LEAD = USERS[0]
LABELS = ["wrong_target", "scroll_needed", "ad", "login", "loop", "crash", "done"]
STEPS = 10
INSERT_BATCH = 20_000


def step_labels(rng: random.Random, annotators: int) -> list[set[str]]:
    """The label sets `annotators` people give one step: mostly the same, sometimes not."""
    base: set[str] = set()
    if rng.random() < 0.3:
        base = set(rng.sample(LABELS, 1 if rng.random() < 0.8 else 2))
    sets = [set(base) for _ in range(annotators)]
    if rng.random() < 0.2:  # disputed: one annotator answers otherwise
        odd = sets[rng.randrange(annotators)]
        if odd and rng.random() < 0.5:
            odd.discard(rng.choice(sorted(odd)))
        else:
            odd.add(rng.choice([label for label in LABELS if label not in odd]))
    return sets


def build(data_dir: Path, n: int) -> str:
    """A store with one labelled study of `n` episodes; returns the study id."""
    import sqlalchemy as sa

    from pipelines.store import open_store
    from pipelines.store import queue as work_queue
    from pipelines.store.models import AnnotatorStepLabelRow, EpisodeRow, QueueAssignmentRow
    from pipelines.ui_import import find_or_create_study
    from protos.rlds_creator import study_pb2

    with open_store(None, data_dir) as repo:
        study = find_or_create_study(repo, "agreement", LEAD)
        work_queue.set_queue(repo, work_queue.QueueConfig(study.id, overlap=3), LEAD)
        session_id = repo.create_session(study.id, LEAD).id
        base = datetime(2026, 1, 1, tzinfo=UTC)
        rng = random.Random(n)
        for lo in range(0, n, INSERT_BATCH):
            episodes, work, labels = [], [], []
            for i in range(lo, min(n, lo + INSERT_BATCH)):
                episode_id, when = f"ep{i:08d}", base + timedelta(milliseconds=i)
                episodes.append({
                    "id": episode_id, "study_id": study.id, "session_id": session_id,
                    "environment_id": "android-ui", "user": LEAD, "state": study_pb2.Episode.STATE_COMPLETED,
                    "start_time": None, "end_time": None, "num_steps": STEPS, "total_reward": 0.0,
                    "storage_kind": None, "storage_tag_directory": None, "storage_index": None,
                    "storage_pickle_path": None, "notes": None, "controller_id": None, "registered_time": when,
                    "source_key": f"ui:ep{i}", "metadata": {"kind": "ui"}, "kind": "ui",
                })  # fmt: skip
                who = [USERS[i % 5], USERS[(i + 1) % 5]] + ([USERS[(i + 2) % 5]] if i % 10 == 3 else [])
                for slot, user in enumerate(who):
                    work.append({"study_id": study.id, "episode_id": episode_id, "user": user, "slot": slot,
                                 "state": "done", "assigned_time": when, "done_time": when})  # fmt: skip
                for step in range(STEPS):
                    for user, given in zip(who, step_labels(rng, len(who)), strict=True):
                        labels += [{"episode_id": episode_id, "user": user, "step_index": step, "label": label,
                                    "created_time": when} for label in sorted(given)]  # fmt: skip
            with repo.engine.begin() as conn:
                for table, rows in ((EpisodeRow, episodes), (QueueAssignmentRow, work),
                                    (AnnotatorStepLabelRow, labels)):  # fmt: skip
                    conn.execute(sa.insert(table.__table__), rows)
        repo.analyze()
        return study.id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2_000, 20_000, 100_000])
    parser.add_argument("--keep", type=Path, help="keep the stores here and reuse them")
    parser.add_argument("--json", action="store_true", help="also time `stepmark agreement --json`")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench_agreement_"))
    root.mkdir(parents=True, exist_ok=True)
    commands = {"agreement": []} | ({"agreement --json": ["--json"]} if args.json else {})
    rows: list[tuple[int, str, float, float, int]] = []
    try:
        for n in args.sizes:
            data_dir = root / f"n{n}"
            marker = data_dir / "study_id"
            if not marker.exists():
                shutil.rmtree(data_dir, ignore_errors=True)
                t = time.perf_counter()
                marker.parent.mkdir(parents=True)
                study_id = build(data_dir, n)
                marker.write_text(study_id)
                print(f"built N={n:,} in {time.perf_counter() - t:.1f} s", flush=True)
            study_id = marker.read_text()
            for name, extra in commands.items():
                out = data_dir / f"out-{name.replace(' ', '')}.txt"
                cmd = [sys.executable, "-m", "stepmark", "agreement", "--study", study_id, "--data", str(data_dir),
                       *extra]  # fmt: skip
                seconds, rss = time_v(cmd, out)
                rows.append((n, name, seconds, rss, out.stat().st_size))
                print(f"N={n:,} {name}: {seconds:.2f} s, {rss:.0f} MB", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\n{'N':>9} {'command':<17} {'wall s':>8} {'x':>6} {'peak RSS MB':>12} {'x':>6} {'output KB':>10}")
    first = {name: (s, r) for n, name, s, r, _ in rows if n == min(args.sizes)}
    for n, name, seconds, rss, size in rows:
        s0, r0 = first[name]
        print(f"{n:>9,} {name:<17} {seconds:>8.2f} {seconds / s0:>6.1f} {rss:>12.0f} {rss / r0:>6.2f} "
              f"{size / 1024:>10.0f}")  # fmt: skip


if __name__ == "__main__":
    main()

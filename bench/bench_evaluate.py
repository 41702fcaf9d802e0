"""`stepmark evaluate` at 10k, 50k and 100k steps: peak RSS and wall time of the whole command, side by side.

Memory must stay flat (issue 33): the predictions file is streamed and the study's episodes are read a page at a
time, each record once. Data: the DroidBot Yelp run of ../shared/fixtures (33 tapped steps) converted and
imported once (a real record); each size is a study of bulk-inserted copies of that row (new ids, the same
record), and a predictions file with one line per step: the recorded point, except every 7th step (a point
far away: `point`) and every 11th step (no line: `missing`). Each run prints its figures; nothing is asserted.

    .venv/bin/python bench/bench_evaluate.py [--sizes 10000 50000 100000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_export_scale import FIXTURES, USER, count, grow, study_of  # noqa: E402
from bench_store_scale import time_v  # noqa: E402


def template(data_dir: Path) -> tuple[list[dict], list[tuple[int, int, int]]]:
    """The imported DroidBot row and its steps with a recorded action: (index, x, y)."""
    import sqlalchemy as sa

    from pipelines import convert
    from pipelines.episodes.ui import open_ui_episode
    from pipelines.store import open_store
    from pipelines.store.models import EpisodeRow
    from pipelines.ui_import import import_ui

    with open_store(None, data_dir) as repo:
        found = repo.find_study_by_name("evaluate template", USER)
        if found:
            study = found[0]
        else:
            screens = data_dir / "ui-input"
            shutil.copytree(FIXTURES / "droidbot" / "yelp", screens / "yelp")
            if convert.run([str(screens), str(data_dir / "converted"), "--runner=FnApiRunner"]) not in (0, None):
                raise SystemExit("convert-ui failed")
            study = import_ui(repo, data_dir / "converted", "evaluate template", USER)
        with repo.engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(
                sa.select(EpisodeRow.__table__).where(EpisodeRow.study_id == study.id))]  # fmt: skip
    record = open_ui_episode(rows[0]["metadata"]["ui_record"], data_dir).record
    steps = [(i, a.x, a.y) for i, a in enumerate(record.actions) if a.type != 0]
    return rows, steps


def predictions(path: Path, data_dir: Path, study_id: str, steps: list[tuple[int, int, int]]) -> int:
    """One line per step of every episode of the study (a few far or left out); the number of steps."""
    import sqlalchemy as sa

    from pipelines.store import open_store
    from pipelines.store.models import EpisodeRow

    n = 0
    with open_store(None, data_dir) as repo, repo.engine.connect() as conn, open(path, "w") as f:
        for (eid,) in conn.execute(sa.select(EpisodeRow.id).where(EpisodeRow.study_id == study_id)):
            for i, x, y in steps:
                n += 1
                if n % 11 == 0:
                    continue
                far = n % 7 == 0
                action = {"action_type": "click", "x": 5 if far else x, "y": 5 if far else y}
                f.write(json.dumps({"episode": eid, "step": i, "action": action}) + "\n")
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000, 100_000], help="steps")
    parser.add_argument("--keep", type=Path, help="keep (and reuse) the store here")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-evaluate-"))
    data_dir = root / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    rows, steps = template(data_dir)
    print(f"template: 1 real DroidBot record, {len(steps)} scored steps", flush=True)
    figures = []
    try:
        for size in sorted(args.sizes):
            episodes = -(-size // len(steps))
            study_id = study_of(data_dir, episodes)
            have = count(data_dir, study_id)
            if have < episodes:
                grow(data_dir, study_id, rows, have, episodes)
            file = root / f"predictions-{size}.jsonl"
            total = predictions(file, data_dir, study_id, steps)
            cmd = [sys.executable, "-m", "stepmark", "evaluate", "--data", str(data_dir), "--study", study_id,
                   "--predictions", str(file), "--name", f"bench-{time.time_ns()}", "--json"]  # fmt: skip
            out = root / f"out-{size}.json"
            wall, rss = time_v(cmd, out)
            with open(out) as f:
                head = f.read(4096)
            accuracy = head.split('"accuracy": ', 1)[1].split(",", 1)[0]
            figures.append((total, episodes, wall, rss))
            print(f"{total:>8,} steps ({episodes:,} episodes): {wall:6.1f} s, peak RSS {rss:6.0f} MB, "
                  f"accuracy {accuracy}", flush=True)  # fmt: skip
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\n{'steps':>8}  {'wall s':>7}  {'steps/s':>8}  {'peak RSS MB':>11}  {'RSS / smallest':>14}")
    for total, _, wall, rss in figures:
        print(f"{total:>8,}  {wall:7.1f}  {total / wall:8.0f}  {rss:11.0f}  {rss / figures[0][3]:14.2f}")


if __name__ == "__main__":
    main()

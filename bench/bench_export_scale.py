"""`stepmark export --study` of a large study: peak RSS and wall time of the whole command against the study's size.

The driver of an export must not hold the selection in memory (issue 21: studies of up to a million episodes).
This bench grows one study of imported UI episodes to each size given (default 2k, 20k, 100k) and exports it
as Parquet under `/usr/bin/time -v`, printing wall time, peak RSS and the RSS per 1,000 episodes side by side.

Data: the Rico screens and the DroidBot Yelp run of ../shared/fixtures converted with convert-ui and imported
once (real records); the study's rows are bulk-inserted copies of those imported rows (new ids, the same
`ui_record` shard and offset, cycling over the real records), so every exported episode reads a real record.
Nothing is asserted: figures are printed.

    .venv/bin/python bench/bench_export_scale.py [--sizes 2000 20000 100000] [--runner FnApiRunner] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_store_scale import time_v  # noqa: E402 - this folder is on sys.path when a bench runs

FIXTURES = Path(os.environ.get("STEPMARK_FIXTURES", REPO.parent / "shared" / "fixtures"))
USER = "bench@example.com"
INSERT_BATCH = 20_000


def convert_fixtures(data_dir: Path) -> Path:
    """convert-ui over every Rico screen and the DroidBot Yelp run (a local copy: discovery skips symlinks)."""
    from pipelines import convert

    screens = data_dir / "ui-input"
    screens.mkdir(parents=True)
    shutil.copytree(FIXTURES / "droidbot" / "yelp", screens / "yelp")
    for src in sorted((FIXTURES / "rico").iterdir()):
        shutil.copy(src, screens / src.name)
    out = data_dir / "converted"
    code = convert.run([str(screens), str(out), "--runner=FnApiRunner"])
    if code not in (0, None):
        raise SystemExit(f"convert-ui failed with {code}")
    return out


def setup(data_dir: Path) -> list[dict]:
    """The rows of the template study (the real records imported once)."""
    import sqlalchemy as sa

    from pipelines.store import open_store
    from pipelines.store.models import EpisodeRow
    from pipelines.ui_import import import_ui

    with open_store(None, data_dir) as repo:
        found = repo.find_study_by_name("export scale template", USER)
        template = (
            found[0] if found else import_ui(repo, convert_fixtures(data_dir), "export scale template", USER)
        )
        with repo.engine.connect() as conn:
            rows = [
                dict(r._mapping)
                for r in conn.execute(
                    sa.select(EpisodeRow.__table__)
                    .where(EpisodeRow.study_id == template.id)
                    .order_by(EpisodeRow.id)
                )
            ]
    return rows


def study_of(data_dir: Path, size: int) -> str:
    """The study of `size` episodes (one per size: a kept store is reused and grown, never shrunk)."""
    from pipelines.store import open_store
    from pipelines.ui_import import find_or_create_study

    with open_store(None, data_dir) as repo:
        return find_or_create_study(repo, f"export scale {size}", USER).id


def count(data_dir: Path, study_id: str) -> int:
    import sqlalchemy as sa

    from pipelines.store import open_store
    from pipelines.store.models import EpisodeRow

    with open_store(None, data_dir) as repo, repo.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).where(EpisodeRow.study_id == study_id)) or 0)


def grow(data_dir: Path, study_id: str, template: list[dict], start: int, stop: int) -> None:
    """Rows start..stop-1 of the study: copies of the template's rows, cycling, in registration order."""
    import sqlalchemy as sa

    from pipelines.store import open_store
    from pipelines.store.models import EpisodeRow

    base = datetime(2026, 1, 1, tzinfo=UTC)
    with open_store(None, data_dir) as repo:
        session_id = repo.create_session(study_id, USER).id
        for lo in range(start, stop, INSERT_BATCH):
            rows = []
            for i in range(lo, min(stop, lo + INSERT_BATCH)):
                row = dict(template[i % len(template)])
                row.update(id=f"{study_id[:8]}-{i:08d}", study_id=study_id, session_id=session_id, source_key=f"scale:{i}",
                           registered_time=base + timedelta(milliseconds=i))  # fmt: skip
                rows.append(row)
            with repo.engine.begin() as conn:
                conn.execute(sa.insert(EpisodeRow.__table__), rows)
        repo.analyze()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2_000, 20_000, 100_000])
    parser.add_argument("--runner", default="FnApiRunner")
    parser.add_argument("--keep", type=Path, help="keep (and reuse) the store and converted records here")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-export-scale-"))
    data_dir = root / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    template = setup(data_dir)
    print(f"template: {len(template)} real UI records", flush=True)
    figures = []
    try:
        for size in sorted(args.sizes):
            study_id = study_of(data_dir, size)
            have = count(data_dir, study_id)
            if have < size:
                t = time.perf_counter()
                grow(data_dir, study_id, template, have, size)
                print(f"grew the study to {size:,} episodes in {time.perf_counter() - t:.1f} s", flush=True)
            out = root / f"export-{size}"
            shutil.rmtree(out, ignore_errors=True)
            cmd = [sys.executable, "-m", "stepmark", "export", "--data", str(data_dir), "--study", study_id,
                   "--format", "parquet", "--out", str(out), f"--runner={args.runner}"]  # fmt: skip
            wall, rss = time_v(cmd)
            files = sum(1 for _ in out.rglob("*.parquet"))
            shutil.rmtree(out, ignore_errors=True)
            figures.append((size, wall, rss))
            print(
                f"{size:>9,} episodes: {wall:7.1f} s, peak RSS {rss:7.0f} MB ({files:,} Parquet files)",
                flush=True,
            )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(
        f"\n{'episodes':>9}  {'wall s':>8}  {'episodes/s':>10}  {'peak RSS MB':>11}  {'RSS / smallest':>14}"
    )
    for size, wall, rss in figures:
        print(f"{size:>9,}  {wall:8.1f}  {size / wall:10.0f}  {rss:11.0f}  {rss / figures[0][2]:14.2f}")


if __name__ == "__main__":
    main()

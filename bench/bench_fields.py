"""Study fields at a scale a team reaches (issue 26): importing values from JSON lines, per-field agreement and
the report's figures, on a throwaway SQLite store of environment episodes (no episode files needed).

    PYTHONPATH=. .venv/bin/python bench/bench_fields.py [--episodes 200] [--steps 50]

The import runs twice with the store's counting triggers (migration 10) and twice without, alternated, so
their cost is a ratio measured in one run. Prints seconds and rates; nothing is asserted (benchmarks live here, tests assert outcomes)."""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from pipelines.report.field_stats import field_stats
from pipelines.store import field_values as fv
from pipelines.store import open_store
from pipelines.store.field_agreement import study_field_agreement
from pipelines.store.field_defs import parse_text
from tests.pipelines.store.conftest import env_episode, study_spec

FIELDS = """fields:
  - {name: ok, scope: step, kind: choice, options: [yes, no, unsure]}
  - {name: note, scope: step, kind: text}
  - {name: problems, scope: step, kind: multi_choice, options: [slow, loop, popup]}
"""
WORDS = "tap open the settings menu search bar type pizza scroll down go back".split()


COUNTING_TRIGGERS = ("field_values_counted_insert", "field_values_counted_delete", "field_values_counted_update")


def measure(root: Path, args: argparse.Namespace, counted: bool) -> dict[str, float]:
    """Seconds of the import (and, when `counted`, of agreement and the report's figures) on a new store.
    Without `counted` the store's counting triggers (migration 10) are dropped first: the import's cost of
    keeping the counts, measured beside it (the figures need the counts, so they are not read then)."""
    rng = random.Random(0)
    out: dict[str, float] = {}
    with open_store(None, root / "data") as repo:
        study = repo.create_study(study_spec(), "lead")
        session = repo.create_session(study.id, "lead")
        episodes = repo.add_episodes([env_episode(study.id, session, num_steps=args.steps) for _ in range(args.episodes)])
        fv.define(repo, study.id, parse_text(FIELDS, "f.yaml"), "lead")
        if not counted:
            with repo.engine.begin() as conn:
                for trigger in COUNTING_TRIGGERS:
                    conn.exec_driver_sql(f"DROP TRIGGER {trigger}")
        lines = []
        for e in episodes:
            for step in range(args.steps):
                for user in ("ann", "bea"):
                    lines.append({"episode": e.id, "step": step, "field": "ok", "user": user,
                                  "value": rng.choice(["yes", "yes", "yes", "no", "unsure"])})
                    lines.append({"episode": e.id, "step": step, "field": "note", "user": user,
                                  "value": " ".join(rng.choices(WORDS, k=6))})
                    lines.append({"episode": e.id, "step": step, "field": "problems", "user": user,
                                  "value": rng.sample(["slow", "loop", "popup"], rng.randint(0, 2))})  # fmt: skip
        path = root / "values.jsonl"
        path.write_text("\n".join(json.dumps(x) for x in lines))
        out["values"] = len(lines)
        t = time.perf_counter()
        fv.import_values(repo, study.id, path, "lead")
        out["import"] = time.perf_counter() - t
        if counted:
            t = time.perf_counter()
            agreement = study_field_agreement(repo, study.id)
            out["agreement"] = time.perf_counter() - t
            out["alphas"] = ", ".join(f"{a.field} alpha {a.alpha:.3f}" for a in agreement)  # type: ignore[assignment]
            t = time.perf_counter()
            field_stats(repo, study.id)
            out["stats"] = time.perf_counter() - t
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    runs = []
    for counted in (True, False, True, False):  # alternated: the machine's noise falls on both
        with tempfile.TemporaryDirectory() as tmp:
            runs.append((counted, measure(Path(tmp), args, counted)))
    with_counts = [r for c, r in runs if c]
    without = [r for c, r in runs if not c]
    n = int(with_counts[0]["values"])
    t_import = min(r["import"] for r in with_counts)
    t_bare = min(r["import"] for r in without)
    print(f"{n} values ({args.episodes} episodes x {args.steps} steps x 3 fields x 2 annotators)")
    print(f"import: {t_import:.2f} s ({n / t_import:,.0f} values/s); without the counting triggers "
          f"{t_bare:.2f} s ({n / t_bare:,.0f} values/s): {t_import / t_bare:.2f}x (best of 2 each)")  # fmt: skip
    best = min(with_counts, key=lambda r: r["agreement"])
    print(f"agreement, 3 fields: {best['agreement']:.2f} s; {best['alphas']}")
    print(f"report figures (incl. agreement): {min(r['stats'] for r in with_counts):.2f} s")


if __name__ == "__main__":
    main()

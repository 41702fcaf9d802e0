"""Study fields at a scale a team reaches (issue 26): importing values from JSON lines, per-field agreement and
the report's figures, on a throwaway SQLite store of environment episodes (no episode files needed).

    PYTHONPATH=. .venv/bin/python bench/bench_fields.py [--episodes 200] [--steps 50]

Prints seconds and rates; nothing is asserted (benchmarks live here, tests assert outcomes)."""

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp, open_store(None, Path(tmp) / "data") as repo:
        study = repo.create_study(study_spec(), "lead")
        session = repo.create_session(study.id, "lead")
        episodes = repo.add_episodes([env_episode(study.id, session, num_steps=args.steps) for _ in range(args.episodes)])
        fv.define(repo, study.id, parse_text(FIELDS, "f.yaml"), "lead")
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
        path = Path(tmp) / "values.jsonl"
        path.write_text("\n".join(json.dumps(x) for x in lines))
        t = time.perf_counter()
        fv.import_values(repo, study.id, path, "lead")
        t_import = time.perf_counter() - t
        t = time.perf_counter()
        agreement = study_field_agreement(repo, study.id)
        t_agree = time.perf_counter() - t
        t = time.perf_counter()
        field_stats(repo, study.id)
        t_stats = time.perf_counter() - t
    n = len(lines)
    print(f"{n} values ({args.episodes} episodes x {args.steps} steps x 3 fields x 2 annotators)")
    print(f"import: {t_import:.2f} s ({n / t_import:,.0f} values/s)")
    print(f"agreement, 3 fields: {t_agree:.2f} s; " + ", ".join(f"{a.field} alpha {a.alpha:.3f}" for a in agreement))
    print(f"report figures (incl. agreement): {t_stats:.2f} s")


if __name__ == "__main__":
    main()

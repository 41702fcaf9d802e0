"""The store and the annotator at a million episodes, on SQLite and on PostgreSQL, side by side.

Grows one study of imported UI episodes itself (bulk inserts of the rows `import-ui` writes: 5 annotators,
one episode in 50 rejected, a step tag on one in 100, an episode tag on one in 250, notes on one in 200 (of
the rejected ones), a
queue of overlap 2 with one episode in 500 labelled by two annotators), and study fields with their values
(a step choice `action_ok` and a step text `instruction` from the two annotators of each labelled episode on
its first four steps, as a labelling pass gives them; an episode choice `success` from one annotator on every
episode, as a triage pass gives it, and from a second on one episode in 50, as a check of that pass), and a
model's suggestions (source `model:bench-vlm@1`, stored before the people's values: `success` on every episode,
agreeing with the triage four times in five; `action_ok` and `instruction` where the queue's two annotators
gave theirs), so the agreement and report figures include the review of suggestions
(pipelines/store/field_review.py), to each size given (default 10k, 100k, 1M), and at each size measures:
  - the repository's list queries in process (count, first page, a jump to the middle page, the page after
    it, sort by steps descending, filters by state, tag and notes text, queue progress), in ms;
  - `stepmark report --study`, `stepmark agreement` (tags and study fields) and `stepmark queue show` under
    `/usr/bin/time -v`: wall time and peak RSS (ratio to the smallest size printed beside), the first run after
    the store was opened (a PostgreSQL cluster the bench just started reads from disk into its cache) and the
    median of two more;
  - the Episodes page in chromium (Playwright at /usr/bin/chromium) against `stepmark annotate`: cold load,
    warm reload (median of 3), choosing the study (first, then median of 3), and each of: next page, jump to
    the middle page, sort by steps, descending, filter by state, search notes; until the page says what it
    shows and Streamlit's run is over. Then the Quality page of the study, first visit and a reload (its
    summaries and plots are remembered until the store changes). The server's RSS (process tree) after them.
PostgreSQL is started by the bench as the tests start it (tests/pg_fixture.py). After each growth the bench
calls `Repository.analyze()`, as import-ui does after registering episodes.
The UI records the episodes point at are a real convert-ui output of ../shared/fixtures (the report reads it);
their offsets are not (no page here opens a record). Nothing is asserted: figures are printed.

    .venv/bin/python bench/bench_store_scale.py [--sizes 10000 100000 1000000] [--backends sqlite postgresql]
        [--no-browser] [--keep DIR [--build-only]]

`--keep DIR` keeps one store per backend and size in DIR (SQLite files, a PostgreSQL cluster) and reuses them on
the next run, growing only what is missing (a 1M store takes minutes to build; a store of an older schema version
is migrated when first opened, and the migration's time printed; a store kept without study fields gets them and
their values added). `--build-only` builds them and measures nothing.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import hashlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
FIXTURES = Path(os.environ.get("STEPMARK_FIXTURES", REPO.parent / "shared" / "fixtures"))
USERS = [f"annotator{i}@example.com" for i in range(5)]
LEAD = USERS[0]
TAGS = ["crash", "wrong_target", "slow", "loop", "login", "ad", "done"]
APPS = [f"com.example.app{i}" for i in range(20)]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
INSERT_BATCH = 20_000
FIELDS = """fields:
  - {name: action_ok, scope: step, kind: choice, options: [yes, no, unsure]}
  - {name: instruction, scope: step, kind: text}
  - {name: success, scope: episode, kind: choice, options: [yes, no, partial]}
"""
WORDS = "tap open the settings menu search bar type pizza scroll down go back and then".split()
MODEL = "model:bench-vlm@1"


def _hex(i: int) -> str:
    return hashlib.md5(str(i).encode()).hexdigest()


def setup(url: str | None, data_dir: Path, converted: Path):
    """The study (an `android-ui` environment, overlap-2 queue, FIELDS) and one import session (those of a kept
    store), how many episodes it has already and how many of them have their field values."""
    import sqlalchemy as sa

    from pipelines.store import field_values as fv
    from pipelines.store import open_store
    from pipelines.store import queue as work_queue
    from pipelines.store.field_defs import parse_text
    from pipelines.store.models import EpisodeRow, FieldSuggestionRow, FieldValueRow
    from pipelines.ui_import import find_or_create_study

    t = time.perf_counter()
    repo = open_store(url, data_dir)
    opened = time.perf_counter() - t
    study = find_or_create_study(repo, "scale", LEAD)
    sessions = repo.list_sessions(study.id)
    if sessions:
        session_id = sessions[0].id
        with repo.engine.connect() as conn:
            have = conn.scalar(sa.select(sa.func.count()).select_from(EpisodeRow).where(EpisodeRow.study_id == study.id))
        print(f"[{data_dir.name}] kept store: {have:,} episodes, opened (and migrated) in {opened:.1f} s", flush=True)
        repo.analyze()  # as import-ui leaves a store
    else:
        work_queue.set_queue(repo, work_queue.QueueConfig(study.id, overlap=2), LEAD)
        session_id, have = repo.create_session(study.id, LEAD).id, 0
    if not fv.definitions(repo, study.id):
        fv.define(repo, study.id, parse_text(FIELDS, "bench fields"), LEAD)
    with repo.engine.connect() as conn:  # every episode has one `success` value by USERS[3]
        with_fields = conn.scalar(
            sa.select(sa.func.count()).select_from(FieldValueRow)
            .where(FieldValueRow.field == "success", FieldValueRow.user == USERS[3])
        )  # fmt: skip
        with_suggestions = conn.scalar(  # and one `success` suggestion of the model
            sa.select(sa.func.count()).select_from(FieldSuggestionRow)
            .where(FieldSuggestionRow.field == "success", FieldSuggestionRow.source == MODEL)
        )  # fmt: skip
    shard = next(converted.glob("episodes-*.tfrecord"))
    return repo, study.id, session_id, str(shard.resolve()), have, with_fields, with_suggestions


def grow(repo, study_id: str, session_id: str, shard: str, start: int, stop: int) -> None:
    """Rows start..stop-1, as import-ui registers them, with tags, notes, queue work and labels."""
    import sqlalchemy as sa

    from pipelines.store.models import (
        AnnotatorStepLabelRow,
        EpisodeRow,
        EpisodeTagRow,
        QueueAssignmentRow,
        StepTagRow,
    )
    from protos.rlds_creator import study_pb2

    base = datetime(2026, 1, 1, tzinfo=UTC)
    kind = {"kind": "ui"} if "kind" in EpisodeRow.__table__.c else {}  # v8: set on insert, as import-ui does
    completed, rejected = study_pb2.Episode.STATE_COMPLETED, study_pb2.Episode.STATE_REJECTED
    for lo in range(start, stop, INSERT_BATCH):
        hi = min(stop, lo + INSERT_BATCH)
        episodes, step_tags, tags, work, labels = [], [], [], [], []
        for i in range(lo, hi):
            h = _hex(i)
            when = base + timedelta(milliseconds=i)
            steps = 1 + int(h[:4], 16) % 30
            episodes.append({
                "id": h, "study_id": study_id, "session_id": session_id, "environment_id": "android-ui",
                "user": LEAD, "state": rejected if i % 50 == 7 else completed, "start_time": None,
                "end_time": None, "num_steps": steps, "total_reward": 0.0, "storage_kind": None,
                "storage_tag_directory": None, "storage_index": None, "storage_pickle_path": None,
                "notes": f"checked {i}: target looks wrong" if i % 200 == 7 else None, "controller_id": None,
                "registered_time": when, "source_key": f"ui:ep{i}",
                "metadata": {"kind": "ui", "ui_record": {"shard": shard, "offset": i * 1000, "episode_id": f"ep{i}"},
                             "app_package": APPS[i % len(APPS)], "source": "aitw", "success": False},
                **kind,
            })  # fmt: skip
            if i % 100 == 5:
                step_tags.append({"episode_id": h, "step_index": 0, "label": TAGS[i % len(TAGS)],
                                  "user": USERS[i % 5], "created_time": when})  # fmt: skip
            if i % 250 == 11:
                tags.append({"episode_id": h, "label": "hard", "user": USERS[i % 5], "created_time": when})
            if i % 500 == 13:
                for slot, user in enumerate(USERS[1:3]):
                    work.append({"study_id": study_id, "episode_id": h, "user": user, "slot": slot, "state": "done",
                                 "assigned_time": when, "done_time": when})  # fmt: skip
                    for step in range(min(steps, 4)):
                        label = TAGS[(i + step + (slot if step == 2 else 0)) % len(TAGS)]
                        labels.append({"episode_id": h, "user": user, "step_index": step, "label": label,
                                       "created_time": when})  # fmt: skip
        with repo.engine.begin() as conn:
            conn.execute(sa.insert(EpisodeRow.__table__), episodes)
            for table, rows in ((StepTagRow, step_tags), (EpisodeTagRow, tags), (QueueAssignmentRow, work),
                                (AnnotatorStepLabelRow, labels)):  # fmt: skip
                if rows:
                    conn.execute(sa.insert(table.__table__), rows)
    repo.analyze()  # what import-ui does after registering episodes


def grow_fields(repo, start: int, stop: int) -> None:
    """The FIELDS values of episodes start..stop-1 (see the module's docstring), deterministic per episode."""
    import sqlalchemy as sa

    from pipelines.store.models import FieldValueRow

    base = datetime(2026, 1, 1, tzinfo=UTC)
    for lo in range(start, stop, INSERT_BATCH):
        rows = []
        for i in range(lo, min(stop, lo + INSERT_BATCH)):
            h = _hex(i)
            when = base + timedelta(milliseconds=i)
            steps = 1 + int(h[:4], 16) % 30
            value = {"episode_id": h, "origin": "scratch", "created_time": when}
            verdict = ("yes", "no", "partial")[int(h[4], 16) % 3]
            rows.append({**value, "field": "success", "step_index": -1, "end_index": -1, "user": USERS[3],
                         "value": verdict, "seconds": 2.0 + int(h[5], 16)})  # fmt: skip
            if i % 50 == 3:  # a second look: agrees three times in four
                second = verdict if int(h[6], 16) % 4 else ("yes", "no", "partial")[(int(h[4], 16) + 1) % 3]
                rows.append({**value, "field": "success", "step_index": -1, "end_index": -1, "user": USERS[4],
                             "value": second, "seconds": 3.0})  # fmt: skip
            if i % 500 == 13:  # the queue's two annotators (grow's USERS[1:3]) on the first four steps
                for step in range(min(steps, 4)):
                    k = int(h[7 + step], 16)
                    words = [WORDS[(k + j * 7) % len(WORDS)] for j in range(5)]
                    for slot, user in enumerate(USERS[1:3]):
                        ok = ("yes", "no", "unsure")[(k + (slot if k % 5 == 0 else 0)) % 3]
                        text = " ".join(words if slot == 0 or k % 3 else list(reversed(words[1:])))
                        place = {"step_index": step, "end_index": step, "user": user, "seconds": 4.0 + k}
                        rows.append({**value, **place, "field": "action_ok", "value": ok})
                        rows.append({**value, **place, "field": "instruction", "value": text})
        with repo.engine.begin() as conn:
            conn.execute(sa.insert(FieldValueRow.__table__), rows)
    repo.analyze()


def grow_suggestions(repo, start: int, stop: int) -> None:
    """The model's suggestions of episodes start..stop-1 (see the module's docstring), a day before the values."""
    import sqlalchemy as sa

    from pipelines.store.models import FieldSuggestionRow

    base = datetime(2026, 1, 1, tzinfo=UTC) - timedelta(days=1)
    for lo in range(start, stop, INSERT_BATCH):
        rows = []
        for i in range(lo, min(stop, lo + INSERT_BATCH)):
            h = _hex(i)
            steps = 1 + int(h[:4], 16) % 30
            row = {"episode_id": h, "source": MODEL, "created_time": base + timedelta(milliseconds=i)}
            k = int(h[4], 16)
            verdict = ("yes", "no", "partial")[(k + (1 if int(h[8], 16) % 5 == 0 else 0)) % 3]
            rows.append({**row, "field": "success", "step_index": -1, "end_index": -1, "value": verdict})
            if i % 500 == 13:
                for step in range(min(steps, 4)):
                    k = int(h[7 + step], 16)
                    words = [WORDS[(k + j * 7) % len(WORDS)] for j in range(5)]
                    place = {"step_index": step, "end_index": step}
                    rows.append({**row, **place, "field": "action_ok", "value": ("yes", "no", "unsure")[(k + 1) % 3]})
                    rows.append({**row, **place, "field": "instruction", "value": " ".join(words[:4])})
        with repo.engine.begin() as conn:
            conn.execute(sa.insert(FieldSuggestionRow.__table__), rows)
    repo.analyze()


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t) * 1000, out


def repo_figures(url: str | None, data_dir: Path, study_id: str) -> dict[str, float]:
    """The list queries the pages run, in a freshly opened store (ms; the best of 3 after a first run)."""
    from pipelines.store import field_agreement, field_review, listing, open_store
    from pipelines.store import queue as work_queue
    from pipelines.store.listing import EpisodeQuery, Sort
    from protos.rlds_creator import study_pb2

    out: dict[str, float] = {}
    with open_store(url, data_dir) as repo:
        q = EpisodeQuery(study_id=study_id)
        total = repo.count_episodes(q)
        middle = (total // 2 // 50) * 50

        def page_after_jump():
            return repo.page_episodes(q, Sort(), repo.episode_cursor(q, Sort(), middle), 50)

        jumped = page_after_jump()
        def fresh(x: EpisodeQuery) -> int:
            """A count as the first look at a list computes it (Repository.count_episodes then remembers it)."""
            with repo._read() as s:
                return listing.count(s, x)

        cases = {
            "count": lambda: fresh(q),
            "count, remembered": lambda: repo.count_episodes(q),
            "first page": lambda: repo.page_episodes(q, Sort(), None, 50),
            "jump to middle page": page_after_jump,
            "next page after it": lambda: repo.page_episodes(q, Sort(), jumped[-1][1], 50),
            "sort steps desc": lambda: repo.page_episodes(q, Sort("steps", True), None, 50),
            "state=rejected count+page": lambda: (
                fresh(s := EpisodeQuery(study_id=study_id, states=(study_pb2.Episode.STATE_REJECTED,))),
                repo.page_episodes(s, Sort(), None, 50),
            ),
            "tag=crash count+page": lambda: (
                fresh(s := EpisodeQuery(study_id=study_id, tag="crash")),
                repo.page_episodes(s, Sort(), None, 50),
            ),
            "notes search count+page": lambda: (
                fresh(s := EpisodeQuery(study_id=study_id, notes_query="looks WRONG")),
                repo.page_episodes(s, Sort(), None, 50),
            ),
            "queue progress": lambda: work_queue.progress(repo, study_id),
            # beside it: the study fields' agreement, and the review of the model's suggestions (issue 33)
            "field agreement": lambda: field_agreement.study_field_agreement(repo, study_id),
            "review of suggestions": lambda: field_review.study_field_review(repo, study_id),
        }
        for name, fn in cases.items():
            fn()
            out[name] = min(timed(fn)[0] for _ in range(3))
    return out


def time_v(args: list[str], out: Path | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one command under /usr/bin/time -v; its output goes to `out` when given
    (a large one is not held in memory). The other benches of commands use this one."""
    with open(out, "w") if out is not None else contextlib.nullcontext(subprocess.PIPE) as sink:
        run = subprocess.run(["/usr/bin/time", "-v", *args], stdout=sink, stderr=subprocess.PIPE, text=True,
                             cwd=REPO)  # fmt: skip
    if run.returncode != 0:
        said = run.stdout[-1000:] if run.stdout else ""
        raise SystemExit(f"{' '.join(args)} failed:\n{said}\n{run.stderr[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr).group(1)) / 1024
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", run.stderr).group(1)
    seconds = sum(float(x) * 60**i for i, x in enumerate(reversed(wall.split(":"))))
    return seconds, rss


def command_figures(url: str | None, data_dir: Path, study_id: str, tmp: Path) -> dict[str, tuple[float, float]]:
    store = ["--store", url] if url else []
    base = [sys.executable, "-m", "stepmark"]
    where = ["--data", str(data_dir), *store]
    commands = {
        "report": [*base, "report", "--study", study_id, "--out", str(tmp / "report.html"), *where],
        "agreement": [*base, "agreement", "--study", study_id, *where],
        "queue show": [*base, "queue", "show", "--study", study_id, *where],
    }
    out: dict[str, tuple[float, float]] = {}
    for name, args in commands.items():
        # The first run after the store was opened (a PostgreSQL cluster just started reads into its cache),
        # then the median of two more, as a store in use answers them.
        runs = [time_v(args) for _ in range(3)]
        out[f"{name}, first"] = runs[0]
        out[name] = (statistics.median(t for t, _ in runs[1:]), max(rss for _, rss in runs[1:]))
    return out


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and its children (MB)."""
    total = 0
    pids = [pid]
    while pids:
        p = pids.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
            with open(f"/proc/{p}/task/{p}/children") as f:
                pids += [int(c) for c in f.read().split()]
        except (OSError, StopIteration):
            continue
    return total / 1024


def _choose(page, label: str, option: str, kind: str = "stSelectbox") -> None:
    """Pick an option of a Streamlit selectbox (or multiselect) by its label, then close its list."""
    from tests.e2e.browser import choose_option

    choose_option(page, label, option, kind, close=True)


def browser_figures(url: str | None, data_dir: Path, study_id: str, total: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    from annotator.launch import free_port
    from tests.e2e.browser import wait_healthy

    port = free_port()
    store = ["--store", url] if url else []
    log = (data_dir / "annotate.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepmark", "annotate", "--data", str(data_dir), "--port", str(port),
         "--user", LEAD, *store],
        stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
    )  # fmt: skip
    out: dict[str, float] = {}
    address = f"http://127.0.0.1:{port}/"
    try:
        wait_healthy(address, proc, timeout=180)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1600, "height": 1200})

            def until(text: str | re.Pattern, action) -> float:
                """Seconds from the action until `text` (which only the new state shows) is on the page, the run
                is over and no element of the previous run is left (Streamlit marks those stale)."""
                t = time.perf_counter()
                action()
                page.get_by_text(text).first.wait_for(timeout=600_000)
                page.wait_for_function(
                    "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
                    " && !document.querySelector('[data-stale=\"true\"]')",
                    timeout=600_000,
                )
                return time.perf_counter() - t

            shown = f"Showing 1–50 of {total:,}, by registration"
            out["cold load"] = until(shown, lambda: page.goto(address))
            out["warm reload"] = statistics.median(until(shown, page.reload) for _ in range(3))
            # The first choice of this page also loads the browser code of the queue panel's elements (progress,
            # toggle, expander: loaded when first drawn), once per page; then, as for the reload, the median of 3
            # (back to every study, then the study again).
            out["choose the study, first"] = until("labellings done", lambda: _choose(page, "Study", "scale"))
            again = []
            for _ in range(3):
                until("Choose a study above", lambda: _choose(page, "Study", "(any)"))
                again.append(until("labellings done", lambda: _choose(page, "Study", "scale")))
            out["choose the study"] = statistics.median(again)
            out["next page"] = until(f"Showing 51–100 of {total:,}",
                                     lambda: page.get_by_role("button", name="Next", exact=True).click())  # fmt: skip
            middle = total // 2 // 50 + 1
            first = (middle - 1) * 50 + 1

            def jump():
                box = page.get_by_label(re.compile(r"^Page \(of"))
                box.fill(str(middle))
                box.press("Enter")

            out["jump to middle page"] = until(f"Showing {first:,}–{first + 49:,} of {total:,}", jump)
            out["sort by steps"] = until("by steps", lambda: _choose(page, "Sort by", "steps"))
            out["descending"] = until("by steps (descending)", lambda: page.get_by_text("Descending").click())
            rejected = sum(1 for i in range(total) if i % 50 == 7)
            out["filter state=rejected"] = until(f"of {rejected:,}, by steps",
                                                 lambda: _choose(page, "Status", "Rejected", "stMultiSelect"))  # fmt: skip
            noted = sum(1 for i in range(total) if i % 200 == 7)  # all of them rejected

            def notes():
                box = page.get_by_label("Search in notes")
                box.fill("looks WRONG")
                box.press("Enter")

            out["search notes"] = until(f"{noted:,} episode(s)", notes) if noted else float("nan")
            # The Quality page of the same study: its summaries and plots are made on the first visit, then
            # remembered until the store changes (a reload shows them without counting again).
            agreement = re.compile(r"steps of [\d,]+ episode\(s\), annotators")
            out["Quality page, first"] = until(agreement, lambda: page.goto(address + "quality"))
            out["Quality page, reload"] = until(agreement, page.reload)
            browser.close()
        out["server RSS MB"] = tree_rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    return out


class KeptPostgres:
    """A PostgreSQL cluster in a kept folder (`--keep`), started like tests/pg_fixture.py's and stopped at exit
    without deleting it; its databases are named after the store's size."""

    def __init__(self, root: Path) -> None:
        from tests.pg_fixture import PostgresServer, _bindir, _free_port

        self.root = root
        self.data = root / "data"
        self.bindir = _bindir()
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        root.mkdir(parents=True, exist_ok=True)
        if self.as_root:
            shutil.chown(root, user="postgres", group="postgres")
        self._run = PostgresServer._run.__get__(self)
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        options = f"-p {self.port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(root / "log"), "-w", "start")
        atexit.register(lambda: self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop"))

    def url(self, name: str) -> str:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres") as conn:
            conn.autocommit = True
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"


def store_location(backend: str, size: int, root: Path, kept: dict) -> tuple[str | None, Path]:
    """(store URL, data folder) of one backend and size under `root`."""
    data_dir = root / f"{backend}-{size}"
    data_dir.mkdir(parents=True, exist_ok=True)
    if backend == "sqlite":
        return None, data_dir
    if "pg" not in kept:
        kept["pg"] = KeptPostgres(root / "pg")
    return kept["pg"].url(f"scale_{size}"), data_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"])
    parser.add_argument("--no-browser", action="store_true", help="skip the chromium measurements")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the stores in DIR and reuse them")
    parser.add_argument("--build-only", action="store_true", help="with --keep: build the stores, measure nothing")
    args = parser.parse_args()
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    from pipelines import convert

    with tempfile.TemporaryDirectory(prefix="bench-store-scale-") as tmp_name:
        tmp = Path(tmp_name)
        root = args.keep.resolve() if args.keep else tmp
        converted = root / "converted"
        if not (converted / "summary.json").exists():
            shutil.rmtree(converted, ignore_errors=True)
            convert.run([str(FIXTURES / "droidbot"), str(converted), "--runner=FnApiRunner"])
        results: dict[str, dict[int, dict]] = {}
        kept: dict = {}
        for backend in args.backends:
            results[backend] = {}
            for size in sorted(args.sizes):
                url, data_dir = store_location(backend, size, root, kept)
                repo, study_id, session_id, shard, have, with_fields, with_suggestions = setup(url, data_dir, converted)
                if have < size:
                    t = time.perf_counter()
                    grow(repo, study_id, session_id, shard, have, size)
                    print(f"[{backend}] grew to {size:,} episodes in {time.perf_counter() - t:.1f} s", flush=True)
                if with_fields < size:
                    t = time.perf_counter()
                    grow_fields(repo, with_fields, size)
                    print(f"[{backend}] field values of episodes {with_fields:,}..{size - 1:,} added in "
                          f"{time.perf_counter() - t:.1f} s", flush=True)  # fmt: skip
                if with_suggestions < size:
                    t = time.perf_counter()
                    grow_suggestions(repo, with_suggestions, size)
                    print(f"[{backend}] model suggestions of episodes {with_suggestions:,}..{size - 1:,} added in "
                          f"{time.perf_counter() - t:.1f} s", flush=True)  # fmt: skip
                repo.close()
                if args.build_only:
                    continue
                figures = {"repo": repo_figures(url, data_dir, study_id),
                           "commands": command_figures(url, data_dir, study_id, tmp)}  # fmt: skip
                if not args.no_browser:
                    figures["browser"] = browser_figures(url, data_dir, study_id, size)
                results[backend][size] = figures
                print(f"[{backend}] {size:,}: {figures}", flush=True)
        if not args.build_only:
            report(results)


def report(results: dict[str, dict[int, dict]]) -> None:
    for backend, by_size in results.items():
        sizes = sorted(by_size)
        head = "".join(f"{s:>14,}" for s in sizes)
        print(f"\n== {backend} ==\n{'repository queries (ms)':34}{head}")
        for name in by_size[sizes[0]]["repo"]:
            print(f"  {name:32}" + "".join(f"{by_size[s]['repo'][name]:14.1f}" for s in sizes))
        print(f"{'commands: s / peak RSS MB':34}{head}   (largest/smallest: time, RSS)")
        for name in by_size[sizes[0]]["commands"]:
            cells = "".join(f"{by_size[s]['commands'][name][0]:7.2f}/{by_size[s]['commands'][name][1]:6.0f}"
                            for s in sizes)  # fmt: skip
            (t0, r0), (t1, r1) = by_size[sizes[0]]["commands"][name], by_size[sizes[-1]]["commands"][name]
            print(f"  {name:32}{cells}   {t1 / t0:5.2f}x {r1 / r0:5.2f}x")
        if "browser" in by_size[sizes[0]]:
            print(f"{'Episodes page in chromium (s)':34}{head}")
            for name in by_size[sizes[0]]["browser"]:
                print(f"  {name:32}" + "".join(f"{by_size[s]['browser'][name]:14.2f}" for s in sizes))


if __name__ == "__main__":
    main()

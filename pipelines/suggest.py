"""`stepmark suggest`: a model backend's answers for a study's steps, stored as suggestions (schemas/model_backend.md).

Beam wiring only. The driver reads the selected UI episodes from the store a page at a time (and which places
already hold this model's suggestion: a run again after a kill asks only the rest), then the pipeline builds one
request per step that still wants a field (`BuildRequests`, reading each episode's record once), asks the
backend with at most `--in-flight` requests in flight per worker, each bounded by `--timeout` and tried again
`--retries` times when the backend is unavailable (`AskBackend`), and stores what fits the fields in batches
(`WriteSuggestions`, under the author `model:NAME@VERSION`; never a person's value). Everything else is a dead
letter with its reason, in `dead_letters.jsonl` beside `summary.json` under `--out`. Runs on any Beam runner:
FnApiRunner by default, Dask with `--runner=...DaskRunner --dask_client_address=...` (as convert-ui).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import apache_beam as beam
import sqlalchemy as sa
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from pipelines import storage
from pipelines.beam_options import check_runner, pipeline_options, runner_name, spread_over_dask
from pipelines.errors import StepmarkError
from pipelines.models.backend import Backend, Model, backend_from_spec
from pipelines.models.contract import ContractError, StepRequest, Unavailable, check_answer, parse_answer
from pipelines.store import field_values
from pipelines.store.models import EpisodeRow, EpisodeTagRow, FieldSuggestionRow, StepTagRow
from pipelines.transforms import OnlyType

NAMESPACE = "stepmark.suggest"
DEAD = "dead_letters"
DEAD_LETTERS = "dead_letters.jsonl"
SUMMARY = "summary.json"
PARTS_PREFIX = ".parts-"
PAGE = 500  # episodes read from the store per round trip
MAX_TAGS = 200  # step tags of the study sent as the palette
MAX_IN_FLIGHT = 256
MAX_RETRIES = 10
BATCH_PER_THREAD = 4  # requests per batch, in multiples of --in-flight (the last round of a batch may idle)


@dataclass
class Summary:
    study: str
    author: str
    backend: str
    runner: str
    episodes: int = 0
    steps_asked: int = 0
    places_asked: int = 0
    places_skipped: int = 0  # already held this model's suggestion
    suggestions_stored: int = 0
    dead_letters: int = 0
    dead_letters_by_reason: dict[str, int] = field(default_factory=dict)
    fields: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DeadLetter:
    """A place (or a whole step: field None) that got no suggestion, and why (`reason` code, `detail`)."""

    episode: str
    episode_key: str
    step: int
    field: str | None
    reason: str
    detail: str


@dataclass(frozen=True)
class Suggestion:
    episode: str
    step: int
    field: str
    value: Any


@dataclass(frozen=True)
class Suggestions:
    """The suggestions of one batch of requests (stored in one transaction per `--batch` of them)."""

    items: tuple[Suggestion, ...]


@dataclass(frozen=True)
class DeadLetters:
    items: tuple[DeadLetter, ...]


def _dead(request: dict[str, Any], field_name: str | None, reason: str, detail: str) -> DeadLetter:
    return DeadLetter(request["episode"], request.get("episode_key", ""), request["step"], field_name, reason,
                      detail[:1000])  # fmt: skip


class BuildRequests(storage.FileSystemsDoFn, beam.DoFn):
    """An episode to do -> (batch key, request JSON) per step that still wants a field; an unreadable record is
    a dead letter. Requests are batched by key and a GroupByKey, not by BatchElements: the DaskRunner drops
    what a DoFn emits in finish_bundle, where BatchElements emits its last batch."""

    def __init__(self, data_dir: str, study: str, fields: list[dict[str, Any]], tags: list[str], image: bool,
                 batches: int) -> None:  # fmt: skip
        self.data_dir, self.study, self.fields, self.tags, self.image = data_dir, study, fields, tags, image
        self.batches = batches

    def process(self, work: dict[str, Any]) -> Iterator:
        from pipelines.episodes.ui import open_ui_episode
        from pipelines.models.step_requests import step_request

        done = {(f, s) for f, s in work["done"]}
        try:
            record = open_ui_episode(work["record"], self.data_dir).record
        except Exception as exc:  # noqa: BLE001 - one unreadable episode is a dead letter, not a failed run
            Metrics.counter(NAMESPACE, "dead_letter_unreadable").inc()
            dead = _dead({"episode": work["episode"], "step": -1}, None, "unreadable", str(exc))
            yield pvalue.TaggedOutput(DEAD, DeadLetters((dead,)))
            return
        names = [d["name"] for d in self.fields]
        for i in range(len(record.episode.time_steps)):
            wanted = [n for n in names if (n, i) not in done]
            if wanted:
                Metrics.counter(NAMESPACE, "requests").inc()
                key = (work["order"] + i) % self.batches
                yield key, step_request(record, i, study=self.study, episode=work["episode"], fields=self.fields,
                                        wanted=wanted, tags=self.tags, with_image=self.image).to_json()  # fmt: skip


class AskBackend(beam.DoFn):
    """A batch of requests -> suggestions and dead letters, at most `in_flight` requests in flight at a time."""

    def __init__(self, spec: str, model: Model, in_flight: int, timeout: float, retries: int) -> None:
        self.spec, self.model, self.in_flight, self.timeout, self.retries = spec, model, in_flight, timeout, retries

    def setup(self) -> None:
        model = f"{self.model.name}@{self.model.version}"
        self.backend: Backend = backend_from_spec(self.spec, model)
        self.pool = ThreadPoolExecutor(max_workers=self.in_flight, thread_name_prefix="suggest")
        self.answered = Metrics.counter(NAMESPACE, "answers")
        self.retried = Metrics.counter(NAMESPACE, "retries")

    def teardown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.backend.close()

    def _ask(self, request: dict[str, Any]) -> list[tuple[str, Any]]:
        step = StepRequest.from_json(request)
        for attempt in range(self.retries + 1):
            try:
                answer = parse_answer(self.backend.answer(step, self.timeout), (self.model.name, self.model.version))
                break
            except Unavailable as exc:
                if attempt == self.retries:
                    return [(DEAD, _dead(request, None, "unavailable", f"after {attempt + 1} tries: {exc}"))]
                self.retried.inc()
                time.sleep(min(0.2 * 2**attempt, 5.0))
            except ContractError as exc:
                return [(DEAD, _dead(request, None, "bad_answer", str(exc)))]
        self.answered.inc()
        checked = check_answer(step, answer, (self.model.name, self.model.version))
        out: list[tuple[str, Any]] = [("main", Suggestion(step.episode, step.step, v.field, v.value))
                                      for v in checked.values]  # fmt: skip
        out += [(DEAD, _dead(request, f, reason, detail)) for f, reason, detail in checked.problems]
        spoken = {v.field for v in checked.values} | {f for f, _, _ in checked.problems}
        if any(reason == "wrong_model" for _, reason, _ in checked.problems):
            return out  # nothing of it counts: one dead letter says why
        out += [(DEAD, _dead(request, f, "no_answer", f"the backend gave no value for {f!r} on this step"))
                for f in step.wanted if f not in spoken]  # fmt: skip
        return out

    def process(self, element: tuple[int, Iterable[dict[str, Any]]]) -> Iterator:
        suggestions, dead = [], []
        for future in [self.pool.submit(self._ask, r) for r in element[1]]:
            for tag, item in future.result():
                if tag == DEAD:
                    Metrics.counter(NAMESPACE, f"dead_letter_{item.reason}").inc()
                    dead.append(item)
                else:
                    suggestions.append(item)
        if dead:
            yield pvalue.TaggedOutput(DEAD, DeadLetters(tuple(dead)))
        if suggestions:
            yield Suggestions(tuple(suggestions))


class WriteSuggestions(beam.DoFn):
    """A batch of checked suggestions -> one store transaction (`field_values.add_suggestions`)."""

    def __init__(self, store: str | None, data_dir: str, study: str, author: str, user: str, batch: int) -> None:
        self.store, self.data_dir, self.study, self.author, self.user = store, data_dir, study, author, user
        self.batch = batch

    def setup(self) -> None:
        from pipelines.episodes.publish import open_store

        self.repo = open_store(self.store, self.data_dir)
        self.stored = Metrics.counter(NAMESPACE, "suggestions_stored")

    def teardown(self) -> None:
        self.repo.close()

    def process(self, suggestions: Suggestions) -> Iterator[int]:
        items = [asdict(b) for b in suggestions.items]
        for i in range(0, len(items), self.batch):
            n = field_values.add_suggestions(self.repo, self.study, self.author, items[i : i + self.batch], self.user)
            self.stored.inc(n)
            yield n


class WriteDeadLetterPart(storage.FileSystemsDoFn, beam.DoFn):
    """A batch of dead letters -> one part file under the run's temporary folder (joined by the driver)."""

    def __init__(self, temp_dir: str) -> None:
        self.temp_dir = temp_dir

    def process(self, dead: DeadLetters) -> Iterator[str]:
        path = storage.join(self.temp_dir, f"dead-{uuid.uuid4().hex}.jsonl")
        lines = "".join(json.dumps(asdict(d), ensure_ascii=False) + "\n" for d in dead.items)
        storage.write_bytes(path, lines.encode("utf-8"))
        yield path


class Suggest(beam.PTransform):
    """PCollection of episodes to do -> suggestions stored and dead-letter part files written."""

    def __init__(self, args: argparse.Namespace, model: Model, fields: list[dict[str, Any]], tags: list[str],
                 temp_dir: str, batches: int) -> None:  # fmt: skip
        super().__init__()
        self.args, self.model, self.fields, self.tags, self.temp_dir = args, model, fields, tags, temp_dir
        self.batches = batches

    def expand(self, works):
        a = self.args
        built = works | "BuildRequests" >> beam.ParDo(
            BuildRequests(a.data, a.study, self.fields, self.tags, not a.no_image, self.batches)
        ).with_outputs(DEAD, main="requests")
        asked = (
            built.requests
            # the DaskRunner routes tagged outputs to every output: keep the (key, request) pairs
            | "OnlyRequests" >> beam.Filter(lambda x: isinstance(x, tuple)).with_output_types(tuple[int, Any])
            | "Batch" >> beam.GroupByKey()
            | "AskBackend" >> beam.ParDo(AskBackend(a.backend, self.model, a.in_flight, a.timeout, a.retries))
            .with_outputs(DEAD, main="suggestions")
        )
        written = (
            asked.suggestions
            | OnlyType(Suggestions)
            | "WriteSuggestions" >> beam.ParDo(
                WriteSuggestions(a.store, a.data, a.study, self.model.author, a.user, a.batch)
            )
        )
        dead = (
            (built[DEAD], asked[DEAD])
            | "AllDead" >> beam.Flatten()
            | OnlyType(DeadLetters)
            | "WriteDead" >> beam.ParDo(WriteDeadLetterPart(self.temp_dir))
        )
        # One last step over both branches: the DaskRunner computes only the graph of the last transform.
        return (written, dead) | "BothWritten" >> beam.Flatten() | "Done" >> beam.Map(lambda x: x)


# -- driver ------------------------------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", required=True, metavar="ID")
    p.add_argument("--backend", required=True, metavar="SPEC",
                   help="openai:URL, python:package.module:function or grounded-instructions")  # fmt: skip
    p.add_argument("--model", metavar="NAME[@VERSION]", help="the model's name (and version): suggestions are "
                   "stored as model:NAME@VERSION (required for openai:)")  # fmt: skip
    p.add_argument("--field", action="append", default=[], metavar="NAME", help="only this step field (repeat)")
    p.add_argument("--episode", action="append", default=[], metavar="ID",
                   help="only this episode (a store id or the converted episode's id; repeat)")  # fmt: skip
    p.add_argument("--tag", help="only episodes with this tag (on the episode or a step)")
    p.add_argument("--state", action="append", default=[], metavar="STATE", help="only episodes in this state")
    p.add_argument("--in-flight", type=int, default=4, help="requests in flight per worker (default 4)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a request may take (default 60)")
    p.add_argument("--retries", type=int, default=2, help="tries again when the backend is unavailable (default 2)")
    p.add_argument("--batch", type=int, default=200, help="suggestions stored per transaction (default 200)")
    p.add_argument("--out", metavar="DIR", help="where dead_letters.jsonl and summary.json go "
                   "(default: DATA/suggest/STUDY/MODEL)")  # fmt: skip
    p.add_argument("--no-image", action="store_true", help="send no screenshot")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _episode_rows(repo: Any, args: argparse.Namespace) -> Iterator[list[tuple[str, dict[str, Any], int]]]:
    """The selected UI episodes (id, ui_record, steps), a page at a time in id order."""
    from protos.rlds_creator import study_pb2

    states = []
    for name in args.state:
        if name not in study_pb2.Episode.State.keys():
            raise StepmarkError(f"--state {name!r}: not an episode state ({', '.join(study_pb2.Episode.State.keys())})")
        states.append(study_pb2.Episode.State.Value(name))
    last = ""
    while True:
        query = sa.select(EpisodeRow.id, EpisodeRow.meta, EpisodeRow.num_steps).where(
            EpisodeRow.study_id == args.study, EpisodeRow.kind == "ui", EpisodeRow.id > last
        )
        if args.episode:
            query = query.where(sa.or_(EpisodeRow.id.in_(args.episode),
                                       EpisodeRow.source_key.in_([f"ui:{e}" for e in args.episode])))  # fmt: skip
        if states:
            query = query.where(EpisodeRow.state.in_(states))
        if args.tag:
            query = query.where(sa.or_(
                sa.exists().where(EpisodeTagRow.episode_id == EpisodeRow.id, EpisodeTagRow.label == args.tag),
                sa.exists().where(StepTagRow.episode_id == EpisodeRow.id, StepTagRow.label == args.tag),
            ))  # fmt: skip
        with repo._read() as s:
            page = s.execute(query.order_by(EpisodeRow.id).limit(PAGE)).all()
        if not page:
            return
        last = page[-1][0]
        yield [(eid, (meta or {}).get("ui_record") or {}, steps or 0) for eid, meta, steps in page]


def _palette(repo: Any, study: str) -> list[str]:
    with repo._read() as s:
        rows = s.scalars(
            sa.select(StepTagRow.label).join(EpisodeRow, EpisodeRow.id == StepTagRow.episode_id)
            .where(EpisodeRow.study_id == study).distinct().order_by(StepTagRow.label).limit(MAX_TAGS)
        )  # fmt: skip
        return list(rows)


def _count_stored(repo: Any, study: str, author: str) -> int:
    with repo._read() as s:
        return s.scalar(
            sa.select(sa.func.count()).select_from(FieldSuggestionRow)
            .join(EpisodeRow, EpisodeRow.id == FieldSuggestionRow.episode_id)
            .where(EpisodeRow.study_id == study, FieldSuggestionRow.source == author)
        ) or 0  # fmt: skip


def _fields(repo: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    defined = {d.name: d for d in field_values.definitions(repo, args.study)}
    if not defined:
        raise StepmarkError(f"study {args.study!r} has no fields (define them with `stepmark study fields`)")
    for name in args.field:
        if name not in defined:
            raise StepmarkError(f"--field {name}: study {args.study!r} has no such field ({', '.join(defined)})")
        if defined[name].scope != "step":
            raise StepmarkError(f"--field {name}: a field of scope {defined[name].scope}; suggest fills step fields")
    chosen = [defined[n] for n in dict.fromkeys(args.field)] or [d for d in defined.values() if d.scope == "step"]
    if not chosen:
        raise StepmarkError(f"study {args.study!r} has no step fields to suggest")
    return [d.to_json() for d in chosen]


class _Progress:
    """A progress bar on stderr over the places asked: stored suggestions and dead letters, polled from the
    store and the run's part files (the work happens in workers, maybe in other processes)."""

    def __init__(self, repo: Any, study: str, author: str, before: int, total: int, temp_dir: str) -> None:
        self.repo, self.study, self.author, self.before, self.total = repo, study, author, before, total
        self.temp_dir, self.stop = temp_dir, threading.Event()
        self.tty = sys.stderr.isatty()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.shown = -1

    def _done(self) -> int:
        stored = _count_stored(self.repo, self.study, self.author) - self.before
        dead = sum(len(storage.read_all(m.path, 64 << 20).splitlines()) for m in storage.match(
            storage.join(self.temp_dir, "dead-*.jsonl")))  # fmt: skip
        return min(self.total, stored + dead)

    def draw(self, done: int) -> None:
        width = 30
        filled = width * done // self.total if self.total else width
        line = f"suggest: [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} places"
        if self.tty:
            print("\r" + line, end="", file=sys.stderr, flush=True)
        elif done * 10 // max(self.total, 1) != self.shown * 10 // max(self.total, 1) or done == self.total:
            print(line, file=sys.stderr, flush=True)
        self.shown = done

    def _loop(self) -> None:
        while not self.stop.wait(0.5):
            with contextlib.suppress(Exception):  # a busy store: the next poll shows it
                done = self._done()
                if done != self.shown:
                    self.draw(done)

    def __enter__(self) -> _Progress:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        with contextlib.suppress(Exception):
            self.draw(self._done())
        if self.tty:
            print(file=sys.stderr)


def _join_dead(temp_dir: str, target: str) -> Counter:
    reasons: Counter = Counter()
    parts = sorted(m.path for m in storage.match(storage.join(temp_dir, "dead-*.jsonl")))
    with storage.create(target + ".tmp") as out:
        for path in parts:
            with storage.open_read(path) as part:
                for line in part:
                    reasons[json.loads(line)["reason"]] += 1
                    out.write(line)
    if storage.exists(target):  # the run before's (this run's file holds only this run's dead letters)
        storage.delete([target])
    storage.rename([target + ".tmp"], [target])
    return reasons


def _remove_killed_runs(out: str) -> None:
    """Delete the part folders of runs that were killed (their owner process is gone): their dead letters are
    of places that hold no suggestion, which this run asks again."""
    temps = {storage.split(m.path)[0] for m in storage.match(storage.join(out, PARTS_PREFIX + "*", "*"))}
    for folder in sorted(temps):
        owner = storage.read_owner(folder)
        if owner is not None and not owner.alive():
            storage.delete_tree(folder)


def _safe(author: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.@" else "_" for c in author)[:150]


def run(argv: Sequence[str] | None = None, *, parsed: argparse.Namespace | None = None) -> int:
    """Entry point: parse arguments, pick the places, run the pipeline, print the summary line."""
    if parsed is None:
        parser = argparse.ArgumentParser(prog="stepmark suggest")
        add_arguments(parser)
        parser.add_argument("--data", default="./stepmark-data")
        parser.add_argument("--store", default=None)
        parser.add_argument("--user", default=None)
        args, beam_args = parser.parse_known_args(argv)
        args.user = args.user or getpass.getuser()
        args.data = str(storage.local_path(args.data, "--data", "suggest"))
    else:
        args, beam_args = parsed, list(argv or [])
    if not 1 <= args.in_flight <= MAX_IN_FLIGHT:
        raise StepmarkError(f"--in-flight must be between 1 and {MAX_IN_FLIGHT}")
    if not 0 <= args.retries <= MAX_RETRIES or not 0 < args.timeout <= 3600 or not 1 <= args.batch <= 10_000:
        raise StepmarkError(f"--retries 0..{MAX_RETRIES}, --timeout 0..3600 s and --batch 1..10000, please")
    storage.configure(beam_args)
    check_runner(pipeline_options(beam_args))
    backend = backend_from_spec(args.backend, args.model)
    model = Model(backend.name, backend.version)
    backend.close()
    from pipelines.episodes.publish import open_store

    with open_store(args.store, args.data) as repo:
        with repo._read() as s:
            field_values._require_lead(s, args.study, args.user, "store model suggestions")
        fields = _fields(repo, args)
        names = [d["name"] for d in fields]
        tags = _palette(repo, args.study)
        works: list[dict[str, Any]] = []
        summary = Summary(args.study, model.author, args.backend, "", fields=names)
        for page in _episode_rows(repo, args):
            done = field_values.suggested_places(repo, [eid for eid, _, _ in page], model.author)
            for eid, record, steps in page:
                places = done.get(eid, set())
                wanted = [sum((n, i) not in places for n in names) for i in range(steps)]
                summary.episodes += 1
                summary.places_skipped += steps * len(names) - sum(wanted)
                if any(wanted):
                    summary.steps_asked += sum(1 for w in wanted if w)
                    summary.places_asked += sum(wanted)
                    works.append({"episode": eid, "record": record, "done": sorted(places), "order": summary.steps_asked})
        if args.episode and not summary.episodes:
            raise StepmarkError(f"--episode {', '.join(args.episode)}: no such UI episode in study {args.study!r}")
        out = args.out or storage.join(str(args.data), "suggest", _safe(args.study), _safe(model.author))
        storage.mkdirs(out, "--out folder")
        _remove_killed_runs(out)
        temp_dir = storage.join(out, f"{PARTS_PREFIX}{uuid.uuid4().hex}")
        storage.mkdirs(temp_dir, "--out folder")
        storage.write_owner(temp_dir)  # a killed run's parts are then known as such by the next run
        before = _count_stored(repo, args.study, model.author)
        options = pipeline_options(spread_over_dask(beam_args, len(works)))
        summary.runner = runner_name(options)
        if works:
            pipeline = beam.Pipeline(options=options)
            # batches of about BATCH_PER_THREAD x --in-flight requests: a worker thread asks one at a time
            batches = max(1, -(-summary.steps_asked // (BATCH_PER_THREAD * args.in_flight)))
            suggest = Suggest(args, model, fields, tags, temp_dir, batches)
            _ = pipeline | "Episodes" >> beam.Create(works) | "Suggest" >> suggest
            progress = (contextlib.nullcontext() if args.quiet else
                        _Progress(repo, args.study, model.author, before, summary.places_asked, temp_dir))  # fmt: skip
            with progress:
                result = pipeline.run()
                result.wait_until_finish()
            close = getattr(getattr(result, "client", None), "close", None)
            if callable(close):  # the DaskRunner's own client (as convert-ui closes it)
                close()
        summary.suggestions_stored = _count_stored(repo, args.study, model.author) - before
    reasons = _join_dead(temp_dir, storage.join(out, DEAD_LETTERS))
    storage.delete_tree(temp_dir)
    summary.dead_letters, summary.dead_letters_by_reason = sum(reasons.values()), dict(sorted(reasons.items()))
    storage.write_bytes(storage.join(out, SUMMARY), (json.dumps(asdict(summary), indent=2) + "\n").encode("utf-8"))
    print(format_summary(summary, storage.join(out, DEAD_LETTERS)))
    return 0


def format_summary(s: Summary, dead_path: str) -> str:
    reasons = ", ".join(f"{k} {v}" for k, v in s.dead_letters_by_reason.items())
    return (f"suggest {s.author} on study {s.study}: {s.episodes} episode(s), {s.steps_asked} step(s) asked, "
            f"{s.suggestions_stored} suggestion(s) stored, {s.places_skipped} place(s) already suggested, "
            f"{s.dead_letters} dead letter(s){f' ({reasons})' if reasons else ''} -> {dead_path}")  # fmt: skip

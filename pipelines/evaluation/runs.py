"""`stepmark evaluate`: a predictions file scored against a study's recorded steps and stored as a run
(schemas/evaluation.md; the matching rule is `matching.py`).

Streams both sides, so memory does not grow with the study: the predictions file is read a line at a time and
written `BATCH` lines at a time into the run's result rows; then the study's UI episodes are read a page at a
time (keyset by id), each episode's record once, and every step with a recorded action is scored against its
prediction (or counted `missing`). All of it is one write transaction: an invalid line, a prediction for a step
the study does not have or a run name already taken refuses the whole file (`FILE:LINE: reason`) and nothing
is stored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines import storage
from pipelines.evaluation import matching
from pipelines.store import grounding as store_grounding
from pipelines.store.access import now
from pipelines.store.errors import NotFound, StoreError
from pipelines.store.jsonl import numbered, object_line
from pipelines.store.models import EpisodeRow, EvaluationResultRow, EvaluationRunRow, StudyRow
from protos.llm4mobile import episode_pb2
from protos.stepmark import ui_episode_pb2

BATCH = 500  # prediction lines per insert, episodes per page
MAX_LINE = 64 << 10
MAX_NAME = 128
#: Which grounding annotations decide a step's target: the export's default (what most annotators agree on).
ANNOTATIONS = "consensus"
_KEYS = {"episode", "step", "action"}
AUDIT_ACTION = "evaluation.run"


@dataclass
class TypeFigures:
    steps: int = 0
    matched: int = 0
    missing: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "matched": self.matched, "missing": self.missing,
                "accuracy": round(self.matched / self.steps, 6) if self.steps else None}  # fmt: skip


@dataclass
class Figures:
    """What a run adds up to: steps scored overall and per recorded action type, episodes and their success."""

    overall: TypeFigures = field(default_factory=TypeFigures)
    per_type: dict[str, TypeFigures] = field(default_factory=dict)
    reasons: Counter = field(default_factory=Counter)
    episodes: int = 0
    episodes_succeeded: int = 0
    unscored_steps: int = 0
    predictions: int = 0

    def add(self, kind: str, outcome: matching.Outcome) -> None:
        for figures in (self.overall, self.per_type.setdefault(kind, TypeFigures())):
            figures.steps += 1
            figures.matched += outcome.matched
            figures.missing += outcome.reason == "missing"
        if outcome.reason:
            self.reasons[outcome.reason] += 1

    def to_json(self) -> dict[str, Any]:
        return {
            **self.overall.to_json(),
            "predictions": self.predictions,
            "per_type": {k: v.to_json() for k, v in sorted(self.per_type.items())},
            "reasons": dict(sorted(self.reasons.items())),
            "episodes": self.episodes,
            "episodes_succeeded": self.episodes_succeeded,
            "episode_success": round(self.episodes_succeeded / self.episodes, 6) if self.episodes else None,
            "unscored_steps": self.unscored_steps,
        }


def _lines(path: str) -> Iterator[tuple[int, str]]:
    """The file's non-blank lines with their numbers, read a line at a time through the storage seam."""
    try:
        f = storage.open_read(path)
    except FileNotFoundError as exc:
        raise StoreError(f"{path}: no such file") from exc
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc}") from exc
    with f:
        yield from numbered(iter(lambda: f.readline(MAX_LINE + 1), b""), path, max_line=MAX_LINE)


@dataclass(frozen=True)
class _Line:
    number: int
    episode: str
    step: int
    action: matching.Predicted


def parse_line(where: str, text: str) -> _Line:
    """One predictions line checked on its own (its episode is resolved later); StoreError `where: reason`."""
    line = object_line(where, text, _KEYS)
    episode, step = line.get("episode"), line.get("step")
    if not isinstance(episode, str) or not episode or len(episode) > 200:
        raise StoreError(f"{where}: 'episode' must be an episode reference (STUDY/SESSION/EPISODE, an id)")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise StoreError(f"{where}: 'step' must be a step index (a whole number, 0 or more)")
    try:
        action = matching.parse_action(line.get("action"))
    except matching.InvalidAction as exc:
        raise StoreError(f"{where}: {exc}") from None
    return _Line(int(where.rsplit(":", 1)[1]), episode, step, action)


class _Episodes:
    """Episode references of the predictions -> the study's episode rows (id, steps), resolved a batch at a
    time: STUDY/SESSION/EPISODE, a store episode id, or the converted episode's own id (`UiEpisode.episode_id`,
    unique in a study: the import key). Remembers at most `limit` references."""

    def __init__(self, s: Session, study_id: str, limit: int = 50_000) -> None:
        self.s, self.study_id, self.limit = s, study_id, limit
        self.known: dict[str, tuple[str, int, str | None] | None] = {}

    def resolve(self, refs: set[str]) -> None:
        todo = [r for r in refs if r not in self.known]
        if len(self.known) + len(todo) > self.limit:
            self.known.clear()
        wanted: dict[str, list[str]] = {}  # store id -> the references naming it
        sessions: dict[str, str] = {}
        for ref in todo:
            parts = ref.split("/")
            if len(parts) == 3 and all(parts) and parts[0] == self.study_id:
                wanted.setdefault(parts[2], []).append(ref)
                sessions[ref] = parts[1]
            else:
                wanted.setdefault(ref, []).append(ref)
            self.known[ref] = None
        rows = self.s.execute(
            sa.select(EpisodeRow.id, EpisodeRow.num_steps, EpisodeRow.kind, EpisodeRow.session_id).where(
                EpisodeRow.study_id == self.study_id, EpisodeRow.id.in_(list(wanted))
            )
        )
        for eid, steps, kind, session in rows:
            for ref in wanted[eid]:
                if sessions.get(ref, session) == session:
                    self.known[ref] = (eid, steps or 0, kind)
        # not found so far: a converted episode's id (which may hold "/", even two)
        others = {f"ui:{r}": r for r in todo if self.known.get(r) is None}
        if others:
            rows = self.s.execute(
                sa.select(EpisodeRow.source_key, EpisodeRow.id, EpisodeRow.num_steps, EpisodeRow.kind).where(
                    EpisodeRow.study_id == self.study_id, EpisodeRow.source_key.in_(list(others))
                )
            )
            for key, eid, steps, kind in rows:
                self.known[others[key]] = (eid, steps or 0, kind)


def _check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise StoreError(f"a run name must be 1 to {MAX_NAME} characters")
    return name


def _stage(s: Session, run_id: int, study_id: str, path: str) -> int:
    """Pass 1: every line checked, resolved and written as a pending result row; the number of predictions."""
    episodes = _Episodes(s, study_id)
    count = 0
    batch: list[_Line] = []

    def flush() -> None:
        episodes.resolve({b.episode for b in batch})
        rows, seen = [], {}
        for b in batch:
            where = f"{path}:{b.number}"
            found = episodes.known.get(b.episode)
            if found is None:
                raise StoreError(f"{where}: episode {b.episode!r} is not in study {study_id!r}")
            eid, steps, kind = found
            if kind != "ui":
                raise StoreError(
                    f"{where}: episode {b.episode!r} is not a UI episode (only UI steps are scored)"
                )
            if b.step >= steps:
                raise StoreError(f"{where}: episode {b.episode!r} has {steps} steps, no step {b.step}")
            if (eid, b.step) in seen:
                raise StoreError(f"{where}: a second prediction for step {b.step} of episode {b.episode!r} "
                                 f"(the first is line {seen[(eid, b.step)]})")  # fmt: skip
            seen[(eid, b.step)] = b.number
            rows.append({"run_id": run_id, "episode_id": eid, "step_index": b.step, "line": b.number,
                         "predicted_type": b.action.action_type, "predicted": b.action.to_json()})  # fmt: skip
        key = (EvaluationResultRow.episode_id, EvaluationResultRow.step_index)
        earlier = s.execute(
            sa.select(*key, EvaluationResultRow.line)
            .where(EvaluationResultRow.run_id == run_id, sa.tuple_(*key).in_(list(seen)))
            .order_by(EvaluationResultRow.line)
        ).first()
        if earlier is not None:
            eid, step, line = earlier
            raise StoreError(f"{path}:{seen[(eid, step)]}: a second prediction for step {step} of episode "
                             f"{eid!r} (the first is line {line})")  # fmt: skip
        s.execute(sa.insert(EvaluationResultRow), rows)
        batch.clear()

    for number, text in _lines(path):
        batch.append(parse_line(f"{path}:{number}", text))
        count += 1
        if len(batch) >= BATCH:
            flush()
    if batch:
        flush()
    return count


def _target_box(
    action: ui_episode_pb2.Action, obs: episode_pb2.Observation, annotations: list[Any]
) -> tuple[int, int, int, int] | None:
    """The box of the step's target as an export in ANNOTATIONS mode writes it (the annotators' corrected
    target, a drawn box, a corrected box; else the converter's)."""
    from pipelines.exporters.grounding import apply_step, select

    if not annotations:
        if not action.HasField("target_index") or not 0 <= action.target_index < len(obs.objects):
            return None
        b = obs.objects[action.target_index].bbox
        return (b.left, b.top, b.right, b.bottom)
    a, o = ui_episode_pb2.Action(), episode_pb2.Observation()
    a.CopyFrom(action)
    o.objects.extend(obs.objects)
    o.screen_width, o.screen_height = obs.screen_width, obs.screen_height
    apply_step(a, o, ui_episode_pb2.StepInfo(), select(annotations, ANNOTATIONS), ANNOTATIONS)
    if not a.HasField("target_index"):
        return None
    b = o.objects[a.target_index].bbox
    return (b.left, b.top, b.right, b.bottom)


def _score(s: Session, run_id: int, study_id: str, data_dir: Any, path: str) -> Figures:
    """Pass 2: every UI episode of the study, a page at a time, each step with a recorded action scored."""
    from pipelines.episodes.ui import open_ui_episode

    figures = Figures()
    last = ""
    result = EvaluationResultRow
    update = (
        sa.update(result)
        .where(result.run_id == run_id, result.episode_id == sa.bindparam("e"), result.step_index == sa.bindparam("i"))
        .values(recorded_type=sa.bindparam("rt"), matched=sa.bindparam("m"), reason=sa.bindparam("r"),
                recorded=sa.bindparam("rec"))
    )  # fmt: skip
    while True:
        page = s.execute(
            sa.select(EpisodeRow.id, EpisodeRow.meta)
            .where(EpisodeRow.study_id == study_id, EpisodeRow.kind == "ui", EpisodeRow.id > last)
            .order_by(EpisodeRow.id)
            .limit(BATCH)
        ).all()
        if not page:
            return figures
        last = page[-1][0]
        ids = [eid for eid, _ in page]
        annotations = store_grounding.in_session(s, ids)
        for eid, meta in page:
            predicted = {
                step: (line, kind, pred)
                for step, line, kind, pred in s.execute(
                    sa.select(result.step_index, result.line, result.predicted_type, result.predicted).where(
                        result.run_id == run_id, result.episode_id == eid
                    )
                )
            }
            record = open_ui_episode((meta or {}).get("ui_record") or {}, data_dir).record
            by_step: dict[int, list[Any]] = {}
            for a in annotations.get(eid, []):
                by_step.setdefault(a.step, []).append(a)
            updates, inserts, scored, succeeded = [], [], 0, True
            for i, ts in enumerate(record.episode.time_steps):
                action = record.actions[i] if i < len(record.actions) else ui_episode_pb2.Action()
                obs = ts.observation
                box = _target_box(action, obs, by_step.get(i, []))
                step = matching.recorded(action, box, obs.screen_width, obs.screen_height)
                if step is None:
                    figures.unscored_steps += 1
                    if i in predicted:
                        name = ui_episode_pb2.Action.Type.Name(action.type)
                        raise StoreError(f"{path}:{predicted[i][0]}: step {i} of episode {eid!r} has no recorded "
                                         f"action to score against ({name})")  # fmt: skip
                    continue
                got = predicted.pop(i, None)
                outcome = matching.match(step, _predicted(got[2]) if got else None)
                figures.add(step.action_type, outcome)
                scored += 1
                succeeded = succeeded and outcome.matched
                row = {
                    "rt": step.action_type,
                    "m": outcome.matched,
                    "r": outcome.reason,
                    "rec": step.to_json(),
                }
                if got:
                    updates.append({"e": eid, "i": i, **row})
                else:
                    inserts.append({"run_id": run_id, "episode_id": eid, "step_index": i, "recorded_type": row["rt"],
                                    "matched": False, "reason": "missing", "recorded": row["rec"]})  # fmt: skip
            if predicted:  # the store's step count said more steps than the record holds
                step, (line, _, _) = min(predicted.items(), key=lambda x: x[1][0])
                raise StoreError(f"{path}:{line}: episode {eid!r} has no step {step} in its record")
            if updates:
                s.connection().execute(update, updates)
            if inserts:
                s.execute(sa.insert(result), inserts)
            if scored:
                figures.episodes += 1
                figures.episodes_succeeded += succeeded


def _predicted(value: dict[str, Any]) -> matching.Predicted:
    return matching.Predicted(**value)


def evaluate(
    repo: Any, study_id: str, path: str, name: str, user: str, *, replace: bool = False
) -> dict[str, Any]:
    """Score the predictions file `path` against the study's steps and store the run as `name`; its summary
    (schemas/evaluation.md). A name already used in the study is refused unless `replace`."""
    name = _check_name(name)
    path = str(path)
    with repo._write() as s:
        if s.get(StudyRow, study_id) is None:
            raise NotFound(f"study {study_id!r} not found")
        old = s.scalars(
            sa.select(EvaluationRunRow).where(
                EvaluationRunRow.study_id == study_id, EvaluationRunRow.name == name
            )
        ).first()
        if old is not None and not replace:
            raise StoreError(f"study {study_id!r} already has a run named {name!r} (--replace replaces it)")
        if old is not None:
            s.execute(sa.delete(EvaluationResultRow).where(EvaluationResultRow.run_id == old.id))
            s.delete(old)
            s.flush()
        run = EvaluationRunRow(study_id=study_id, name=name, predictions=path, created_by=user,
                               created_time=now(), summary={})  # fmt: skip
        s.add(run)
        s.flush()
        count = _stage(s, run.id, study_id, path)
        figures = _score(s, run.id, study_id, repo.data_dir, path)
        figures.predictions = count
        run.summary = figures.to_json()
        # audited: the study's change mark moves, so remembered counts of its lists (the run filter) follow
        repo._audit(s, user, AUDIT_ACTION, study_id=study_id, before={"run": name} if old is not None else None,
                    after={"run": name, "file": path, "steps": figures.overall.steps,
                           "matched": figures.overall.matched})  # fmt: skip
        return _run_json(run)


def _run_json(run: EvaluationRunRow) -> dict[str, Any]:
    return {"run": run.name, "study": run.study_id, "predictions_file": run.predictions,
            "created_by": run.created_by, "created_time": run.created_time.isoformat(), **run.summary}  # fmt: skip


def _run(s: Session, study_id: str, name: str) -> EvaluationRunRow:
    run = s.scalars(
        sa.select(EvaluationRunRow).where(
            EvaluationRunRow.study_id == study_id, EvaluationRunRow.name == name
        )
    ).first()
    if run is None:
        raise NotFound(f"study {study_id!r} has no run named {name!r}")
    return run


def runs(repo: Any, study_id: str) -> list[dict[str, Any]]:
    """The study's runs, newest first (name, time, figures)."""
    with repo._read() as s:
        rows = s.scalars(
            sa.select(EvaluationRunRow)
            .where(EvaluationRunRow.study_id == study_id)
            .order_by(EvaluationRunRow.created_time.desc(), EvaluationRunRow.id.desc())
        )
        return [_run_json(r) for r in rows]


def summary(repo: Any, study_id: str, name: str) -> dict[str, Any]:
    with repo._read() as s:
        return _run_json(_run(s, study_id, name))


def failed_steps(repo: Any, study_id: str, name: str) -> Iterator[dict[str, Any]]:
    """The run's failed steps (episode, step, recorded, predicted, reason), by episode and step, read a page at
    a time."""
    r = EvaluationResultRow
    with repo._read() as s:
        run_id = _run(s, study_id, name).id
    after: tuple[str, int] = ("", -1)
    while True:
        with repo._read() as s:
            rows = s.execute(
                sa.select(r.episode_id, r.step_index, r.recorded, r.predicted, r.reason)
                .where(
                    r.run_id == run_id, r.matched.is_(False), sa.tuple_(r.episode_id, r.step_index) > after
                )
                .order_by(r.episode_id, r.step_index)
                .limit(BATCH)
            ).all()
        if not rows:
            return
        for eid, step, rec, pred, reason in rows:
            yield {"episode": eid, "step": step, "recorded": rec, "predicted": pred, "reason": reason}
        after = (rows[-1][0], rows[-1][1])


def step_results(repo: Any, study_id: str, name: str, episode_id: str) -> list[dict[str, Any]]:
    """One episode's rows of a run, by step (what the player draws beside the recorded action)."""
    r = EvaluationResultRow
    with repo._read() as s:
        run_id = _run(s, study_id, name).id
        rows = s.execute(
            sa.select(r.step_index, r.recorded, r.predicted, r.matched, r.reason)
            .where(r.run_id == run_id, r.episode_id == episode_id)
            .order_by(r.step_index)
        ).all()
    return [{"step": i, "recorded": rec, "predicted": pred, "matched": bool(m), "reason": reason}
            for i, rec, pred, m, reason in rows]  # fmt: skip


def compare(repo: Any, study_id: str, a: str, b: str) -> Iterator[dict[str, Any]]:
    """Steps where runs `a` and `b` differ (one matched, the other not), by episode and step, a page at a time."""
    ra, rb = sa.orm.aliased(EvaluationResultRow), sa.orm.aliased(EvaluationResultRow)
    with repo._read() as s:
        ida, idb = _run(s, study_id, a).id, _run(s, study_id, b).id
    after: tuple[str, int] = ("", -1)
    while True:
        with repo._read() as s:
            rows = s.execute(
                sa.select(ra.episode_id, ra.step_index, ra.recorded, ra.predicted, ra.matched, ra.reason,
                          rb.predicted, rb.matched, rb.reason)
                .join(rb, sa.and_(rb.run_id == idb, rb.episode_id == ra.episode_id, rb.step_index == ra.step_index))
                .where(ra.run_id == ida, ra.matched != rb.matched,
                       sa.tuple_(ra.episode_id, ra.step_index) > after)
                .order_by(ra.episode_id, ra.step_index)
                .limit(BATCH)
            ).all()  # fmt: skip
        if not rows:
            return
        for eid, step, rec, pa, ma, wa, pb, mb, wb in rows:
            yield {"episode": eid, "step": step, "recorded": rec,
                   "runs": {a: {"predicted": pa, "matched": bool(ma), "reason": wa},
                            b: {"predicted": pb, "matched": bool(mb), "reason": wb}}}  # fmt: skip
        after = (rows[-1][0], rows[-1][1])

"""A study's own fields in the store (issue 26): definitions, each annotator's values, suggestions, adjudications.

Rules (documented in schemas/store.md, "Study fields"):
- the study's creator or a reviewer defines the fields (`define`); a field left out of a new definition is
  kept with `active` false, so its values stay readable and exportable; a renamed field is a new field; the
  kind or scope of a field that has values, adjudications or suggestions cannot change (rename it instead), nor
  can an option they use be removed, nor can the field narrow (min, max, integer, max_length) below them;
- every annotator has their own value per field and place (step, segment start..end, or the episode: -1..-1);
  a newer value replaces their older one. Each change is one transaction with its audit row (`field.set`,
  `field.clear`: before/after are the value JSON with author and time), undone by `Repository.undo_last`
  through `swap`, like tags and grounding annotations;
- a value's `origin` is worked out here, not trusted from the client: `accepted` (equal to a suggestion),
  `edited` (a suggestion existed), `scratch` (none did), `imported` (given under a user by `import_values`,
  which the creator or a reviewer runs and which never replaces a value of another origin);
- an empty multi_choice value ([]) is no value: it clears;
- suggestions are a converted episode's step texts (`pipelines/step_text.py`, passed in by the caller, which
  reads the episode), values imported under a source name (`field_suggestions`) and a model's answers stored by
  `stepmark suggest` under `model:NAME@VERSION` (`add_suggestions`; schemas/model_backend.md).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from pipelines.store import field_actions, mapping
from pipelines.store.access import EpisodeAccess, EpisodeRef, now, parse_ref
from pipelines.store.errors import Conflict, InvalidSpec, NotFound, PermissionDenied, StoreError
from pipelines.store.field_defs import FieldDef, FieldValueError, check_value
from pipelines.store.jsonl import numbered, object_line
from pipelines.store.models import (
    EpisodeRow,
    FieldAdjudicationRow,
    FieldSuggestionRow,
    FieldValueRow,
    StudyFieldRow,
    StudyReviewerRow,
    StudyRow,
)
from pipelines.traces.files import FileRefused, read_limited

EPISODE = -1  # step_index/end_index of an episode-scope value
MAX_SECONDS = 3600.0
MAX_IMPORT_BYTES = 64 << 20
MAX_IMPORT_LINES = 500_000
_CHUNK = 500


@dataclass(frozen=True)
class FieldValue:
    """One value of one field by one author (a user, or a suggestion's source)."""

    episode_id: str
    field: str
    step: int  # -1: the episode
    end: int
    user: str
    value: Any
    origin: str = "scratch"
    seconds: float | None = None
    time: datetime | None = None

    @property
    def place(self) -> tuple[int, int]:
        return (self.step, self.end)

    def to_json(self) -> dict[str, Any]:
        """What the audit log and the routes say of a value: enough to re-create it under its author and time."""
        return {
            "field": self.field, "step": self.step, "end": self.end, "user": self.user, "value": self.value,
            "origin": self.origin, "seconds": self.seconds,
            "created_time": mapping.utc(self.time).isoformat() if self.time else None,
        }  # fmt: skip


def _value(row: FieldValueRow) -> FieldValue:
    return FieldValue(
        row.episode_id, row.field, row.step_index, row.end_index, row.user, row.value, row.origin, row.seconds,
        mapping.utc(row.created_time),
    )  # fmt: skip


# -- definitions -----------------------------------------------------------------------------------------------


def definitions(repo: EpisodeAccess, study_id: str, *, include_removed: bool = False) -> list[FieldDef]:
    """The study's fields in file order, then (with include_removed) the removed ones, inactive."""
    with repo._read() as s:
        rows = s.scalars(sa.select(StudyFieldRow).where(StudyFieldRow.study_id == study_id)).all()
        out = [FieldDef.from_json(r.definition, active=r.active, position=r.position) for r in rows]
    out = [d for d in out if d.active or include_removed]
    return sorted(out, key=lambda d: (not d.active, d.position, d.name))


def _require_lead(s: Session, study_id: str, user: str, what: str, *, lock: bool = False) -> StudyRow:
    """The study's row when `user` is its creator or a reviewer; NotFound / PermissionDenied otherwise."""
    study = s.get(StudyRow, study_id, with_for_update=lock)
    if study is None:
        raise NotFound(f"study {study_id!r} not found")
    if user != study.creator and s.get(StudyReviewerRow, (study_id, user)) is None:
        raise PermissionDenied(f"only the creator ({study.creator}) or a reviewer may {what} of study {study_id!r}")
    return study


_BATCH = 1000  # stored values read per round trip while a new definition is checked against them
_EXAMPLES = 2  # example values a refusal quotes
_NOT_STORED = frozenset({"name", "guideline", "keys", "prompt", "active", "position", "extra"})  # no stored value meets these


def _stored(s: Session, model: type, study_id: str, field: str) -> Iterator[Any]:
    """The values `model` (values, adjudications, suggestions) holds for a field of the study, streamed `_BATCH`
    rows at a time: a field may hold millions, and checking a definition must not load them all at once."""
    query = (
        sa.select(model.value).join(EpisodeRow, EpisodeRow.id == model.episode_id)  # type: ignore[attr-defined]
        .where(EpisodeRow.study_id == study_id, model.field == field)  # type: ignore[attr-defined]
        .execution_options(yield_per=_BATCH)
    )  # fmt: skip
    yield from s.scalars(query)


def _count(s: Session, model: type, study_id: str, field: str) -> int:
    """How many rows `model` holds for a field of the study, counted by the database."""
    return s.scalar(
        sa.select(sa.func.count()).select_from(model).join(EpisodeRow, EpisodeRow.id == model.episode_id)  # type: ignore[attr-defined]
        .where(EpisodeRow.study_id == study_id, model.field == field)  # type: ignore[attr-defined]
    ) or 0  # fmt: skip


_USES = ((FieldValueRow, "value(s)"), (FieldAdjudicationRow, "adjudication(s)"), (FieldSuggestionRow, "suggestion(s)"))


def _narrowings(old: FieldDef, new: FieldDef) -> list[str]:
    """How `new` (same kind and scope as `old`) may refuse a value that fits `old`, each in words ("max lowered
    from 5 to 3"); empty when every value fitting `old` fits `new` (guideline, keys or option order changed, an
    option added, a limit widened), so nothing stored needs reading. A changed attribute not known here counts as
    a narrowing: the stored values are then checked with `check_value`, which knows every rule."""
    out: list[str] = []
    for attribute in dataclasses.fields(FieldDef):
        name = attribute.name
        before, after = getattr(old, name), getattr(new, name)
        if name in _NOT_STORED or before == after:
            continue
        if name == "options":
            gone = [o for o in before if o not in after]
            if gone:
                out.append(f"option(s) {gone} removed")
        elif name in ("min", "max"):
            tighter = after is not None and (before is None or (after > before if name == "min" else after < before))
            if tighter:
                out.append(f"{name} {after} added" if before is None else
                           f"{name} {'raised' if name == 'min' else 'lowered'} from {before} to {after}")  # fmt: skip
        elif name == "integer":
            if after:
                out.append("integer: true added")
        elif name == "max_length":
            if after < before:
                out.append(f"max_length lowered from {before} to {after}")
        else:
            out.append(f"{name} changed from {before!r} to {after!r}")
    return out


def _example(value: Any) -> str:
    """A stored value as a refusal quotes it: short, a text with its length (what max_length counts), a whole
    number without ".0" (JSON on PostgreSQL keeps 9.0 where SQLite gives back 9)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    if isinstance(value, str):
        return f"{value[:20] + '…' if len(value) > 20 else value!r} ({len(value)} characters)"
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= 40 else shown[:40] + "…"


def _check_change(s: Session, study_id: str, row: StudyFieldRow, new: FieldDef) -> None:
    """Refuse (InvalidSpec, one line) a change of a field's kind or scope while anything is stored for it, and a
    change after which a stored value, adjudication or suggestion would no longer fit the field (an option it
    uses removed, a number outside a raised min or lowered max or not whole under `integer`, a text longer than a
    lowered max_length): exports promise that values fit their field. Stored values are read only when the
    change may refuse one, streamed, and judged by `check_value`, the one home of what fits a field."""
    old = FieldDef.from_json(row.definition)
    if (row.kind, row.scope) != (new.kind, new.scope):
        counts = ", ".join(f"{n} {what}" for model, what in _USES if (n := _count(s, model, study_id, new.name)))
        if counts:
            raise InvalidSpec(
                f"field {new.name}: it has {counts} as a {row.scope} {row.kind} field; "
                f"its kind and scope cannot change (give the new field another name)"
            )
        return
    narrowed = _narrowings(old, new)
    if not narrowed:
        return
    removed = set(old.options) - set(new.options)
    still: dict[str, dict[str, int]] = {}  # removed option -> what -> how many use it
    outside: dict[str, int] = {}  # what -> how many do not fit the new definition
    examples: list[str] = []
    for model, what in _USES:
        for value in _stored(s, model, study_id, new.name):
            try:
                check_value(new, value)
                continue
            except FieldValueError:
                pass
            options = [o for o in (value if isinstance(value, list) else [value]) if isinstance(o, str)]
            used = [o for o in options if o in removed]
            for option in used:
                by = still.setdefault(option, {})
                by[what] = by.get(what, 0) + 1
            if not used:
                outside[what] = outside.get(what, 0) + 1
                if len(examples) < _EXAMPLES and _example(value) not in examples:
                    examples.append(_example(value))
    if still:
        listed = "; ".join(
            f"{option!r}: " + ", ".join(f"{n} {what}" for what, n in by.items()) for option, by in still.items()
        )
        raise InvalidSpec(
            f"field {new.name}: option(s) still used cannot be removed or renamed ({listed}); "
            f"clear or change those first, or give the new field another name"
        )
    if outside:
        counts = ", ".join(f"{n} {what}" for what, n in outside.items())
        raise InvalidSpec(
            f"field {new.name}: {' and '.join(narrowed)}, but {counts} stored would not fit "
            f"(e.g. {', '.join(examples)}); clear or change those first, or give the new field another name"
        )


def define(repo: EpisodeAccess, study_id: str, fields: list[FieldDef], user: str) -> list[FieldDef]:
    """Make `fields` the study's fields (creator or reviewer). Audited as `study.fields`."""
    with repo._write() as s:
        _require_lead(s, study_id, user, "define the fields", lock=True)
        rows = {r.name: r for r in s.scalars(sa.select(StudyFieldRow).where(StudyFieldRow.study_id == study_id))}
        before = [r.definition | {"active": r.active} for r in sorted(rows.values(), key=lambda r: r.position)]
        time = now()
        for i, definition in enumerate(fields):
            row = rows.get(definition.name)
            if row is not None:
                _check_change(s, study_id, row, definition)
            if row is None:
                row = StudyFieldRow(study_id=study_id, name=definition.name)
                s.add(row)
            row.position, row.scope, row.kind = i, definition.scope, definition.kind
            row.definition, row.active, row.updated_by, row.updated_time = definition.to_json(), True, user, time
        names = {d.name for d in fields}
        for name, row in rows.items():
            if name not in names and row.active:
                row.active, row.updated_by, row.updated_time = False, user, time
        s.flush()
        after = [d.to_json() for d in fields]
        repo._audit(s, user, field_actions.DEFINE, study_id=study_id, before={"fields": before},
                    after={"fields": after})  # fmt: skip
    return definitions(repo, study_id)


def _field(s: Session, study_id: str, name: str, *, active_only: bool = True) -> FieldDef:
    row = s.get(StudyFieldRow, (study_id, name))
    if row is None or (active_only and not row.active):
        raise FieldValueError(f"study {study_id!r} has no field {name!r}")
    return FieldDef.from_json(row.definition, active=row.active, position=row.position)


def place_of(definition: FieldDef, step: int | None, end: int | None) -> tuple[int, int]:
    """(step_index, end_index) of a value of this field; StoreError when the place does not fit its scope."""
    if definition.scope == "episode":
        if step is not None and step != EPISODE:
            raise FieldValueError(f"field {definition.name} is given to the episode, not to step {step}")
        return EPISODE, EPISODE
    if step is None or step < 0:
        raise FieldValueError(f"field {definition.name} is given to a {definition.scope}: it needs a step")
    if definition.scope == "step":
        if end is not None and end != step:
            raise FieldValueError(f"field {definition.name} is given to one step, not to steps {step}–{end}")
        return step, step
    if end is None or end < step:
        raise FieldValueError(f"field {definition.name} is given to a segment: it needs an end >= {step}")
    return step, end


# -- values ----------------------------------------------------------------------------------------------------


def _insert(s: Session, model: type, values: dict[str, Any]) -> int | None:
    """INSERT unless the unique slot is taken (race-free); the new id or None."""
    table = model.__table__  # type: ignore[attr-defined]
    dialect = s.get_bind().dialect.name
    if dialect in ("sqlite", "postgresql"):
        insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
        return s.scalar(insert(table).values(**values).on_conflict_do_nothing().returning(table.c.id))
    try:
        with s.begin_nested():
            return s.scalar(sa.insert(table).values(**values).returning(table.c.id))
    except sa.exc.IntegrityError:
        return None


def _slot(s: Session, episode_id: str, field: str, user: str, place: tuple[int, int]) -> FieldValueRow | None:
    return s.scalars(
        sa.select(FieldValueRow).where(
            FieldValueRow.episode_id == episode_id, FieldValueRow.field == field, FieldValueRow.user == user,
            FieldValueRow.step_index == place[0], FieldValueRow.end_index == place[1],
        ).with_for_update()
    ).first()  # fmt: skip


def stored_suggestions(s: Session, episode_id: str, field: str, place: tuple[int, int]) -> list[Any]:
    return list(
        s.scalars(
            sa.select(FieldSuggestionRow.value).where(
                FieldSuggestionRow.episode_id == episode_id, FieldSuggestionRow.field == field,
                FieldSuggestionRow.step_index == place[0], FieldSuggestionRow.end_index == place[1],
            ).order_by(FieldSuggestionRow.id)
        )
    )  # fmt: skip


def origin_of(value: Any, suggestions: Iterable[Any]) -> str:
    """accepted / edited / scratch: the value against what was suggested for its place."""
    given = [v for v in suggestions if v not in (None, "", [])]
    if not given:
        return "scratch"
    return "accepted" if value in given else "edited"


UNCHECKED: Any = object()  # `set_value(replaces=...)` not given: whatever the slot holds is replaced


def same_value(a: Any, b: Any) -> bool:
    """Equal as JSON values: True is not 1 (Python says it is), 9 is 9.0 (PostgreSQL's JSON may give back 9.0)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def _said(value: Any) -> str:
    return "nothing" if value is None else _example(value)


def set_value(
    repo: EpisodeAccess, ref: EpisodeRef, field: str, user: str, value: Any, *, step: int | None = None,
    end: int | None = None, seconds: float | None = None, suggested: Iterable[Any] = (),
    replaces: Any = UNCHECKED,
) -> FieldValue | None:
    """Set (or, with value None, clear) `user`'s value of `field` at a place; returns the value now stored
    (None when cleared). An empty multi_choice value ([]: nothing picked) clears too: it is no value.
    `suggested`: what the converted episode suggests there (its step text). `replaces`: the value the person
    saw there (None: nothing); a change of a slot that holds another value by now is refused (`Conflict`), so
    a form showing a stale value never clears or overwrites what the store holds (issue 32). Audited."""
    with repo._write() as s:
        row = repo._episode_row(s, ref, lock=True)
        definition = _field(s, row.study_id, field)
        if definition.kind == "multi_choice" and value == []:
            value = None
        if definition.kind == "multi_choice" and replaces == []:
            replaces = None
        place = place_of(definition, step, end)
        for index in {place[0], place[1]} - {EPISODE}:
            repo._check_step(row, index)
        old = _slot(s, row.id, field, user, place)
        before = _value(old).to_json() if old is not None else None
        checked = None if value is None else check_value(definition, value)
        held = None if old is None else old.value
        if replaces is not UNCHECKED and not same_value(held, replaces) and not same_value(held, checked):
            at = field_actions.where({"step": place[0], "end": place[1]})
            raise Conflict(f"{user}'s {field} on {at} holds {_said(held)} by now, not {_said(replaces)} as shown: "
                           f"nothing changed")  # fmt: skip
        if value is None:
            if old is None:
                return None
            s.delete(old)
            s.flush()
            repo._audit(s, user, field_actions.CLEAR, **repo._where(row), step_index=place[0], before=before)
            return None
        origin = origin_of(checked, [*suggested, *stored_suggestions(s, row.id, field, place)])
        if seconds is not None:
            seconds = min(max(float(seconds), 0.0), MAX_SECONDS)
        if old is not None:
            if old.value == checked:
                return _value(old)
            s.delete(old)
            s.flush()
        new_id = _insert(s, FieldValueRow, {
            "episode_id": row.id, "field": field, "step_index": place[0], "end_index": place[1], "user": user,
            "value": checked, "origin": origin, "seconds": seconds, "created_time": now(),
        })  # fmt: skip
        if new_id is None:
            raise Conflict(f"{user}'s value of {field} on episode {row.id!r} changed meanwhile: try again")
        new = _value(s.get(FieldValueRow, new_id))
        repo._audit(s, user, field_actions.SET, **repo._where(row), step_index=place[0], before=before,
                    after=new.to_json())  # fmt: skip
        return new


def swap(
    s: Session, episode: EpisodeRow, current: dict[str, Any] | None, target: dict[str, Any] | None, user: str,
    guard: Any,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Undo/redo hook (revert.py): take a slot from `current` (a value JSON or None) to `target`, re-creating a
    value under its own author and time. Refuses (Conflict) when the slot holds another value by now."""
    from pipelines.store import tags  # parse_time: one home for audit-log times

    removed = created = None
    side = current or target
    if side is None:
        return None, None
    place = (side["step"], side["end"])
    row = _slot(s, episode.id, side["field"], side["user"], place)
    if current is not None and row is not None:
        if row.value != current.get("value"):
            raise Conflict(
                f"cannot revert: {row.user}'s value of {row.field} on episode {episode.id!r} changed since"
            )
        if row.user != user:
            guard(s, episode, user, f"remove {row.user}'s value of {row.field}")
        removed = _value(row).to_json()
        s.delete(row)
        s.flush()
        row = None
    if target is not None:
        if row is not None and row.value != target.get("value"):
            raise Conflict(f"cannot revert: {row.user} has another value of {row.field} on episode {episode.id!r}")
        if row is None:
            new_id = _insert(s, FieldValueRow, {
                "episode_id": episode.id, "field": target["field"], "step_index": place[0], "end_index": place[1],
                "user": target["user"], "value": target["value"], "origin": target.get("origin") or "scratch",
                "seconds": target.get("seconds"), "created_time": tags.parse_time(target.get("created_time")) or now(),
            })  # fmt: skip
            if new_id is not None:
                created = dict(target)
    return removed, created


def values(
    repo: EpisodeAccess, episode_ids: Iterable[str], *, user: str | None = None
) -> dict[str, list[FieldValue]]:
    """Values of these episodes (every author, or `user`'s), oldest first, read in chunks."""
    ids = list(dict.fromkeys(episode_ids))
    out: dict[str, list[FieldValue]] = {}
    with repo._read() as s:
        for i in range(0, len(ids), _CHUNK):
            query = sa.select(FieldValueRow).where(FieldValueRow.episode_id.in_(ids[i : i + _CHUNK]))
            if user is not None:
                query = query.where(FieldValueRow.user == user)
            for r in s.scalars(query.order_by(FieldValueRow.id)):
                out.setdefault(r.episode_id, []).append(_value(r))
    return out


def suggestions(repo: EpisodeAccess, episode_ids: Iterable[str]) -> dict[str, list[FieldValue]]:
    """Imported suggestions of these episodes (`user` is the source's name), oldest first."""
    ids = list(dict.fromkeys(episode_ids))
    out: dict[str, list[FieldValue]] = {}
    with repo._read() as s:
        for i in range(0, len(ids), _CHUNK):
            query = sa.select(FieldSuggestionRow).where(FieldSuggestionRow.episode_id.in_(ids[i : i + _CHUNK]))
            for r in s.scalars(query.order_by(FieldSuggestionRow.id)):
                out.setdefault(r.episode_id, []).append(
                    FieldValue(r.episode_id, r.field, r.step_index, r.end_index, r.source, r.value, "suggested",
                               None, mapping.utc(r.created_time))  # fmt: skip
                )
    return out


def adjudications(repo: EpisodeAccess, study_id: str) -> dict[tuple[str, str, int, int], Any]:
    """(episode, field, step, end) -> the adjudicated value, for the study."""
    return {key: value for key, (value, *_) in decisions(repo, study_id).items()}


def decisions(repo: EpisodeAccess, study_id: str) -> dict[tuple[str, str, int, int], tuple[Any, datetime, str]]:
    """(episode, field, step, end) -> (the adjudicated value, the time it was decided, who decided), for the
    study."""
    from pipelines.store import listing

    with repo._read() as s:
        rows = s.execute(
            sa.select(FieldAdjudicationRow).where(listing.in_study(FieldAdjudicationRow.episode_id, study_id))
        ).scalars()
        return {(r.episode_id, r.field, r.step_index, r.end_index): (r.value, mapping.utc(r.time), r.user)
                for r in rows}  # fmt: skip


def adjudicate(
    repo: EpisodeAccess, ref: EpisodeRef, field: str, user: str, value: Any, *, step: int | None = None,
    end: int | None = None,
) -> Any:
    """Record the consensus value of a field at a place (replacing an earlier decision); the creator or a
    reviewer decides. Audited as `field.adjudicate`. Returns the value as stored."""
    with repo._write() as s:
        row = repo._episode_row(s, ref, lock=True)
        repo._require_review(s, row, user, f"adjudicate field {field}")
        definition = _field(s, row.study_id, field, active_only=False)
        place = place_of(definition, step, end)
        checked = check_value(definition, value)
        old = s.scalars(
            sa.select(FieldAdjudicationRow).where(
                FieldAdjudicationRow.episode_id == row.id, FieldAdjudicationRow.field == field,
                FieldAdjudicationRow.step_index == place[0], FieldAdjudicationRow.end_index == place[1],
            )
        ).first()  # fmt: skip
        before = None if old is None else {"field": field, "value": old.value}
        if old is None:
            s.add(FieldAdjudicationRow(episode_id=row.id, field=field, step_index=place[0], end_index=place[1],
                                       value=checked, user=user, time=now()))  # fmt: skip
        else:
            old.value, old.user, old.time = checked, user, now()
        repo._audit(s, user, field_actions.ADJUDICATE, **repo._where(row), step_index=place[0], before=before,
                    after={"field": field, "step": place[0], "end": place[1], "value": checked})  # fmt: skip
        return checked


# -- import ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportResult:
    values: int
    suggestions: int


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        data = read_limited(str(path), MAX_IMPORT_BYTES)
    except FileRefused as exc:
        raise StoreError(f"{path}: {exc.message}") from exc
    except FileNotFoundError as exc:
        raise StoreError(f"{path}: no such file") from exc
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc}") from exc
    yield from numbered(data.split(b"\n"), str(path), max_lines=MAX_IMPORT_LINES)


_IMPORT_KEYS = {"episode", "step", "end", "field", "value", "user", "source"}


def import_values(repo: Any, study_id: str, path: str | Path, actor: str) -> ImportResult:
    """Import `path` (JSON lines: {"episode", "step" (or null), "end"?, "field", "value", "user" | "source"};
    "episode" is a store episode id, a `STUDY/SESSION/EPISODE` reference as `stepmark export --episode` takes,
    or, for a UI study, the converted episode's own id):
    lines with `source` become suggestions of that source, lines with `user` values of that annotator (origin
    `imported`). The study's creator or a reviewer imports (`actor`). Every line is checked first; any invalid
    line refuses the whole file (naming the line), nothing imported. A line replaces an earlier import of the
    same source/user at the same place; a place where that user has a value of their own (entered by hand:
    any origin but `imported`) is an invalid line, never overwritten. A user's empty multi_choice value ([])
    is no value: it removes an earlier import there and stores nothing."""
    path = Path(path)
    with repo._read() as s:
        _require_lead(s, study_id, actor, "import field values")
    fields = {d.name: d for d in definitions(repo, study_id)}
    checked: list[tuple[int, dict[str, Any]]] = []
    episode_ids: set[str] = set()
    for number, text in _lines(path):
        where = f"{path}:{number}"
        line = object_line(where, text, _IMPORT_KEYS)
        name = line.get("field")
        if name not in fields:
            raise StoreError(f"{where}: unknown field {name!r} (study fields: {', '.join(fields) or 'none'})")
        who = [k for k in ("user", "source") if isinstance(line.get(k), str) and line[k].strip()]
        if len(who) != 1 or len(line[who[0]]) > 320:
            raise StoreError(f"{where}: give either a user or a source name (at most 320 characters)")
        episode = line.get("episode")
        if not isinstance(episode, str) or not episode or len(episode) > 200:
            raise StoreError(f"{where}: 'episode' must be an episode id or STUDY/SESSION/EPISODE")
        session = ""
        if "/" in episode:  # the reference `stepmark export --episode` takes (one parser: store/access.py)
            try:
                ref = parse_ref(episode)
            except StoreError as exc:
                raise StoreError(f"{where}: {exc}") from None
            if ref.study_id != study_id:
                raise StoreError(f"{where}: episode {episode!r} is not in study {study_id!r}")
            episode, session = ref.episode_id, ref.session_id
        if len(episode) > 64:
            raise StoreError(f"{where}: 'episode' must be an episode id (at most 64 characters)")
        step, end = line.get("step"), line.get("end")
        for key, number_value in (("step", step), ("end", end)):
            if number_value is not None and (isinstance(number_value, bool) or not isinstance(number_value, int)):
                raise StoreError(f"{where}: {key!r} must be a whole number or null")
        try:
            place = place_of(fields[name], step, end)
            value = check_value(fields[name], line.get("value"))
        except InvalidSpec as exc:
            raise StoreError(f"{where}: {exc}") from None
        checked.append((number, {"episode_id": episode, "field": name, "step_index": place[0],
                                 "end_index": place[1], "who": who[0], "name": line[who[0]].strip(),
                                 "value": value, "line": number, "session_id": session}))  # fmt: skip
        episode_ids.add(episode)
    with repo._write() as s:
        rows = {}
        ids = sorted(episode_ids)
        for i in range(0, len(ids), _CHUNK):
            for r in s.scalars(sa.select(EpisodeRow).where(EpisodeRow.id.in_(ids[i : i + _CHUNK]))):
                rows[r.id] = r
        # an id that is no store id may be a converted episode's own id (`UiEpisode.episode_id`, as
        # `stepmark inspect` shows it): the study's episode imported from that record
        others = [e for e in ids if e not in rows]
        for i in range(0, len(others), _CHUNK):
            keys = {f"ui:{e}": e for e in others[i : i + _CHUNK]}
            query = sa.select(EpisodeRow).where(EpisodeRow.study_id == study_id, EpisodeRow.source_key.in_(keys))
            for r in s.scalars(query):
                rows[keys[r.source_key]] = r
        for number, item in checked:
            row = rows.get(item["episode_id"])
            if row is None or row.study_id != study_id:
                raise StoreError(f"{path}:{number}: episode {item['episode_id']!r} is not in study {study_id!r}")
            if item["session_id"] and row.session_id != item["session_id"]:
                raise StoreError(f"{path}:{number}: episode {item['episode_id']!r} is not in session "
                                 f"{item['session_id']!r}")  # fmt: skip
            try:
                for index in {item["step_index"], item["end_index"]} - {EPISODE}:
                    repo._check_step(row, index)
            except StoreError as exc:
                raise StoreError(f"{path}:{number}: {exc}") from None
        time = now()
        slots: dict[tuple[str, ...], dict[str, dict[str, Any]]] = {"source": {}, "user": {}}
        first_line: dict[tuple[str, ...], int] = {}
        for _, item in checked:  # a later line for the same place and author replaces an earlier one
            item["episode_id"] = rows[item["episode_id"]].id
            key = (item["episode_id"], item["field"], item["name"], item["step_index"], item["end_index"])
            slots[item["who"]][key] = item
            first_line.setdefault((item["who"], *key), item["line"])
        user_columns = (FieldValueRow.episode_id, FieldValueRow.field, FieldValueRow.user, FieldValueRow.step_index,
                        FieldValueRow.end_index)  # fmt: skip
        user_keys = list(slots["user"])
        own: list[tuple[int, FieldValueRow]] = []
        for i in range(0, len(user_keys), _CHUNK):  # a value a person entered is never replaced by an import
            query = sa.select(FieldValueRow).where(
                sa.tuple_(*user_columns).in_(user_keys[i : i + _CHUNK]), FieldValueRow.origin != "imported"
            )
            for r in s.scalars(query):
                key = (r.episode_id, r.field, r.user, r.step_index, r.end_index)
                own.append((first_line[("user", *key)], r))
        if own:
            number, r = min(own, key=lambda x: x[0])
            at = "the episode" if r.step_index == EPISODE else (
                f"step {r.step_index}" if r.step_index == r.end_index else f"steps {r.step_index}–{r.end_index}"
            )  # fmt: skip
            raise StoreError(
                f"{path}:{number}: {r.user} already has a value of {r.field} on {at} of episode {r.episode_id!r} "
                f"entered in stepmark (origin {r.origin}); an import never replaces it. The file is refused "
                f"whole, nothing imported ({len(own)} such line(s)): leave those lines out, or import the "
                f"values under another name"
            )
        counts: dict[str, int] = {}
        for who, model, author in (("source", FieldSuggestionRow, "source"), ("user", FieldValueRow, "user")):
            # in key order (episode first): concurrent writers then take the per-episode rows the counting
            # trigger keeps (migration 10) in one order rather than deadlock on them
            slot_keys = sorted(slots[who])
            items = [slots[who][key] for key in slot_keys]
            columns = (model.episode_id, model.field, getattr(model, author), model.step_index, model.end_index)
            for i in range(0, len(slot_keys), _CHUNK):  # replace what an earlier import put there (only that)
                where = [sa.tuple_(*columns).in_(slot_keys[i : i + _CHUNK])]
                if who == "user":
                    where.append(FieldValueRow.origin == "imported")
                s.execute(sa.delete(model).where(*where))
            if who == "user":  # an empty multi_choice value is no value: nothing stored
                items = [it for it in items if not (fields[it["field"]].kind == "multi_choice" and it["value"] == [])]
            counts[who] = len(items)
            extra = {"origin": "imported"} if who == "user" else {}
            rows_out = [{"episode_id": it["episode_id"], "field": it["field"], author: it["name"],
                         "step_index": it["step_index"], "end_index": it["end_index"], "value": it["value"],
                         "created_time": time, **extra} for it in items]  # fmt: skip
            for i in range(0, len(rows_out), _CHUNK):
                s.execute(sa.insert(model), rows_out[i : i + _CHUNK])
        n_values, n_suggestions = counts["user"], counts["source"]
        repo._audit(s, actor, field_actions.IMPORT, study_id=study_id,
                    after={"file": str(path), "values": n_values, "suggestions": n_suggestions})  # fmt: skip
    return ImportResult(n_values, n_suggestions)


# -- model suggestions (`stepmark suggest`, schemas/model_backend.md) --------------------------------------------


def suggested_places(repo: EpisodeAccess, episode_ids: Iterable[str], source: str) -> dict[str, set[tuple[str, int]]]:
    """episode -> {(field, step)} where `source` already has a suggestion (a resumed run skips them)."""
    ids = list(dict.fromkeys(episode_ids))
    out: dict[str, set[tuple[str, int]]] = {}
    with repo._read() as s:
        for i in range(0, len(ids), _CHUNK):
            rows = s.execute(
                sa.select(FieldSuggestionRow.episode_id, FieldSuggestionRow.field, FieldSuggestionRow.step_index)
                .where(FieldSuggestionRow.episode_id.in_(ids[i : i + _CHUNK]), FieldSuggestionRow.source == source)
            )  # fmt: skip
            for eid, name, step in rows:
                out.setdefault(eid, set()).add((name, step))
    return out


def add_suggestions(repo: EpisodeAccess, study_id: str, source: str, items: list[dict[str, Any]], actor: str) -> int:
    """Store a model's suggestions ({"episode", "field", "step", "value"}, step fields) under `source`; a slot
    that already holds one of `source` keeps it (a resumed run never replaces), and people's values are never
    touched (suggestions are rows of their own). Each value is checked against its field here too. One
    transaction, audited as an import; the number stored."""
    if not items:
        return 0
    with repo._write() as s:
        _require_lead(s, study_id, actor, "store model suggestions")
        fields: dict[str, FieldDef] = {}
        time, stored = now(), 0
        for item in items:
            name = item["field"]
            if name not in fields:
                fields[name] = _field(s, study_id, name)
            place = place_of(fields[name], item["step"], None)
            row = {"episode_id": item["episode"], "field": name, "step_index": place[0], "end_index": place[1],
                   "source": source, "value": check_value(fields[name], item["value"]), "created_time": time}  # fmt: skip
            stored += _insert(s, FieldSuggestionRow, row) is not None
        repo._audit(s, actor, field_actions.IMPORT, study_id=study_id,
                    after={"source": source, "values": 0, "suggestions": stored})  # fmt: skip
    return stored


def suggestion_counts(repo: EpisodeAccess, study_id: str) -> dict[str, dict[str, int]]:
    """field -> source -> how many suggestions the study holds (counted by the database)."""
    out: dict[str, dict[str, int]] = {}
    with repo._read() as s:
        rows = s.execute(
            sa.select(FieldSuggestionRow.field, FieldSuggestionRow.source, sa.func.count())
            .join(EpisodeRow, EpisodeRow.id == FieldSuggestionRow.episode_id)
            .where(EpisodeRow.study_id == study_id)
            .group_by(FieldSuggestionRow.field, FieldSuggestionRow.source)
            .order_by(FieldSuggestionRow.field, FieldSuggestionRow.source)
        )  # fmt: skip
        for name, source, n in rows:
            out.setdefault(name, {})[source] = n
    return out

"""Review of a study's suggestions (issue 33): per field and per source (a model, `model:NAME@VERSION`, or any
imported source), what people did with them, and how well the source agrees with people.

Definitions (schemas/store.md, "Review of suggestions"):
- a person's *answer* to a suggestion is their value at the suggestion's place (same episode, field, step, end)
  written in stepmark (any origin but `imported`) at or after the suggestion was stored: a value written
  before it, or imported, was given without seeing it;
- `unseen`: suggestions nobody has answered yet;
- each answer is `accepted` (equal to the suggestion, the rule `field_values.origin_of` uses), `edited` (not
  equal but kept in part: a text at least EDITED_SIMILARITY alike, 1 - normalised edit distance; a set of
  options sharing one with the suggestion) or `replaced` (any other value: another choice, number or yes/no,
  a text mostly rewritten, disjoint options). accepted + edited + replaced = answers;
- `alpha`: Krippendorff's alpha of the field with the source counted as one more annotator (its suggestion its
  value) over every place where two or more of people and the source gave a value; `alpha_people`: the same
  over people only (the field's agreement, `field_agreement`). Both with the field's distance.

INVALID sessions' episodes are left out, as agreement leaves them out. Two reads, BATCH rows at a time, into
running sums (`field_agreement.Alpha`), so memory does not grow with the study: one pass over every suggestion
with the value at its place where at most one person gave one, aggregated by the database per distinct
(suggestion, value, answered) row (JSON compared as its stored text); and the places two or more people gave a
value (the partial index of `field_places`, as agreement reads them) with the suggestions there, one place at a
time. Time grows with the suggestions (bench/bench_store_scale.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa

from pipelines.store import field_values as fv
from pipelines.store import listing
from pipelines.store.field_agreement import PLACE_KEY, alpha_for, jaccard, text_distance
from pipelines.store.field_defs import FieldDef
from pipelines.store.models import EpisodeRow, FieldPlaceRow, FieldSuggestionRow, FieldValueRow

EDITED_SIMILARITY = 0.5  # a text answer at least this alike to the suggestion kept it in part: edited
BATCH = 2000  # rows read from the store at a time


@dataclass(frozen=True)
class SourceReview:
    """One source's suggestions of one field, and what people did with them."""

    field: str
    kind: str
    source: str
    suggestions: int
    unseen: int  # suggestions nobody answered yet
    answers: int  # (suggestion, person) pairs: accepted + edited + replaced
    accepted: int
    edited: int
    replaced: int
    units: int  # places in `alpha`: two or more values among people and this source
    alpha: float | None  # the source as one more annotator; None: undefined
    people_units: int  # places two or more people gave a value
    alpha_people: float | None  # among people only

    @property
    def accepted_rate(self) -> float | None:
        return self.accepted / self.answers if self.answers else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"accepted_rate": self.accepted_rate}


def answer_kind(definition: FieldDef, suggested: Any, value: Any) -> str:
    """accepted / edited / replaced: a person's answer against the suggestion (module docstring)."""
    if value == suggested:
        return "accepted"
    if definition.kind == "text" and 1.0 - text_distance(suggested, value) >= EDITED_SIMILARITY:
        return "edited"
    if definition.kind == "multi_choice" and jaccard(suggested, value) < 1.0:
        return "edited"
    return "replaced"


def _same(table: Any, other: Any) -> sa.ColumnElement[bool]:
    return sa.and_(*(getattr(table, c) == getattr(other, c) for c in PLACE_KEY))


def _json_text(column: Any) -> Any:
    """A JSON column as its stored text: equal texts are equal values (one serializer writes them all), so the
    database can group and compare them; unequal texts are compared in Python (3 and 3.0 are equal)."""
    return sa.cast(column, sa.Text)


def _answered(value: Any, suggestion: Any) -> Any:
    """1 where the row's person value answers the suggestion (module docstring), else 0 (or no value)."""
    answer = sa.and_(value.origin != "imported", value.created_time >= suggestion.created_time)
    return sa.case((answer, 1), else_=0).label("answered")


def _by_pair(s: Any, study_id: str, valid: Any) -> Iterator[tuple[str, str, str, str | None, int, int, int]]:
    """(field, source, suggested value's text, the person's value's text or None, answered, shared, how many)
    over every suggestion, counted by the database per distinct row: one pass over the suggestions. At a place
    two or more people gave a value (`shared`: 1) the values are not joined (`_shared` reads those places)."""
    place, value, suggestion = FieldPlaceRow, FieldValueRow, FieldSuggestionRow
    suggested, given = _json_text(suggestion.value).label("suggested"), _json_text(value.value).label("given")
    answered = _answered(value, suggestion)
    shared = sa.case((place.annotators >= 2, 1), else_=0).label("shared")
    query = (
        sa.select(suggestion.field, suggestion.source, suggested, given, answered, shared, sa.func.count())
        .join(EpisodeRow, EpisodeRow.id == suggestion.episode_id)
        .outerjoin(place, _same(place, suggestion))
        .outerjoin(value, sa.and_(_same(value, suggestion), place.annotators < 2))
        .where(EpisodeRow.study_id == study_id, *([] if valid is None else [valid]))
        .group_by(suggestion.field, suggestion.source, suggested, given, answered, shared)
        .execution_options(yield_per=BATCH)
    )
    yield from s.execute(query)


Place = tuple[str, list[Any], dict[str, Any], dict[str, list[Any]]]


def _places(rows: Any) -> Iterator[Place]:
    """(field, people's values in the order given, {source: suggested value}, {source: the values answering
    it}) per place, from rows (field, episode, step, end, user, value, source, suggested, answered) ordered by
    place (a join repeats both sides)."""
    current = None
    people: dict[str, Any] = {}
    models: dict[str, Any] = {}
    answers: dict[str, dict[str, Any]] = {}
    for name, episode_id, step, end, user, given, source, suggested, answered in rows:
        key = (name, episode_id, step, end)
        if key != current:
            if current is not None:
                yield current[0], list(people.values()), models, {k: list(v.values()) for k, v in answers.items()}
            current, people, models, answers = key, {}, {}, {}
        people.setdefault(user, given)
        if source is not None:
            models.setdefault(source, suggested)
            if answered:
                answers.setdefault(source, {})[user] = given
    if current is not None:
        yield current[0], list(people.values()), models, {k: list(v.values()) for k, v in answers.items()}


def _shared(s: Any, study_id: str, valid: Any) -> Iterator[Place]:
    """Places two or more people gave a value, with every source's suggestion there and who answered it."""
    place, value, suggestion = FieldPlaceRow, FieldValueRow, FieldSuggestionRow
    order = [place.field, place.episode_id, place.step_index, place.end_index]
    query = (
        sa.select(*order, value.user, value.value, suggestion.source, suggestion.value, _answered(value, suggestion))
        .join(value, _same(value, place))
        .outerjoin(suggestion, _same(suggestion, place))
        # the partial index's own condition, as a literal (as `field_agreement.shared_places` reads it)
        .where(place.study_id == study_id, sa.text("field_places.annotators >= 2"))
        .order_by(*order, value.id, suggestion.id)
        .execution_options(yield_per=BATCH)
    )
    if valid is not None:
        query = query.join(EpisodeRow, EpisodeRow.id == place.episode_id).where(valid)
    yield from _places(s.execute(query))


class _Tally:
    """One (field, source)'s figures as places and counted rows come."""

    def __init__(self, definition: FieldDef) -> None:
        self.definition = definition
        self.suggestions = self.unseen = self.units = 0
        self.kinds = {"accepted": 0, "edited": 0, "replaced": 0}
        self.alpha = alpha_for(definition)

    def answer(self, suggested: Any, given: Any, times: int = 1) -> None:
        self.kinds[answer_kind(self.definition, suggested, given)] += times


def study_field_review(repo: Any, study_id: str) -> list[SourceReview]:
    """Every source's review figures per field of the study (removed fields too), in field then source order."""
    repo.get_study(study_id)  # NotFound names the study
    defs = {d.name: d for d in fv.definitions(repo, study_id, include_removed=True)}
    tallies: dict[tuple[str, str], _Tally] = {}
    with repo._read() as s:
        valid = listing.valid_only(s, listing.EpisodeQuery(study_id=study_id))
        for name, source, suggested_text, given_text, answered, shared, n in _by_pair(s, study_id, valid):
            if name not in defs:
                continue
            tally = tallies.get((name, source)) or tallies.setdefault((name, source), _Tally(defs[name]))
            if shared:  # counted place by place below
                continue
            tally.suggestions += n
            if given_text is None:
                tally.unseen += n
                continue
            suggested, given = json.loads(suggested_text), json.loads(given_text)
            if answered:
                if given_text == suggested_text:  # equal texts: equal values
                    tally.kinds["accepted"] += n
                else:
                    tally.answer(suggested, given, n)
            else:
                tally.unseen += n
            tally.alpha.add([given, suggested], times=n)
            tally.units += n
        sources: dict[str, list[str]] = {}
        for name, source in sorted(tallies):
            sources.setdefault(name, []).append(source)
        if not sources:
            return []
        people = {name: alpha_for(defs[name]) for name in sources}
        people_units = dict.fromkeys(sources, 0)
        for name, given, models, answers in _shared(s, study_id, valid):
            if name not in sources:
                continue
            people[name].add(given)
            people_units[name] += 1
            for source in sources[name]:
                tally = tallies[(name, source)]
                if source in models:
                    tally.suggestions += 1
                    tally.unseen += source not in answers
                    for answer in answers.get(source, ()):
                        tally.answer(models[source], answer)
                tally.alpha.add([*given, models[source]] if source in models else given)
                tally.units += 1
    out = []
    for name in (d for d in defs if d in sources):
        for source in sources[name]:
            tally = tallies[(name, source)]
            accepted, edited, replaced = (tally.kinds[k] for k in ("accepted", "edited", "replaced"))
            out.append(SourceReview(
                name, defs[name].kind, source, tally.suggestions, tally.unseen, accepted + edited + replaced,
                accepted, edited, replaced, tally.units, tally.alpha.value(), people_units[name], people[name].value(),
            ))  # fmt: skip
    return out

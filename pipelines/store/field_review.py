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

INVALID sessions' episodes are left out, as agreement leaves them out. The counts are SQL aggregates: totals,
unseen, answers and those equal to the suggestion per field and source, and the other answers per distinct
(suggestion, answer) pair, which Python sorts into edited and replaced; alpha reads the places two or more
annotators gave a value (the partial index of `field_places`) one at a time, and the places of one person with a
suggestion per distinct (value, suggestion) pair with their count, into running sums (`field_agreement.Alpha`),
BATCH rows at a time: memory does not grow with the study.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa

from pipelines.store import field_values as fv
from pipelines.store import listing
from pipelines.store.field_agreement import PLACE_KEY, Alpha, alpha_for, jaccard, text_distance
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


def _answer(value: Any, suggestion: Any) -> sa.ColumnElement[bool]:
    """`value` is a person's answer to `suggestion` (module docstring)."""
    return sa.and_(_same(value, suggestion), value.origin != "imported", value.created_time >= suggestion.created_time)


def _json_text(column: Any) -> Any:
    """A JSON column as its stored text: equal texts are equal values (one serializer writes them all), so the
    database can group and compare them; unequal texts are compared in Python (3 and 3.0 are equal)."""
    return sa.cast(column, sa.Text)


def _counts(s: Any, study_id: str, valid: Any) -> dict[tuple[str, str], list[int]]:
    """(field, source) -> [suggestions, unseen, answers, answers equal to the suggestion as stored text], one
    aggregate over the suggestions and their answers."""
    suggestion, value = FieldSuggestionRow, FieldValueRow
    same = sa.and_(value.id.is_not(None), _json_text(value.value) == _json_text(suggestion.value))
    query = (
        sa.select(suggestion.field, suggestion.source, sa.func.count(sa.distinct(suggestion.id)),
                  sa.func.sum(sa.case((value.id.is_(None), 1), else_=0)), sa.func.count(value.id),
                  sa.func.sum(sa.case((same, 1), else_=0)))  # fmt: skip
        .join(EpisodeRow, EpisodeRow.id == suggestion.episode_id)
        .outerjoin(value, _answer(value, suggestion))
        .where(EpisodeRow.study_id == study_id, *([] if valid is None else [valid]))
        .group_by(suggestion.field, suggestion.source)
    )
    return {(name, source): [int(n or 0) for n in rest] for name, source, *rest in s.execute(query)}


def _changed(s: Any, study_id: str, valid: Any) -> Iterator[tuple[str, str, Any, Any, int]]:
    """(field, source, suggested value, answer, how many) of the answers whose stored text differs from the
    suggestion's, counted by the database per distinct pair."""
    suggestion, value = FieldSuggestionRow, FieldValueRow
    suggested, given = _json_text(suggestion.value).label("suggested"), _json_text(value.value).label("given")
    query = (
        sa.select(suggestion.field, suggestion.source, suggested, given, sa.func.count())
        .join(EpisodeRow, EpisodeRow.id == suggestion.episode_id)
        .join(value, _answer(value, suggestion))
        .where(EpisodeRow.study_id == study_id, given != suggested, *([] if valid is None else [valid]))
        .group_by(suggestion.field, suggestion.source, suggested, given)
        .execution_options(yield_per=BATCH)
    )
    for name, source, a, b, n in s.execute(query):
        yield name, source, json.loads(a), json.loads(b), n


def _places(rows: Any) -> Iterator[tuple[str, list[Any], dict[str, Any]]]:
    """(field, people's values in the order given, {source: suggested value}) per place, from rows
    (field, episode, step, end, user, value, source, suggested) ordered by place (a join repeats both sides)."""
    current = None
    people: dict[str, Any] = {}
    models: dict[str, Any] = {}
    for name, episode_id, step, end, user, given, source, suggested in rows:
        key = (name, episode_id, step, end)
        if key != current:
            if current is not None:
                yield current[0], list(people.values()), models
            current, people, models = key, {}, {}
        people.setdefault(user, given)
        if source is not None:
            models.setdefault(source, suggested)
    if current is not None:
        yield current[0], list(people.values()), models


def _shared(s: Any, study_id: str, valid: Any) -> Iterator[tuple[str, list[Any], dict[str, Any]]]:
    """Places two or more people gave a value, with every source's suggestion there."""
    place, value, suggestion = FieldPlaceRow, FieldValueRow, FieldSuggestionRow
    order = [place.field, place.episode_id, place.step_index, place.end_index]
    query = (
        sa.select(*order, value.user, value.value, suggestion.source, suggestion.value)
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


def _single(s: Any, study_id: str, valid: Any) -> Iterator[tuple[str, str, Any, Any, int]]:
    """(field, source, the person's value, the suggested value, how many places) of the places one person gave a
    value and a source suggested one: found from the suggestions, counted by the database per distinct pair."""
    place, value, suggestion = FieldPlaceRow, FieldValueRow, FieldSuggestionRow
    given, suggested = _json_text(value.value).label("given"), _json_text(suggestion.value).label("suggested")
    query = (
        sa.select(suggestion.field, suggestion.source, given, suggested, sa.func.count())
        .join(EpisodeRow, EpisodeRow.id == suggestion.episode_id)
        .join(place, _same(place, suggestion))
        .join(value, _same(value, suggestion))
        .where(EpisodeRow.study_id == study_id, place.annotators == 1, *([] if valid is None else [valid]))
        .group_by(suggestion.field, suggestion.source, given, suggested)
        .execution_options(yield_per=BATCH)
    )
    for name, source, a, b, n in s.execute(query):
        yield name, source, json.loads(a), json.loads(b), n


def study_field_review(repo: Any, study_id: str) -> list[SourceReview]:
    """Every source's review figures per field of the study (removed fields too), in field then source order."""
    repo.get_study(study_id)  # NotFound names the study
    defs = {d.name: d for d in fv.definitions(repo, study_id, include_removed=True)}
    with repo._read() as s:
        valid = listing.valid_only(s, listing.EpisodeQuery(study_id=study_id))
        counts = {key: n for key, n in _counts(s, study_id, valid).items() if key[0] in defs}
        if not counts:
            return []
        answers: dict[tuple[str, str], dict[str, int]] = {key: {"accepted": n[3]} for key, n in counts.items()}
        for name, source, suggested, given, n in _changed(s, study_id, valid):
            if (name, source) in answers:
                kind = answer_kind(defs[name], suggested, given)
                answers[(name, source)][kind] = answers[(name, source)].get(kind, 0) + n
        sources: dict[str, list[str]] = {}
        for name, source in sorted(counts):
            sources.setdefault(name, []).append(source)
        people = {name: alpha_for(defs[name]) for name in sources}
        people_units = dict.fromkeys(sources, 0)
        with_model: dict[tuple[str, str], Alpha] = {key: alpha_for(defs[key[0]]) for key in counts}
        units = dict.fromkeys(counts, 0)
        for name, given, models in _shared(s, study_id, valid):
            if name not in sources:
                continue
            people[name].add(given)
            people_units[name] += 1
            for source in sources[name]:
                unit = [*given, models[source]] if source in models else given
                with_model[(name, source)].add(unit)
                units[(name, source)] += 1
        for name, source, given, suggested, n in _single(s, study_id, valid):
            if (name, source) in with_model:
                with_model[(name, source)].add([given, suggested], times=n)
                units[(name, source)] += n
    out = []
    for name in (d for d in defs if d in sources):
        for source in sources[name]:
            (n, unseen, _, _), got = counts[(name, source)], answers[(name, source)]
            accepted, edited, replaced = (got.get(k, 0) for k in ("accepted", "edited", "replaced"))
            out.append(SourceReview(
                name, defs[name].kind, source, n, unseen, accepted + edited + replaced, accepted, edited, replaced,
                units[(name, source)], with_model[(name, source)].value(), people_units[name], people[name].value(),
            ))  # fmt: skip
    return out

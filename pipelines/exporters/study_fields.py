"""A study's own fields in an export (issue 26): one named, typed column/feature per field on every step,
`field:<name>:origin` saying how the value came to be and `field:<name>:source` who it came from (issue 33).
Documented in schemas/dataset_spec.md ("Study fields").

Which value a step gets (`--annotations`, as for grounding):
- `none`: no field columns;
- `mine`: the `--user`'s value;
- `all`: everyone's values, the newest wins (imported values too);
- `consensus` (default): the adjudicated value, else the value more than half of the place's annotators gave,
  else none.
A step takes its own value (step fields), the value of a segment holding it (segment fields; where segments
overlap, the one whose chosen value is newest wins: the time of that value, of its adjudication, or for a
majority the newest of the agreeing values) or the episode's (episode fields, repeated on every step). Removed fields are exported too (their
values stay); the dataset metadata lists every field with `active`.

Types, the same in every format: text and choice -> string ("" = none), number -> float64 (NaN = none),
boolean -> bool (false = none), multi_choice -> bool[len(options)] (one flag per option, in the field's order).
`field:<name>:origin` is "" where the step has no value, else accepted | edited | scratch | imported |
adjudicated. `field:<name>:source` is "" where the step has no value; for an accepted value the source of the
suggestion it equals at its place (the oldest such: a model's `model:NAME@VERSION`, any imported source's
name), else `episode` (the converted episode's step text, as the player names that suggestion); for an
adjudicated value the adjudicator; else the annotator who gave it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from pipelines.errors import StepmarkError

PREFIX = "field:"
ORIGIN = ":origin"
SOURCE = ":source"
STEP_TEXT = "episode"  # the source of a suggestion that is the converted episode's step text (field_routes)
MODES = ("none", "mine", "all", "consensus")

# episode id -> field -> [(start, end, value, origin, source)], newest chosen value last
Resolved = dict[str, dict[str, list[tuple[int, int, Any, str, str]]]]


def column(name: str) -> str:
    return PREFIX + name


class StudyFields:
    """The study fields of a selection read as the driver streams it: `values` resolves each batch's values
    under `mode` (reading the definitions and decisions of each study once, when its first episode comes), and
    `defs` is every selected study's definitions (removed ones too) in a fixed order, once all are seen."""

    def __init__(self, repo: Any, mode: str, user: str | None) -> None:
        self.repo, self.mode, self.user = repo, mode, user
        self._of_study: dict[str, list[dict[str, Any]]] = {}
        self._names: set[str] = set()  # fields defined in the studies seen so far
        self._decided: dict[tuple[str, str, int, int], tuple[Any, datetime, str]] = {}
        # the same places by episode: adjudicated places nobody holds now are found per episode
        self._decided_of: dict[str, list[tuple[str, int, int, Any, datetime, str]]] = {}

    def _see(self, study_ids: Iterable[str]) -> None:
        from pipelines.store import field_values as fv

        for study_id in sorted(set(study_ids) - set(self._of_study)):
            found = [
                d.to_json() | {"active": d.active}
                for d in fv.definitions(self.repo, study_id, include_removed=True)
            ]
            self._of_study[study_id] = found
            self._names.update(d["name"] for d in found)
            if found and self.mode == "consensus":
                decided = fv.decisions(self.repo, study_id)
                self._decided.update(decided)
                for (episode_id, name, start, end), (value, time, user) in decided.items():
                    self._decided_of.setdefault(episode_id, []).append((name, start, end, value, time, user))

    @property
    def defs(self) -> tuple[dict[str, Any], ...]:
        """The definitions of the studies seen (each name once, by study id then the study's order)."""
        found: dict[str, dict[str, Any]] = {}
        for study_id in sorted(self._of_study):
            for json in self._of_study[study_id]:
                known = found.get(json["name"])
                if known is not None and _shape(known) != _shape(json):
                    raise StepmarkError(
                        f"field {json['name']!r} is defined differently in two studies of the export; "
                        "export them apart"
                    )
                found.setdefault(json["name"], json)
        return tuple(found.values())

    def values(self, episodes: Sequence[Any]) -> Resolved:
        """Each of these episodes' values under the mode (episodes without any left out). A value counts when its
        field is defined in a study seen (its own always is: the store checks a value against its study)."""
        from pipelines.store import field_values as fv

        if self.mode == "none" or not episodes:
            return {}
        self._see(e.study_id for e in episodes)
        if not self._names:
            return {}
        episode_ids = [e.id for e in episodes]
        defs, mode, user = self._names, self.mode, self.user
        by_episode: dict[str, dict[str, list[tuple[datetime, int, int, Any, str, str]]]] = {}
        suggested: dict[tuple[str, str, int, int], list[Any]] | None = None  # by place, read once a batch
        # has an accepted value
        for episode_id, given in fv.values(self.repo, episode_ids).items():
            places: dict[tuple[str, int, int], list[Any]] = {}
            for v in given:
                if v.field in defs and (mode != "mine" or v.user == user):
                    places.setdefault((v.field, v.step, v.end), []).append(v)
            out = by_episode.setdefault(episode_id, {})
            for (name, start, end), vs in places.items():
                chosen = _choose(vs, mode, self._decided.get((episode_id, name, start, end), _NONE))
                if chosen is None:
                    continue
                value, origin, time, source = chosen
                if origin == "accepted":
                    if suggested is None:
                        suggested = _by_place(fv.suggestions(self.repo, episode_ids))
                    source = _accepted_from(suggested.get((episode_id, name, start, end), ()), value)
                out.setdefault(name, []).append((time, start, end, value, origin, source))
        for episode_id in dict.fromkeys(episode_ids):  # adjudicated places nobody holds now
            for name, start, end, value, time, decider in self._decided_of.get(episode_id, ()):
                out = by_episode.setdefault(episode_id, {})
                if name in defs and not any((s, e) == (start, end) for _, s, e, *_ in out.get(name, [])):
                    out.setdefault(name, []).append((time, start, end, value, "adjudicated", decider))
        resolved: Resolved = {}
        for episode_id, out in by_episode.items():
            # the newest chosen value last: the last hit wins in step_columns
            for name, places_of in out.items():
                places_of.sort(key=lambda p: (p[0], p[1], p[2]))
                resolved.setdefault(episode_id, {})[name] = [
                    (s, e, value, origin, source) for _, s, e, value, origin, source in places_of
                ]
        return resolved


def _shape(definition: dict[str, Any]) -> tuple:
    return definition["kind"], definition["scope"], definition.get("options")


def load(
    repo: Any, episodes: Sequence[Any], mode: str, user: str | None
) -> tuple[tuple[dict[str, Any], ...], Resolved]:
    """(definitions of these episodes' studies, removed ones too; each episode's values under `mode`) in one go:
    `StudyFields` for a few episodes."""
    if mode == "none" or not episodes:
        return (), {}
    fields = StudyFields(repo, mode, user)
    values = fields.values(episodes)
    return fields.defs, values


_NONE = object()
_EPOCH = datetime.min.replace(tzinfo=UTC)


def _by_place(suggestions: dict[str, list[Any]]) -> dict[tuple[str, str, int, int], list[Any]]:
    """Episodes' suggestions (oldest first) by place (episode, field, step, end), oldest first at each."""
    out: dict[tuple[str, str, int, int], list[Any]] = {}
    for episode_id, listed in suggestions.items():
        for s in listed:
            out.setdefault((episode_id, s.field, s.step, s.end), []).append(s)
    return out


def _accepted_from(suggestions: Iterable[Any], value: Any) -> str:
    """The source of the oldest of a place's suggestions equal to an accepted value (`field_values.origin_of`'s
    equality); none stored: the converted episode's step text, the other suggestion a value is accepted from."""
    for s in suggestions:  # oldest first
        if s.value == value:
            return s.user
    return STEP_TEXT


def _choose(vs: list[Any], mode: str, adjudicated: Any) -> tuple[Any, str, datetime, str] | None:
    """(value, origin, time, who gave it) of a place under `mode`: the time orders overlapping segments (newest
    wins)."""
    vs = sorted(vs, key=lambda v: (v.time or _EPOCH, v.user))
    if mode in ("mine", "all"):
        return vs[-1].value, vs[-1].origin, vs[-1].time or _EPOCH, vs[-1].user
    if adjudicated is not _NONE:
        return adjudicated[0], "adjudicated", adjudicated[1] or _EPOCH, adjudicated[2]
    counts = Counter(_key(v.value) for v in vs)
    top, n = counts.most_common(1)[0]
    if n * 2 <= len(vs):
        return None
    agreeing = [v for v in vs if _key(v.value) == top]
    return agreeing[0].value, agreeing[0].origin, agreeing[-1].time or _EPOCH, agreeing[0].user


def _key(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def empty_value(definition: dict[str, Any]) -> Any:
    kind = definition["kind"]
    if kind == "number":
        return math.nan
    if kind == "boolean":
        return False
    if kind == "multi_choice":
        return [False] * len(definition.get("options") or [])
    return ""


def typed(definition: dict[str, Any], value: Any) -> Any:
    """A stored value in its exported type (see the module's docstring)."""
    kind = definition["kind"]
    if kind == "number":
        return float(value)
    if kind == "boolean":
        return bool(value)
    if kind == "multi_choice":
        chosen = set(value or [])
        return [o in chosen for o in definition.get("options") or []]
    return str(value)


def step_columns(
    defs: Iterable[dict[str, Any]], resolved: dict[str, list[tuple[int, int, Any, str, str]]] | None, index: int
) -> dict[str, Any]:
    """The field columns of exported step `index` (every field, "none" values where it has none)."""
    out: dict[str, Any] = {}
    for d in defs:
        name = d["name"]
        hit = None
        for start, end, value, origin, source in (resolved or {}).get(name, ()):
            if (start == -1 and d["scope"] == "episode") or start <= index <= end:
                hit = (value, origin, source)  # newest last: the last hit wins
        out[column(name)] = typed(d, hit[0]) if hit else empty_value(d)
        out[column(name) + ORIGIN] = hit[1] if hit else ""
        out[column(name) + SOURCE] = hit[2] if hit else ""
    return out


def apply(exported: Any, defs: Sequence[dict[str, Any]], values: dict[str, Any] | None) -> Any:
    """Fill `fields` of every step of an ExportEpisode from the episode's own resolved `values` (in place;
    returned for chaining)."""
    if not defs:
        return exported
    for i, step in enumerate(exported.steps):
        step.fields = step_columns(defs, values, i)
    return exported


def metadata(defs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The field definitions as the dataset metadata carries them (`study_fields`)."""
    return [dict(d) for d in defs]

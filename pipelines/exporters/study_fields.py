"""A study's own fields in an export (issue 26): one named, typed column/feature per field on every step, and
`field:<name>:origin` saying how the value came to be. Documented in schemas/dataset_spec.md ("Study fields").

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
adjudicated.
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
MODES = ("none", "mine", "all", "consensus")

# episode id -> field -> [(start, end, value, origin)], newest chosen value last
Resolved = dict[str, dict[str, list[tuple[int, int, Any, str]]]]


def column(name: str) -> str:
    return PREFIX + name


def load(repo: Any, episodes: Sequence[Any], mode: str, user: str | None) -> tuple[tuple[dict[str, Any], ...], Resolved]:
    """(definitions of the selection's studies, removed ones too; each episode's values under `mode`): one
    store read before the pipeline, like the grounding annotations."""
    from pipelines.store import field_values as fv

    if mode == "none" or not episodes:
        return (), {}
    defs: dict[str, dict[str, Any]] = {}
    for study_id in sorted({e.study_id for e in episodes}):
        for d in fv.definitions(repo, study_id, include_removed=True):
            json = d.to_json() | {"active": d.active}
            known = defs.get(d.name)
            if known is not None and (known["kind"], known["scope"], known.get("options")) != (
                json["kind"], json["scope"], json.get("options")
            ):
                raise StepmarkError(
                    f"field {d.name!r} is defined differently in two studies of the export; export them apart"
                )
            defs.setdefault(d.name, json)
    if not defs:
        return (), {}
    ids = [e.id for e in episodes]
    values = fv.values(repo, ids)
    decided: dict[tuple[str, str, int, int], tuple[Any, datetime]] = {}
    if mode == "consensus":
        for study_id in sorted({e.study_id for e in episodes}):
            decided.update(fv.decisions(repo, study_id))
    by_episode: dict[str, dict[str, list[tuple[datetime, int, int, Any, str]]]] = {}
    for episode_id, given in values.items():
        places: dict[tuple[str, int, int], list[Any]] = {}
        for v in given:
            if v.field in defs and (mode != "mine" or v.user == user):
                places.setdefault((v.field, v.step, v.end), []).append(v)
        out = by_episode.setdefault(episode_id, {})
        for (name, start, end), vs in places.items():
            chosen = _choose(vs, mode, decided.get((episode_id, name, start, end), _NONE))
            if chosen is not None:
                out.setdefault(name, []).append((chosen[2], start, end, chosen[0], chosen[1]))
    wanted = set(ids)
    for (episode_id, name, start, end), (value, time) in decided.items():  # adjudicated places nobody holds now
        if episode_id not in wanted:
            continue
        out = by_episode.setdefault(episode_id, {})
        if name in defs and not any((s, e) == (start, end) for _, s, e, *_ in out.get(name, [])):
            out.setdefault(name, []).append((time, start, end, value, "adjudicated"))
    resolved: Resolved = {}
    for episode_id, out in by_episode.items():
        for name, places_of in out.items():  # the newest chosen value last: the last hit wins in step_columns
            places_of.sort(key=lambda p: (p[0], p[1], p[2]))
            resolved.setdefault(episode_id, {})[name] = [(s, e, value, origin) for _, s, e, value, origin in places_of]
    return tuple(defs.values()), resolved


_NONE = object()
_EPOCH = datetime.min.replace(tzinfo=UTC)


def _choose(vs: list[Any], mode: str, adjudicated: Any) -> tuple[Any, str, datetime] | None:
    """(value, origin, time) of a place under `mode`: the time orders overlapping segments (newest wins)."""
    vs = sorted(vs, key=lambda v: (v.time or _EPOCH, v.user))
    if mode in ("mine", "all"):
        return vs[-1].value, vs[-1].origin, vs[-1].time or _EPOCH
    if adjudicated is not _NONE:
        return adjudicated[0], "adjudicated", adjudicated[1] or _EPOCH
    counts = Counter(_key(v.value) for v in vs)
    top, n = counts.most_common(1)[0]
    if n * 2 <= len(vs):
        return None
    agreeing = [v for v in vs if _key(v.value) == top]
    return agreeing[0].value, agreeing[0].origin, agreeing[-1].time or _EPOCH


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
    defs: Iterable[dict[str, Any]], resolved: dict[str, list[tuple[int, int, Any, str]]] | None, index: int
) -> dict[str, Any]:
    """The field columns of exported step `index` (every field, "none" values where it has none)."""
    out: dict[str, Any] = {}
    for d in defs:
        name = d["name"]
        hit = None
        for start, end, value, origin in (resolved or {}).get(name, ()):
            if (start == -1 and d["scope"] == "episode") or start <= index <= end:
                hit = (value, origin)  # newest last: the last hit wins
        out[column(name)] = typed(d, hit[0]) if hit else empty_value(d)
        out[column(name) + ORIGIN] = hit[1] if hit else ""
    return out


def apply(exported: Any, defs: Sequence[dict[str, Any]], resolved: Resolved) -> Any:
    """Fill `fields` of every step of an ExportEpisode (in place; returned for chaining)."""
    if not defs:
        return exported
    mine = resolved.get(exported.meta.episode_id)
    for i, step in enumerate(exported.steps):
        step.fields = step_columns(defs, mine, i)
    return exported


def metadata(defs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The field definitions as the dataset metadata carries them (`study_fields`)."""
    return [dict(d) for d in defs]

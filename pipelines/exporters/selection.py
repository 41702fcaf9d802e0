"""Choosing the episodes of an export, and grouping them by what can share one dataset.

Selection (one store query, done once by the driver): explicit `EpisodeRef`s, or every episode matching a
study / tag / state (all given filters at once). Episodes of INVALID sessions and episodes that are not
COMPLETED are left out unless asked for; what was left out is reported (`Selection.skipped`), never dropped
silently. UI and environment episodes are selected alike.

Grouping: one dataset holds episodes of one observation/action spec. Environment episodes share a spec when
their environment settings (family + its settings, from the study's `EnvironmentSpec`) are equal; UI episodes
form their own group. A selection spanning several groups is refused with the list of groups unless the
user asks for one dataset per group (`--split-by-spec`), each in a sub-folder named by its environment id.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from pipelines.errors import StepmarkError
from pipelines.exporters.transform import KIND_UI, episode_kind, episode_name
from pipelines.store import NotFound, Repository
from pipelines.store.listing import EpisodeQuery
from protos.rlds_creator import client_pb2, study_pb2

COMPLETED = study_pb2.Episode.STATE_COMPLETED
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class MixedSpecs(StepmarkError):
    """The selection holds episodes that cannot share one dataset."""


@dataclass(frozen=True)
class SelectionQuery:
    refs: tuple[client_pb2.EpisodeRef, ...] = ()
    study_id: str | None = None
    tag: str | None = None
    state: str | None = None  # an Episode.State name (`COMPLETED`, `STATE_REJECTED`, ...)
    include_incomplete: bool = False
    include_invalid_sessions: bool = False

    def describe(self) -> str:
        parts = []
        if self.refs:
            parts.append(f"{len(self.refs)} episode reference(s)")
        for name in ("study_id", "tag", "state"):
            value = getattr(self, name)
            if value:
                parts.append(f"{name.replace('_id', '')} {value!r}")
        return ", ".join(parts) or "nothing"


@dataclass
class Skipped:
    episode: str
    reason: str


@dataclass
class Selection:
    episodes: list[study_pb2.Episode]
    skipped: list[Skipped] = field(default_factory=list)


@dataclass
class SpecGroup:
    """Episodes that go into one dataset."""

    key: str  # what they share (environment settings, or "ui")
    name: str  # sub-folder name with --split-by-spec (the environment id; "ui" for UI episodes)
    kind: str
    environment_id: str
    episodes: list[study_pb2.Episode]


def parse_state(name: str) -> int:
    """`COMPLETED`, `completed` or `STATE_COMPLETED` -> the Episode.State value."""
    key = name.strip().upper()
    if not key.startswith("STATE_"):
        key = f"STATE_{key}"
    try:
        return study_pb2.Episode.State.Value(key)
    except ValueError:
        names = ", ".join(n.removeprefix("STATE_").lower() for n in study_pb2.Episode.State.keys()[1:])
        raise StepmarkError(f"unknown episode state {name!r} (choose from {names})") from None


def parse_ref(text: str) -> client_pb2.EpisodeRef:
    """`STUDY/SESSION/EPISODE` -> EpisodeRef."""
    parts = text.split("/")
    if len(parts) != 3 or not all(parts):
        raise StepmarkError(f"episode reference {text!r} is not STUDY/SESSION/EPISODE")
    return client_pb2.EpisodeRef(study_id=parts[0], session_id=parts[1], episode_id=parts[2])


def select_episodes(repo: Repository, query: SelectionQuery) -> Selection:
    """The episodes to export, in a stable order, with what was left out and why."""
    if not (query.refs or query.study_id or query.tag or query.state):
        raise StepmarkError("nothing selected: give --study, --episode, --tag or --state")
    state_filter: list[int] | None = None
    if query.state:
        state_filter = [parse_state(query.state)]
    elif not query.include_incomplete:
        state_filter = [COMPLETED]
    selection = Selection(episodes=[])
    if query.study_id:
        try:
            repo.get_study(query.study_id)
        except NotFound:
            raise NotFound(
                f"study {query.study_id!r} not found (stepmark study list shows the studies)"
            ) from None
    if query.refs:
        try:
            candidates = repo.episodes_by_refs(list(query.refs))
        except NotFound:
            candidates = []
            for ref in query.refs:  # name the reference the user gave, not only the episode id
                try:
                    candidates.extend(repo.episodes_by_refs([ref]))
                except NotFound:
                    raise NotFound(
                        f"episode {ref.study_id}/{ref.session_id}/{ref.episode_id} not found"
                    ) from None
        for ref, episode in zip(query.refs, candidates, strict=True):
            if ref.session_id and episode.session_id != ref.session_id:
                raise NotFound(f"episode {ref.study_id}/{ref.session_id}/{ref.episode_id} not found")
        invalid_sessions: dict[str, bool] = {}
        for episode in candidates:
            if query.study_id and episode.study_id != query.study_id:
                continue
            if query.tag and not _has_tag(episode, query.tag):
                continue
            if state_filter is not None and episode.state not in state_filter:
                state = study_pb2.Episode.State.Name(episode.state)
                selection.skipped.append(Skipped(episode_name(episode), f"state {state} (not selected)"))
                continue
            if not query.include_invalid_sessions and episode.session_id:
                if episode.session_id not in invalid_sessions:
                    try:
                        state = repo.get_session(episode.session_id).state
                    except (
                        NotFound
                    ):  # the store keeps episodes of deleted sessions: nothing marks them invalid
                        state = study_pb2.Session.STATE_UNSPECIFIED
                    invalid_sessions[episode.session_id] = state == study_pb2.Session.STATE_INVALID
                if invalid_sessions[episode.session_id]:
                    selection.skipped.append(Skipped(episode_name(episode), "session marked invalid"))
                    continue
            selection.episodes.append(episode)
    else:
        selection.episodes = repo.list_episodes(
            study_id=query.study_id,
            tag=query.tag,
            states=state_filter,
            include_invalid_sessions=query.include_invalid_sessions,
        )
    seen: set[tuple[str, str]] = set()
    unique = []
    for episode in selection.episodes:  # a reference given twice is exported once
        key = (episode.study_id, episode.id)
        if key not in seen:
            seen.add(key)
            unique.append(episode)
    selection.episodes = unique
    if not selection.episodes:
        raise StepmarkError(
            f"no episodes to export for {query.describe()}{_why_empty(repo, query, selection)}"
        )
    return selection


def _why_empty(repo: Repository, query: SelectionQuery, selection: Selection) -> str:
    """What the filters left out, so an empty export says which flag would change it."""
    if selection.skipped:
        reasons: dict[str, int] = {}
        for s in selection.skipped:
            reasons[s.reason] = reasons.get(s.reason, 0) + 1
        return "; left out: " + ", ".join(f"{n} x {r}" for r, n in sorted(reasons.items()))
    if query.refs:
        return ""
    by_state = repo.episode_states(  # one GROUP BY, not the study's episodes in memory
        EpisodeQuery(study_id=query.study_id, tag=query.tag, include_invalid_sessions=True)
    )
    if not by_state:
        return ""
    states = {study_pb2.Episode.State.Name(k).removeprefix("STATE_").lower(): n for k, n in by_state.items()}
    found = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    return (
        f"; the filters left out {sum(by_state.values())} episode(s) ({found}, counting invalid sessions): "
        "see --state, --include-incomplete, --include-invalid-sessions"
    )


def _has_tag(episode: study_pb2.Episode, tag: str) -> bool:
    if any(t.label == tag for t in episode.tags):
        return True
    return any(t.label == tag for meta in episode.step_metadata.values() for t in meta.tags)


def environment_key(spec: study_pb2.EnvironmentSpec) -> str:
    """What decides an environment's observation and action specs: its family and that family's settings."""
    family = spec.WhichOneof("type")
    if family is None:
        return f"env:{spec.id}"
    settings = getattr(spec, family)
    return f"{family}:{settings.SerializeToString(deterministic=True).hex()}"


def describe_environment(spec: study_pb2.EnvironmentSpec | None, env_id: str) -> str:
    if spec is None or spec.WhichOneof("type") is None:
        return env_id or "(no environment)"
    family = spec.WhichOneof("type")
    settings = getattr(spec, family)
    name = getattr(settings, "id", "") or getattr(settings, "task", "")
    return f"{family} {name}".strip()


def group_by_spec(repo: Repository, episodes: Sequence[study_pb2.Episode]) -> list[SpecGroup]:
    """Groups in order of first appearance; names are unique, safe folder names."""
    env_specs: dict[tuple[str, str], study_pb2.EnvironmentSpec | None] = {}
    groups: dict[str, SpecGroup] = {}
    for episode in episodes:
        kind = episode_kind(episode)
        if kind == KIND_UI:
            key, name, env_id = "ui", "ui", ""
        else:
            env_id = episode.environment_id
            lookup = (episode.study_id, env_id)
            if lookup not in env_specs:
                try:
                    env_specs[lookup] = repo.get_environment(episode.study_id, env_id)
                except NotFound:
                    env_specs[lookup] = None
            spec = env_specs[lookup]
            key = environment_key(spec) if spec is not None else f"env-id:{env_id}"
            name = env_id or "env"
        if key not in groups:
            groups[key] = SpecGroup(key=key, name=name, kind=kind, environment_id=env_id, episodes=[])
        groups[key].episodes.append(episode)
    used: set[str] = set()
    for group in groups.values():
        base = _UNSAFE.sub("_", group.name).strip("._") or "dataset"
        name, n = base, 1
        while name in used:
            n += 1
            name = f"{base}-{n}"
        used.add(name)
        group.name = name
    return list(groups.values())


def mixed_specs_error(repo: Repository, groups: Sequence[SpecGroup]) -> MixedSpecs:
    lines = []
    for g in groups:
        if g.kind == KIND_UI:
            what = "UI episodes"
        else:
            study = g.episodes[0].study_id
            try:
                spec = repo.get_environment(study, g.environment_id)
            except NotFound:
                spec = None
            what = f"environment {g.environment_id!r} ({describe_environment(spec, g.environment_id)})"
        lines.append(f"{g.name}: {len(g.episodes)} episode(s) of {what}")
    return MixedSpecs(
        "the selected episodes cannot share one dataset (different environments or observation/action "
        f"specs): {'; '.join(lines)}. Select one group, or pass --split-by-spec for one dataset per group"
    )

"""Choosing the episodes of an export, and grouping them by what can share one dataset.

Selection (read once by the driver, `BATCH` episodes at a time: a study may hold a million): explicit
`EpisodeRef`s, or every episode matching a study / tag / state (all given filters at once). Episodes of INVALID
sessions and episodes that are not COMPLETED are left out unless asked for; what was left out is reported
(`skipped`), never dropped silently. UI and environment episodes are selected alike.

Grouping (`SpecGroups`, one episode at a time, counts only): one dataset holds episodes of one observation/action
spec. Environment episodes share a spec when
their environment settings (family + its settings, from the study's `EnvironmentSpec`) are equal; UI episodes
form their own group. A selection spanning several groups is refused with the list of groups unless the
user asks for one dataset per group (`--split-by-spec`), each in a sub-folder named by its environment id.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from pipelines.errors import StepmarkError
from pipelines.exporters.transform import KIND_UI, episode_kind, episode_name
from pipelines.store import NotFound, Repository
from pipelines.store.listing import MAX_PAGE, EpisodeQuery
from protos.rlds_creator import client_pb2, study_pb2

COMPLETED = study_pb2.Episode.STATE_COMPLETED
#: Episodes read from the store at a time: the driver of an export holds at most one such batch.
BATCH = MAX_PAGE
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
    """The episodes that go into one dataset, counted (the episodes themselves are streamed, never kept)."""

    key: str  # what they share (environment settings, or "ui")
    name: str  # sub-folder name with --split-by-spec (the environment id; "ui" for UI episodes)
    kind: str
    environment_id: str
    first: study_pb2.Episode  # its first episode: its study holds the group's EnvironmentSpec
    count: int = 0


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


def _state_filter(query: SelectionQuery) -> list[int] | None:
    if query.state:
        return [parse_state(query.state)]
    return None if query.include_incomplete else [COMPLETED]


def check_query(repo: Repository, query: SelectionQuery) -> None:
    """Refuses a query that selects nothing or names a study the store lacks (before any work)."""
    if not (query.refs or query.study_id or query.tag or query.state):
        raise StepmarkError("nothing selected: give --study, --episode, --tag or --state")
    if query.state:
        parse_state(query.state)
    if query.study_id:
        try:
            repo.get_study(query.study_id)
        except NotFound:
            raise NotFound(
                f"study {query.study_id!r} not found (stepmark study list shows the studies)"
            ) from None


def iter_selected(
    repo: Repository, query: SelectionQuery, skipped: list[Skipped]
) -> Iterator[list[study_pb2.Episode]]:
    """The episodes to export in a stable order (registration order, or the references' order), `BATCH` at a
    time: a study of a million episodes is read page by page (keyset), never whole. What was left out and why
    goes into `skipped`. Raises StepmarkError, once the selection is read, when it holds no episode.

    The keys (episode ids) are paged on their own (`Repository.iter_episode_ids`: one short read per page,
    keyset from the last key, no transaction open between pages) and each page's rows loaded after: a page
    whose rows were all deleted between the two reads loads as nothing, and the selection goes on from its
    last key. The selection ends when the key query past the last key returns nothing, never on an empty load.
    Each page sees what was committed before it was read, and its loaded rows are checked against the filters
    again (state, tag, INVALID session): what changed since its key was read is honoured."""
    check_query(repo, query)
    state_filter = _state_filter(query)
    selected = 0
    if query.refs:
        seen: set[tuple[str, str]] = set()
        for start in range(0, len(query.refs), BATCH):
            batch = _referenced(repo, query, query.refs[start : start + BATCH], state_filter, skipped, seen)
            selected += len(batch)
            if batch:
                yield batch
    else:
        q = EpisodeQuery(
            study_id=query.study_id,
            tag=query.tag,
            states=None if state_filter is None else tuple(state_filter),
            include_invalid_sessions=query.include_invalid_sessions,
        )
        for ids in repo.iter_episode_ids(q, BATCH):
            batch = _loaded(repo, query, ids, state_filter, skipped)
            selected += len(batch)
            if batch:
                yield batch
    if not selected:
        raise StepmarkError(f"no episodes to export for {query.describe()}{_why_empty(repo, query, skipped)}")


def _loaded(
    repo: Repository,
    query: SelectionQuery,
    ids: Sequence[str],
    state_filter: list[int] | None,
    skipped: list[Skipped],
) -> list[study_pb2.Episode]:
    """The episodes of a page of keys, in its order; those deleted since their keys were read are left out (they
    are gone). The filters are checked again on the loaded rows, as for references: an episode whose state
    changed since is skipped with its state, one whose session was marked INVALID is skipped as such, and one
    that lost the selected tag is no longer selected."""
    wanted = list(ids)
    while wanted:
        try:
            episodes = repo.episodes_by_refs([client_pb2.EpisodeRef(episode_id=i) for i in wanted])
            break
        except NotFound:  # one was deleted after its key was read: look up which are left (fewer each time)
            present = repo.refs_of(wanted)
            wanted = [i for i in wanted if i in present]
    else:
        return []
    invalid: set[str] = set()
    if not query.include_invalid_sessions:  # read after the rows: a session marked since is seen
        invalid = repo.invalid_sessions_among(e.session_id for e in episodes)
    out = []
    for episode in episodes:
        if (query.study_id and episode.study_id != query.study_id) or (
            query.tag and not _has_tag(episode, query.tag)
        ):
            continue
        if state_filter is not None and episode.state not in state_filter:
            state = study_pb2.Episode.State.Name(episode.state)
            skipped.append(Skipped(episode_name(episode), f"state {state} (not selected)"))
            continue
        if episode.session_id in invalid:
            skipped.append(Skipped(episode_name(episode), "session marked invalid"))
            continue
        out.append(episode)
    return out


def _referenced(
    repo: Repository,
    query: SelectionQuery,
    refs: Sequence[client_pb2.EpisodeRef],
    state_filter: list[int] | None,
    skipped: list[Skipped],
    seen: set[tuple[str, str]],
) -> list[study_pb2.Episode]:
    """The episodes of some of the references the user gave that pass the filters; a reference given twice is
    exported once (`seen`: the references are the user's own list, in memory anyway)."""
    try:
        candidates = repo.episodes_by_refs(list(refs))
    except NotFound:
        candidates = []
        for ref in refs:  # name the reference the user gave, not only the episode id
            try:
                candidates.extend(repo.episodes_by_refs([ref]))
            except NotFound:
                raise NotFound(
                    f"episode {ref.study_id}/{ref.session_id}/{ref.episode_id} not found"
                ) from None
    for ref, episode in zip(refs, candidates, strict=True):
        if ref.session_id and episode.session_id != ref.session_id:
            raise NotFound(f"episode {ref.study_id}/{ref.session_id}/{ref.episode_id} not found")
    invalid_sessions: dict[str, bool] = {}
    out = []
    for episode in candidates:
        if query.study_id and episode.study_id != query.study_id:
            continue
        if query.tag and not _has_tag(episode, query.tag):
            continue
        if state_filter is not None and episode.state not in state_filter:
            state = study_pb2.Episode.State.Name(episode.state)
            skipped.append(Skipped(episode_name(episode), f"state {state} (not selected)"))
            continue
        if not query.include_invalid_sessions and episode.session_id:
            if episode.session_id not in invalid_sessions:
                try:
                    state = repo.get_session(episode.session_id).state
                except NotFound:  # the store keeps episodes of deleted sessions: nothing marks them invalid
                    state = study_pb2.Session.STATE_UNSPECIFIED
                invalid_sessions[episode.session_id] = state == study_pb2.Session.STATE_INVALID
            if invalid_sessions[episode.session_id]:
                skipped.append(Skipped(episode_name(episode), "session marked invalid"))
                continue
        if (episode.study_id, episode.id) not in seen:
            seen.add((episode.study_id, episode.id))
            out.append(episode)
    return out


def select_episodes(repo: Repository, query: SelectionQuery) -> Selection:
    """The whole selection in memory (`iter_selected`, collected): for small selections and tests."""
    selection = Selection(episodes=[])
    for batch in iter_selected(repo, query, selection.skipped):
        selection.episodes.extend(batch)
    return selection


def _why_empty(repo: Repository, query: SelectionQuery, skipped: Sequence[Skipped]) -> str:
    """What the filters left out, so an empty export says which flag would change it."""
    if skipped:
        reasons: dict[str, int] = {}
        for s in skipped:
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


class SpecGroups:
    """Groups in order of first appearance, built one episode at a time (state: one entry per group and per
    environment looked up, whatever the number of episodes). Names are unique, safe folder names, fixed when a
    group first appears."""

    def __init__(self, repo: Repository) -> None:
        self.repo = repo
        self.groups: dict[str, SpecGroup] = {}
        self._env_specs: dict[tuple[str, str], study_pb2.EnvironmentSpec | None] = {}
        self._used: set[str] = set()

    def add(self, episode: study_pb2.Episode) -> tuple[SpecGroup, int]:
        """The episode's group and its index there (its position among the group's episodes)."""
        kind = episode_kind(episode)
        if kind == KIND_UI:
            key, name, env_id = "ui", "ui", ""
        else:
            env_id = episode.environment_id
            lookup = (episode.study_id, env_id)
            if lookup not in self._env_specs:
                try:
                    self._env_specs[lookup] = self.repo.get_environment(episode.study_id, env_id)
                except NotFound:
                    self._env_specs[lookup] = None
            spec = self._env_specs[lookup]
            key = environment_key(spec) if spec is not None else f"env-id:{env_id}"
            name = env_id or "env"
        group = self.groups.get(key)
        if group is None:
            group = SpecGroup(
                key=key, name=self._unique(name), kind=kind, environment_id=env_id, first=episode
            )
            self.groups[key] = group
        group.count += 1
        return group, group.count - 1

    def _unique(self, name: str) -> str:
        base = _UNSAFE.sub("_", name).strip("._") or "dataset"
        name, n = base, 1
        while name in self._used:
            n += 1
            name = f"{base}-{n}"
        self._used.add(name)
        return name

    def __iter__(self) -> Iterator[SpecGroup]:
        return iter(list(self.groups.values()))

    def __len__(self) -> int:
        return len(self.groups)


def group_by_spec(repo: Repository, episodes: Iterable[study_pb2.Episode]) -> list[SpecGroup]:
    """`SpecGroups` of these episodes."""
    groups = SpecGroups(repo)
    for episode in episodes:
        groups.add(episode)
    return list(groups)


def mixed_specs_error(repo: Repository, groups: Sequence[SpecGroup]) -> MixedSpecs:
    lines = []
    for g in groups:
        if g.kind == KIND_UI:
            what = "UI episodes"
        else:
            study = g.first.study_id
            try:
                spec = repo.get_environment(study, g.environment_id)
            except NotFound:
                spec = None
            what = f"environment {g.environment_id!r} ({describe_environment(spec, g.environment_id)})"
        lines.append(f"{g.name}: {g.count} episode(s) of {what}")
    return MixedSpecs(
        "the selected episodes cannot share one dataset (different environments or observation/action "
        f"specs): {'; '.join(lines)}. Select one group, or pass --split-by-spec for one dataset per group"
    )

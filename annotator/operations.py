"""The annotator's service layer: one method per operation of the RLDS Creator client protocol.

The Streamlit pages are thin views over `Operations`; everything they change goes through here into the store,
so the same behaviour is reachable (and tested) without a browser, and `handle()` answers a raw
`client_pb2.OperationRequest` the way the reference server does. Like the reference server, an `Operations`
object is one annotator's session: it remembers the selected study and environment, the episode being replayed
and the episode being recorded. Nothing that matters lives only here: tags, notes and states are written to the
store at once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from annotator.errors import OperationError
from annotator.export_child import export_in_child_process
from annotator.readers import ReaderCache, SharedReader
from annotator.step_data import to_data
from pipelines.errors import StepmarkError
from pipelines.store.errors import Conflict, NotFound
from pipelines.store.listing import MAX_PAGE, EpisodeQuery, Sort
from protos.rlds_creator import client_pb2, study_pb2

Progress = Callable[[float], None]

STATE_LABELS = {
    study_pb2.Episode.STATE_UNSPECIFIED: "Unspecified",
    study_pb2.Episode.STATE_COMPLETED: "Completed",
    study_pb2.Episode.STATE_ABANDONED: "Abandoned",
    study_pb2.Episode.STATE_CANCELLED: "Cancelled",
    study_pb2.Episode.STATE_REJECTED: "Rejected",
}
STATE_BY_LABEL = {label: state for state, label in STATE_LABELS.items()}
PICKER_SIZE = 50  # episodes a picker (Replay, Export) offers at once; typing narrows them


class NotesConflict(OperationError):
    """The notes changed in the store after the annotator last saw them."""


@dataclass
class UndoResult:
    """What an undo/redo did: the audit entry it wrote (None: nothing to do) and that change in plain words."""

    entry: Any
    message: str

    def __bool__(self) -> bool:
        return self.entry is not None


@dataclass
class DeleteResult:
    """Deleting an episode: whether the row was deleted, the files removed and kept, and problems on disk."""

    success: bool
    removed: list[Path]
    kept: list[str]
    problems: list[str]


def ref_of(episode: study_pb2.Episode) -> client_pb2.EpisodeRef:
    return client_pb2.EpisodeRef(
        study_id=episode.study_id, session_id=episode.session_id, episode_id=episode.id
    )


def ref_key(ref: client_pb2.EpisodeRef) -> str:
    """A readable, unique string for an episode reference (used as cache and widget key)."""
    return f"{ref.study_id}/{ref.session_id}/{ref.episode_id}"


def parse_ref_key(key: str) -> client_pb2.EpisodeRef:
    parts = key.split("/")
    if len(parts) != 3 or not all(parts):
        raise OperationError(f"episode reference {key!r} is not STUDY/SESSION/EPISODE")
    return client_pb2.EpisodeRef(study_id=parts[0], session_id=parts[1], episode_id=parts[2])


def humanize_duration(seconds: float) -> str:
    """Like the reference client: 30s, 2m 5s, 1h 3m."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def episode_duration(episode: study_pb2.Episode) -> str:
    if not episode.HasField("start_time") or not episode.HasField("end_time"):
        return ""
    start = episode.start_time.ToDatetime()
    end = episode.end_time.ToDatetime()
    return humanize_duration((end - start).total_seconds())


def episode_kind(episode: study_pb2.Episode) -> str:
    """ "ui" for imported UI traces, "env" for recorded environment episodes."""
    kind = episode.metadata.fields.get("kind") if episode.HasField("metadata") else None
    if kind is not None and kind.string_value:
        return kind.string_value
    return "env" if episode.HasField("storage") else "ui"


def episode_success(episode: study_pb2.Episode) -> bool | None:
    value = episode.metadata.fields.get("success") if episode.HasField("metadata") else None
    if value is None or value.WhichOneof("kind") != "bool_value":
        return None
    return value.bool_value


TITLE_CHARS = 120  # a title's length at most (a goal can be a paragraph)


def episode_title(episode: study_pb2.Episode) -> str:
    """A name people can tell episodes apart by (the id stays beside it): a UI episode's app and goal, an
    environment episode's environment, seed and start date (schemas/store.md)."""
    fields = episode.metadata.fields if episode.HasField("metadata") else {}

    def text(key: str) -> str:
        value = fields.get(key)
        return value.string_value.strip() if value is not None and value.WhichOneof("kind") == "string_value" else ""

    if episode_kind(episode) == "ui":
        parts = [p for p in (text("app_package") or "UI episode", text("goal")) if p]
        title = " — ".join(parts)
    else:
        parts = [episode.environment_id or "environment"]
        seed = fields.get("seed")
        if seed is not None and seed.WhichOneof("kind") == "number_value":
            parts.append(f"seed {seed.number_value:g}")
        if episode.HasField("start_time"):
            parts.append(episode.start_time.ToDatetime().strftime("%Y-%m-%d %H:%M:%S UTC"))
        title = " · ".join(parts)
    return title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1] + "…"


def step_tags(episode: study_pb2.Episode, index: int) -> list[str]:
    if index not in episode.step_metadata:
        return []
    return [tag.label for tag in episode.step_metadata[index].tags]


def tagged_steps(episode: study_pb2.Episode) -> dict[int, list[str]]:
    """Step index -> its tags, for every step that has one (sorted by index)."""
    return {
        index: [tag.label for tag in meta.tags]
        for index, meta in sorted(episode.step_metadata.items())
        if len(meta.tags)
    }


# ---------------------------------------------------------------------------------------------------------------


@dataclass
class ReplayState:
    ref: client_pb2.EpisodeRef
    episode: study_pb2.Episode
    reader: SharedReader


@dataclass
class EpisodeFilter:
    """Filters of the Episodes page; None means any."""

    study_id: str | None = None
    env_id: str | None = None
    states: list[int] | None = None
    tag: str | None = None
    user: str | None = None
    notes_query: str | None = None
    failed_in_run: str | None = None  # a run of the study (`stepmark evaluate`): its failed episodes

    def query(self) -> EpisodeQuery:
        """The store's query for these filters."""
        return EpisodeQuery(
            study_id=self.study_id or None, env_id=self.env_id or None,
            states=tuple(self.states) if self.states else None, tag=self.tag or None, user=self.user or None,
            notes_query=self.notes_query or None, failed_in_run=self.failed_in_run or None,
        )  # fmt: skip


@dataclass
class ExportOptions:
    """What the Export page asks for beyond the protocol's DownloadEpisodesRequest."""

    format: str = "envlogger"  # any of pipelines.export.FORMATS
    out_dir: Path | None = None
    include_incomplete: bool = False
    split_by_spec: bool = False  # one dataset per environment when the selection mixes them
    splits: str = ""  # "train=0.8,val=0.1,test=0.1" (empty: one split, train); checked by the export
    split_seed: int = 0
    ui_objects: str = ""  # UI episodes: "" (the full object table) or "padded:N"
    annotations: str = "consensus"  # UI episodes: which grounding annotations apply (none|mine|all|consensus)


class Operations:
    """One annotator's session over the store, the episode readers and the recorder."""

    def __init__(
        self,
        repo: Any,
        data_dir: str | Path,
        user: str,
        *,
        open_reader: Callable[[study_pb2.Episode], SharedReader] | None = None,
        export_dir: str | Path | None = None,
        store_url: str | None = None,
    ) -> None:
        if not user:
            raise OperationError("an annotator needs a user name")
        self.repo = repo
        self.data_dir = Path(data_dir)
        self.user = user
        self._open_reader = open_reader or ReaderCache(self.data_dir)
        self.export_dir = Path(export_dir) if export_dir else self.data_dir / "exports"
        self.store_url = store_url  # passed to the export pipeline, which opens its own connection
        self.last_export: Any = None
        self.study: study_pb2.StudySpec | None = None
        self.env: study_pb2.EnvironmentSpec | None = None
        self.replay: ReplayState | None = None
        self.recorder: Any = None
        self.last_step: client_pb2.StepResponse | None = None
        self.pending_save: client_pb2.ConfirmSaveResponse | None = None
        self.quality = client_pb2.SetQualityRequest.QUALITY_MEDIUM
        self.fps: float | None = None
        self.camera = 0
        self.storage = "envlogger"
        self.last_saved_study: study_pb2.StudySpec | None = None
        self._tap = False  # async env: keys pressed once, to be released after the next tick
        self.last_abandoned: study_pb2.Episode | None = None  # set when idleness ended an episode

    # -- studies ------------------------------------------------------------------------------------------------

    def set_studies(
        self, request: client_pb2.SetStudiesRequest | None = None
    ) -> client_pb2.SetStudiesResponse:
        """The studies created by this user (the reference's meaning of the study list)."""
        return client_pb2.SetStudiesResponse(studies=self.repo.list_studies(creator=self.user))

    def all_studies(self) -> list[study_pb2.StudySpec]:
        return list(self.repo.list_studies())

    def select_study(self, request: client_pb2.SelectStudyRequest) -> client_pb2.SelectStudyResponse:
        study = self.repo.get_study(request.study_id)
        self.study = study
        self.env = None
        return client_pb2.SelectStudyResponse(study=study)

    def save_study(self, request: client_pb2.SaveStudyRequest) -> client_pb2.SaveStudyResponse:
        """Create (no id) or update (id set; read-only fields ignored, only the creator) a study."""
        spec = request.study
        if not spec.name.strip():
            raise OperationError("a study needs a name")
        ids = [env.id for env in spec.environment_specs]
        if any(not env_id for env_id in ids):
            raise OperationError("every environment of a study needs an id")
        if len(set(ids)) != len(ids):
            raise OperationError(f"environment ids must be unique in a study: {ids}")
        saved = self.repo.save_study(spec, self.user) if spec.id else self.repo.create_study(spec, self.user)
        if self.study is not None and self.study.id == saved.id:
            self.study = saved
        self.last_saved_study = saved
        return client_pb2.SaveStudyResponse()

    def check_environment(self, spec: study_pb2.EnvironmentSpec) -> str | None:
        """Build the environment a spec describes once and close it, so the study editor refuses a bad game,
        robot or setting when it is added rather than when someone first records. Raises StepmarkError; returns
        a note when nothing can be built here (no environment type, DMLab)."""
        from annotator.envs import registry

        return registry.check(spec)

    def enable_study(self, request: client_pb2.EnableStudyRequest) -> client_pb2.EnableStudyResponse:
        spec = self.repo.enable_study(request.study_id, request.enable, self.user)
        return client_pb2.EnableStudyResponse(
            study_id=spec.id, enabled=spec.state == study_pb2.StudySpec.STATE_ENABLED
        )

    # -- episodes -----------------------------------------------------------------------------------------------

    def episode_metadata(
        self, episode: study_pb2.Episode, studies: dict[str, study_pb2.StudySpec] | None = None
    ) -> client_pb2.EpisodeMetadata:
        study = (studies or {}).get(episode.study_id)
        if study is None:
            study = self.repo.get_study(episode.study_id)
        meta = client_pb2.EpisodeMetadata(
            study=study,
            episode=episode,
            duration=episode_duration(episode),
            status=STATE_LABELS.get(episode.state, "Unspecified"),
            can_delete=self._can_delete(episode, study),
        )
        for env in study.environment_specs:
            if env.id == episode.environment_id:
                meta.env.CopyFrom(env)
                break
        return meta

    def _can_delete(self, episode: study_pb2.Episode, study: study_pb2.StudySpec) -> bool:
        """Repository.can_delete's rule (own episode, or the study's creator) with the study already in hand,
        so listing 1,000 episodes costs no query per row."""
        return self.user in (episode.user.email, study.creator.email)

    def episodes(self, filters: EpisodeFilter | None = None) -> client_pb2.EpisodesResponse:
        """The protocol's episode list: the first `MAX_PAGE` matching episodes in registration order (one page
        of `Repository.page_episodes`; the Episodes page pages through the rest, pickers search)."""
        f = filters or EpisodeFilter()
        return self._response(e for e, _ in self.repo.page_episodes(f.query(), Sort(), None, MAX_PAGE))

    def find_episodes(self, text: str = "", study_id: str | None = None, limit: int = PICKER_SIZE) -> Any:
        """A picker's episodes (Replay, Export): the newest, or those whose id starts with `text`, then those
        whose notes contain it; at most `limit`, whatever the number of episodes."""
        return self._response(self.repo.find_episodes(text, study_id=study_id, limit=limit))

    def _response(self, episodes: Any) -> client_pb2.EpisodesResponse:
        studies = {s.id: s for s in self.repo.list_studies()}
        response = client_pb2.EpisodesResponse()
        for episode in episodes:
            response.episodes.append(self.episode_metadata(episode, studies))
        return response

    def episodes_page(
        self, filters: EpisodeFilter, sort: Any, after: Any = None, size: int = 50
    ) -> tuple[client_pb2.EpisodesResponse, Any]:
        """One page of the Episodes table (keyset after the cursor `after`; `Repository.page_episodes`) and the
        cursor the next page starts after (None on an empty page)."""
        page = self.repo.page_episodes(filters.query(), sort, after, size)
        studies = {s.id: s for s in self.repo.list_studies()}
        response = client_pb2.EpisodesResponse()
        for episode, _ in page:
            response.episodes.append(self.episode_metadata(episode, studies))
        return response, (page[-1][1] if page else None)

    def replay_episode(self, request: client_pb2.ReplayEpisodeRequest) -> client_pb2.ReplayEpisodeResponse:
        """Open an episode for replay: its metadata and the reward of every step."""
        episode = self.repo.get_episode(request.ref)
        reader = self._open_reader(episode)
        self.replay = ReplayState(ref=client_pb2.EpisodeRef(), episode=episode, reader=reader)
        self.replay.ref.CopyFrom(request.ref)
        return client_pb2.ReplayEpisodeResponse(
            episode=self.episode_metadata(episode), step_rewards=reader.rewards()
        )

    def _replaying(self) -> ReplayState:
        if self.replay is None:
            raise OperationError("no episode is being replayed: open one first (ReplayEpisode)")
        return self.replay

    def _refresh(self) -> study_pb2.Episode:
        """Re-read the replayed episode so tags written by another annotator show up."""
        state = self._replaying()
        state.episode = self.repo.get_episode(state.ref)
        return state.episode

    def replay_step(self, request: client_pb2.ReplayStepRequest) -> client_pb2.ReplayStepResponse:
        return self.replay_step_with_data(request.index)[0]

    def replay_step_with_data(self, index: int) -> tuple[client_pb2.ReplayStepResponse, Any]:
        """The protocol's ReplayStepResponse and the reader's `Step` it came from (the page draws from both)."""
        state = self._replaying()
        if not 0 <= index < len(state.reader):
            raise OperationError(
                f"step {index} is out of range: episode {ref_key(state.ref)} has {len(state.reader)} steps"
            )
        step = state.reader.step(index)
        episode = self._refresh()
        response = client_pb2.ReplayStepResponse(
            index=index,
            keys=list(step.keys or []),
            reward=float(step.reward or 0.0),
            tags=step_tags(episode, index),
        )
        if step.image:
            response.image = step.image
        if step.observation is not None:
            response.observation.CopyFrom(to_data(step.observation, "observation"))
        if step.action is not None:
            response.action.CopyFrom(to_data(step.action, "action"))
        return response, step

    def add_episode_tag(self, request: client_pb2.AddEpisodeTagRequest) -> client_pb2.AddEpisodeTagResponse:
        label = _label(request.tag)
        ok = self.repo.add_episode_tag(self._replaying().ref, label, self.user)
        self._refresh()
        return client_pb2.AddEpisodeTagResponse(tag=label, success=bool(ok))

    def remove_episode_tag(
        self, request: client_pb2.RemoveEpisodeTagRequest
    ) -> client_pb2.RemoveEpisodeTagResponse:
        ok = self.repo.remove_episode_tag(self._replaying().ref, request.tag, self.user)
        self._refresh()
        return client_pb2.RemoveEpisodeTagResponse(tag=request.tag, success=bool(ok))

    def add_step_tag(self, request: client_pb2.AddStepTagRequest) -> client_pb2.AddStepTagResponse:
        state = self._replaying()
        label = _label(request.tag)
        self._check_index(request.index)
        ok = self.repo.add_step_tag(state.ref, request.index, label, self.user)
        self._refresh()
        return client_pb2.AddStepTagResponse(index=request.index, tag=label, success=bool(ok))

    def remove_step_tag(self, request: client_pb2.RemoveStepTagRequest) -> client_pb2.RemoveStepTagResponse:
        state = self._replaying()
        ok = self.repo.remove_step_tag(state.ref, request.index, request.tag, self.user)
        self._refresh()
        return client_pb2.RemoveStepTagResponse(index=request.index, tag=request.tag, success=bool(ok))

    def update_replay_episode(
        self, request: client_pb2.UpdateReplayEpisodeRequest, expected: str | None = None
    ) -> client_pb2.UpdateReplayEpisodeResponse:
        """Replace the notes. With `expected` (the notes this annotator last saw), refuse with NotesConflict when
        someone else changed them since, so a stale editor never silently overwrites another's note."""
        state = self._replaying()
        try:
            ok = self.repo.set_notes(state.ref, request.notes, self.user, expected=expected)
        except Conflict as exc:
            self._refresh()
            raise NotesConflict(f"the notes of episode {ref_key(state.ref)} were changed meanwhile") from exc
        self._refresh()
        return client_pb2.UpdateReplayEpisodeResponse(success=bool(ok))

    def set_episode_state(self, state: int) -> study_pb2.Episode:
        """Mark the replayed episode's state (not a protocol message; the Tagging panel's state selector)."""
        self.repo.set_episode_state(self._replaying().ref, state, self.user)
        return self._refresh()

    def _check_index(self, index: int) -> None:
        state = self._replaying()
        if not 0 <= index < len(state.reader):
            raise OperationError(f"step {index} is out of range (episode has {len(state.reader)} steps)")

    def delete_episode(self, request: client_pb2.DeleteEpisodeRequest) -> client_pb2.DeleteEpisodeResponse:
        """The protocol's DeleteEpisode: the store row and the episode's own files (`delete_with_files`)."""
        result = self.delete_with_files(request.ref)
        return client_pb2.DeleteEpisodeResponse(ref=request.ref, success=result.success)

    def files_of(self, ref: client_pb2.EpisodeRef) -> Any:
        """What deleting the episode would remove from disk and what it keeps (the confirmation shows it).

        Files another registered episode also points at are kept (never remove someone else's data)."""
        from pipelines.episodes.removal import FilesPlan, episode_files

        episode = self.repo.get_episode(ref)
        plan = episode_files(episode, self.data_dir)
        if not plan.remove:
            return plan
        shared_paths: set[Path] = set()  # streamed: the study's other episodes with files, storage columns only
        for other in self.repo.iter_stored(episode.study_id):
            if other.id == episode.id:
                continue
            for o in episode_files(other, self.data_dir).remove:
                shared_paths.update(p for p in plan.remove if o == p or p in o.parents or o in p.parents)
        kept = FilesPlan(keep=list(plan.keep))
        for path in plan.remove:
            if path in shared_paths:
                kept.keep.append(f"{path} is shared with another episode: not removed")
            else:
                kept.remove.append(path)
        return kept

    def delete_with_files(self, ref: client_pb2.EpisodeRef) -> DeleteResult:
        """Delete the episode from the store (own episode or study creator), then its files under the data
        directory; UI records stay in their convert-ui shards (the result says where)."""
        from pipelines.episodes.removal import FilesPlan, remove_files

        try:
            plan = self.files_of(ref)
        except NotFound:
            plan = FilesPlan()
        ok = self.repo.delete_episode(ref, self.user)
        if self.replay is not None and ref_key(self.replay.ref) == ref_key(ref):
            self.replay = None
        if not ok:
            return DeleteResult(False, [], [], [])
        self._forget_reader(plan.remove)
        problems = remove_files(plan)
        removed = [p for p in plan.remove if not p.exists()]
        return DeleteResult(True, removed, plan.keep, problems)

    def _forget_reader(self, paths: list[Path]) -> None:
        """Close a cached reader of files about to be removed (an open Riegeli file keeps disk space)."""
        close = getattr(self._open_reader, "close", None)
        if paths and callable(close):
            close()

    def recent_tags(self, study_id: str, limit: int = 10) -> list[str]:
        return list(self.repo.recent_tags(study_id, limit=limit))

    def audit_log(self, ref: client_pb2.EpisodeRef | None = None, limit: int | None = None) -> list[Any]:
        return list(self.repo.audit_log(ref=ref, limit=limit))

    def _undo_or_redo(self, redo: bool) -> UndoResult:
        from pipelines.store.audit import describe

        ref = self.replay.ref if self.replay is not None else None
        if redo:
            entry = self.repo.redo_last(self.user, ref=ref)
        else:
            entry = self.repo.undo_last(self.user, ref=ref)
        if self.replay is not None:
            self._refresh()
        verb = "redo" if redo else "undo"
        if entry is None:
            where = " on this episode" if ref is not None else ""
            return UndoResult(None, f"Nothing of yours to {verb}{where}")
        return UndoResult(entry, describe(entry))

    def undo(self) -> UndoResult:
        """Undo this user's last change on the replayed episode (any episode when none is open)."""
        return self._undo_or_redo(False)

    def redo(self) -> UndoResult:
        """Redo this user's last undo on the replayed episode (a new change there clears the redo chain)."""
        return self._undo_or_redo(True)

    def add_segment_tag(self, start: int, end: int, tag: str) -> int:
        """Tag steps start..end of the replayed episode (one change, one undo); returns the steps added."""
        state = self._replaying()
        self._check_index(start)
        self._check_index(end)
        count = self.repo.add_segment_tag(state.ref, start, end, _label(tag), self.user)
        self._refresh()
        return count

    def remove_segment_tag(self, start: int, end: int, tag: str) -> int:
        count = self.repo.remove_segment_tag(self._replaying().ref, start, end, tag, self.user)
        self._refresh()
        return count

    def can_review(self, ref: client_pb2.EpisodeRef | None = None) -> bool:
        """May this user change the (replayed) episode's state and remove others' tags on it?"""
        return bool(self.repo.can_review(ref or self._replaying().ref, self.user))

    # -- palettes and reviewers ---------------------------------------------------------------------------------

    def palette(self, study_id: str) -> list[str]:
        return list(self.repo.get_palette(study_id))

    def set_palette(self, study_id: str, labels: list[str]) -> list[str]:
        return list(self.repo.set_palette(study_id, labels, self.user))

    def reviewers(self, study_id: str) -> list[str]:
        return list(self.repo.list_reviewers(study_id))

    def set_reviewers(self, study_id: str, users: list[str]) -> list[str]:
        return list(self.repo.set_reviewers(study_id, users, self.user))

    # -- export -------------------------------------------------------------------------------------------------

    def download_episodes(
        self,
        request: client_pb2.DownloadEpisodesRequest,
        options: ExportOptions | None = None,
        progress: Progress | None = None,
    ) -> client_pb2.DownloadEpisodesResponse:
        """Run the export pipeline over the chosen episodes; the url is the archive or folder written."""
        from pipelines import export

        if not request.refs:
            raise OperationError("choose at least one episode to export")
        opts = options or ExportOptions()
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%f")
        # A Minari dataset's folder name is its id and must read NAME-vN (minari.load_dataset finds it by it).
        name = f"export-{stamp}-v0" if opts.format == "minari" else f"export-{stamp}"
        out = (opts.out_dir or self.export_dir) / name
        out.parent.mkdir(parents=True, exist_ok=True)
        if request.archive:
            out = out.with_suffix(".zip")
        export_request = export.ExportRequest.from_download_request(
            request,
            data_dir=self.data_dir,
            out=out,
            format=opts.format,
            store_url=self.store_url,
            include_incomplete=opts.include_incomplete,
            split_by_spec=opts.split_by_spec,
            splits=opts.splits,
            split_seed=opts.split_seed,
            ui_objects=opts.ui_objects,
            annotations=opts.annotations,
            user=self.user,  # whose annotations `mine` means: the annotator who exports
        )

        def report(percent: float) -> None:  # the pipeline reports 0-100, the page wants 0-1
            if progress is not None:
                progress(max(0.0, min(1.0, float(percent) / 100.0)))

        summary = export_in_child_process(export_request, report)
        self.last_export = summary
        return client_pb2.DownloadEpisodesResponse(url=Path(summary.out).resolve().as_uri(), progress=100.0)

    # -- recording ----------------------------------------------------------------------------------------------

    def select_environment(
        self, request: client_pb2.SelectEnvironmentRequest
    ) -> client_pb2.SelectEnvironmentResponse:
        """Start the chosen environment of the selected study (a new episode begins; its first frame is kept)."""
        if self.study is None:
            raise OperationError("select a study first (SelectStudy)")
        env = next((e for e in self.study.environment_specs if e.id == request.env_id), None)
        if env is None:
            raise OperationError(f"study {self.study.id} has no environment {request.env_id!r}")
        if self.study.state == study_pb2.StudySpec.STATE_DISABLED:
            raise OperationError(f"study {self.study.name!r} is disabled: it takes no new episodes")
        self.close_recorder()
        from annotator.recorder import Recorder

        self.recorder = Recorder(
            self.repo,
            self.data_dir,
            self.study.id,
            env.id,
            self.user,
            storage=self.storage,
            quality=self.quality,
        )
        self.env = env
        self.pending_save = None
        self.last_step = self.recorder.start()
        return client_pb2.SelectEnvironmentResponse(study_id=self.study.id, env=env)

    def key_map(self) -> dict[str, str]:
        """Key -> what it does in the running environment (for the on-screen buttons)."""
        recorder = self._recording()
        env = getattr(recorder, "env", None)
        return dict(getattr(recorder, "key_map", None) or getattr(env, "key_map", None) or {})

    def cameras(self) -> list[str]:
        env = getattr(self._recording(), "env", None)
        return list(getattr(env, "cameras", None) or [])

    def is_sync(self) -> bool:
        return bool(self.env is None or self.env.sync)

    def _recording(self) -> Any:
        if self.recorder is None:
            raise OperationError("no environment is running: select one first (SelectEnvironment)")
        return self.recorder

    def action(
        self, request: client_pb2.ActionRequest
    ) -> client_pb2.StepResponse | client_pb2.ConfirmSaveResponse:
        """One user input: a StepResponse, or ConfirmSaveResponse once the episode has ended."""
        recorder = self._recording()
        if self.pending_save is not None:
            return self.pending_save
        if self._restart_if_abandoned(recorder):
            return self.last_step  # the input that woke an abandoned episode is not applied to the new one
        gamepad = request.gamepad_input if request.HasField("gamepad_input") else None
        result = recorder.act(list(request.keys), gamepad)
        self._tap = not self.is_sync() and bool(request.keys or gamepad)
        if isinstance(result, client_pb2.ConfirmSaveResponse):
            self.pending_save = result
            if self.last_step is not None:  # show the final frame in the save dialog
                self.last_step.image = recorder.frame
                self.last_step.episode_steps += 1
        else:
            self.last_step = result
        return result

    def _restart_if_abandoned(self, recorder: Any) -> bool:
        """An episode left without input for the recorder's idle_timeout is ABANDONED (the reference's state
        for a user who stopped responding); the next one starts at once. The abandoned episode (None when it
        had no steps and was dropped) is kept in `last_abandoned` for the page to report."""
        was_running = recorder.in_episode
        abandoned = recorder.abandon_if_idle()
        if not was_running or recorder.in_episode:
            return False
        self.last_abandoned = abandoned if abandoned is not None else study_pb2.Episode()
        self.last_step = recorder.start()
        return True

    def tick(self) -> client_pb2.StepResponse | client_pb2.ConfirmSaveResponse | None:
        """Advance an asynchronous environment by its clock (no-op for sync ones)."""
        recorder = self._recording()
        if self.pending_save is not None:
            return self.pending_save
        result = recorder.tick()
        if isinstance(result, client_pb2.ConfirmSaveResponse):
            self.pending_save = result
        elif isinstance(result, client_pb2.StepResponse):
            self.last_step = result
            if self._tap:  # a browser button press is a tap: release the keys after the step that used them
                recorder.act([], None)
                self._tap = False
        return result

    def save_episode(self, request: client_pb2.SaveEpisodeRequest) -> client_pb2.SaveEpisodeResponse:
        """Save (or reject) the ended episode, then start the next one in the same environment."""
        recorder = self._recording()
        response = recorder.save(request)
        self.pending_save = None
        self.last_step = recorder.start()
        return response

    def close_recorder(self) -> study_pb2.Episode | None:
        """Stop recording: an episode with steps is kept as CANCELLED (an empty one leaves nothing)."""
        if self.recorder is None:
            return None
        try:
            return self.recorder.cancel()
        finally:
            self.recorder.close()
            self.recorder = None
            self.pending_save = None

    def set_fps(self, request: client_pb2.SetFpsRequest) -> client_pb2.SetFpsResponse:
        if request.fps <= 0:
            raise OperationError(f"fps must be positive, got {request.fps}")
        if self.recorder is not None:
            self.recorder.set_fps(request)
        self.fps = request.fps
        return client_pb2.SetFpsResponse()

    def set_quality(self, request: client_pb2.SetQualityRequest) -> client_pb2.StepResponse | None:
        """Later frames use the new JPEG preset; while recording, the reply is the current frame in it."""
        self.quality = request.quality
        if self.recorder is not None:
            self.last_step = self.recorder.set_quality(request)
            return self.last_step
        return None

    def set_camera(self, request: client_pb2.SetCameraRequest) -> client_pb2.SetCameraResponse:
        response = self._recording().set_camera(request)
        self.camera = request.index
        frame = getattr(self.recorder, "frame", None)
        if self.last_step is not None and frame:
            self.last_step.image = frame
        return response

    # -- the protocol entry point -------------------------------------------------------------------------------

    def handle(self, request: client_pb2.OperationRequest) -> client_pb2.OperationResponse:
        """Answer one OperationRequest; failures become an ErrorResponse with a message saying why."""
        kind = request.WhichOneof("type")
        response = client_pb2.OperationResponse()
        if kind is None:
            response.error.mesg = "empty OperationRequest: no operation set"
            return response
        try:
            result = _DISPATCH[kind](self, getattr(request, kind))
        except StepmarkError as exc:
            response.error.mesg = f"{kind}: {exc}"
            return response
        except Exception as exc:  # noqa: BLE001 - the client gets a message, not a dropped connection
            response.error.mesg = f"{kind}: {type(exc).__name__}: {exc}"
            return response
        if result is None:
            return response
        for name, value in _RESPONSE_FIELDS.items():
            if isinstance(result, value):
                getattr(response, name).CopyFrom(result)
                return response
        raise TypeError(f"no OperationResponse field for {type(result).__name__}")


def _label(tag: str) -> str:
    label = (tag or "").strip()
    if not label:
        raise OperationError("a tag needs a non-empty label")
    return label


_DISPATCH: dict[str, Callable[[Operations, Any], Any]] = {
    "action": Operations.action,
    "add_episode_tag": Operations.add_episode_tag,
    "add_step_tag": Operations.add_step_tag,
    "delete_episode": Operations.delete_episode,
    "download_episodes": lambda ops, req: ops.download_episodes(req),
    "enable_study": Operations.enable_study,
    "replay_step": Operations.replay_step,
    "remove_episode_tag": Operations.remove_episode_tag,
    "remove_step_tag": Operations.remove_step_tag,
    "replay_episode": Operations.replay_episode,
    "save_episode": Operations.save_episode,
    "save_study": Operations.save_study,
    "select_environment": Operations.select_environment,
    "select_study": Operations.select_study,
    "set_camera": Operations.set_camera,
    "set_fps": Operations.set_fps,
    "set_quality": Operations.set_quality,
    "set_studies": Operations.set_studies,
    "update_replay_episode": Operations.update_replay_episode,
}

# OperationResponse field for each response type (SetQuality has none).
_RESPONSE_FIELDS: dict[str, type] = {
    field.name: getattr(client_pb2, field.message_type.name)
    for field in client_pb2.OperationResponse.DESCRIPTOR.oneofs_by_name["type"].fields
}

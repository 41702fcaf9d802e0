"""Records environment episodes for one user's session, through the reference save flow.

`Recorder` runs one episode at a time: `start()` resets the environment, `act(keys)` (sync environments)
or `tick()` (async: the annotator calls it, the recorder steps at the environment's fps with the keys last
pressed) advances it; when the episode terminates or is truncated the client gets a `ConfirmSaveResponse`
and answers with `save(SaveEpisodeRequest)`:

    accept and mark_as_completed -> COMPLETED     accept, not marked -> CANCELLED
    not accept                   -> REJECTED (files kept and registered, so the store holds every attempt;
                                    exports select states, and a rejected episode can still be inspected)

`cancel()` ends the episode as CANCELLED, `abandon_if_idle(now)` as ABANDONED after `idle_timeout` seconds
without user input. A user may also save before the environment ends an episode (environments such as
Robosuite only truncate): the last transition is then written as a truncation, with the episode
statistics in its info. Files are registered only once complete (`pipelines.episodes.publish`).

`record_batch` records episodes with a policy and no person (`stepmark record`).
"""

from __future__ import annotations

import os
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import json_format
from tqdm import tqdm

from annotator.envs import registry
from annotator.envs.base import Environment, Transition
from annotator.envs.render import encode_jpeg
from pipelines.episodes import (
    STORAGE_KINDS,
    EnvSpecs,
    EpisodeMetadata,
    WriterProcess,
    create_writer,
    layout,
    publish,
    stats,
)
from pipelines.episodes.base import EpisodeWriter
from pipelines.errors import StepmarkError
from pipelines.store import errors as store_errors
from pipelines.store.listing import EpisodeQuery
from protos.rlds_creator import client_pb2, study_pb2

QUALITY_MEDIUM = client_pb2.SetQualityRequest.QUALITY_MEDIUM
QUALITY_HIGH = client_pb2.SetQualityRequest.QUALITY_HIGH
SMALL_FRAME = 128  # pixels a side: frames this small get QUALITY_HIGH by default
DEFAULT_IDLE_TIMEOUT = 300.0  # seconds without user input before an episode counts as abandoned
State = study_pb2.Episode.State
Clock = Callable[[], float]


def default_quality(shape: Sequence[int]) -> int:
    """HIGH for frames up to SMALL_FRAME pixels a side (Procgen's 64x64 is unreadable at MEDIUM), else MEDIUM."""
    return QUALITY_HIGH if max(int(shape[0]), int(shape[1])) <= SMALL_FRAME else QUALITY_MEDIUM


@dataclass
class _Pending:
    """The latest transition, held back one step so a user-ended episode can close on it (see module doc)."""

    action: Any
    transition: Transition
    keys: list[str]
    image: bytes


class _Episode:
    """The episode being recorded: its proto, folders, writer and running statistics."""

    def __init__(self, proto: study_pb2.Episode, paths: layout.EpisodePaths, writer: EpisodeWriter) -> None:
        self.proto = proto
        self.paths = paths
        self.writer = writer
        self.stats = stats.StatsAccumulator()
        self.pending: _Pending | None = None
        self.ended = False  # the environment (or max_steps) ended it; waiting for save()
        self.final_stats: stats.EpisodeStats | None = None
        self.last_info: dict[str, Any] = {}


def _find_env_spec(study: study_pb2.StudySpec, env_id: str) -> study_pb2.EnvironmentSpec:
    for spec in study.environment_specs:
        if spec.id == env_id:
            return spec
    ids = ", ".join(s.id for s in study.environment_specs) or "none"
    raise StepmarkError(f"study {study.id!r} has no environment {env_id!r} (environments: {ids})")


def _duration(episode: study_pb2.Episode) -> str:
    seconds = max(0, episode.end_time.ToSeconds() - episode.start_time.ToSeconds())
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Recorder:
    """One user recording episodes of one environment of a study (see the module docstring)."""

    def __init__(
        self,
        repo: Any,
        data_dir: str | Path,
        study_id: str,
        env_id: str,
        user: str,
        *,
        storage: str = "envlogger",
        quality: int | None = QUALITY_MEDIUM,
        seed: int | None = None,
        session_id: str | None = None,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        max_steps: int | None = None,
        clock: Clock = time.monotonic,
        background_writer: bool = False,
        flush_steps: bool = False,
    ) -> None:
        if storage not in STORAGE_KINDS:
            raise StepmarkError(
                f"unknown episode storage {storage!r} (choose from {', '.join(STORAGE_KINDS)})"
            )
        if not user:
            raise StepmarkError("a recording needs a user (agent id)")
        self.repo = repo
        self.data_dir = Path(data_dir)
        self.study_id = study_id
        self.env_id = env_id
        self.user = user
        self.storage = storage
        # None: chosen from the first frame's size (`default_quality`), so small frames stay readable.
        self.quality: int | None = None if quality is None else int(quality)
        # Live recording: every step reaches the writer process at once, so a killed server loses at most the
        # step held back for the save flow (see `pipelines/episodes/publish.py`).
        self.flush_steps = bool(flush_steps)
        self.seed = seed
        self.idle_timeout = float(idle_timeout)
        self.max_steps = max_steps if max_steps and max_steps > 0 else None
        self._clock = clock
        # envlogger writing in a child process (pipelines/episodes/writer_process.py), started on first use.
        self.background_writer = bool(background_writer) and storage == "envlogger"
        self._writer_process: WriterProcess | None = None
        self._closing: deque[tuple[_Episode, study_pb2.Episode]] = deque()  # saved, files being closed
        self._session_id = session_id
        self.session: study_pb2.Session | None = None
        # Fail fast on a wrong study or environment id (the study may still be disabled later: start() checks).
        self.env_spec: study_pb2.EnvironmentSpec = _find_env_spec(repo.get_study(study_id), env_id)
        self.env: Environment | None = None
        self.episode_index = -1
        self.last_episode: study_pb2.Episode | None = None
        self.recovery: publish.RecoveryReport | None = None
        self._current: _Episode | None = None
        self._image = b""
        self._keys: list[str] = []
        self._gamepad: client_pb2.GamepadInput | None = None
        self._last_input = clock()
        self._last_tick = 0.0
        if self.background_writer:  # starts now, so it is up by the first step
            self._writer_process = WriterProcess()

    # ----- lifecycle --------------------------------------------------------------------------------
    @property
    def in_episode(self) -> bool:
        return self._current is not None

    @property
    def episode_steps(self) -> int:
        """Transitions taken in the episode being recorded (0 between episodes)."""
        return self._current.stats.num_steps if self._current is not None else 0

    def note_input(self) -> None:
        """The user is there (e.g. resumed a paused recording): the idle timer starts again."""
        self._last_input = self._clock()

    @property
    def awaiting_save(self) -> bool:
        """True when the environment ended the episode and the client has not answered yet."""
        return self._current is not None and self._current.ended

    def _study(self) -> study_pb2.StudySpec:
        study = self.repo.get_study(self.study_id)
        if study.state == study_pb2.StudySpec.STATE_DISABLED:
            raise store_errors.StudyDisabled(f"study {self.study_id!r} is disabled: it takes no new episodes")
        return study

    def _open_session(self) -> None:
        if self.session is not None:
            return
        # First start for this data dir in this recorder: clean up after recorders that were killed.
        self.recovery = publish.recover_abandoned(self.repo, self.data_dir)
        if self._session_id:
            session = self.repo.get_session(self._session_id)
            if session.study_id != self.study_id or session.user.email != self.user:
                raise StepmarkError(f"session {self._session_id!r} belongs to another study or user")
            self.episode_index = self.repo.count_episodes(EpisodeQuery(session_id=session.id)) - 1  # a count
        else:
            session = self.repo.create_session(self.study_id, self.user)
        self.session = session

    def prepare(self) -> None:
        """Refuses a disabled study and creates the environment now, so a batch fails before it starts.

        `start()` does the same on first use; calling this first is optional.
        """
        self.env_spec = _find_env_spec(self._study(), self.env_id)
        if self.env is None:
            self.env = registry.create(self.env_spec, seed=self.seed)

    def start(self) -> client_pb2.StepResponse:
        """Starts the next episode (opening the session and environment on first use)."""
        if self._current is not None:
            raise StepmarkError("an episode is already being recorded: save or cancel it first")
        study = self._study()
        self.env_spec = _find_env_spec(study, self.env_id)
        self._open_session()
        if self.background_writer and (self._writer_process is None or self._writer_process.closed):
            self._writer_process = WriterProcess()  # boots while the environment is created
        if self.env is None:
            self.env = registry.create(self.env_spec, seed=self.seed)
        assert self.session is not None
        self.episode_index += 1
        episode_id = uuid.uuid4().hex
        paths = layout.episode_paths(self.data_dir, self.study_id, self.session.id, self.env_id, episode_id)
        proto = study_pb2.Episode(
            id=episode_id,
            study_id=self.study_id,
            environment_id=self.env_id,
            session_id=self.session.id,
            user=study_pb2.User(email=self.user),
        )
        proto.start_time.GetCurrentTime()
        specs = EnvSpecs(self.env.observation_spec(), self.env.action_spec())
        dataset_meta = {
            "study_id": self.study_id,
            "env_id": self.env_id,
            "env_spec": json_format.MessageToJson(self.env_spec, indent=None),
        }
        # The started marker (its owner: host, pid, start time) before any episode file, so recovery never
        # mistakes a folder being filled for a leftover.
        paths.temp.mkdir(parents=True)
        try:
            publish.write_started(paths.temp, self._started_marker(proto, paths))
            writer = create_writer(
                self.storage, paths.temp, paths.relative, specs, dataset_meta, process=self._writer_process
            )
        except BaseException:
            publish.discard(paths.temp)
            self.episode_index -= 1
            raise
        self._current = _Episode(proto, paths, writer)
        try:
            first = self.env.reset()
            self._image = self._render()
            writer.write_first(first.observation, image=self._image, info=first.info)
        except BaseException:
            self._drop_current()
            raise
        self._last_input = self._clock()
        self._last_tick = self._clock()
        self._keys, self._gamepad = [], None
        return self._step_response(0.0)

    def _started_marker(self, proto: study_pb2.Episode, paths: layout.EpisodePaths) -> study_pb2.Episode:
        """What recovery needs to register this episode if the process dies while recording it."""
        marker = study_pb2.Episode()
        marker.CopyFrom(proto)
        if self.storage == "envlogger":
            marker.storage.environment_logger.tag_directory = str(paths.relative)
        else:
            marker.storage.pickle.path = str(paths.relative / layout.PICKLE_NAME)
        marker.metadata.update({"kind": "env", "env_family": registry.family(self.env_spec),
                                "storage_format": self.storage, "agent_id": self.user})  # fmt: skip
        return marker

    def close(self) -> None:
        """Ends the session's recording: an unfinished episode with steps is registered as ABANDONED."""
        try:
            try:
                self.publish_closed(wait=True)
            finally:
                if self._current is not None:
                    self._finish(State.STATE_ABANDONED, keep_empty=False)
        finally:
            if self._writer_process is not None:
                self._writer_process.stop()
                self._writer_process = None
            if self.env is not None:
                self.env.close()
                self.env = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- stepping ---------------------------------------------------------------------------------
    def _require_running(self) -> _Episode:
        if self._current is None:
            raise StepmarkError("no episode is being recorded: call start() first")
        if self._current.ended:
            raise StepmarkError("the episode has ended: answer the save confirmation first")
        return self._current

    def act(
        self, keys: Sequence[str], gamepad: client_pb2.GamepadInput | None = None
    ) -> client_pb2.StepResponse | client_pb2.ConfirmSaveResponse:
        """User input. Sync environments step once; async ones remember the keys for `tick()`."""
        self._require_running()
        assert self.env is not None
        self._keys = [str(k) for k in keys]
        self._gamepad = gamepad
        self._last_input = self._clock()
        if gamepad is not None and gamepad.id and self._current is not None:
            self._current.proto.controller_id = gamepad.id
        if not self.env.sync:
            return self._step_response(0.0)
        return self.step_action(self.env.action_from_input(self._keys, gamepad), self._keys)

    def step_held(
        self, keys: Sequence[str] | None = None, gamepad: client_pb2.GamepadInput | None = None
    ) -> client_pb2.StepResponse | client_pb2.ConfirmSaveResponse:
        """Async: one frame now, with `keys`/`gamepad` (default: those last given to `act`). The caller owns
        the clock (`tick()` here, the live session's frame clock in the browser recorder); this is no input,
        so it does not reset the idle timer."""
        if keys is None:
            keys, gamepad = self._keys, self._gamepad
        assert self.env is not None
        keys = [str(k) for k in keys]
        return self.step_action(self.env.action_from_input(keys, gamepad), keys)

    def tick(
        self, now: float | None = None
    ) -> client_pb2.StepResponse | client_pb2.ConfirmSaveResponse | None:
        """For async environments: one step with the held keys when 1/fps has passed, else None.

        An async environment keeps stepping while nobody plays, so the clock that drives it also ends an
        idle episode: after `idle_timeout` seconds without input it is ABANDONED (`last_episode`) and
        None is returned, instead of growing until max_episode_steps (or forever when that is 0).
        """
        if self._current is None or self._current.ended or self.env is None or self.env.sync:
            return None
        now = self._clock() if now is None else now
        if now - self._last_input > self.idle_timeout:
            self.abandon_if_idle(now)
            return None
        if now - self._last_tick < 1.0 / self.env.fps - 1e-6:  # timers jitter; float sums too
            return None
        self._last_tick = now
        return self.step_held()

    def step_action(
        self, action: Any, keys: Sequence[str] = ()
    ) -> client_pb2.StepResponse | client_pb2.ConfirmSaveResponse:
        """Steps with an explicit action (policies, and the two input paths above)."""
        ep = self._require_running()
        assert self.env is not None
        t = self.env.step(action)
        ep.stats.add(t.reward)
        ep.last_info = t.info
        self._image = self._render()
        if ep.pending is not None:
            self._write(ep.pending)
        pending = _Pending(action=action, transition=t, keys=list(keys), image=self._image)
        truncated = t.truncated or (
            not t.terminated and self.max_steps is not None and ep.stats.num_steps >= self.max_steps
        )
        if t.terminated or truncated:
            ep.pending = None
            self._end(ep, pending, terminated=t.terminated)
            return client_pb2.ConfirmSaveResponse(mark_as_completed=True)
        ep.pending = pending
        return self._step_response(t.reward)

    def _write(self, p: _Pending, *, terminated: bool = False, truncated: bool = False, info=None) -> None:
        assert self._current is not None
        t = p.transition
        try:
            self._current.writer.write_step(
                p.action,
                t.observation,
                t.reward,
                terminated=terminated,
                truncated=truncated,
                image=p.image,
                keys=p.keys,
                info=t.info if info is None else info,
            )
            if self.flush_steps and self._writer_process is not None:
                self._writer_process.flush()
        except StepmarkError:  # the writer lost the episode (e.g. its process died): it cannot be saved
            self._drop_current()
            raise

    def _end(self, ep: _Episode, last: _Pending | None, *, terminated: bool) -> None:
        """Writes the finishing transition with `info["episode"]` and freezes the statistics."""
        assert self.env is not None
        success = self.env.success(last.transition.info) if last is not None else None
        ep.final_stats = ep.stats.finish(success)
        if last is not None:
            info = dict(last.transition.info)
            info.update(stats.episode_info(ep.final_stats))
            self._write(last, terminated=terminated, truncated=not terminated, info=info)
        ep.ended = True

    # ----- save flow --------------------------------------------------------------------------------
    def save(self, request: client_pb2.SaveEpisodeRequest) -> client_pb2.SaveEpisodeResponse:
        """Ends the episode in the state the request asks for and registers it (see module docstring)."""
        episode = self.save_episode(request)
        assert episode is not None
        return client_pb2.SaveEpisodeResponse(episode=self.episode_metadata(episode))

    def save_episode(
        self, request: client_pb2.SaveEpisodeRequest, *, wait: bool = True
    ) -> study_pb2.Episode | None:
        """`save` without building the client's response (two store reads): the registered episode.

        `wait=False` (batch recording with the background writer): the child process finishes the files
        while the caller records the next episode; the episode is registered later, by
        `publish_closed()` (and by `close()`), and None is returned.
        """
        if self._current is None:
            raise StepmarkError("no episode to save")
        if not request.accept:
            state = State.STATE_REJECTED
        elif request.mark_as_completed:
            state = State.STATE_COMPLETED
        else:
            state = State.STATE_CANCELLED
        episode = self._finish(state, keep_empty=True, wait=wait)
        assert episode is not None or not wait
        return episode

    def cancel(self) -> study_pb2.Episode | None:
        """Ends the episode as CANCELLED (nothing is registered if no step was taken)."""
        if self._current is None:
            return None
        return self._finish(State.STATE_CANCELLED, keep_empty=False)

    def abandon_if_idle(self, now: float | None = None) -> study_pb2.Episode | None:
        """ABANDONED when no user input came for `idle_timeout` seconds (empty episodes are dropped)."""
        if self._current is None:
            return None
        now = self._clock() if now is None else now
        if now - self._last_input <= self.idle_timeout:
            return None
        return self._finish(State.STATE_ABANDONED, keep_empty=False)

    def _finish(self, state: int, *, keep_empty: bool, wait: bool = True) -> study_pb2.Episode | None:
        ep = self._current
        assert ep is not None and self.env is not None
        if wait:
            self.publish_closed(wait=True)  # earlier episodes first: the writer answers closes in order
        if not ep.ended:
            last, ep.pending = ep.pending, None
            self._end(ep, last, terminated=False)
        assert ep.final_stats is not None
        if ep.final_stats.l == 0 and not keep_empty:
            self._drop_current()
            return None
        proto = ep.proto
        proto.state = state
        proto.end_time.GetCurrentTime()
        stats.apply_to_episode(proto, ep.final_stats)
        proto.metadata.update(
            {
                "kind": "env",
                "env_family": registry.family(self.env_spec),
                "storage_format": self.storage,
                "agent_id": self.user,
            }
        )
        if self.seed is not None:
            proto.metadata.update({"seed": self.seed})
        meta = EpisodeMetadata(
            agent_id=self.user,
            episode_id=proto.id,
            env_id=self.env_id,
            study_id=self.study_id,
            session_id=proto.session_id,
        )
        try:
            ep.writer.begin_close(meta)
        except BaseException:
            self._drop_current()  # files not complete: nothing to publish, the temp folder goes
            raise
        self._current = None
        self._closing.append((ep, proto))
        if not wait:
            return None
        return self.publish_closed(wait=True)[-1]

    def publish_closed(self, *, wait: bool) -> list[study_pb2.Episode]:
        """Registers the saved episodes whose files are complete (all of them, waiting, with `wait`).

        An episode whose writer failed is deleted, never registered; the first such error is raised
        after the others were handled.
        """
        registered: list[study_pb2.Episode] = []
        error: BaseException | None = None
        while self._closing:
            ep, proto = self._closing[0]
            if not wait and error is None and not ep.writer.close_done():
                break
            self._closing.popleft()
            try:
                proto.storage.CopyFrom(ep.writer.finish_close())
            except StepmarkError as exc:
                publish.discard(ep.paths.temp)
                error = error or exc
                continue
            episode = publish.publish(self.repo, ep.paths, proto)
            self.last_episode = episode
            registered.append(episode)
        if error is not None:
            raise error
        return registered

    def _drop_current(self) -> None:
        ep, self._current = self._current, None
        if ep is not None:
            try:
                if self._closing:  # the abort's answer comes after theirs
                    self.publish_closed(wait=True)
            finally:
                ep.writer.abort()
                publish.discard(ep.paths.temp)
                self.episode_index -= 1

    def episode_metadata(self, episode: study_pb2.Episode) -> client_pb2.EpisodeMetadata:
        study = self.repo.get_study(self.study_id)
        return client_pb2.EpisodeMetadata(
            study=study,
            env=self.env_spec,
            episode=episode,
            duration=_duration(episode),
            status=State.Name(episode.state).removeprefix("STATE_").capitalize(),
            can_delete=bool(self.repo.can_delete(episode, self.user)),
        )

    # ----- display settings -------------------------------------------------------------------------
    def set_fps(self, request: client_pb2.SetFpsRequest) -> client_pb2.SetFpsResponse:
        if self.env is None:
            raise StepmarkError("no environment yet: call start() first")
        self.env.set_fps(request.fps)
        return client_pb2.SetFpsResponse()

    def set_quality(self, request: client_pb2.SetQualityRequest) -> client_pb2.StepResponse:
        """Later frames (shown and stored) use the new JPEG quality; returns the current frame in it."""
        self.quality = int(request.quality)
        if self.env is not None and self._current is not None:
            self._image = self._render()
        return self._step_response(0.0)

    def set_camera(self, request: client_pb2.SetCameraRequest) -> client_pb2.SetCameraResponse:
        if self.env is None:
            raise StepmarkError("no environment yet: call start() first")
        name = self.env.set_camera(request.index)
        if self._current is not None:
            self._image = self._render()
        return client_pb2.SetCameraResponse(index=request.index, name=name)

    # ----- helpers ----------------------------------------------------------------------------------
    def _render(self) -> bytes:
        assert self.env is not None
        frame = self.env.render()
        if self.quality is None:
            self.quality = default_quality(frame.shape)
        return encode_jpeg(frame, self.quality)

    def _step_response(self, reward: float) -> client_pb2.StepResponse:
        steps = self._current.stats.num_steps if self._current is not None else 0
        return client_pb2.StepResponse(
            image=self._image, episode_index=max(self.episode_index, 0), episode_steps=steps, reward=reward
        )

    @property
    def frame(self) -> bytes:
        """JPEG of the latest frame (also after the episode ended, for the confirmation dialog)."""
        return self._image


# ----- batch recording ----------------------------------------------------------------------------
Policy = Callable[[Environment, np.random.Generator], Any]
POLICIES: dict[str, Policy] = {
    "random": lambda env, rng: env.sample_action(rng),
    "noop": lambda env, rng: env.noop_action(),
}


def record_batch(
    repo: Any,
    data_dir: str | Path,
    study_id: str,
    env_id: str,
    n: int,
    policy: str = "random",
    user: str = "",
    seed: int | None = None,
    progress: bool = True,
    *,
    storage: str = "envlogger",
    max_steps: int | None = None,
    quality: int = QUALITY_MEDIUM,
    background_writer: bool | None = None,
    stop: Callable[[], bool] | None = None,
) -> list[study_pb2.Episode]:
    """Records `n` COMPLETED episodes with a policy (`random` or `noop`); a tqdm bar shows progress.

    Interrupted runs keep what was saved; the unfinished episode is registered as ABANDONED. `stop` is
    polled before every step: when it returns True the batch ends there, the same way but at a clean point
    (a KeyboardInterrupt can land between creating an episode's folder and tracking it).
    `background_writer` (default: when this process may use more than one CPU) writes the envlogger files
    in a child process that finishes each episode's files while the next one is recorded. It costs more
    CPU in all (pipe copy, one more parse) and pays off only with a core to spare: see
    bench/bench_record.py and schemas/episode_storage.md for the measured figures.
    """
    if background_writer is None:
        background_writer = len(os.sched_getaffinity(0)) > 1
    if policy not in POLICIES:
        raise StepmarkError(f"unknown policy {policy!r} (choose from {', '.join(POLICIES)})")
    if n < 1:
        raise StepmarkError(f"number of episodes must be >= 1, got {n}")
    choose = POLICIES[policy]
    rng = np.random.default_rng(seed)
    episodes: list[study_pb2.Episode] = []
    recorder = Recorder(
        repo,
        data_dir,
        study_id,
        env_id,
        user,
        storage=storage,
        seed=seed,
        max_steps=max_steps,
        quality=quality,
        background_writer=background_writer,
    )
    with recorder:
        recorder.prepare()  # a disabled study or unusable environment fails before the progress bar shows
        _record_loop(recorder, n, choose, rng, progress, episodes, stop or (lambda: False))
    return episodes


def _record_loop(
    recorder: Recorder,
    n: int,
    choose: Policy,
    rng: np.random.Generator,
    progress: bool,
    episodes: list[study_pb2.Episode],
    stop: Callable[[], bool],
) -> None:
    """`n` policy-driven episodes, each saved as COMPLETED and appended to `episodes` once registered.

    When `stop()` turns True the unfinished episode is left to `Recorder.close()` (ABANDONED).
    """
    with tqdm(total=n, unit="episode", disable=not progress, desc=f"record {recorder.env_id}") as bar:
        for _ in range(n):
            if stop():
                break
            recorder.start()
            assert recorder.env is not None
            ended = False
            while not stop():
                response = recorder.step_action(choose(recorder.env, rng))
                if isinstance(response, client_pb2.ConfirmSaveResponse):
                    ended = True
                    break
            if not ended:
                break
            request = client_pb2.SaveEpisodeRequest(accept=True, mark_as_completed=True)
            recorder.save_episode(request, wait=False)  # the writer closes it while we record the next
            done = recorder.publish_closed(wait=False)
            for episode in done:
                bar.set_postfix(steps=episode.num_steps, ret=f"{episode.total_reward:g}")
            bar.update(len(done))
            episodes.extend(done)
        done = recorder.publish_closed(wait=True)
        bar.update(len(done))
        episodes.extend(done)

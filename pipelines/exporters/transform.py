"""Pure per-episode transforms for export: episode + its steps in, one `ExportEpisode` out (no I/O).

What happens to an episode on its way into a dataset (reference semantics of `DownloadEpisodesRequest`):
- `end_of_episode_tags`: the episode is cut at its first step carrying one of the tags. That step becomes
  the last one; it is a truncation (`is_last` true, `is_terminal` false, discount 1), the steps after it are
  dropped, and return and length are recomputed from the kept transitions.
- every step tag used anywhere in the selection becomes a boolean step field `tag:<label>`.
- `strip_internal_metadata`: images, pressed keys, environment info, episode tags and notes are dropped;
  ids and statistics stay, so every step has the same fixed-shape fields.
- statistics: every episode carries return/length/success (from the store, else derived from the steps; a
  statistic that is neither is an error naming the episode), and `info["episode"] = {r, l, s, mask}` on the
  last step, the end of the finished transition (mask false, zeros, on every other step). Field names:
  `schemas/dataset_spec.md`.

Steps follow the RLDS alignment of `pipelines.episodes.Step`: step i holds observation i, the action taken on
it and the reward/info of that transition; the last step holds the final observation (no action).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.episodes.base import Step, to_jsonable
from pipelines.episodes.stats import EPISODE_KEY, SUCCESS_KEY, EpisodeStats
from pipelines.errors import StepmarkError
from protos.llm4mobile import episode_pb2
from protos.rlds_creator import study_pb2
from protos.stepmark import ui_episode_pb2

TAG_PREFIX = "tag:"
KIND_ENV = "env"
KIND_UI = "ui"
# Success flags environments put in a transition's info, besides info["episode"]["s"].
_SUCCESS_INFO_KEYS = ("success", "is_success")


class MissingStatistic(StepmarkError):
    """An episode whose return, length or success is neither stored nor derivable from its steps."""


class InconsistentEpisode(StepmarkError):
    """The store's figures and the episode's step data disagree (e.g. a different number of steps)."""


@dataclass(frozen=True)
class TransformOptions:
    """The per-episode options of an export (`DownloadEpisodesRequest` + the selection's step tags)."""

    strip_internal_metadata: bool = False
    end_of_episode_tags: tuple[str, ...] = ()
    # Every step tag label used in the selection, sorted: each becomes a `tag:<label>` field on every step.
    step_tag_labels: tuple[str, ...] = ()


@dataclass
class ExportStep:
    """One exported RLDS step. `action` is None on the final-observation step."""

    observation: Any
    action: Any
    reward: float
    discount: float
    is_first: bool
    is_last: bool
    is_terminal: bool
    tags: dict[str, bool]  # "tag:<label>" -> whether this step carries the tag
    episode: dict[str, Any]  # info["episode"]: {"r", "l", "s", "mask"}
    # Internal metadata; None when stripped.
    image: bytes | None = None
    keys: list[str] | None = None
    info: dict[str, Any] | None = None


@dataclass
class ExportEpisodeMeta:
    """Episode-level fields of an exported episode (names as in `schemas/dataset_spec.md`)."""

    episode_index: int
    episode_id: str
    study_id: str
    session_id: str
    environment_id: str
    agent_id: str
    kind: str
    state: str
    episode_return: float
    episode_length: int
    episode_success: bool
    truncated_by_tag: str = ""
    tags: list[str] | None = None  # None when stripped
    notes: str | None = None  # None when stripped
    # UI episodes only: app_package, goal, source (empty strings when the trace had none).
    ui: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain values for envlogger's episode metadata (reference names `num_steps`/`total_reward` too)."""
        d: dict[str, Any] = {
            "episode_index": int(self.episode_index),
            "episode_id": self.episode_id,
            "study_id": self.study_id,
            "session_id": self.session_id,
            "environment_id": self.environment_id,
            "agent_id": self.agent_id,
            "kind": self.kind,
            "state": self.state,
            "episode_return": float(self.episode_return),
            "episode_length": int(self.episode_length),
            "episode_success": bool(self.episode_success),
            "num_steps": int(self.episode_length),
            "total_reward": float(self.episode_return),
            "truncated_by_tag": self.truncated_by_tag,
        }
        if self.tags is not None:
            d["tags"] = list(self.tags)
        if self.notes is not None:
            d["notes"] = self.notes
        d.update(self.ui)
        return d


@dataclass
class ExportEpisode:
    meta: ExportEpisodeMeta
    steps: list[ExportStep]

    @property
    def num_steps(self) -> int:
        return len(self.steps)


def episode_name(episode: study_pb2.Episode) -> str:
    """How errors and dead letters name an episode: `study/session/episode`."""
    return f"{episode.study_id}/{episode.session_id}/{episode.id}"


def episode_kind(episode: study_pb2.Episode) -> str:
    """`ui` for converted UI traces, `env` for environment episodes (the store's `metadata["kind"]`)."""
    if episode.HasField("metadata") and "kind" in episode.metadata.fields:
        kind = episode.metadata["kind"]
        if kind in (KIND_UI, KIND_ENV):
            return str(kind)
    return KIND_UI if not episode.HasField("storage") else KIND_ENV


def step_tag_labels(episodes: Iterable[study_pb2.Episode]) -> tuple[str, ...]:
    """Sorted set of the step tag labels used in the episodes (reference: `_get_step_tags`)."""
    labels: set[str] = set()
    for episode in episodes:
        for meta in episode.step_metadata.values():
            labels.update(tag.label for tag in meta.tags if tag.label)
    return tuple(sorted(labels))


def step_tags(episode: study_pb2.Episode, index: int) -> set[str]:
    meta = episode.step_metadata.get(index)
    return {tag.label for tag in meta.tags} if meta is not None else set()


def cut_point(episode: study_pb2.Episode, end_tags: Iterable[str]) -> tuple[int, str] | None:
    """The first step (lowest index) carrying one of `end_tags`, with the tag; None when there is none."""
    wanted = set(end_tags)
    if not wanted:
        return None
    for index in sorted(episode.step_metadata):
        hit = sorted(step_tags(episode, index) & wanted)
        if hit:
            return index, hit[0]
    return None


def _stored_stats(episode: study_pb2.Episode) -> tuple[float | None, int | None, bool | None]:
    r = float(episode.total_reward) if episode.HasField("total_reward") else None
    n = int(episode.num_steps) if episode.HasField("num_steps") else None
    s: bool | None = None
    if episode.HasField("metadata") and SUCCESS_KEY in episode.metadata.fields:
        s = bool(episode.metadata[SUCCESS_KEY])
    return r, n, s


def _info_success(info: dict[str, Any] | None) -> bool | None:
    """Success as a transition's info reports it: info["episode"]["s"], else info["success"/"is_success"]."""
    if not isinstance(info, dict):
        return None
    entry = info.get(EPISODE_KEY)
    if isinstance(entry, dict) and entry.get("mask", True) and "s" in entry:
        return bool(entry["s"])
    for key in _SUCCESS_INFO_KEYS:
        if key in info and isinstance(info[key], bool | int | float | np.bool_ | np.number):
            return bool(info[key])
    return None


def _finite(value: float, what: str, episode: study_pb2.Episode) -> float:
    if not math.isfinite(value):
        raise InconsistentEpisode(f"episode {episode_name(episode)}: {what} is {value!r}")
    return value


def compute_stats(episode: study_pb2.Episode, steps: Sequence[Step], cut: int | None) -> EpisodeStats:
    """Return, length (transitions) and success of the exported episode.

    Uncut: the store's figures (`total_reward`, `num_steps`, `metadata["success"]`), each one derived from
    the steps when the store lacks it: return = sum of the step rewards, length = steps minus the final
    observation, success = the finished transition's info. Cut at step k: return = rewards of steps 0..k-1,
    length = k transitions (in the store's own counting), success = whether any kept transition's info
    reports success. A statistic that can be neither read nor derived raises `MissingStatistic`.
    """
    name = episode_name(episode)
    stored_r, stored_l, stored_s = _stored_stats(episode)
    n = len(steps)
    if n == 0:
        raise InconsistentEpisode(f"episode {name}: no steps in its data")
    # How the store counts length against the data's steps: transitions (n - 1) by convention.
    offset = 1 if stored_l is None else n - stored_l
    if offset not in (0, 1):
        raise InconsistentEpisode(
            f"episode {name}: the store says {stored_l} steps but its data holds {n} (expected {n - 1})"
        )
    if cut is None:
        r = stored_r if stored_r is not None else sum(float(s.reward) for s in steps)
        length = stored_l if stored_l is not None else n - 1
        s_val = stored_s
        if s_val is None:
            for step in reversed(steps):
                s_val = _info_success(step.info)
                if s_val is not None:
                    break
        if s_val is None:
            raise MissingStatistic(
                f"episode {name}: success is neither stored (metadata.success) nor in its steps' info"
            )
        return EpisodeStats(r=_finite(float(r), "return", episode), l=int(length), s=bool(s_val))
    r = sum(float(steps[i].reward) for i in range(cut))
    successes = [_info_success(steps[i].info) for i in range(cut)]
    return EpisodeStats(
        r=_finite(r, "return", episode), l=max(cut + 1 - offset, 0), s=any(bool(x) for x in successes)
    )


def _episode_entry(stats: EpisodeStats | None) -> dict[str, Any]:
    if stats is None:
        return {"r": 0.0, "l": 0, "s": False, "mask": False}
    return {"r": float(stats.r), "l": int(stats.l), "s": bool(stats.s), "mask": True}


def finished_step_index(num_steps: int) -> int:
    """The RLDS step whose action finished the episode (the one before the final observation; the only step of
    a one-step episode)."""
    return max(num_steps - 2, 0)


# --- UI episodes: protos to plain fields ------------------------------------------------------------

UI_OBJECT_FIELDS = (
    "id",
    "index",
    "parent_index",
    "type",
    "android_class",
    "text",
    "content_desc",
    "resource_id",
    "bbox",
    "grid_location",
    "depth",
    "is_leaf",
    "is_actionable",
    "clickable",
    "visible",
    "enabled",
    "scrollable",
    "checked",
)


def ui_observation(observation: episode_pb2.Observation) -> dict[str, Any]:
    """A UI screen as fixed-named fields: the screenshot bytes, its size, an object table, and the proto.

    The object table has one row per object (N varies by screen): `bbox` is [N, 4] int32 as
    (left, top, right, bottom) in screenshot pixels. `proto` is the whole `llm4mobile.proto.Observation`
    without its screenshot (kept once, in `screenshot`), so nothing the converter produced is lost.
    """
    objs = observation.objects
    table: dict[str, Any] = {
        "id": [o.id for o in objs],
        "index": np.array([o.index for o in objs], np.int32),
        "parent_index": np.array([o.parent_index for o in objs], np.int32),
        "type": np.array([int(o.type) for o in objs], np.int32),
        "android_class": [o.android_class for o in objs],
        "text": [o.text for o in objs],
        "content_desc": [o.content_desc for o in objs],
        "resource_id": [o.resource_id for o in objs],
        "bbox": np.array(
            [[o.bbox.left, o.bbox.top, o.bbox.right, o.bbox.bottom] for o in objs], np.int32
        ).reshape(-1, 4),
        "grid_location": np.array([int(o.grid_location) for o in objs], np.int32),
        "depth": np.array([o.dom_position.depth for o in objs], np.int32),
        "is_leaf": np.array([o.is_leaf for o in objs], np.bool_),
        "is_actionable": np.array([o.is_actionable for o in objs], np.bool_),
        "clickable": np.array([o.clickable for o in objs], np.bool_),
        "visible": np.array([o.visible for o in objs], np.bool_),
        "enabled": np.array([o.enabled for o in objs], np.bool_),
        "scrollable": np.array([o.scrollable for o in objs], np.bool_),
        "checked": np.array([o.checked for o in objs], np.bool_),
    }
    without_screenshot = episode_pb2.Observation()
    without_screenshot.CopyFrom(observation)
    without_screenshot.ClearField("screenshot")
    return {
        "screenshot": bytes(observation.screenshot),
        "screen_width": np.int32(observation.screen_width),
        "screen_height": np.int32(observation.screen_height),
        "objects": table,
        "proto": without_screenshot.SerializeToString(deterministic=True),
    }


def ui_action(action: ui_episode_pb2.Action | None, *, strip: bool) -> dict[str, Any]:
    """A `stepmark.Action` as scalars; `target_index` is -1 when no object was hit, `raw_json` kept unstripped."""
    a = action if action is not None else ui_episode_pb2.Action()
    out: dict[str, Any] = {
        "type": np.int32(a.type),
        "type_name": ui_episode_pb2.Action.Type.Name(a.type),
        "x": np.int32(a.x),
        "y": np.int32(a.y),
        "end_x": np.int32(a.end_x),
        "end_y": np.int32(a.end_y),
        "target_index": np.int32(a.target_index if a.HasField("target_index") else -1),
        "target_id": a.target_id,
        "text": a.text,
        "duration_ms": np.int64(a.duration_ms),
    }
    if not strip:
        out["raw_json"] = a.raw_json
    return out


# --- the transform -----------------------------------------------------------------------------------


def _plain_info(info: dict[str, Any] | None) -> dict[str, Any]:
    """A copy to edit; readers already hand over JSON values (decoded from the stored JSON text)."""
    out = dict(info or {})
    if any(not isinstance(v, str | int | float | bool | list | dict | type(None)) for v in out.values()):
        out = to_jsonable(out)
    return out


def transform_episode(
    index: int,
    episode: study_pb2.Episode,
    steps: Sequence[Step],
    options: TransformOptions,
    reader_metadata: dict[str, Any] | None = None,
) -> ExportEpisode:
    """Applies truncation, tag fields, stripping and statistics to one episode's steps."""
    kind = episode_kind(episode)
    strip = options.strip_internal_metadata
    steps = list(steps)
    cut_at: int | None = None
    cut_label = ""
    hit = cut_point(episode, options.end_of_episode_tags)
    if hit is not None:
        k, label = hit
        cut_label = label
        if k < len(steps) - 1:  # a tag on the final observation cuts nothing
            cut_at = k
    stats = compute_stats(episode, steps, cut_at)
    kept = steps[: cut_at + 1] if cut_at is not None else steps
    finished = finished_step_index(len(kept))

    out_steps: list[ExportStep] = []
    for i, step in enumerate(kept):
        last = i == len(kept) - 1
        truncated_here = cut_at is not None and last
        labels = step_tags(episode, i)
        # info["episode"] sits with the final observation (the `is_last` step; envlogger's LAST record), where
        # TFDS's own envlogger->RLDS conversion puts it too; zeros with mask false everywhere else.
        entry = _episode_entry(stats if last else None)
        info = None
        if not strip:
            # The environment's info of the finishing transition carries the same figures, as recorded.
            info = _plain_info(step.info if not truncated_here else {})
            info.pop(EPISODE_KEY, None)
            if i == finished:
                info[EPISODE_KEY] = _episode_entry(stats)
        if kind == KIND_UI:
            observation = ui_observation(step.observation)
            # UI traces record an action on every screen, the last one included (unless cut there).
            action = ui_action(None if truncated_here else step.action, strip=strip)
        else:
            observation = step.observation
            action = None if last else step.action
        out_steps.append(
            ExportStep(
                observation=observation,
                action=action,
                reward=0.0 if truncated_here else float(step.reward),
                discount=1.0 if truncated_here else float(step.discount),
                is_first=i == 0,
                is_last=last,
                is_terminal=False if truncated_here else bool(step.is_terminal and last),
                tags={f"{TAG_PREFIX}{label}": label in labels for label in options.step_tag_labels},
                episode=entry,
                image=None if strip else step.image,
                keys=None if strip or truncated_here else [str(k) for k in step.keys],
                info=info,
            )
        )

    ui_fields: dict[str, str] = {}
    if kind == KIND_UI:
        md = reader_metadata or {}
        ui_fields = {key: str(md.get(key, "") or "") for key in ("app_package", "goal", "source")}
    meta = ExportEpisodeMeta(
        episode_index=index,
        episode_id=episode.id,
        study_id=episode.study_id,
        session_id=episode.session_id,
        environment_id=episode.environment_id,
        agent_id=episode.user.email,
        kind=kind,
        state=study_pb2.Episode.State.Name(episode.state),
        episode_return=stats.r,
        episode_length=stats.l,
        episode_success=stats.s,
        truncated_by_tag=cut_label if cut_at is not None else "",
        tags=None if strip else [t.label for t in episode.tags],
        notes=None if strip else episode.notes,
        ui=ui_fields,
    )
    return ExportEpisode(meta=meta, steps=out_steps)


def info_json(info: dict[str, Any] | None) -> str:
    """A step's info as the JSON text both formats store (envlogger's codec refuses mixed lists)."""
    return json.dumps(info or {}, sort_keys=True, allow_nan=False)

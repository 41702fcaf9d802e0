"""Pure per-episode transforms for export: episode + its steps in, one `ExportEpisode` out (no I/O).

What happens to an episode on its way into a dataset (reference semantics of `DownloadEpisodesRequest`):
- `end_of_episode_tags`: the episode is cut at its first step carrying one of the tags. That step becomes
  the final observation; it is a truncation (`is_terminal` false), the steps after it are dropped, and return
  and length are recomputed from the kept transitions.
- every step tag used anywhere in the selection becomes a boolean step field `tag:<label>`.
- `strip_internal_metadata`: images, pressed keys, environment info, episode tags and notes are dropped;
  ids and statistics stay, so every step has the same fixed-shape fields.
- statistics: every episode carries return/length/success (length and success from the store, else derived
  from the steps; a statistic that is neither is an error naming the episode; the return is always the float64
  sum of the exported rewards), and `info["episode"] = {r, l, s, mask}` on the
  last step, the end of the finished transition (mask false, zeros, on every other step). Field names:
  `schemas/dataset_spec.md`.

Steps follow the one step contract of `schemas/dataset_spec.md` (RLDS alignment): step i holds observation i,
the action taken on it and the reward/discount/info of that transition; the final step holds the last
observation with no action (padding in the files), reward 0 and discount 0.
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
from pipelines.step_text import texts_of
from protos.llm4mobile import episode_pb2
from protos.rlds_creator import study_pb2
from protos.stepmark import ui_episode_pb2

TAG_PREFIX = "tag:"
KIND_ENV = "env"
KIND_UI = "ui"
# The environment id of UI datasets (the store's UI studies use the same name: pipelines/ui_import.py).
UI_ENVIRONMENT_ID = "android-ui"
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
    # UI episodes: 0 = the full ragged object table; N = `--ui-objects padded:N` (fixed-shape, with a mask).
    ui_objects_padded: int = 0


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
    # Study fields (issue 26): "field:<name>", "field:<name>:origin" and ":source" -> typed value
    # (exporters/study_fields.py)
    fields: dict[str, Any] = field(default_factory=dict)


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
    split: str = ""  # the --split this episode belongs to ("" without --split)
    tags: list[str] | None = None  # None when stripped
    notes: str | None = None  # None when stripped
    # UI episodes only: app_package, goal, source (empty strings when the trace had none).
    ui: dict[str, str] = field(default_factory=dict)
    # The episode's position among its dataset's selected episodes (the driver's count, before the workers
    # left some out: skipped, dead letters). `episode_index` starts as it and is made the position in the
    # written dataset by the last step (`pipelines/export.py` `_count_outcome`); -1: the same as `episode_index`.
    selection_index: int = -1

    def to_dict(self) -> dict[str, Any]:
        """Plain values for envlogger's episode metadata (reference names `num_steps`/`total_reward` too)."""
        d: dict[str, Any] = {
            "episode_index": int(self.episode_index),
            "selection_index": int(self.episode_index if self.selection_index < 0 else self.selection_index),
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
        if self.split:
            d["split"] = self.split
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

    Uncut: the store's figures (`num_steps`, `metadata["success"]`), each one derived from the steps when the
    store lacks it: length = steps minus the final observation, success = the finished transition's info.
    The return is always the float64 sum of the transitions' rewards (the store's `total_reward` is a float32:
    NetHack's 0.78 read back as 0.7799999713897705; `transform_episode` sums the exported rewards once more,
    so `r` is exactly what a consumer adds up). Cut at step k: return = rewards of steps 0..k-1,
    length = k transitions (in the store's own counting), success = whether any kept transition's info
    reports success. A statistic that can be neither read nor derived raises `MissingStatistic`.
    """
    name = episode_name(episode)
    _, stored_l, stored_s = _stored_stats(episode)
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
        r = math.fsum(float(s.reward) for s in steps[:-1])  # the final step's reward is exported as 0
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
    r = math.fsum(float(steps[i].reward) for i in range(cut))
    successes = [_info_success(steps[i].info) for i in range(cut)]
    return EpisodeStats(
        r=_finite(r, "return", episode), l=max(cut + 1 - offset, 0), s=any(bool(x) for x in successes)
    )


def _episode_entry(stats: EpisodeStats | None) -> dict[str, Any]:
    if stats is None:
        return {"r": 0.0, "l": 0, "s": False, "mask": False}
    return {"r": float(stats.r), "l": int(stats.l), "s": bool(stats.s), "mask": True}


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
    "labels",
    "human_drawn",
    "box_corrected",
    "window",
)
#: Columns of a UI observation's `windows` table (accessibility forests: one row per window, forest order;
#: empty for the other formats). From `StepInfo.windows`; `schemas/dataset_spec.md`.
UI_WINDOW_FIELDS = ("id", "type", "title", "layer", "focused", "active", "first_object", "num_objects")
#: Runner-up targets carried per action (`Action.target_candidates` holds at most 4), padded with -1.
TARGET_CANDIDATES = 4


def window_table(windows: Sequence[dict[str, Any]] = ()) -> dict[str, list[Any]]:
    """The step's windows (its `StepInfo.windows` as JSON, from the reader: zero values left out) as columns."""
    ws = list(windows or ())
    return {
        "id": [np.int32(w.get("id", 0)) for w in ws],
        "type": [str(w.get("type", "")) for w in ws],
        "title": [str(w.get("title", "")) for w in ws],
        "layer": [np.int32(w.get("layer", 0)) for w in ws],
        "focused": [bool(w.get("focused", False)) for w in ws],
        "active": [bool(w.get("active", False)) for w in ws],
        "first_object": [np.int32(w.get("first_object", 0)) for w in ws],
        "num_objects": [np.int32(w.get("num_objects", 0)) for w in ws],
    }


def object_windows(num_objects: int, table: dict[str, list[Any]]) -> list[int]:
    """Per object: the row of its window in the windows table, -1 when it belongs to none (formats without
    windows, boxes an annotator drew)."""
    out = [-1] * num_objects
    for row, (first, count) in enumerate(zip(table["first_object"], table["num_objects"], strict=True)):
        for i in range(max(int(first), 0), min(int(first) + int(count), num_objects)):
            out[i] = row
    return out


def object_grounding(
    observation: episode_pb2.Observation, annotations: Sequence[dict[str, Any]] = ()
) -> tuple[list[str], list[bool], list[bool]]:
    """Per object of the screen: its annotators' labels (newline-separated), whether an annotator drew it,
    whether its box was corrected; from the step's `StepInfo.object_annotations` (as JSON, from the reader)."""
    n = len(observation.objects)
    labels, drawn, corrected = [""] * n, [False] * n, [False] * n
    for note in annotations or ():
        i = int(note.get("object_index", 0))  # protobuf's JSON leaves out a zero index
        if 0 <= i < n:
            labels[i] = "\n".join(note.get("labels") or [])
            drawn[i] = bool(note.get("human_drawn"))
            corrected[i] = bool(note.get("box_corrected"))
    return labels, drawn, corrected


def ui_observation(
    observation: episode_pb2.Observation,
    *,
    padded: int = 0,
    annotations: Sequence[dict[str, Any]] = (),
    windows: Sequence[dict[str, Any]] = (),
    selected: list[int] | None = None,
    texts: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A UI screen as fixed-named fields: the screenshot bytes, its size, an object table, the proto, and the
    step's texts (`step_text`: every name of `pipelines.step_text.STEP_TEXT_FIELDS`, "" when none).

    The object table has one entry per object (N varies by screen): each `bbox` is 4 int32 as
    (left, top, right, bottom) in screenshot pixels. `proto` is the whole `llm4mobile.proto.Observation`
    without its screenshot (kept once, in `screenshot`), so nothing the converter produced is lost.
    `annotations` (the step's `object_annotations`) fill the grounding columns `labels`, `human_drawn`,
    `box_corrected`. `windows` (the step's `StepInfo.windows`) give the `windows` table (full form) and each
    object's `window` row (both forms; padded: with the window's type, layer and focus per object row).
    `selected`: the objects of the padded table (`padded_rows`; default the first `padded`).
    """
    objs = observation.objects
    labels, drawn, corrected = object_grounding(observation, annotations)
    wtable = window_table(windows)
    in_window = object_windows(len(objs), wtable)
    # Lists, one entry per object: envlogger's codec reads an empty array back as None but keeps an empty list.
    table: dict[str, Any] = {
        "id": [o.id for o in objs],
        "index": [np.int32(o.index) for o in objs],
        "parent_index": [np.int32(o.parent_index) for o in objs],
        "type": [np.int32(o.type) for o in objs],
        "android_class": [o.android_class for o in objs],
        "text": [o.text for o in objs],
        "content_desc": [o.content_desc for o in objs],
        "resource_id": [o.resource_id for o in objs],
        "bbox": [np.array([o.bbox.left, o.bbox.top, o.bbox.right, o.bbox.bottom], np.int32) for o in objs],
        "grid_location": [np.int32(o.grid_location) for o in objs],
        "depth": [np.int32(o.dom_position.depth) for o in objs],
        "is_leaf": [bool(o.is_leaf) for o in objs],
        "is_actionable": [bool(o.is_actionable) for o in objs],
        "clickable": [bool(o.clickable) for o in objs],
        "visible": [bool(o.visible) for o in objs],
        "enabled": [bool(o.enabled) for o in objs],
        "scrollable": [bool(o.scrollable) for o in objs],
        "checked": [bool(o.checked) for o in objs],
        "labels": labels,
        "human_drawn": drawn,
        "box_corrected": corrected,
        "window": [np.int32(w) for w in in_window],
    }
    without_screenshot = episode_pb2.Observation()
    without_screenshot.CopyFrom(observation)
    without_screenshot.ClearField("screenshot")
    out = {
        "screenshot": bytes(observation.screenshot),
        # False on the placeholder screen and on a screen recorded without one: `screenshot` is then b"".
        "has_screenshot": np.bool_(len(observation.screenshot) > 0),
        "screen_width": np.int32(observation.screen_width),
        "screen_height": np.int32(observation.screen_height),
        "proto": without_screenshot.SerializeToString(deterministic=True),
        "step_text": texts if texts is not None else texts_of(None, None),
    }
    if padded:
        from pipelines.exporters.ui_objects import padded_objects

        out["objects_padded"] = padded_objects(
            observation, padded, grounding=(labels, drawn, corrected), windows=(in_window, wtable), selected=selected
        )
    else:
        out["objects"] = table
        out["windows"] = wtable
    return out


def padded_rows(
    observation: episode_pb2.Observation,
    n: int,
    action: ui_episode_pb2.Action | None,
    annotations: Sequence[dict[str, Any]] = (),
) -> list[int]:
    """The objects of a screen's padded table (`ui_objects.select_rows`): the action's target and the
    converter's target, and every object an annotator drew, labelled or corrected, are always kept (or
    `PaddingOverflow`); the runner-up targets next; then the converter's order."""
    from pipelines.exporters.ui_objects import select_rows

    labels, drawn, corrected = object_grounding(observation, annotations)
    keep = [i for i, (lab, d, c) in enumerate(zip(labels, drawn, corrected, strict=True)) if lab or d or c]
    prefer: list[int] = []
    if action is not None:
        if action.HasField("target_index"):
            keep.append(action.target_index)
        if action.HasField("converter_target_index"):
            keep.append(action.converter_target_index)
        prefer = list(action.target_candidates)
    return select_rows(len(observation.objects), n, keep, prefer)


def ui_action(
    action: ui_episode_pb2.Action | None, *, strip: bool, padded: int = 0, selected: list[int] | None = None
) -> dict[str, Any]:
    """A `stepmark.Action` as scalars (and `target_candidates` as int32[4], -1 padded); `target_index` is -1
    when no object was hit; `raw_json` kept unstripped. Object indices are rows of the padded table with
    `padded` (of its `selected` objects; default the first `padded`)."""
    a = action if action is not None else ui_episode_pb2.Action()
    if padded and selected is None:
        selected = list(range(padded))
    candidates = np.full((TARGET_CANDIDATES,), -1, np.int32)
    for i, index in enumerate(list(a.target_candidates)[:TARGET_CANDIDATES]):
        candidates[i] = _padded_index(index, selected)
    out: dict[str, Any] = {
        "type": np.int32(a.type),
        "type_name": ui_episode_pb2.Action.Type.Name(a.type),
        "x": np.int32(a.x),
        "y": np.int32(a.y),
        "end_x": np.int32(a.end_x),
        "end_y": np.int32(a.end_y),
        "target_index": np.int32(_target_index(a, selected)),
        "target_id": a.target_id,
        "target_source": a.target_source,
        "converter_target_index": np.int32(
            _padded_index(a.converter_target_index, selected) if a.HasField("converter_target_index") else -1
        ),
        "text": a.text,
        "duration_ms": np.int64(a.duration_ms),
        "instruction": a.instruction,
        "direction": a.direction,
        "target_rule": a.target_rule,
        "target_candidates": candidates,
    }
    if not strip:
        out["raw_json"] = a.raw_json
    return out


def _target_index(action: ui_episode_pb2.Action, selected: list[int] | None) -> int:
    return _padded_index(action.target_index if action.HasField("target_index") else -1, selected)


def _padded_index(index: int, selected: list[int] | None) -> int:
    if selected is not None:
        from pipelines.exporters.ui_objects import padded_target

        return padded_target(index, selected)
    return index


# --- the transform -----------------------------------------------------------------------------------


_JSON_TYPES = (str, int, float, bool, list, dict, type(None))
_EXACT_JSON_TYPES = frozenset(_JSON_TYPES)


def _plain_info(info: dict[str, Any] | None) -> dict[str, Any]:
    """A copy to edit; readers already hand over JSON values (decoded from the stored JSON text). The exact
    type is checked first: one set lookup per value on every step instead of an isinstance over seven types."""
    out = dict(info or {})
    if any(type(v) not in _EXACT_JSON_TYPES and not isinstance(v, _JSON_TYPES) for v in out.values()):
        out = to_jsonable(out)
    return out


class NoTransition(StepmarkError):
    """An episode that keeps a single observation (cut at step 0, or a one-screen trace without an action):
    no transition to train on, and no dm_env episode (FIRST needs a LAST) — a dead letter, never a stub."""


def _has_recorded_action(action: ui_episode_pb2.Action | None) -> bool:
    return action is not None and action.type != ui_episode_pb2.Action.ACTION_UNSPECIFIED


def placeholder_ui_observation() -> episode_pb2.Observation:
    """The final observation of a UI episode whose last screen has a recorded action: the screen that action
    led to was not captured, so it is an empty screen (no screenshot, no objects, size 0) — the step contract
    needs a final observation after every transition (`schemas/dataset_spec.md`, "The step contract")."""
    return episode_pb2.Observation()


def transform_episode(
    index: int,
    episode: study_pb2.Episode,
    steps: Sequence[Step],
    options: TransformOptions,
    reader_metadata: dict[str, Any] | None = None,
    *,
    split: str = "",
) -> ExportEpisode:
    """Applies the step contract, truncation, tag fields, stripping and statistics to one episode's steps.

    The contract (`schemas/dataset_spec.md`): step i holds observation i, the action taken on it and what
    followed (reward, discount, info, keys); the final step holds the last observation with a padding action
    (None here; zeros in the files), reward 0 and discount 0, whatever ended the episode; length counts
    transitions (steps minus one) for every kind of episode.
    """
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
    # UI traces record an action on every screen, often the last one too; the screen it led to was not
    # captured, so an empty placeholder screen becomes the final observation (the action is kept).
    placeholder = kind == KIND_UI and cut_at is None and _has_recorded_action(kept[-1].action)
    num_out = len(kept) + (1 if placeholder else 0)
    if num_out < 2:
        why = f"cut at step 0 by tag {cut_label!r}" if cut_at == 0 else "a single observation without an action"
        raise NoTransition(f"episode {episode_name(episode)}: no transition left ({why})")
    if kind == KIND_UI:  # traces have no rewards; length = transitions, like every episode
        stats = EpisodeStats(r=stats.r, l=num_out - 1, s=stats.s)

    out_steps: list[ExportStep] = []
    for i in range(num_out):
        last = i == num_out - 1
        step = kept[i] if i < len(kept) else None
        labels = step_tags(episode, i) if step is not None else set()
        # info["episode"] sits with the final observation (the `is_last` step; envlogger's LAST record).
        entry = _episode_entry(stats if last else None)
        info: dict[str, Any] | None = None
        if not strip:
            # What this step's action returned; the final step took no action, so it has none.
            info = {} if last or step is None else _plain_info(step.info)
            info.pop(EPISODE_KEY, None)
        if kind == KIND_UI:
            screen = step.observation if step is not None else placeholder_ui_observation()
            step_info = (step.info or {}) if step is not None else {}
            notes = step_info.get("object_annotations", [])
            selected = None
            if options.ui_objects_padded:
                try:
                    selected = padded_rows(screen, options.ui_objects_padded, None if last else step.action, notes)
                except StepmarkError as exc:
                    raise type(exc)(f"episode {episode_name(episode)} step {i}: {exc}") from None
            observation = ui_observation(
                screen,
                padded=options.ui_objects_padded,
                annotations=notes,
                windows=step_info.get("windows", []),
                selected=selected,
                texts=texts_of(step.action if step is not None else None, step_info.get("text")),
            )
            action = (
                None
                if last
                else ui_action(step.action, strip=strip, padded=options.ui_objects_padded, selected=selected)
            )
            # Traces do not say whether the task ended: every UI episode ends in a truncation (discount 1).
            reward, discount, terminal = 0.0, (0.0 if last else 1.0), False
        else:
            observation = step.observation
            action = None if last else step.action
            reward = 0.0 if last else float(step.reward)
            discount = 0.0 if last else float(step.discount)
            terminal = last and cut_at is None and bool(step.is_terminal)
        # Kept when stripped too: the writers leave the `image` field out then, but TFDS may still store the
        # recorded JPEG as the observation's frame. UI: the screenshot is the observation's.
        image = step.image if step is not None and kind != KIND_UI else None
        out_steps.append(
            ExportStep(
                observation=observation,
                action=action,
                reward=reward,
                discount=discount,
                is_first=i == 0,
                is_last=last,
                is_terminal=terminal,
                tags={f"{TAG_PREFIX}{label}": label in labels for label in options.step_tag_labels},
                episode=entry,
                image=image,
                keys=None if strip else ([] if last or step is None else [str(k) for k in step.keys]),
                info=info,
            )
        )

    # The return is the float64 sum of the exported rewards, exactly (math.fsum: correctly rounded).
    stats = EpisodeStats(r=math.fsum(s.reward for s in out_steps), l=stats.l, s=stats.s)
    out_steps[-1].episode["r"] = stats.r
    ui_fields: dict[str, str] = {}
    if kind == KIND_UI:
        md = reader_metadata or {}
        ui_fields = {key: str(md.get(key, "") or "") for key in ("app_package", "goal", "source")}
    meta = ExportEpisodeMeta(
        episode_index=index,
        selection_index=index,
        episode_id=episode.id,
        study_id=episode.study_id,
        session_id=episode.session_id,
        environment_id=episode.environment_id or (UI_ENVIRONMENT_ID if kind == KIND_UI else ""),
        agent_id=episode.user.email,
        kind=kind,
        state=study_pb2.Episode.State.Name(episode.state),
        episode_return=stats.r,
        episode_length=stats.l,
        episode_success=stats.s,
        truncated_by_tag=cut_label if cut_at is not None else "",
        tags=None if strip else [t.label for t in episode.tags],
        notes=None if strip else episode.notes,
        split=split,
        ui=ui_fields,
    )
    return ExportEpisode(meta=meta, steps=out_steps)


def frame_leaf(sample: ExportEpisode) -> tuple[str, ...] | None:
    """The observation leaf the recorded JPEG frames depict: a uint8 (H, W, 3) array of the frames' size (the
    first such leaf by name; () for a bare array observation); None when there is none or no JPEG frame."""
    from pipelines.hierarchy.screenshot import image_info  # pure: reads the header only

    jpeg = next((s.image for s in sample.steps if s.image), None)
    if jpeg is None:
        return None
    try:
        info = image_info(jpeg)
    except Exception:  # noqa: BLE001 - a frame we cannot read: keep the raw arrays
        return None
    if info.format != "jpeg":
        return None
    stack: list[tuple[tuple[str, ...], Any]] = [((), sample.steps[0].observation)]
    found = []
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((path + (str(k),), v) for k, v in value.items())
        elif isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.shape == (info.height, info.width, 3):
            found.append(path)
    return min(found) if found else None


def info_json(info: dict[str, Any] | None) -> str:
    """A step's info as the JSON text both formats store (envlogger's codec refuses mixed lists)."""
    return json.dumps(info or {}, sort_keys=True, allow_nan=False)

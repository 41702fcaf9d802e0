"""Apply the store's grounding annotations (pipelines/store/grounding.py) on top of a converted UiEpisode for an
export: the corrected target and who chose it, object labels, drawn boxes as extra objects, corrected boxes.

`apply_annotations` is pure (record + annotations in, new record out; the input is never changed), so the
export pipeline can call it inside a DoFn. `load_annotations` is the one store read, done before the pipeline.
Which annotations apply is the export's `--annotations` mode:

- `none`: nothing (the converter's record, with `target_source = "converter"` on steps that have a target);
- `mine`: only `user`'s annotations;
- `all`: everyone's; where authors disagree on a step's target or an object's box, the newest wins; labels and
  drawn boxes of every author are kept;
- `consensus`: per step, what more than half of that step's annotators (users with any annotation on it) agree
  on: the same target (or "no target"), the same label on an object, a box correction of an object (the box
  is the per-edge median of theirs), a drawn box overlapping theirs (IoU >= 0.5; the earliest one is kept).

Fields written (schemas/ui_episode.md): `Action.target_index/target_id` (corrected), `target_source`
(`converter` / `annotator`), `target_rule` (`annotator` when corrected), `converter_target_index` (the converter's
choice when an annotator changed it); `StepInfo.object_annotations` (labels, `human_drawn`, `box_corrected` with
`original_bbox`, authors); drawn boxes appended to `Observation.objects`. An annotation the record can no longer
place (object id gone after a re-conversion) is skipped with a `grounding:` warning in that step's
`StepInfo.warnings`, never silently.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipelines.hierarchy import Box, grid_location
from pipelines.store import grounding as store
from protos.llm4mobile import episode_pb2
from protos.stepmark import ui_episode_pb2

MODES = ("none", "mine", "all", "consensus")
CONVERTER, ANNOTATOR = "converter", "annotator"
#: Two drawn boxes are "the same box" for consensus when their intersection over union reaches this.
SAME_BOX_IOU = 0.5

Annotation = store.Annotation


@dataclass
class StepDecision:
    """What the applied annotations decide for one step. `target`: None = nothing decided (converter's),
    ("target", object_id) or ("no_target", None)."""

    target: tuple[str, str | None] | None = None
    target_authors: list[str] = field(default_factory=list)
    labels: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    boxes: dict[str, list[int]] = field(default_factory=dict)  # object id -> corrected box
    drawn: list[Annotation] = field(default_factory=list)
    authors: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # object id -> authors


def _order(a: Annotation) -> tuple:
    return (a.time, a.id)


def select(annotations: Iterable[Annotation], mode: str, user: str | None = None) -> list[Annotation]:
    """The annotations a mode looks at (consensus looks at all of them, then votes per step)."""
    if mode not in MODES:
        raise ValueError(f"unknown annotations mode {mode!r}; one of {', '.join(MODES)}")
    if mode == "none":
        return []
    if mode == "mine":
        if not user:
            raise ValueError("annotations mode 'mine' needs the exporting user")
        return [a for a in annotations if a.user == user]
    return list(annotations)


def _iou(a: Sequence[int], b: Sequence[int]) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(0, w) * max(0, h)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def decide(annotations: Sequence[Annotation], mode: str) -> StepDecision:
    """One step's decision from its (already selected) annotations."""
    d = StepDecision()
    ordered = sorted(annotations, key=_order)
    if mode == "consensus":
        return _consensus(ordered, d)
    for a in ordered:
        if a.kind in (store.TARGET, store.NO_TARGET):
            d.target, d.target_authors = (a.kind, a.object_id), [a.user]  # newest wins
        elif a.kind == store.LABEL and a.object_id:
            d.labels[a.object_id].add(a.payload["label"])
            d.authors[a.object_id].add(a.user)
        elif a.kind == store.WRONG_BOX and a.object_id:
            d.boxes[a.object_id] = list(a.payload["box"])
            d.authors[a.object_id].add(a.user)
        elif a.kind == store.BOX:
            d.drawn.append(a)
            d.authors[a.object_id or ""].add(a.user)
    return d


def _consensus(ordered: list[Annotation], d: StepDecision) -> StepDecision:
    annotators = {a.user for a in ordered}
    need = len(annotators) / 2  # strictly more than half

    def majority(voters: set[str]) -> bool:
        return len(voters) > need

    targets: dict[tuple[str, str | None], set[str]] = defaultdict(set)
    labels: dict[tuple[str, str], set[str]] = defaultdict(set)
    wrong: dict[str, dict[str, list[int]]] = defaultdict(dict)
    drawn = [a for a in ordered if a.kind == store.BOX]
    for a in ordered:
        if a.kind in (store.TARGET, store.NO_TARGET):
            targets[(a.kind, a.object_id)].add(a.user)
        elif a.kind == store.LABEL and a.object_id:
            labels[(a.object_id, a.payload["label"])].add(a.user)
        elif a.kind == store.WRONG_BOX and a.object_id:
            wrong[a.object_id][a.user] = list(a.payload["box"])  # newest of each user
    for choice, voters in targets.items():
        if majority(voters):
            d.target, d.target_authors = choice, sorted(voters)
    for (oid, label), voters in labels.items():
        if majority(voters):
            d.labels[oid].add(label)
            d.authors[oid] |= voters
    for oid, by_user in wrong.items():
        if majority(set(by_user)):
            boxes = list(by_user.values())
            d.boxes[oid] = [int(statistics.median_low(b[k] for b in boxes)) for k in range(4)]
            d.authors[oid] |= set(by_user)
    for a in drawn:
        voters = {b.user for b in drawn if _iou(a.payload["box"], b.payload["box"]) >= SAME_BOX_IOU}
        taken = any(_iou(a.payload["box"], k.payload["box"]) >= SAME_BOX_IOU for k in d.drawn)
        if majority(voters) and not taken:
            d.drawn.append(a)
            d.authors[a.object_id or ""] |= voters
    return d


def _grid(box: Sequence[int], obs: episode_pb2.Observation) -> int:
    return grid_location(Box(*box), obs.screen_width, obs.screen_height)


def _drawn_object(a: Annotation, index: int, obs: episode_pb2.Observation) -> episode_pb2.Object:
    left, top, right, bottom = a.payload["box"]
    text = a.payload.get("text", "")
    o = episode_pb2.Object(
        id=a.object_id or "", index=index, parent_id="", parent_index=-1, name=" ".join(text.split()),
        text=text, type=episode_pb2.ObjectType.Value(a.payload.get("type") or "UNKNOWN_TYPE"),
        visible=True, enabled=True, is_leaf=True,
    )  # fmt: skip
    o.bbox.left, o.bbox.top, o.bbox.right, o.bbox.bottom = left, top, right, bottom
    o.grid_location = _grid(a.payload["box"], obs)
    o.dom_position.depth = 0
    o.dom_position.pre_order_id = index
    o.dom_position.post_order_id = index  # a childless root after every other object
    return o


def apply_step(
    action: ui_episode_pb2.Action,
    obs: episode_pb2.Observation,
    info: ui_episode_pb2.StepInfo,
    annotations: Sequence[Annotation],
    mode: str,
) -> None:
    """Apply one step's selected annotations to its (copied) action, observation and step info, in place."""
    d = decide(annotations, mode)
    marks: dict[int, ui_episode_pb2.ObjectAnnotation] = {}

    def mark(index: int) -> ui_episode_pb2.ObjectAnnotation:
        if index not in marks:
            marks[index] = ui_episode_pb2.ObjectAnnotation(object_index=index, object_id=obs.objects[index].id)
        return marks[index]

    for a in d.drawn:
        index = len(obs.objects)
        obs.objects.append(_drawn_object(a, index, obs))
        mark(index).human_drawn = True
    where = {o.id: o.index for o in obs.objects}

    def place(oid: str | None, what: str) -> int | None:
        index = where.get(oid or "")
        if index is None and (oid or "").startswith(store.DRAWN_PREFIX):
            info.warnings.append(f"grounding: {what} names drawn box {oid}, which this export leaves out: skipped")
        elif index is None:
            info.warnings.append(f"grounding: {what} names object {oid}, which this step no longer has: skipped")
        return index

    for oid, box in d.boxes.items():
        index = place(oid, "a box correction")
        if index is not None:
            o, m = obs.objects[index], mark(index)
            m.box_corrected = True
            m.original_bbox.CopyFrom(o.bbox)
            o.bbox.left, o.bbox.top, o.bbox.right, o.bbox.bottom = box
            o.grid_location = _grid(box, obs)
    for oid, labels in d.labels.items():
        index = place(oid, "a label")
        if index is not None:
            mark(index).labels.extend(sorted(set(labels) - set(mark(index).labels)))
    for oid, authors in d.authors.items():
        index = where.get(oid)
        if index is not None and index in marks:
            marks[index].authors.extend(sorted(authors))
    for m in marks.values():
        labels = sorted(set(m.labels))
        del m.labels[:]
        m.labels.extend(labels)
    action.target_source = CONVERTER
    if d.target is not None:
        kind, oid = d.target
        index = place(oid, "the target") if kind == store.TARGET else None
        if kind == store.NO_TARGET or index is not None:
            if action.HasField("target_index"):
                action.converter_target_index = action.target_index
            action.target_source, action.target_rule = ANNOTATOR, ANNOTATOR
            if index is None:
                action.ClearField("target_index")
                action.target_id = ""
            else:
                action.target_index, action.target_id = index, obs.objects[index].id
    info.object_annotations.extend(marks[i] for i in sorted(marks))


def apply_annotations(
    ui_episode: ui_episode_pb2.UiEpisode,
    annotations: Iterable[Annotation],
    mode: str,
    user: str | None = None,
) -> ui_episode_pb2.UiEpisode:
    """A copy of `ui_episode` with the annotations of `mode` applied (see the module docstring). `annotations`
    are the episode's (any author; `load_annotations`); `user` is the exporting user, needed by `mine`.
    Annotations on steps the record does not have get a `grounding:` note in `metadata["warnings"]`."""
    chosen = select(annotations, mode, user)
    out = ui_episode_pb2.UiEpisode()
    out.CopyFrom(ui_episode)
    by_step: dict[int, list[Annotation]] = defaultdict(list)
    for a in chosen:
        by_step[a.step].append(a)
    steps = out.episode.time_steps
    while len(out.step_info) < len(steps):
        out.step_info.add()
    while len(out.actions) < len(steps):
        out.actions.add()
    for i, ts in enumerate(steps):
        apply_step(out.actions[i], ts.observation, out.step_info[i], by_step.pop(i, []), mode)
    if by_step:
        lost = sum(len(v) for v in by_step.values())
        note = f"grounding: {lost} annotation(s) on steps {sorted(by_step)} not in this record: skipped"
        out.metadata["warnings"] = "; ".join(w for w in (out.metadata.get("warnings", ""), note) if w)
    return out


def effective_target(
    action: ui_episode_pb2.Action, objects: Sequence[episode_pb2.Object], annotations: Sequence[Annotation],
    mode: str = "all", user: str | None = None,
) -> dict[str, Any]:
    """The target an export in `mode` would write for one step, as JSON for the player: `index` (None: no
    target), `object_id`, `source` (converter/annotator), `rule`, `authors`."""
    a = ui_episode_pb2.Action()
    a.CopyFrom(action)
    obs = episode_pb2.Observation()
    obs.objects.extend(objects)
    apply_step(a, obs, ui_episode_pb2.StepInfo(), select(annotations, mode, user), mode)
    decided = decide(select(annotations, mode, user), mode)
    index = a.target_index if a.HasField("target_index") else None
    return {
        "index": index, "object_id": a.target_id or None, "source": a.target_source, "rule": a.target_rule,
        "authors": decided.target_authors if a.target_source == ANNOTATOR else [],
        "converter_index": action.target_index if action.HasField("target_index") else None,
    }  # fmt: skip


def load_annotations(repo: Any, episodes: Iterable[Any]) -> dict[str, list[Annotation]]:
    """Every grounding annotation of these store episodes (protos with `.id`, or ids), keyed by store episode
    id; pass each UI episode's list to `apply_annotations`. One read, in chunks."""
    ids = [e if isinstance(e, str) else e.id for e in episodes]
    return store.for_episodes(repo, ids)


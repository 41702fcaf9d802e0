"""What a convert-ui output holds, counted for the quality report (one pass, one record in memory at a time).

The totals are defined as `stepmark inspect` defines them (episodes, steps, objects, actions, resolved
targets, apps, dead letters), so the report and inspect agree; a test checks it.
"""

from __future__ import annotations

import io
from collections import Counter
from dataclasses import dataclass, field

from PIL import Image

from pipelines import ui_records
from pipelines.hierarchy.errors import HierarchyError
from pipelines.hierarchy.screenshot import image_info
from protos.llm4mobile import episode_pb2
from protos.stepmark import ui_episode_pb2

Action = ui_episode_pb2.Action
# Actions that act on a place on the screen, so convert-ui tries to resolve them to an object.
TARGETABLE = frozenset({Action.TAP, Action.LONG_PRESS, Action.SWIPE, Action.TYPE_TEXT})
SAMPLE_PIXELS = 40_000_000  # larger screenshots are not decoded for the sample strip
SAMPLE_SIDE = 480  # samples are shrunk to this height before they are embedded


@dataclass(frozen=True)
class Sample:
    """One screenshot (PNG, shrunk) with the boxes of its actionable objects, scaled like the image."""

    episode_id: str
    step: int
    png: bytes
    width: int
    height: int
    boxes: list[tuple[float, float, float, float]]  # left, top, right, bottom


@dataclass
class UiStats:
    path: str
    episodes: int = 0
    steps: int = 0
    objects: int = 0
    steps_with_screenshot: int = 0
    objects_per_step: list[int] = field(default_factory=list)
    object_types: Counter[str] = field(default_factory=Counter)
    actionable: int = 0
    actionable_grid: list[list[int]] = field(default_factory=lambda: [[0] * 3 for _ in range(3)])
    actions: Counter[str] = field(default_factory=Counter)
    actions_with_target: int = 0
    targetable_actions: int = 0
    targetable_with_target: int = 0
    apps: Counter[str] = field(default_factory=Counter)
    screen_sizes: Counter[str] = field(default_factory=Counter)
    dead_letters: Counter[str] | None = None
    samples: list[Sample] = field(default_factory=list)

    @property
    def target_resolution_rate(self) -> float | None:
        """Share of on-screen actions (tap, long press, swipe, type) resolved to an object."""
        return self.targetable_with_target / self.targetable_actions if self.targetable_actions else None


def _grid_cell(location: int) -> tuple[int, int] | None:
    """(row, column) of a 3x3 GridLocation; None for UNKNOWN_LOCATION."""
    if not 1 <= location <= 9:
        return None
    return (location - 1) // 3, (location - 1) % 3


def sample(episode_id: str, step: int, obs: episode_pb2.Observation) -> Sample | None:
    """A shrunk PNG of the step's screenshot with its actionable boxes; None if it cannot be read cheaply."""
    try:
        info = image_info(obs.screenshot)
    except HierarchyError:
        return None
    if info.width * info.height > SAMPLE_PIXELS:
        return None
    try:
        with Image.open(io.BytesIO(obs.screenshot)) as image:
            k = min(1.0, SAMPLE_SIDE / image.height)
            small = image.convert("RGB").resize(
                (max(1, round(image.width * k)), max(1, round(image.height * k)))
            )
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
    buffer = io.BytesIO()
    small.save(buffer, format="PNG")
    boxes = [
        (o.bbox.left * k, o.bbox.top * k, o.bbox.right * k, o.bbox.bottom * k)
        for o in obs.objects
        if o.is_actionable and o.visible and o.bbox.right > o.bbox.left and o.bbox.bottom > o.bbox.top
    ]
    return Sample(episode_id, step, buffer.getvalue(), small.width, small.height, boxes)


def ui_stats(path: str, samples: int = 3) -> UiStats:
    """Counts over every record under `path` and up to `samples` sample screenshots (first step with one of
    each of the first episodes)."""
    stats = UiStats(path)
    for e in ui_records.iter_episodes(path):
        stats.episodes += 1
        stats.apps[e.app_package or "(unknown)"] += 1
        sampled = len(stats.samples) >= samples
        for i, (ts, action) in enumerate(zip(e.episode.time_steps, e.actions, strict=False)):
            obs = ts.observation
            stats.steps += 1
            stats.objects += len(obs.objects)
            stats.objects_per_step.append(len(obs.objects))
            stats.steps_with_screenshot += bool(obs.screenshot)
            stats.screen_sizes[f"{obs.screen_width}x{obs.screen_height}"] += 1
            for o in obs.objects:
                stats.object_types[episode_pb2.ObjectType.Name(o.type)] += 1
                if o.is_actionable:
                    stats.actionable += 1
                    cell = _grid_cell(o.grid_location)
                    if cell is not None:
                        stats.actionable_grid[cell[0]][cell[1]] += 1
            stats.actions[Action.Type.Name(action.type)] += 1
            targeted = action.HasField("target_index")
            stats.actions_with_target += targeted
            if action.type in TARGETABLE:
                stats.targetable_actions += 1
                stats.targetable_with_target += targeted
            if not sampled and obs.screenshot:
                found = sample(e.episode_id, i, obs)
                if found is not None:
                    stats.samples.append(found)
                    sampled = True
    if ui_records.is_output_folder(path):
        stats.dead_letters = Counter(d.reason for d in ui_records.read_dead_letters(path))
    return stats

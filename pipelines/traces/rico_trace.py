"""Rico trace folders: `view_hierarchies/<id>.json`, `screenshots/<id>.jpg`, `gestures.json`.

Steps are the screens in numeric id order (as Rico numbers them). gestures.json maps a screen id to the touch
points recorded on it, normalized to 0..1: one point is a tap, several a swipe from the first to the last
point, none (or no entry) means no action. Entries that break schemas/gestures.schema.json are dead letters
(`bad_action`); the screen is kept without an action.
"""

from __future__ import annotations

import json

from pipelines.traces import files, validation
from pipelines.traces.common import LayoutFileError, Reader, apply_manifest, load_json
from pipelines.traces.discover import GESTURES, IMAGE_EXTS, MANIFEST, natural_key
from pipelines.traces.model import DeadLetter, EpisodeSource, RawAction, RawEpisode, RawStep


def gesture_action(points: list[list[float]]) -> RawAction | None:
    """The action a list of normalized touch points stands for."""
    raw = json.dumps(points)
    if not points:
        return None
    (x, y) = points[0]
    if len(points) == 1:
        return RawAction("tap", x=x, y=y, space="normalized", raw_json=raw)
    (ex, ey) = points[-1]
    return RawAction("swipe", x=x, y=y, end_x=ex, end_y=ey, space="normalized", raw_json=raw)


def read(source: EpisodeSource, read_file: Reader) -> RawEpisode:
    hierarchies: dict[str, str] = {}
    screenshots: dict[str, list[str]] = {}
    gestures_path = manifest_path = None
    for path in source.files:
        parts = files.relative(source.source_path, path).split("/")
        stem, ext = files.stem_and_ext(parts[-1])
        if parts == [GESTURES]:
            gestures_path = path
        elif parts == [MANIFEST]:
            manifest_path = path
        elif len(parts) == 2 and parts[0] == "view_hierarchies" and ext == ".json":
            hierarchies[stem] = path
        elif len(parts) == 2 and parts[0] == "screenshots" and ext in IMAGE_EXTS:
            screenshots.setdefault(stem, []).append(path)
    order = sorted(hierarchies, key=natural_key)
    episode = RawEpisode(source=source, steps=[], num_source_steps=len(order))
    eid = source.episode_id
    if manifest_path:
        apply_manifest(episode, read_file, manifest_path)

    actions: dict[str, RawAction | None] = {}
    if gestures_path is None:
        episode.warnings.append("no gestures.json: no actions recorded for this trace")
    else:
        try:
            gestures = load_json(read_file, gestures_path)
            if not isinstance(gestures, dict):
                raise LayoutFileError(f"{gestures_path}: must be a JSON object mapping screen id to points")
        except LayoutFileError as exc:
            episode.dead_letters.append(DeadLetter(gestures_path, None, exc.reason or "bad_gestures", str(exc), eid))
            episode.warnings.append("gestures.json unusable (see dead letters): no actions")
            gestures = {}
        bad: dict[str, list[str]] = {}
        for where, message in validation.problems(validation.GESTURES, gestures):
            bad.setdefault(str(where[0]) if where else "", []).append(message)
        for screen_id, points in gestures.items():
            step = order.index(screen_id) if screen_id in hierarchies else None
            if screen_id in bad:
                msg = f"{gestures_path}: entry {screen_id!r} " + "; ".join(bad[screen_id])
                episode.dead_letters.append(DeadLetter(gestures_path, step, "bad_action", msg, eid))
            elif screen_id not in hierarchies:
                msg = f"{gestures_path}: gesture for screen {screen_id!r}, which has no view_hierarchies/{screen_id}.json"
                episode.dead_letters.append(DeadLetter(gestures_path, None, "bad_action", msg, eid))
            else:
                actions[screen_id] = gesture_action(points)

    for index, stem in enumerate(order):
        shots = screenshots.get(stem, [])
        warnings = [f"also found {files.split(p)[1]} for this screen; not used" for p in shots[1:]]
        if not shots:
            warnings.append(f"no screenshots/{stem}.jpg: step has no screenshot")
        episode.steps.append(
            RawStep(
                index,
                stem,
                hierarchies[stem],
                shots[0] if shots else None,
                actions.get(stem),
                tuple(warnings),
            )
        )
    for stem, paths in screenshots.items():
        if stem not in hierarchies:
            for p in paths:
                msg = f"{p}: screenshot has no view_hierarchies/{stem}.json"
                episode.dead_letters.append(DeadLetter(p, None, "orphan_screenshot", msg, eid))
    return episode

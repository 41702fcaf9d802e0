"""DroidRun trajectory folders: `ui_states/<i>.json` (the portal state of step i: `a11y_tree` + `phone_state`),
`screenshots/<i>.png` and `macro.json` (`description` = the goal, `actions` = the recorded actions, in order).

Step i is `ui_states/<i>.json` in numeric order with `screenshots/<i>.<image>`; action i of macro.json is the
action taken on step i (DroidRun records the UI state before each action). Points of macro actions are
screen pixels. Field mapping: schemas/layouts.md, section (g). A macro action that is not a JSON object of a
known type is a `bad_action` dead letter; a macro.json that is not JSON is `bad_manifest`.
"""

from __future__ import annotations

import json
from typing import Any

from pipelines.traces import files
from pipelines.traces.common import (
    LayoutFileError,
    Reader,
    actions_on_steps,
    gap_warnings,
    load_json,
    number_screens,
    screen_number,
)
from pipelines.traces.discover import DROIDRUN_MACRO, IMAGE_EXTS
from pipelines.traces.model import DeadLetter, EpisodeSource, RawAction, RawEpisode, RawStep

#: Android key codes DroidRun's KeyPressActionEvent records, for the keys an Action names.
KEYCODES = {3: "home", 4: "back", 66: "enter"}


def _number(value: Any) -> float | None:
    return float(value) if type(value) in (int, float) else None


def macro_action(item: Any) -> RawAction:
    """One macro.json action (`type` TapActionEvent, SwipeActionEvent, DragActionEvent, InputTextActionEvent,
    KeyPressActionEvent, StartAppEvent, WaitEvent) as a RawAction in screenshot pixels. Raises ValueError."""
    if not isinstance(item, dict):
        raise ValueError("not a JSON object")
    kind = item.get("type") or item.get("action_type")
    raw = json.dumps(item, sort_keys=True, ensure_ascii=False)
    instruction = item.get("description") if isinstance(item.get("description"), str) else ""
    if kind in ("TapActionEvent", "tap"):
        x, y = _number(item.get("x")), _number(item.get("y"))
        if x is None or y is None:
            raise ValueError(f"{kind} without numeric x and y")
        return RawAction("tap", x=x, y=y, raw_json=raw, instruction=instruction)
    if kind in ("SwipeActionEvent", "DragActionEvent", "swipe", "drag"):
        points = [_number(item.get(k)) for k in ("start_x", "start_y", "end_x", "end_y")]
        if any(p is None for p in points):
            raise ValueError(f"{kind} without numeric start_x, start_y, end_x, end_y")
        duration = item.get("duration_ms")
        return RawAction(
            "swipe", x=points[0], y=points[1], end_x=points[2], end_y=points[3], raw_json=raw,
            duration_ms=duration if type(duration) is int and 0 <= duration < 2**31 else 0, instruction=instruction,
        )  # fmt: skip
    if kind in ("InputTextActionEvent", "input_text"):
        text = item.get("text")
        return RawAction("type", text=text if isinstance(text, str) else "", raw_json=raw, instruction=instruction)
    if kind in ("KeyPressActionEvent", "key_press"):
        code = item.get("keycode")
        name = item.get("key_name") if isinstance(item.get("key_name"), str) else str(code)
        mapped = KEYCODES.get(code) if type(code) is int else None
        return RawAction(mapped or "other", text="" if mapped else name, raw_json=raw, instruction=instruction)
    if kind in ("StartAppEvent", "start_app"):
        package = item.get("package")
        return RawAction("open_app", text=package if isinstance(package, str) else "", raw_json=raw,
                         instruction=instruction)  # fmt: skip
    if kind in ("WaitEvent", "wait"):
        return RawAction("wait", raw_json=raw, instruction=instruction)
    raise ValueError(f"unknown action type {kind!r}")


def read(source: EpisodeSource, read_file: Reader) -> RawEpisode:
    """Steps by UI state number: macro action i is state (first + i)'s action, whatever states are missing, so
    a gap never shifts the later actions onto other screens (schemas/layouts.md, section (g))."""
    states: dict[int, list[str]] = {}
    shots: dict[int, str] = {}
    macro_path = None
    for path in sorted(source.files):
        parts = files.relative(source.source_path, path).split("/")
        stem, ext = files.stem_and_ext(parts[-1])
        number = screen_number(stem)
        if parts == [DROIDRUN_MACRO]:
            macro_path = path
        elif len(parts) == 2 and parts[0] == "ui_states" and ext == ".json" and number is not None:
            states.setdefault(number, []).append(path)
        elif len(parts) == 2 and parts[0] == "screenshots" and ext in IMAGE_EXTS and number is not None:
            shots.setdefault(number, path)
    eid = source.episode_id
    episode = RawEpisode(source=source, steps=[], num_source_steps=0)
    screens = {n: states.get(n, []) + ([shots[n]] if n in shots else []) for n in {*states, *shots}}
    first, span = number_screens(screens, episode)
    numbers = sorted(n for n in states if n in screens)
    stepped = {n - first for n in numbers}
    actions: dict[int, RawAction] = {}
    if macro_path is not None:
        try:
            macro = load_json(read_file, macro_path)
            if not isinstance(macro, dict) or not isinstance(macro.get("actions", []), list):
                raise LayoutFileError(f"{macro_path}: not an object with an 'actions' list")
        except LayoutFileError as exc:
            episode.dead_letters.append(DeadLetter(macro_path, None, exc.reason or "bad_manifest", str(exc), eid))
            macro = {}
        if isinstance(macro.get("description"), str):
            episode.goal = macro["description"]
        items = macro.get("actions", [])
        if len(items) > span:  # one letter for all of them, however many a file lists
            why = (f"{macro_path}: {len(items) - span} action(s) beyond the trajectory's {span} UI "
                   f"states (actions[{span}] on) not used")  # fmt: skip
            episode.dead_letters.append(DeadLetter(macro_path, None, "bad_action", why, eid))

        def screenshot_only(i: int, n: int, shot: str) -> str:
            return (f"{macro_path}: actions[{i}] is the action on screen {n}, which has no ui_states/{n}.json "
                    f"(only its screenshot {shot}); not used")  # fmt: skip

        def no_file(p0: int, p1: int) -> str:
            if p0 == p1:
                return (f"{macro_path}: actions[{p0}] is the action on screen {first + p0}, which has no "
                        f"ui_states/{first + p0}.json (no screenshot either); not used")  # fmt: skip
            return (f"{macro_path}: actions[{p0}..{p1}] are the actions on screens {first + p0}-{first + p1}, "
                    f"which have no ui_states/N.json and no screenshot; not used")  # fmt: skip

        for i, item in actions_on_steps(enumerate(items[:span]), first, stepped, shots, episode, macro_path,
                                        screenshot_only, no_file):  # fmt: skip
            try:
                actions[i] = macro_action(item)
            except ValueError as exc:
                why = f"{macro_path}: actions[{i}]: {exc}"
                episode.dead_letters.append(DeadLetter(macro_path, i, "bad_action", why, eid))
    else:
        episode.warnings.append(f"no {DROIDRUN_MACRO}: the trajectory has no actions and no goal")
    for number in numbers:
        position = number - first
        state, *others = states[number]
        stem = files.stem_and_ext(files.split(state)[1])[0]
        shot = shots.get(number)
        warnings = [f"also found {files.split(p)[1]} for this step; not used" for p in others]
        if not shot:
            warnings.append(f"no screenshots/{stem}.png: step has no screenshot")
        warnings += gap_warnings(position, first, span, stepped, "ui_states/{n}.json")
        episode.steps.append(
            RawStep(
                index=position,
                name=stem,
                hierarchy_path=state,
                screenshot_path=shot,
                action=actions.get(position),
                warnings=tuple(warnings),
                hierarchy_format="droidrun",
            )
        )
    for number in sorted(set(shots) - set(states)):
        if number in screens:  # (beyond the span: already a dead letter)
            why = f"{shots[number]}: screenshot has no ui_states/{number}.json"
            episode.dead_letters.append(DeadLetter(shots[number], number - first, "orphan_screenshot", why, eid))
    return episode

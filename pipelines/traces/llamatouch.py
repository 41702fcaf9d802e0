"""LlamaTouch traces: `N.png` + `N.xml` per step (beside `N.vh`, `N.json`, `N.activity`, `N_drawed.png`, ...),
`eventStructs.txt` (one recorded action per line, line i = the action taken on screen i) and `instruction.txt`
(the episode key on its first line, the task on the next).

eventStructs lines come in the English form of LlamaTouch's scrcpy recorder and the Chinese form of its first
release; points are in the recorder's own `Screen Resolution (W, H)`, so they are kept as fractions x/W, y/H of
the screen (`normalized`). Field mapping: schemas/layouts.md, section (f). A line that cannot be read is a
`bad_action` dead letter naming the file and line; its step keeps no action.
"""

from __future__ import annotations

import json
import re

from pipelines.hierarchy.encoding import decode_detected
from pipelines.traces import files
from pipelines.traces.common import (
    Reader,
    actions_on_steps,
    decode_text,
    gap_warnings,
    number_screens,
    read_failure_reason,
    screen_number,
)
from pipelines.traces.discover import IMAGE_EXTS, LLAMATOUCH_EVENTS, LLAMATOUCH_INSTRUCTION
from pipelines.traces.model import DeadLetter, EpisodeSource, RawAction, RawEpisode, RawStep

#: Most eventStructs lines read (a trace has tens); the rest are one dead letter.
MAX_EVENT_LINES = 10_000
#: Hierarchy files of a step, in the order they are preferred: the uiautomator dump, else the JSON view
#: hierarchy the in-app accessibility service wrote.
HIERARCHY_EXTS = (".xml", ".vh")

_KIND = re.compile(r"^\s*(?:\[([^\]]+)\]|【([^】]+)】)\s*(.*)$", re.S)
# "(320, 720)" and the Chinese "（w320，h720）" / "（x196，y558）": two integers in brackets.
_PAIR = re.compile(r"[(（]\s*[a-zA-Z]?\s*(-?\d+)\s*[,，]\s*[a-zA-Z]?\s*(-?\d+)\s*[)）]")
_KEYS = {
    "home": "home", "back": "back", "home键": "home", "back键": "back",
}  # fmt: skip
_TOUCH = {"click": "tap", "点击事件": "tap", "long click": "long_press"}
_DRAG = {"swipe": "swipe", "滑动事件": "swipe", "drag": "swipe"}
_TYPE = {"input": "type", "键盘输入": "type"}
#: A drag is a swipe held longer than the recorder's 0.5 s threshold; it records no duration.
LONG_PRESS_MS = 500


class EventLineError(ValueError):
    """An eventStructs line that is none of the recorded forms."""


def parse_event(line: str) -> RawAction:
    """One eventStructs line as a RawAction (points as fractions of the recorder's screen). Raises
    EventLineError."""
    m = _KIND.match(line)
    if m is None:
        raise EventLineError("does not start with [Action] or 【动作】")
    name = (m.group(1) or m.group(2) or "").strip()
    rest = m.group(3)
    key = name.lower()
    raw = json.dumps({"line": line}, ensure_ascii=False)
    if key in _KEYS:
        return RawAction(_KEYS[key], space="normalized", raw_json=raw)
    if key in _TYPE:
        return RawAction("type", text=rest.strip(), space="normalized", raw_json=raw)
    if key in _TOUCH or key in _DRAG:
        pairs = [(int(a), int(b)) for a, b in _PAIR.findall(rest)]
        need = 2 if key in _TOUCH else 3
        if len(pairs) < need:
            raise EventLineError(f"[{name}] needs the screen resolution and {need - 1} position(s)")
        (w, h), points = pairs[0], pairs[1:]
        if w <= 0 or h <= 0:
            raise EventLineError(f"screen resolution ({w}, {h}) is not a size")
        x, y = points[0][0] / w, points[0][1] / h
        if key in _TOUCH:
            kind = _TOUCH[key]
            duration = LONG_PRESS_MS if kind == "long_press" else 0
            return RawAction(kind, x=x, y=y, space="normalized", duration_ms=duration, raw_json=raw)
        ex, ey = points[1][0] / w, points[1][1] / h
        return RawAction("swipe", x=x, y=y, end_x=ex, end_y=ey, space="normalized", raw_json=raw)
    return RawAction("other", text=name, space="normalized", raw_json=raw)  # [App Switch], ...


def parse_instruction(text: str) -> tuple[str, str]:
    """(episode key, task) from instruction.txt: the first line is the key when more lines follow (LlamaTouch
    writes "18\\nPractice pronunciation ..."); a single line is the task."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) >= 2:
        return lines[0], " ".join(lines[1:])
    return "", lines[0] if lines else ""


def _read_text(read_file: Reader, path: str, episode: RawEpisode) -> str | None:
    """The text of a small trace file; bytes that are not UTF-8 (the Chinese recorder's files written in GBK) are
    decoded in the encoding detected, as dumps are (`encoding.decode_detected`), with an episode warning."""
    try:
        data = read_file(path)
    except Exception as exc:
        why = f"{path}: cannot read ({exc})"
        episode.dead_letters.append(DeadLetter(path, None, read_failure_reason(exc), why, episode.source.episode_id))
        return None
    try:
        return decode_text(data)
    except UnicodeDecodeError as exc:
        text, warning = decode_detected(bytes(data), "utf-8", exc.start)
        episode.warnings.append(f"{files.split(path)[1]}: {warning}")
        return text


def read(source: EpisodeSource, read_file: Reader) -> RawEpisode:
    """Steps by screen number: line i of eventStructs.txt is screen (first + i)'s action, whatever screens lack a
    dump, so a gap never shifts the later actions onto other screens (schemas/layouts.md, section (f))."""
    by_name = {files.split(p)[1]: p for p in source.files}
    hierarchies: dict[int, list[str]] = {}
    shots: dict[int, str] = {}
    activities: dict[int, str] = {}
    for name in sorted(by_name):
        stem, ext = files.stem_and_ext(name)
        number = screen_number(stem)
        if number is None:
            continue
        if ext in HIERARCHY_EXTS:
            hierarchies.setdefault(number, []).append(name)
        elif ext in IMAGE_EXTS:
            shots.setdefault(number, name)
        elif ext == ".activity":
            activities.setdefault(number, name)
    eid = source.episode_id
    episode = RawEpisode(source=source, steps=[], num_source_steps=0)
    screens = {n: [by_name[x] for x in hierarchies.get(n, [])] + ([by_name[shots[n]]] if n in shots else [])
               for n in {*hierarchies, *shots}}  # fmt: skip
    first, span = number_screens(screens, episode)
    numbers = sorted(n for n in hierarchies if n in screens)
    stepped = {n - first for n in numbers}
    if LLAMATOUCH_INSTRUCTION in by_name:
        text = _read_text(read_file, by_name[LLAMATOUCH_INSTRUCTION], episode)
        if text is not None:
            key, episode.goal = parse_instruction(text)
            if key:
                episode.metadata["llamatouch_episode"] = key
    actions: dict[int, RawAction] = {}
    if LLAMATOUCH_EVENTS in by_name:
        path = by_name[LLAMATOUCH_EVENTS]
        text = _read_text(read_file, path, episode)
        lines = [] if text is None else [(n, ln) for n, ln in enumerate(text.split("\n"), 1) if ln.strip()]
        if len(lines) > MAX_EVENT_LINES:
            msg = f"{path}: {len(lines)} actions; only the first {MAX_EVENT_LINES} are read"
            episode.dead_letters.append(DeadLetter(path, None, "bad_action", msg, eid))
            lines = lines[:MAX_EVENT_LINES]
        extra = lines[span:]
        if extra:  # one letter for all of them: a long log must not become as many dead letters
            why = (f"{path} line {extra[0][0]}: {len(extra)} action(s) beyond the trace's {span} screens "
                   f"(lines {extra[0][0]}-{extra[-1][0]}) not used")  # fmt: skip
            episode.dead_letters.append(DeadLetter(path, None, "bad_action", why, eid))

        def screenshot_only(step: int, n: int, shot: str) -> str:
            lineno, line = lines[step]
            return (f"{path} line {lineno}: the action on screen {n}, which has no {n}.xml or {n}.vh (only its "
                    f"screenshot {shot}); not used: {line.strip()[:80]!r}")  # fmt: skip

        def no_file(p0: int, p1: int) -> str:
            (l0, line), l1 = lines[p0], lines[p1][0]
            if p0 == p1:
                return (f"{path} line {l0}: the action on screen {first + p0}, which has no {first + p0}.xml or "
                        f"{first + p0}.vh (no file at all); not used: {line.strip()[:80]!r}")  # fmt: skip
            return (f"{path} lines {l0}-{l1}: {p1 - p0 + 1} actions on screens {first + p0}-{first + p1}, which "
                    f"have no file at all (no N.xml, N.vh or screenshot); not used")  # fmt: skip

        for step, (lineno, line) in actions_on_steps(enumerate(lines[:span]), first, stepped, shots, episode, path,
                                                     screenshot_only, no_file):  # fmt: skip
            try:
                actions[step] = parse_event(line.rstrip("\r"))
            except EventLineError as exc:
                why = f"{path} line {lineno}: {exc}: {line.strip()[:80]!r}"
                episode.dead_letters.append(DeadLetter(path, step, "bad_action", why, eid))
    else:
        episode.warnings.append(f"no {LLAMATOUCH_EVENTS}: the trace has no actions")
    for number in numbers:
        position = number - first
        names = hierarchies[number]
        names.sort(key=lambda n: HIERARCHY_EXTS.index(files.stem_and_ext(n)[1]))
        stem = files.stem_and_ext(names[0])[0]
        warnings = [f"also found {n} for this step; not used" for n in names[1:]]
        shot = shots.get(number)
        if shot is None:
            warnings.append(f"no screenshot {stem}.png: step has no screenshot")
        warnings += gap_warnings(position, first, span, stepped, "{n}.xml or {n}.vh")
        foreground = ""
        if number in activities:
            text = _read_text(read_file, by_name[activities[number]], episode)
            first_line = (text or "").strip().split("/", 1)[0].strip()
            foreground = first_line if "/" in (text or "") else ""
        episode.steps.append(
            RawStep(
                index=position,
                name=stem,
                hierarchy_path=by_name[names[0]],
                screenshot_path=by_name[shot] if shot else None,
                action=actions.get(position),
                warnings=tuple(warnings),
                foreground_package=foreground,
            )
        )
    for number in sorted(set(shots) - set(hierarchies)):
        if number not in screens:
            continue  # beyond the span: already a dead letter
        stem = files.stem_and_ext(shots[number])[0]
        why = f"{by_name[shots[number]]}: screenshot has no {stem}.xml or {stem}.vh beside it"
        episode.dead_letters.append(
            DeadLetter(by_name[shots[number]], number - first, "orphan_screenshot", why, eid)
        )
    return episode

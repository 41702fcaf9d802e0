"""Assemble a `UiEpisode` from one episode's raw steps: parse each screen, map actions to screenshot pixels,
resolve the object an action targets. Everything but `convert_episode`'s injected `read_file` is pure.

Coordinate rule (schemas/ui_episode.md): boxes and action points are in the step's output space
`screen_width` x `screen_height`. That is the screenshot's pixel size when the screenshot's aspect ratio
matches the hierarchy's within `ASPECT_TOLERANCE` (boxes are rescaled when the sizes differ, e.g. Rico's
1440x2560 onto a 540x960 JPEG), and also when the dump's root is the screenshot less a system bar (one side
equal, the other shorter, every box inside: boxes unchanged), so every step of an episode with one screenshot
size has that size. Otherwise the screenshot is kept but not used for scaling: the output space is the
hierarchy's own, and StepInfo carries a `screenshot_mismatch:` warning.
"""

from __future__ import annotations

import dataclasses
import math
import traceback
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from pipelines.display_size import (
    DisplaySizes,
    Observed,
    guessed,
    no_screenshot_warning,
    on_display,
    sizes_beside,
)
from pipelines.hierarchy import (
    Box,
    HierarchyError,
    Screen,
    forest_json,
    grid_location,
    image_info,
    parse,
    rescale,
    targets,
)
from pipelines.traces.examples import ExampleError
from pipelines.traces.files import display
from pipelines.traces.model import NO_HIERARCHY, DeadLetter, RawAction, RawEpisode, RawStep, RecordEpisode
from pipelines.traces.records import read_record_episode
from protos.llm4mobile import episode_pb2
from protos.stepmark import ui_episode_pb2

#: Largest relative difference between the screenshot's and the hierarchy's aspect ratios still treated as
#: the same screen (rounding of odd sizes; a status bar missing from one of them is well above this).
ASPECT_TOLERANCE = 0.01
#: How far (in output pixels, per edge) a recorded target's rescaled box may be from an object's box and still
#: be that object (rescaling rounds each edge once).
TARGET_SLACK = 1
MISMATCH = "screenshot_mismatch"
#: Formats whose parser takes the screen size from the caller (`parse(screen_size=...)`).
SIZED_FORMATS = ("uiautomator", "droidbot", "a11y_forest", "droidrun")
#: Formats whose boxes are measured on the screenshot itself (detector boxes: AITW/AitZ OCR and icons): the
#: screenshot's size is the screen's, passed to the parser.
SCREENSHOT_FORMATS = ("aitw_annotations",)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
#: Bytes of converted steps after which an episode converted with a `spill` goes on in a new record part
#: (schemas/ui_episode.md, "Episodes in parts"): memory is bounded by one part, not by the run's length.
PART_BYTES = 64 * 2**20
#: Parsed screens kept for reuse (DroidBot steps share state files; a run returns to a few screens).
CACHED_SCREENS = 32
#: Most steps held back after a step sized by its windows alone while waiting for a step that shows the
#: display (`pipelines/display_size.py`); past it, the waiting steps are sized with what has been seen.
MAX_WAITING = 256
#: Packages of the system's own views (window decor, status and navigation bars): an app's episode is named
#: after its own package even when these views outnumber its objects.
FRAMEWORK_PACKAGES = frozenset({"android", "com.android.systemui"})

Action = ui_episode_pb2.Action
ACTION_TYPES = {
    "tap": Action.TAP,
    "long_press": Action.LONG_PRESS,
    "swipe": Action.SWIPE,
    "type": Action.TYPE_TEXT,
    "back": Action.BACK,
    "home": Action.HOME,
    "enter": Action.ENTER,
    "wait": Action.WAIT,
    "other": Action.OTHER,
    "open_app": Action.OPEN_APP,
    "task_complete": Action.TASK_COMPLETE,
    "task_impossible": Action.TASK_IMPOSSIBLE,
}
POINTED = ("tap", "long_press", "swipe", "type")


@dataclass
class ConvertedStep:
    time_step: episode_pb2.TimeStep
    action: ui_episode_pb2.Action
    info: ui_episode_pb2.StepInfo
    #: The app in the foreground on this step (`foreground_package`); "" when nothing tells.
    foreground_package: str = ""
    #: The screenshot's pixel size (None without a screenshot).
    image_size: tuple[int, int] | None = None


def foreground_package(raw: RawStep, screen: Screen) -> str:
    """The step's foreground app: what the trace records beside the dump (LlamaTouch `N.activity`), else what
    the dump says (DroidBot `foreground_activity`, DroidRun `phone_state`), else the package owning most of the
    step's objects, not counting the system's own views unless there is nothing else. For accessibility forests
    (AndroidControl), the active application window's package comes before counting objects."""
    if raw.foreground_package or screen.foreground_package:
        return raw.foreground_package or screen.foreground_package
    apps = [w for w in screen.windows if w.type == "APPLICATION" and 0 <= w.first_object < len(screen.objects)]
    if apps:
        top = max(apps, key=lambda w: (w.active, w.focused, w.layer))
        if screen.objects[top.first_object].android_package:
            return screen.objects[top.first_object].android_package
    packages = Counter(o.android_package for o in screen.objects if o.android_package)
    ranked = [p for p, _ in packages.most_common()]
    apps = [p for p in ranked if p not in FRAMEWORK_PACKAGES] or ranked
    return apps[0] if apps else ""


#: How far from the end of a screenshot its end marker may be: some devices and tools append a trailer after
#: a JPEG's EOI (Samsung's "SEFT" block) or a PNG's IEND, and a cut-off file has no marker that close.
END_MARKER_WINDOW = 4096


def check_complete(data: bytes, fmt: str) -> None:
    """Reject screenshots cut short (`image_info` reads only the header): a JPEG must hold its EOI marker and a
    PNG its IEND chunk within END_MARKER_WINDOW bytes of the end. (In JPEG scan data 0xFF is always followed by
    0x00 or a restart marker, so FF D9 there is the real end.)"""
    tail = bytes(data[-END_MARKER_WINDOW:])
    if fmt == "jpeg" and b"\xff\xd9" not in tail:
        raise HierarchyError("bad_screenshot", "truncated JPEG: no end-of-image marker (FF D9) near the end")
    if fmt == "png" and b"IEND" not in tail:
        raise HierarchyError("bad_screenshot", "truncated PNG: no IEND chunk near the end")


def aspect_matches(w1: int, h1: int, w2: int, h2: int) -> bool:
    """True when w1/h1 and w2/h2 differ by at most ASPECT_TOLERANCE (relative)."""
    return abs(w1 * h2 - w2 * h1) <= ASPECT_TOLERANCE * w2 * h1


def _fits(screen: Screen, width: int, height: int) -> bool:
    """Every valid box lies within width x height."""
    return all(
        o.bbox.right <= width and o.bbox.bottom <= height
        for o in screen.objects
        if o.bbox.right > o.bbox.left and o.bbox.bottom > o.bbox.top
    )


def _outside(screen: Screen, width: int, height: int) -> int:
    """How many valid boxes do not lie within width x height."""
    return sum(
        1
        for o in screen.objects
        if o.bbox.right > o.bbox.left
        and o.bbox.bottom > o.bbox.top
        and (o.bbox.left < 0 or o.bbox.top < 0 or o.bbox.right > width or o.bbox.bottom > height)
    )


def bars_excluded(hw: int, hh: int, iw: int, ih: int) -> bool:
    """The dump's root is the screenshot minus a system bar: one side equal, the other shorter (a status or
    navigation bar the app window does not cover), so both are in the same device pixels."""
    return (hw == iw and 0 < hh < ih) or (hh == ih and 0 < hw < iw)


def _resized(screen: Screen, width: int, height: int) -> Screen:
    """The same boxes on a width x height screen: only the grid locations change."""
    for o in screen.objects:
        b = o.bbox
        o.grid_location = grid_location(Box(b.left, b.top, b.right, b.bottom), width, height)
    return dataclasses.replace(screen, width=width, height=height, size_estimated=False)


def screenshot_only(screenshot: bytes | None) -> Observed:
    """A step with a screenshot and no hierarchy (GUI-Odyssey, AndroidControl without trees): no objects, the
    screen is the screenshot's size. Raises HierarchyError (`missing_screenshot` when there is none)."""
    if screenshot is None:
        raise HierarchyError("missing_screenshot", "a step without a hierarchy needs a screenshot")
    image = image_info(screenshot)
    check_complete(screenshot, image.format)
    screen = Screen(objects=[], width=image.width, height=image.height, format=NO_HIERARCHY)
    return Observed(screen, b"", image.width, image.height, screenshot, image, False, [])


def observe(
    hierarchy: bytes | None, screenshot: bytes | None, *, drop_invisible: bool = False, fmt: str | None = None
) -> Observed:
    """Parse a hierarchy (`fmt`, detected when None) and fit it to its screenshot (see the module docstring).
    No hierarchy (None, or `fmt` NO_HIERARCHY): a screenshot-only step. Raises HierarchyError."""
    if hierarchy is None or fmt == NO_HIERARCHY:
        return screenshot_only(screenshot)
    image = None
    if screenshot is not None:
        image = image_info(screenshot)
        check_complete(screenshot, image.format)
    on_shot = fmt in SCREENSHOT_FORMATS and image is not None
    size = (image.width, image.height) if on_shot else None
    screen = parse(hierarchy, fmt=fmt or None, drop_invisible=drop_invisible, screen_size=size)
    hw, hh = screen.width, screen.height
    mismatch = False
    extra: list[str] = []
    if (
        image is not None
        and hw != hh
        and (hw, hh) == (image.height, image.width)
        and screen.format in SIZED_FORMATS
        and (off := _outside(screen, image.width, image.height)) <= _outside(screen, hw, hh)
    ):  # the device reported its landscape size with a portrait screenshot (or the reverse): DroidBot
        fit = "every box fits the screenshot" if not off else (
            f"{off} box(es) lie outside it, no more than outside the reported size (content scrolled off-screen)"
        )  # fmt: skip
        extra.append(
            f"hierarchy size {hw}x{hh} is the {image.width}x{image.height} screenshot's turned sideways and {fit}: "
            f"its orientation is used (boxes unchanged, every computed field redone)"
        )
        size = (image.width, image.height)
        screen = parse(hierarchy, fmt=screen.format, drop_invisible=drop_invisible, screen_size=size)
        hw, hh = screen.width, screen.height
    if image is not None and screen.size_estimated and _fits(screen, image.width, image.height):
        extra.append(
            f"hierarchy size {hw}x{hh} was estimated from window bounds; the {image.width}x{image.height} "
            f"screenshot is taken as the screen (boxes unchanged, grid locations recomputed)"
        )
        screen = _resized(screen, image.width, image.height)
        hw, hh = screen.width, screen.height
    if (
        image is not None
        and bars_excluded(hw, hh, image.width, image.height)
        and not aspect_matches(image.width, image.height, hw, hh)
        and _fits(screen, image.width, image.height)
    ):
        extra.append(
            f"hierarchy root {hw}x{hh} is the {image.width}x{image.height} screenshot less a system bar: the "
            f"screenshot's size is the screen (boxes unchanged, grid locations recomputed)"
        )
        screen = _resized(screen, image.width, image.height)
        hw, hh = screen.width, screen.height
    if image is not None and (image.width, image.height) != (hw, hh):
        if hw <= 0 or hh <= 0:
            mismatch = True
            extra.append(
                f"{MISMATCH}: the hierarchy has no usable size ({hw}x{hh}); boxes left as parsed, "
                f"screen size taken from the {image.width}x{image.height} screenshot"
            )
            screen = _resized(screen, image.width, image.height)
        elif aspect_matches(image.width, image.height, hw, hh):
            screen = rescale(screen, image.width, image.height)
        else:
            mismatch = True
            extra.append(
                f"{MISMATCH}: screenshot is {image.width}x{image.height} but the hierarchy space is "
                f"{hw}x{hh} (aspect ratios differ by more than {ASPECT_TOLERANCE:.0%}); boxes and actions "
                f"stay in hierarchy coordinates"
            )
    elif image is None:
        extra.append(no_screenshot_warning(hw, hh))
    return Observed(screen, hierarchy, hw, hh, screenshot, image, mismatch, list(screen.warnings) + extra)


def _to_output(obs: Observed, x: float, y: float, space: str, warnings: list[str]) -> tuple[int, int] | None:
    """A point in `space` mapped to the output space, rounded to whole pixels; None (with a warning) when it
    is not a finite point that fits the Action's int32 fields."""
    point = _mapped(obs, x, y, space, warnings)
    if point is None:
        warnings.append(f"action point ({x}, {y}) in {space} space is not a usable pixel position: left out")
    return point


def _pixel(value: float) -> int | None:
    if not math.isfinite(value):
        return None
    rounded = int(round(value))
    return rounded if INT32_MIN <= rounded <= INT32_MAX else None


def _mapped(obs: Observed, x: float, y: float, space: str, warnings: list[str]) -> tuple[int, int] | None:
    if space == "normalized":
        fx, fy = x * obs.width, y * obs.height
    elif space == "hierarchy":
        sx, sy = obs.screen.scale
        fx, fy = x * sx, y * sy
    elif obs.image is None:
        warnings.append(
            "action given in screenshot pixels but there is no screenshot: used as hierarchy pixels"
        )
        fx, fy = x, y
    elif obs.mismatch and obs.hierarchy_width > 0 and obs.hierarchy_height > 0:
        warnings.append(f"{MISMATCH}: action mapped from screenshot to hierarchy pixels axis by axis")
        fx = x * obs.hierarchy_width / obs.image.width
        fy = y * obs.hierarchy_height / obs.image.height
    else:
        fx, fy = x, y
    px, py = _pixel(fx), _pixel(fy)
    return None if px is None or py is None else (px, py)


def _scroll_points(raw: RawAction, obs: Observed) -> tuple[float, float, float, float]:
    """DroidBot's ScrollEvent.send: drag through 4/5 of the view (or screen) around its centre, in hierarchy
    coordinates."""
    if raw.target_bounds is not None:
        left, top, right, bottom = raw.target_bounds
    else:
        left, top, right, bottom = 0, 0, obs.hierarchy_width, obs.hierarchy_height
    width, height = right - left, bottom - top
    x = raw.x if raw.x is not None else (left + right) / 2
    y = raw.y if raw.y is not None else (top + bottom) / 2
    sx, sy, ex, ey = x, y, x, y
    if raw.direction == "UP":
        sy, ey = y - height * 2 / 5, y + height * 2 / 5
    elif raw.direction == "DOWN":
        sy, ey = y + height * 2 / 5, y - height * 2 / 5
    elif raw.direction == "LEFT":
        sx, ex = x - width * 2 / 5, x + width * 2 / 5
    elif raw.direction == "RIGHT":
        sx, ex = x + width * 2 / 5, x - width * 2 / 5
    return sx, sy, ex, ey


def _recorded_target(raw: RawAction, obs: Observed) -> int | None:
    """The object whose box (and class / resource id, when recorded) is the recorded target's; the deepest one
    when several match."""
    if raw.target_bounds is None:
        return None
    sx, sy = obs.screen.scale if raw.space == "hierarchy" else (1.0, 1.0)
    left, top, right, bottom = raw.target_bounds
    want = (left * sx, top * sy, right * sx, bottom * sy)
    found = None
    for o in obs.screen.objects:
        b = o.bbox
        if not all(
            abs(a - w) <= TARGET_SLACK for a, w in zip((b.left, b.top, b.right, b.bottom), want, strict=True)
        ):
            continue
        if raw.target_class and o.android_class and o.android_class != raw.target_class:
            continue
        if raw.target_resource_id and o.resource_id and o.resource_id != raw.target_resource_id:
            continue
        found = o.index
    return found


def resolve_action(raw: RawAction | None, obs: Observed) -> tuple[ui_episode_pb2.Action, list[str]]:
    """The proto Action for a raw action on this screen, with the target object resolved, plus warnings.

    Target (`hierarchy.targets.resolve`, rule in schemas/objects.md): a recorded target (DroidBot's view)
    matched by box/class/resource id; otherwise, and as a fallback, the best object under (x, y) (the start
    point for swipes). A `type` action without a point targets the focused object.
    """
    action = ui_episode_pb2.Action()
    warnings: list[str] = []
    if raw is None:
        return action, warnings
    action.type = ACTION_TYPES[raw.kind]
    action.text = raw.text
    if 0 <= raw.duration_ms <= INT32_MAX:  # layout schemas bound it; a reader bug must not lose the step
        action.duration_ms = raw.duration_ms
    else:
        warnings.append(f"action duration {raw.duration_ms} ms out of range: left out")
    action.raw_json = raw.raw_json
    action.instruction = raw.instruction
    if raw.kind == "swipe" and raw.direction:
        action.direction = raw.direction.lower()
    x, y, ex, ey = raw.x, raw.y, raw.end_x, raw.end_y
    if raw.kind == "swipe" and raw.direction:
        x, y, ex, ey = _scroll_points(raw, obs)
    point = _to_output(obs, x, y, raw.space, warnings) if x is not None and y is not None else None
    if point is not None:
        action.x, action.y = point
    else:
        x = y = None
        if raw.kind in ("tap", "long_press", "swipe"):
            warnings.append(f"{raw.kind} recorded without usable coordinates")
    end = _to_output(obs, ex, ey, raw.space, warnings) if ex is not None and ey is not None else None
    if end is not None:
        action.end_x, action.end_y = end
    if raw.kind not in POINTED:
        return action, warnings
    recorded = _recorded_target(raw, obs)
    if recorded is None and raw.target_bounds is not None:
        warnings.append("recorded target view not found among the objects; target resolved by position")
    found = targets.resolve(
        obs.screen.objects, (action.x, action.y) if x is not None and y is not None else None,
        recorded=recorded, swipe=raw.kind == "swipe", typing=raw.kind == "type",
    )  # fmt: skip
    if found.index is not None:
        action.target_index = found.index
        action.target_id = obs.screen.objects[found.index].id
        action.target_rule = found.rule
        action.target_candidates.extend(found.runners_up)
    return action, warnings


def build_step(raw: RawStep, obs: Observed, position: int, episode_id: str) -> ConvertedStep:
    """TimeStep + Action + StepInfo for one step (position = its index in the output episode)."""
    step = episode_pb2.TimeStep(index=position)
    o = step.observation
    o.objects.extend(obs.screen.objects)
    if obs.screenshot is not None:
        o.screenshot = obs.screenshot
        o.debug_screenshot_filepath = display(raw.screenshot_path or "")
    o.image_id = f"{episode_id}/{display(raw.name)}"
    if obs.screen.format == NO_HIERARCHY:
        pass  # a screenshot-only step: no hierarchy to keep
    elif obs.screen.format == "uiautomator":
        o.xml = obs.hierarchy
    elif obs.screen.format == "a11y_forest":
        o.json = forest_json(obs.hierarchy, text=raw.hierarchy_format == "a11y_forest_text")
    else:
        o.json = obs.hierarchy
    o.screen_width, o.screen_height = obs.width, obs.height
    o.debug_vh_filepath = display(raw.hierarchy_path)
    action, action_warnings = resolve_action(raw.action, obs)
    size_warnings = []
    if raw.expected_size is not None and obs.image is not None:
        width, height, warning = raw.expected_size
        if (obs.image.width, obs.image.height) != (width, height):
            size_warnings.append(warning.format(width=obs.image.width, height=obs.image.height))
    sx, sy = obs.screen.scale
    info = ui_episode_pb2.StepInfo(
        index=raw.index,
        hierarchy_path=display(raw.hierarchy_path),
        screenshot_path=display(raw.screenshot_path or ""),
        hierarchy_width=obs.hierarchy_width,
        hierarchy_height=obs.hierarchy_height,
        scale_x=sx,
        scale_y=sy,
        screenshot_format=obs.image.format if obs.image else "",
        warnings=[
            display(w) for w in (*raw.warnings, *size_warnings, *obs.warnings, *action_warnings)
        ],  # may quote file names
        rotation=obs.screen.rotation,
        hierarchy_format=obs.screen.format,
        windows=obs.screen.windows,
    )
    for name, value in raw.text:
        setattr(info.text, name, value)
    image_size = (obs.image.width, obs.image.height) if obs.image else None
    return ConvertedStep(step, action, info, foreground_package(raw, obs.screen), image_size)


@dataclass
class EpisodeFacts:
    """What the episode-level fields need of every converted step, gathered one step at a time so the steps
    themselves need not all be kept (`assemble`)."""

    steps: int = 0
    objects: int = 0
    mismatches: int = 0
    kept: set[int] = field(default_factory=set)
    foreground: list[str] = field(default_factory=list)
    by_image: dict[tuple[int, int], Counter] = field(default_factory=dict)

    def add(self, s: ConvertedStep) -> None:
        o = s.time_step.observation
        self.steps += 1
        self.objects += len(o.objects)
        self.mismatches += any(w.startswith(MISMATCH) for w in s.info.warnings)
        self.kept.add(s.info.index)
        self.foreground.append(s.foreground_package)
        if s.image_size is not None:
            self.by_image.setdefault(s.image_size, Counter())[(o.screen_width, o.screen_height)] += 1


def assemble(raw: RawEpisode, steps: list[ConvertedStep], facts: EpisodeFacts) -> ui_episode_pb2.UiEpisode:
    """The UiEpisode record from converted steps (in order) and `facts` of every step of the episode: `steps`
    may be only the last of them (the episode's last record part)."""
    out = ui_episode_pb2.UiEpisode(
        episode_id=raw.source.episode_id,
        source=raw.source.layout,
        source_path=display(raw.source.source_path),
        goal=raw.goal,
    )
    add_steps(out, steps)
    out.app_package = raw.app_package or app_under_test(facts.foreground)
    out.metadata.update(raw.metadata)
    out.metadata["source_steps"] = str(raw.num_source_steps)
    dropped = [str(i) for i in range(raw.num_source_steps) if i not in facts.kept]
    if dropped:
        out.metadata["dropped_steps"] = ",".join(dropped)
    notes = list(raw.warnings)
    mixed = _mixed(facts.by_image)
    if mixed:
        notes.append(mixed)
    if notes:
        out.metadata["warnings"] = display("; ".join(notes))
    return out


def add_steps(out: ui_episode_pb2.UiEpisode, steps: Iterable[ConvertedStep]) -> None:
    for s in steps:
        out.episode.time_steps.append(s.time_step)
        out.actions.append(s.action)
        out.step_info.append(s.info)


def _mixed(by_image: dict[tuple[int, int], Counter]) -> str:
    """An episode warning when steps whose screenshots share one size still ended in different output spaces
    (the fit rule kept a dump's own space on some: `screenshot_mismatch`), naming the sizes; "" otherwise.
    Different screenshot sizes (a rotation) are not a contradiction."""
    parts = []
    for (iw, ih), sizes in by_image.items():
        if len(sizes) > 1:
            listed = ", ".join(f"{w}x{h} ({n} steps)" for (w, h), n in sizes.most_common())
            parts.append(f"steps with {iw}x{ih} screenshots are in {len(sizes)} screen sizes: {listed}")
    return "; ".join(parts)


def app_under_test(foreground: Iterable[str]) -> str:
    """The episode's app when the trace does not name it: the foreground package of most steps (the first
    one seen on a tie), not counting the system's own packages unless there is nothing else. Counting steps,
    not objects: a file picker with many rows must not outvote the app on most screens."""
    steps = Counter(p for p in foreground if p)
    ranked = [p for p, _ in steps.most_common()]  # most_common keeps first-seen order among equal counts
    apps = [p for p in ranked if p not in FRAMEWORK_PACKAGES] or ranked
    return apps[0] if apps else ""


@dataclass
class EpisodeResult:
    """What converting one episode produced: the record (None when no step survived) and its dead letters."""

    episode: ui_episode_pb2.UiEpisode | None
    dead_letters: list[DeadLetter]
    num_objects: int = 0
    mismatches: int = 0
    #: Converted with a `spill`: the first step index of each part handed to it, in order; `episode` is then
    #: the last part (every episode-level field, the steps after the spilled ones). Empty: `episode` is whole.
    spilled: list[int] = field(default_factory=list)
    #: Steps of the whole episode (all parts).
    num_steps: int = 0


def _error(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, HierarchyError):
        return exc.reason, str(exc)
    if isinstance(exc, OSError):
        return "unreadable", f"{type(exc).__name__}: {exc}"
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {frame.filename}:{frame.lineno}" if frame else ""
    return "internal_error", f"{type(exc).__name__}: {exc}{where}"


class _FileFailure(Exception):
    """Which file of a step failed, and why."""

    def __init__(self, path: str, cause: BaseException) -> None:
        super().__init__(path)
        self.path, self.cause = path, cause


def _observe_files(raw: RawStep, read_file: Callable[[str], bytes], drop_invisible: bool) -> Observed:
    """Read a step's files and observe them, blaming the file that failed (screenshot or hierarchy)."""
    shot = None
    if raw.screenshot_path is not None:
        try:
            shot = read_file(raw.screenshot_path)
            check_complete(shot, image_info(shot).format)
        except Exception as exc:
            raise _FileFailure(raw.screenshot_path, exc) from exc
    if raw.hierarchy_format == NO_HIERARCHY:
        try:
            return screenshot_only(shot)
        except Exception as exc:
            raise _FileFailure(raw.screenshot_path or raw.name, exc) from exc
    try:
        return observe(
            read_file(raw.hierarchy_path), shot, drop_invisible=drop_invisible, fmt=raw.hierarchy_format
        )
    except Exception as exc:
        raise _FileFailure(raw.hierarchy_path, exc) from exc


def convert_episode(
    raw: RawEpisode,
    read_file: Callable[[str], bytes],
    *,
    drop_invisible: bool = False,
    spill: Callable[[bytes], None] | None = None,
    part_bytes: int | None = None,
) -> EpisodeResult:
    """Read, parse and assemble every step; a failing step becomes a dead letter and the episode keeps the
    others. An episode left with no step is itself a dead letter (`no_steps`). Screens shared by several steps
    (DroidBot states) are parsed once while they are in use.

    Steps are converted one at a time (`converted_steps`). Without `spill` the record holds them all. With it,
    each time the steps held reach `part_bytes` (PART_BYTES) they are handed to `spill` as a serialized UiEpisode holding
    only steps (fields 2-4), and the result's `episode` is the last part: memory stays bounded by one part
    however long the run (schemas/ui_episode.md, "Episodes in parts")."""
    part_bytes = part_bytes or PART_BYTES
    dead = list(raw.dead_letters)
    facts = EpisodeFacts()
    held: list[ConvertedStep] = []
    size = 0
    spilled: list[int] = []
    for step in converted_steps(raw, read_file, dead, drop_invisible=drop_invisible):
        step_size = step.time_step.ByteSize() + step.action.ByteSize() + step.info.ByteSize()
        if spill is not None and held and size + step_size > part_bytes:
            spilled.append(facts.steps - len(held))
            part = ui_episode_pb2.UiEpisode()
            add_steps(part, held)
            held, size = [], 0
            spill(part.SerializeToString(deterministic=True))
            del part
        facts.add(step)
        held.append(step)
        size += step_size
    if not facts.steps:
        why = f"{raw.source.source_path}: no step of this {raw.source.layout} episode could be converted"
        if raw.num_source_steps == 0:
            why = f"{raw.source.source_path}: this {raw.source.layout} episode has no steps"
        dead.append(DeadLetter(raw.source.source_path, None, "no_steps", why, raw.source.episode_id))
        return EpisodeResult(None, dead)
    episode = assemble(raw, held, facts)
    return EpisodeResult(episode, dead, facts.objects, facts.mismatches, spilled, facts.steps)


@dataclass
class _Waiting:
    """A converted step held back until the display it may need is known, with what rebuilding it takes."""

    step: ConvertedStep
    raw: RawStep
    observed: Observed | None = None  # set when its size is its windows' guess


def converted_steps(
    raw: RawEpisode, read_file: Callable[[str], bytes], dead: list[DeadLetter], *, drop_invisible: bool = False
) -> Iterator[ConvertedStep]:
    """The episode's converted steps, in order, one at a time (positions numbered from 0); failing steps are
    appended to `dead`. Parsed screens are reused from a small cache (CACHED_SCREENS). A step sized by its
    windows alone is held back, with the steps after it, until a step shows a display holding its windows (or
    MAX_WAITING steps, or the end): it is then rebuilt on that display (`pipelines/display_size.py`)."""
    eid = raw.source.episode_id
    if raw.blobs:  # bytes the layout reader derived (detector boxes, decoded screenshots): no file to read
        file_reader, blobs = read_file, raw.blobs

        def read_file(path: str) -> bytes:
            found = blobs.get(path)
            return found if found is not None else file_reader(path)

    cache: OrderedDict[tuple[str, str | None], Observed | DeadLetter] = OrderedDict()
    display = DisplaySizes()
    waiting: list[_Waiting] = []
    position = 0

    def beside() -> list[tuple[int, int, str]]:
        return sizes_beside(raw.source.context, read_file)

    for raw_step in raw.steps:
        key = (raw_step.hierarchy_path, raw_step.screenshot_path)
        if key in cache:
            cache.move_to_end(key)
        else:
            try:
                cache[key] = _observe_files(raw_step, read_file, drop_invisible)
            except _FileFailure as failure:
                reason, message = _error(failure.cause)
                cache[key] = DeadLetter(
                    failure.path, raw_step.index, reason, f"{failure.path}: {message}", eid
                )
            if len(cache) > CACHED_SCREENS:
                cache.popitem(last=False)
        observed = cache[key]
        if isinstance(observed, DeadLetter):
            dead.append(
                DeadLetter(observed.source_path, raw_step.index, observed.reason, observed.exception, eid)
            )
            continue
        display.see(observed, raw_step.index)
        try:
            step = build_step(raw_step, observed, position, eid)
        except Exception as exc:  # never lose the step silently
            reason, message = _error(exc)
            where = raw_step.hierarchy_path or raw_step.screenshot_path or raw.source.source_path
            dead.append(DeadLetter(where, raw_step.index, reason, message, eid))
            continue
        position += 1
        is_guess = guessed(observed)
        if not (waiting or is_guess):
            yield step
            continue
        waiting.append(_Waiting(step, raw_step, observed if is_guess else None))
        if len(waiting) < MAX_WAITING and not all(
            w.observed is None or display.display_for(w.observed) is not None for w in waiting
        ):
            continue  # a guess the steps seen so far cannot size yet: wait for one that shows the display
        yield from _resize_guesses(waiting, display, eid, beside)
        waiting = []
    yield from _resize_guesses(waiting, display, eid, beside)


def _resize_guesses(
    waiting: list[_Waiting],
    display: DisplaySizes,
    eid: str,
    beside: Callable[[], list[tuple[int, int, str]]],
) -> Iterator[ConvertedStep]:
    """The waiting steps in order, those sized by their windows alone rebuilt on the display the steps seen so
    far show (else a file beside them, read only then: `beside`; `pipelines/display_size.py`); a step nothing
    helps keeps its guess."""
    fitted: dict[int, Observed] = {}  # steps sharing one dump (DroidBot states) share its fitted copy
    for w in waiting:
        if w.observed is None:
            yield w.step
            continue
        found = display.display_for(w.observed)
        if found is None:
            if display.files is None:
                display.files = beside()
            found = display.display_beside(w.observed)
        if found is None:
            yield w.step
            continue
        if id(w.observed) not in fitted:
            fitted[id(w.observed)] = on_display(w.observed, *found)
        try:
            yield build_step(w.raw, fitted[id(w.observed)], w.step.time_step.index, eid)
        except Exception:  # the step as first built stays: nothing is lost
            yield w.step


def convert_record_episode(
    item: RecordEpisode, *, drop_invisible: bool = False, spill: Callable[[bytes], None] | None = None
) -> EpisodeResult:
    """Convert an episode that came inside TFRecord records (AndroidControl, AITW): the layout reader maps
    its steps to in-memory bytes, then `convert_episode` does the rest. A record that is not the Example its
    layout needs is a `bad_record` dead letter."""
    try:
        raw, blobs = read_record_episode(item)
    except ExampleError as exc:
        where = display(f"{item.records[0][0]}@{item.records[0][1]}") if item.records else item.source_path
        dead = [
            *item.dead_letters,
            DeadLetter(item.source_path, None, "bad_record", f"{where}: {exc}", item.episode_id),
        ]
        return EpisodeResult(None, dead)
    return convert_episode(raw, blobs.__getitem__, drop_invisible=drop_invisible, spill=spill)

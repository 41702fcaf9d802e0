"""The display size of a run, for the steps whose own dump cannot tell it (issue 32, item 5).

A dump that states no size and comes without a screenshot has only its windows' extent as the screen: a
dialog on top (`[0,583][1080,1718]`) or a car display whose windows stop short of the screen then gets the
window's extent. Another step of the same episode (a DroidBot run, a step folder) often shows the display: its
screenshot, the size its dump states, or a larger window starting at the origin (a full-screen root). A step
whose size is such a guess takes the display size its siblings show, when one holds its windows and has its
rotation; otherwise it keeps its guess and the warning saying so. When no step of the episode shows it, the
files discovery found beside the dumps (`EpisodeSource.context`: a single screen's sibling screenshots, saved
`dumpsys` / `wm size` output) are read, for such a step only.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pipelines.hierarchy import ImageInfo, Screen
from pipelines.hierarchy.errors import HierarchyError
from pipelines.hierarchy.objects import Box, estimated_warning, grid_location
from pipelines.hierarchy.screenshot import image_info
from pipelines.traces.files import display

#: How a step shows the display (strongest first), as the note on a resized step names it.
SCREENSHOT, STATED, WINDOW = "step {}'s screenshot", "the size step {}'s dump states", "step {}'s full-screen window"
#: A file beside the dumps (no rotation known: it must have the step's orientation).
BESIDE = "{} beside it"
#: The display size in saved `dumpsys` / `wm size` output, most trusted first: `wm size`'s override and physical
#: size, `dumpsys window displays`' current size, `dumpsys display`'s real size.
DISPLAY_PATTERNS = tuple(
    re.compile(p)
    for p in (
        r"Override size:\s*(\d+)\s*x\s*(\d+)",
        r"Physical size:\s*(\d+)\s*x\s*(\d+)",
        r"\bcur=(\d+)x(\d+)",
        r"\breal (\d+) x (\d+)",
    )
)
#: Bytes of a saved dumpsys read at most (`dumpsys window` runs to a few hundred KB).
MAX_TEXT = 1 << 20


def size_in_text(data: bytes) -> tuple[int, int] | None:
    """The display size a saved `dumpsys` / `wm size` output states, None when it states none."""
    text = data[:MAX_TEXT].decode("utf-8", "replace")
    for pattern in DISPLAY_PATTERNS:
        m = pattern.search(text)
        if m and 0 < int(m.group(1)) < 1 << 16 and 0 < int(m.group(2)) < 1 << 16:
            return int(m.group(1)), int(m.group(2))
    return None


def sizes_beside(paths: Sequence[str], read_file: Callable[[str], bytes]) -> list[tuple[int, int, str]]:
    """(width, height, file) of the display each context file shows (screenshots, then saved display output,
    in `paths` order); a file that cannot be read or shows nothing is passed over (not part of the episode)."""
    out = []
    for path in paths:
        try:
            data = read_file(path)
            if path.lower().endswith(".txt"):
                size = size_in_text(data)
            else:
                info = image_info(data)
                size = (info.width, info.height)
        except (OSError, HierarchyError, ValueError):
            continue
        if size is not None:
            out.append((*size, display(path)))
    return out



def no_screenshot_warning(width: int, height: int) -> str:
    """The warning of a step without a screenshot whose size comes from its hierarchy."""
    return f"no screenshot: screen size {width}x{height} from the hierarchy"


@dataclass
class Observed:
    """One parsed screen in its output space; shared by every step that shows the same state file. It lives here
    because the display-size rules reason over it and `pipelines.ui_episode` builds it (no import circle)."""

    screen: Screen
    hierarchy: bytes
    hierarchy_width: int
    hierarchy_height: int
    screenshot: bytes | None
    image: ImageInfo | None
    mismatch: bool
    warnings: list[str] = field(default_factory=list)

    @property
    def width(self) -> int:
        return self.screen.width

    @property
    def height(self) -> int:
        return self.screen.height



def guessed(obs: Observed) -> bool:
    """The step's screen size is its windows' extent, with no screenshot to check it against."""
    return obs.image is None and obs.screen.size_from_windows and obs.width > 0 and obs.height > 0


@dataclass
class DisplaySizes:
    """What the steps of one episode show of the display: (width, height, rotation) -> the first step showing
    it, by kind of evidence. Steps are fed in order with `see`."""

    shown: dict[str, dict[tuple[int, int, int], int]] = field(
        default_factory=lambda: {SCREENSHOT: {}, STATED: {}, WINDOW: {}}
    )
    counts: Counter = field(default_factory=Counter)
    #: (width, height, file) the context files show, once read (`beside`).
    files: list[tuple[int, int, str]] | None = None

    def see(self, obs: Observed, step: int) -> None:
        """Learn from one observed step (`pipelines.ui_episode.Observed`) of source index `step`."""
        w, h, rotation = obs.hierarchy_width, obs.hierarchy_height, obs.screen.rotation
        if w <= 0 or h <= 0 or obs.mismatch:
            return
        if obs.image is not None:
            kind = SCREENSHOT
        elif not obs.screen.size_from_windows:
            kind = STATED
        elif not obs.screen.size_estimated:
            kind = WINDOW
        else:
            return  # a dialog's extent shows nothing of the display
        self.shown[kind].setdefault((w, h, rotation), step)
        if kind != WINDOW:
            self.counts[(w, h, rotation)] += 1

    def display_for(self, obs: Observed) -> tuple[int, int, str] | None:
        """(width, height, where it was seen) of the display for a guessed step: the most often shown
        screenshot/stated size holding its windows, else the largest full-screen window that does; None when
        no step shows a larger display."""
        w, h, rotation = obs.width, obs.height, obs.screen.rotation

        def holds(size: tuple[int, int, int]) -> bool:
            return size[2] == rotation and size[0] >= w and size[1] >= h

        # A screenshot or a stated size may confirm the guess (the same size); another dump's windows only
        # show a display when they are larger (windows of the same extent may all stop short).
        strong = [s for kind in (SCREENSHOT, STATED) for s in self.shown[kind] if holds(s)]
        if strong:
            best = max(strong, key=lambda s: self.counts[s])
            kind = SCREENSHOT if best in self.shown[SCREENSHOT] else STATED
        else:
            windows = [s for s in self.shown[WINDOW] if holds(s) and (s[0], s[1]) != (w, h)]
            if not windows:
                return None
            best, kind = max(windows, key=lambda s: s[0] * s[1]), WINDOW
        return best[0], best[1], kind.format(self.shown[kind][best])

    def display_beside(self, obs: Observed) -> tuple[int, int, str] | None:
        """The display a context file shows for a guessed step (`files` read): saved display output holding
        its windows with its orientation (portrait or landscape), else a screenshot that does and also shares
        one side with them (a folder of single screens may mix devices: a dialog spans the display's width, a
        window beside a bar its height)."""
        w, h = obs.width, obs.height

        def holds(fw: int, fh: int) -> bool:
            return fw >= w and fh >= h and (fw >= fh) == (w >= h)

        texts = [f for f in self.files or () if f[2].lower().endswith(".txt") and holds(f[0], f[1])]
        shots = [f for f in self.files or () if not f[2].lower().endswith(".txt") and holds(f[0], f[1])]
        found = texts + [s for s in shots if s[0] == w or s[1] == h]
        return (found[0][0], found[0][1], BESIDE.format(found[0][2])) if found else None


def on_display(obs: Observed, width: int, height: int, where: str) -> Observed:
    """A copy of a guessed step on the width x height display: boxes unchanged, grid locations recomputed,
    the guess's warnings replaced by one naming where the size was seen."""
    screen = obs.screen
    objects = []
    for o in screen.objects:
        copy = type(o)()
        copy.CopyFrom(o)
        b = copy.bbox
        copy.grid_location = grid_location(Box(b.left, b.top, b.right, b.bottom), width, height)
        objects.append(copy)
    dropped = {estimated_warning(obs.width, obs.height), no_screenshot_warning(obs.width, obs.height)}
    note = (
        f"no screenshot: screen size {width}x{height} from {where} (this dump's windows span only "
        f"{obs.width}x{obs.height}); boxes unchanged, grid locations recomputed"
        if (width, height) != (obs.width, obs.height)
        else f"no screenshot: screen size {width}x{height} from the hierarchy, as {where} shows"
    )
    new_screen = dataclasses.replace(
        screen,
        objects=objects,
        width=width,
        height=height,
        warnings=[w for w in screen.warnings if w not in dropped],
        size_estimated=False,
        size_from_windows=False,
    )
    warnings = [w for w in obs.warnings if w not in dropped] + [note]
    return dataclasses.replace(
        obs, screen=new_screen, hierarchy_width=width, hierarchy_height=height, warnings=warnings
    )

"""What a trace layout reader produces: episodes as file paths plus raw actions, before any parsing.

Readers only locate files and read the small layout files (gestures.json, actions.jsonl, DroidBot events);
view hierarchies and screenshots are read and parsed later, one episode at a time, so discovery stays cheap
and memory does not grow with the number of episodes.
"""

from __future__ import annotations

import json
from dataclasses import KW_ONLY, dataclass, field

#: Input layouts, as written to `UiEpisode.source`.
LAYOUTS = (
    "rico_trace", "step_folder", "single_screen", "droidbot", "android_control", "aitw", "llamatouch", "droidrun",
    "aitz", "gui_odyssey", "android_control_json",
)  # fmt: skip

#: Action kinds a reader may emit (see schemas/actions.schema.json).
ACTION_KINDS = (
    "tap", "long_press", "swipe", "type", "back", "home", "enter", "wait", "other",
    "open_app", "task_complete", "task_impossible",
)  # fmt: skip

#: Coordinate spaces a raw action's points may be given in.
SPACES = ("screenshot", "hierarchy", "normalized")
#: `RawStep.hierarchy_format` of a screenshot-only step: no hierarchy file, no objects, the screen is the
#: screenshot (schemas/ui_episode.md, "Screenshot-only steps").
NO_HIERARCHY = "none"


@dataclass(frozen=True)
class EpisodeSource:
    """One episode found by discovery: its layout and the files that make it up (paths only)."""

    layout: str
    episode_id: str
    source_path: str
    files: tuple[str, ...]
    #: Files of the same folder that may show the display size for a step whose dump cannot tell it (sibling
    #: screenshots of a single screen, `dumpsys`/`wm size` text); read only then (`pipelines/display_size.py`).
    context: tuple[str, ...] = ()


@dataclass(frozen=True)
class RawAction:
    """An action as the trace recorded it, not yet mapped to screenshot pixels or resolved to an object.

    Points are in `space`: "screenshot" pixels, "hierarchy" coordinates (the dump's own space, e.g.
    1440x2560 device pixels for DroidBot) or "normalized" fractions of the screen (Rico gestures).
    `direction` (UP/DOWN/LEFT/RIGHT) describes a DroidBot scroll whose points are computed from `target_bounds`
    (or the whole screen) once the screen size is known.
    """

    kind: str
    x: float | None = None
    y: float | None = None
    end_x: float | None = None
    end_y: float | None = None
    space: str = "screenshot"
    text: str = ""
    duration_ms: int = 0
    direction: str = ""
    target_bounds: tuple[int, int, int, int] | None = None  # left, top, right, bottom in hierarchy space
    target_class: str = ""
    target_resource_id: str = ""
    raw_json: str = ""
    instruction: str = ""  # the step's natural-language instruction (AndroidControl step_instructions)

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ValueError(f"unknown action kind {self.kind!r}")
        if self.space not in SPACES:
            raise ValueError(f"unknown coordinate space {self.space!r}")


@dataclass(frozen=True)
class RawStep:
    """One step: where its hierarchy and screenshot are, and the action taken on it (None = none recorded)."""

    index: int
    name: str
    hierarchy_path: str
    screenshot_path: str | None
    action: RawAction | None = None
    warnings: tuple[str, ...] = ()
    #: `pipelines.hierarchy.FORMATS` name of the hierarchy bytes; "" = detect (XML / JSON files); NO_HIERARCHY =
    #: a screenshot-only step (`hierarchy_path` is then "").
    hierarchy_format: str = ""
    _: KW_ONLY  # the fields below are named where they are given: two branches added one each, in one place
    #: The app in the foreground on this step when the trace records it beside the dump (LlamaTouch
    #: `N.activity`); "" = ask the dump (`Screen.foreground_package`) or its objects.
    foreground_package: str = ""
    #: Step-level texts for `StepInfo.text` (field name -> text; names from pipelines.step_text.STEP_TEXT_FIELDS
    #: except "instruction", which travels in `action.instruction`).
    text: tuple[tuple[str, str], ...] = ()
    #: (width, height, warning): the screen size the trace records (GUI-Odyssey `device_info`), checked by the
    #: converter against the screenshot it reads for the step anyway (readers keep no screenshot bytes); another
    #: size adds `warning`, formatted with the screenshot's {width} and {height}, to the step's warnings.
    expected_size: tuple[int, int, str] | None = None


@dataclass(frozen=True)
class DeadLetter:
    """Something that could not be converted, with enough to find it again. Written to dead_letters.jsonl."""

    source_path: str
    step: int | None
    reason: str
    exception: str
    episode_id: str = ""

    def to_json(self) -> str:
        """One JSON line. Lone surrogates (from file names that are not UTF-8) are written as \\uXXXX escapes,
        so the line is valid UTF-8 and `from_json` gives the same strings back."""
        return (
            json.dumps(
                {
                    "source_path": self.source_path,
                    "step": self.step,
                    "reason": self.reason,
                    "exception": self.exception,
                    "episode_id": self.episode_id,
                },
                ensure_ascii=False,
                sort_keys=True,
            )
            .encode("utf-8", "backslashreplace")
            .decode("utf-8")
        )

    @classmethod
    def from_json(cls, line: str) -> DeadLetter:
        d = json.loads(line)
        return cls(d["source_path"], d["step"], d["reason"], d["exception"], d.get("episode_id", ""))


@dataclass(frozen=True)
class RecordEpisode:
    """An episode whose data comes inside TFRecord records rather than files: one AndroidControl record, or
    the grouped per-step records of one Android in the Wild episode. `records` are (file, byte offset of the
    record in the decompressed stream, serialized tf.train.Example); `dead_letters` are what the grouping
    already found wrong. Travels between transforms, so it holds the bytes (no file is re-read)."""

    layout: str
    episode_id: str
    source_path: str
    records: tuple[tuple[str, int, bytes], ...]
    dead_letters: tuple[DeadLetter, ...] = ()
    #: What the grouping noticed without losing anything (records repeated byte for byte, read once); they
    #: become episode warnings (`UiEpisode.metadata["warnings"]`).
    notes: tuple[str, ...] = ()


@dataclass
class RawEpisode:
    """An episode's steps in order plus what the reader already found wrong (steps it could not locate)."""

    source: EpisodeSource
    steps: list[RawStep]
    dead_letters: list[DeadLetter] = field(default_factory=list)
    #: Steps the source trace holds, including those already dead-lettered by the reader.
    num_source_steps: int = 0
    app_package: str = ""
    goal: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: Step bytes the reader derived from its layout files (an AitZ step's detector boxes as an annotation
    #: document, an AndroidControl-JSON step's decoded screenshot), by the pseudo path its RawStep names;
    #: read instead of a file by `ui_episode.convert_episode`.
    blobs: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class DiscoveryReport:
    """What discovery saw besides episodes."""

    episodes: int
    ignored_files: int
    ignored_examples: tuple[str, ...]
    collapsed_records: int = 0  # record copies read once (schemas/layouts.md, "Duplicate records")

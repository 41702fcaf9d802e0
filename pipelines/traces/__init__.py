"""Trace layouts: find episodes under an input folder and read their raw steps (file paths + raw actions).

One reader per layout (`rico_trace`, `step_folder`, `single_screen`, `droidbot`, `llamatouch`, `droidrun`,
`aitz`, `gui_odyssey`; `android_control_json` is told from a `.json` single screen by its bytes); `read_episode`
dispatches on
`EpisodeSource.layout`. Nothing here parses a view hierarchy: that is `pipelines.hierarchy`.
How to add a layout: docs/adding_a_layout.md.
"""

from __future__ import annotations

from pipelines.traces import (
    aitz,
    android_control_json,
    droidbot,
    droidrun,
    files,
    gui_odyssey,
    llamatouch,
    rico_trace,
    single_screen,
    step_folder,
)
from pipelines.traces.common import Reader
from pipelines.traces.discover import IgnoredFile, discover, plan
from pipelines.traces.model import LAYOUTS, DeadLetter, EpisodeSource, RawAction, RawEpisode, RawStep


def _single_screen(source: EpisodeSource, read_file: Reader) -> RawEpisode:
    """A `.json` single screen may be an AndroidControl JSON episode (told by its bytes, read once: a Rico or
    DroidBot screen keeps the bytes in `blobs` so they are not read again)."""
    path = source.files[0]
    if files.stem_and_ext(path)[1] != ".json":
        return single_screen.read(source, read_file)
    try:
        data = read_file(path)
    except Exception:  # refused or unreadable: the step's dead letter says why, when the step is read
        return single_screen.read(source, read_file)
    if android_control_json.looks_like(data):
        episode = android_control_json.read_bytes(source, data)
        if episode is not None:
            return episode  # else JSON without the keys at its top level: an ordinary screen holding the words
    episode = single_screen.read(source, read_file)
    episode.blobs[path] = data
    return episode


READERS = {
    "rico_trace": rico_trace.read,
    "step_folder": step_folder.read,
    "single_screen": _single_screen,
    "droidbot": droidbot.read,
    "llamatouch": llamatouch.read,
    "droidrun": droidrun.read,
    "aitz": aitz.read,
    "gui_odyssey": gui_odyssey.read,
}


def read_episode(source: EpisodeSource, read_file: Reader) -> RawEpisode:
    """The raw steps of one discovered episode; `read_file(path) -> bytes` does the I/O."""
    reader = READERS.get(source.layout)
    if reader is None:  # a tfrecord_file source: its records are read by pipelines.traces.records
        raise ValueError(f"{source.source_path}: layout {source.layout!r} has no file reader")
    return reader(source, read_file)


__all__ = [
    "LAYOUTS",
    "DeadLetter",
    "EpisodeSource",
    "IgnoredFile",
    "RawAction",
    "RawEpisode",
    "RawStep",
    "discover",
    "plan",
    "read_episode",
]

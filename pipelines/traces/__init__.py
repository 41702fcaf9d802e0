"""Trace layouts: find episodes under an input folder and read their raw steps (file paths + raw actions).

One reader per layout (`rico_trace`, `step_folder`, `single_screen`, `droidbot`, `llamatouch`, `droidrun`); `read_episode` dispatches on
`EpisodeSource.layout`. Nothing here parses a view hierarchy: that is `pipelines.hierarchy`.
"""

from __future__ import annotations

from pipelines.traces import droidbot, droidrun, llamatouch, rico_trace, single_screen, step_folder
from pipelines.traces.common import Reader
from pipelines.traces.discover import IgnoredFile, discover, plan
from pipelines.traces.model import LAYOUTS, DeadLetter, EpisodeSource, RawAction, RawEpisode, RawStep

READERS = {
    "rico_trace": rico_trace.read,
    "step_folder": step_folder.read,
    "single_screen": single_screen.read,
    "droidbot": droidbot.read,
    "llamatouch": llamatouch.read,
    "droidrun": droidrun.read,
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

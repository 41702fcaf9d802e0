"""Single screens: `<id>.xml|json|pb|textproto` (+ `<id>.png|jpg`) as a one-step episode with no action.

A hierarchy without a screenshot is still an episode (uiautomator dumps often come alone): the step has no
screenshot, a warning says so, and the screen size comes from the hierarchy.
"""

from __future__ import annotations

from pipelines.traces import files
from pipelines.traces.common import Reader
from pipelines.traces.discover import hierarchy_format, pair_screens
from pipelines.traces.model import EpisodeSource, RawEpisode, RawStep


def read(source: EpisodeSource, read_file: Reader) -> RawEpisode:
    del read_file  # nothing to read before parsing
    by_name = {files.split(p)[1]: p for p in source.files}
    hierarchies, images = pair_screens(by_name)
    (stem,) = hierarchies  # discovery groups one stem per single-screen source
    names, shots = hierarchies[stem], images.get(stem, [])
    warnings = [f"also found {n} for this screen; not used" for n in names[1:] + shots[1:]]
    if not shots:
        warnings.append("no screenshot beside the hierarchy: screen size taken from the hierarchy")
    shot = by_name[shots[0]] if shots else None
    step = RawStep(0, stem, by_name[names[0]], shot, None, tuple(warnings), hierarchy_format(names[0]))
    return RawEpisode(source=source, steps=[step], num_source_steps=1)

"""Find the episodes under INPUT: detect each folder's layout from file names alone (no file is opened).

Rules (also in schemas/layouts.md), applied per folder, outermost first:
  * DroidBot run: the folder has `states/state_*.json` and `events/event_*.json`. Claims the whole subtree.
  * Rico trace: the folder has `view_hierarchies/*.json`. Claims the whole subtree.
  * DroidRun trajectory: the folder has `ui_states/*.json`. Claims the whole subtree.
  * GUI-Odyssey: the folder has `annotations/*.json` and `screenshots/` holding images. Claims the whole
    subtree; one episode per annotation file.
  * LlamaTouch trace: a folder (not claimed above) with `eventStructs.txt`. Its own files.
  * Android-in-the-Zoo: a folder (not claimed above) holding `<folder>.json` and `<folder>_<n>.<image>`.
  * Step folder: a folder (not claimed above) with `actions.jsonl` or `episode.json`, or whose hierarchy files
    are named by consecutive step numbers after a common prefix (`0..n-1` or `1..n`: "3.xml", "step_003.xml";
    leading zeros allowed, at least two). Its own files.
  * Single screens: every other `<id>.xml|json|pb|textproto` (`.pb`/`.textproto`: an AndroidEnv accessibility
    forest, binary or text format) (with `<id>.png|jpg|jpeg|webp` when present) is a one-step
    episode.
  * TFRecord files (`*.tfrecord[.gz]`, `*.tfrecords[.gz]`, `*.tfr[.gz]`, or release shard names
    `<name>-00000-of-00020[.gz]`) in unclaimed folders: one `tfrecord_file` source each; what their records
    hold (AndroidControl episodes, AITW steps) is decided when they are read.
Screenshots with no hierarchy of the same name become dead letters (`orphan_screenshot`); other files are
counted as ignored.
"""

from __future__ import annotations

import errno
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pipelines.traces import files, gui_odyssey
from pipelines.traces.model import DeadLetter, EpisodeSource

HIERARCHY_EXTS = (".xml", ".json", ".pb", ".textproto")
#: Hierarchy formats named by the file extension (binary protos cannot be told apart by their bytes).
FORMAT_BY_EXT = {".pb": "a11y_forest", ".textproto": "a11y_forest_text"}
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".webp")
GESTURES = "gestures.json"
MANIFEST = "episode.json"
ACTIONS = "actions.jsonl"
RECORD_EXTS = (".tfrecord", ".tfrecords", ".tfrecord.gz", ".tfrecords.gz", ".tfr", ".tfr.gz")
RECORD_FILE = "tfrecord_file"  # EpisodeSource.layout of a TFRecord input file (not an output layout)
RESERVED = frozenset({GESTURES, MANIFEST})
#: Sibling screenshots a single screen without its own may consult for the display size (the first ones).
CONTEXT_SCREENSHOTS = 3


def is_display_text(name: str) -> bool:
    """A text file of `adb shell dumpsys ...` or `wm size` output saved beside the dumps (`dumpsys.txt`,
    `dumpsys_display.txt`, `wm_size.txt`): read for the display size when a dump cannot tell it."""
    stem, ext = files.stem_and_ext(name)
    return ext == ".txt" and (stem.lower().startswith("dumpsys") or stem.lower() in ("wm_size", "wm-size"))
LLAMATOUCH_EVENTS = "eventStructs.txt"
LLAMATOUCH_INSTRUCTION = "instruction.txt"
DROIDRUN_MACRO = "macro.json"
DROIDBOT_UTG = "utg.js"


@dataclass(frozen=True)
class IgnoredFile:
    """A file under INPUT that belongs to no episode (README, logs, DroidBot's view crops...)."""

    path: str


def natural_key(name: str) -> tuple:
    """Sort key comparing digit runs as numbers ("2" < "10"), the order Rico and step folders use."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name) if p)


def _parent(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def _name(rel: str) -> str:
    return rel.rsplit("/", 1)[-1]


def _under(folder: str, sub: str) -> str:
    return f"{folder}/{sub}" if folder else sub


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


_SHARD_NAME = re.compile(r"-\d{5}-of-\d{5}(\.gz)?$")


def hierarchy_format(name: str) -> str:
    """The `pipelines.hierarchy` format a hierarchy file's extension names; "" = detect from the bytes."""
    return FORMAT_BY_EXT.get(files.stem_and_ext(name)[1], "")


def is_record_file(name: str) -> bool:
    """A TFRecord input by its name (see the module docstring)."""
    lower = name.lower()
    return lower.endswith(RECORD_EXTS) or bool(_SHARD_NAME.search(lower))


def _record_source(path: str, episode_id: str) -> EpisodeSource:
    return EpisodeSource(layout=RECORD_FILE, episode_id=episode_id, source_path=path, files=(path,))


def _is_numbered(stems: list[str]) -> bool:
    """At least two stems, all `<same prefix><number>` ("3", "step_003", "screen-3"), numbered 0..n-1 or 1..n."""
    if len(stems) < 2:
        return False
    parts = [_NUMBERED.match(s) for s in stems]
    if not all(parts) or len({m.group(1) for m in parts}) != 1:
        return False
    numbers = sorted(int(m.group(2)) for m in parts)
    return numbers in (list(range(len(numbers))), list(range(1, len(numbers) + 1)))


def pair_screens(names: Iterable[str]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Group file names of one folder by stem: ({stem: hierarchy names}, {stem: image names}), in a stable
    order (.xml before .json; .png, .jpg, .jpeg, .webp)."""
    hierarchies: dict[str, list[str]] = defaultdict(list)
    images: dict[str, list[str]] = defaultdict(list)
    for name in names:
        if name in RESERVED:
            continue
        stem, ext = files.stem_and_ext(name)
        if ext in HIERARCHY_EXTS:
            hierarchies[stem].append(name)
        elif ext in IMAGE_EXTS:
            images[stem].append(name)
    for group, order in ((hierarchies, HIERARCHY_EXTS), (images, IMAGE_EXTS)):
        for stem in group:
            group[stem].sort(key=lambda n: order.index(files.stem_and_ext(n)[1]))
    return dict(hierarchies), dict(images)


def _is_screen_file(name: str, hierarchies: dict[str, list[str]]) -> bool:
    stem, ext = files.stem_and_ext(name)
    return stem in hierarchies and ext in HIERARCHY_EXTS + IMAGE_EXTS and name not in RESERVED


def _droidbot_file(rel: str) -> bool:
    """states/state_*.json, states/screen_*.<image>, events/event_*.json, utg.js (relative to the run folder)."""
    parts = rel.split("/")
    if parts == [DROIDBOT_UTG]:
        return True
    if len(parts) != 2:
        return False
    stem, ext = files.stem_and_ext(parts[1])
    if parts[0] == "states":
        return (stem.startswith("state_") and ext == ".json") or (
            stem.startswith("screen_") and ext in IMAGE_EXTS
        )
    return parts[0] == "events" and stem.startswith("event_") and ext == ".json"


def _rico_trace_file(rel: str) -> bool:
    """view_hierarchies/*.json, screenshots/*.<image>, gestures.json, episode.json (relative to the trace)."""
    parts = rel.split("/")
    if len(parts) == 1:
        return rel in (GESTURES, MANIFEST)
    ext = files.stem_and_ext(parts[-1])[1]
    return len(parts) == 2 and (
        (parts[0] == "view_hierarchies" and ext == ".json")
        or (parts[0] == "screenshots" and ext in IMAGE_EXTS)
    )


def _droidrun_file(rel: str) -> bool:
    """ui_states/<n>.json, screenshots/<n>.<image>, macro.json (relative to the trajectory folder)."""
    parts = rel.split("/")
    if len(parts) == 1:
        return rel == DROIDRUN_MACRO
    stem, ext = files.stem_and_ext(parts[1])
    return len(parts) == 2 and stem.isdigit() and (
        (parts[0] == "ui_states" and ext == ".json") or (parts[0] == "screenshots" and ext in IMAGE_EXTS)
    )


def _llamatouch_file(name: str) -> bool:
    """eventStructs.txt, instruction.txt and the numbered step files `N.xml|vh|activity|<image>` (`N.vh` is left
    out by the caller when `N.xml` is there)."""
    stem, ext = files.stem_and_ext(name)
    return name in (LLAMATOUCH_EVENTS, LLAMATOUCH_INSTRUCTION) or (
        stem.isdigit() and ext in (".xml", ".vh", ".activity", *IMAGE_EXTS)
    )


_CLAIMS = {"droidbot": _droidbot_file, "rico_trace": _rico_trace_file, "droidrun": _droidrun_file}
def is_aitz_folder(folder_name: str, names: list[str]) -> bool:
    """Android-in-the-Zoo: `<folder>.json` and at least one `<folder>_<n>.<image>` (file names only)."""
    if f"{folder_name}.json" not in names:
        return False
    prefix = f"{folder_name}_"
    for name in names:
        stem, ext = files.stem_and_ext(name)
        if ext in IMAGE_EXTS and stem.startswith(prefix) and stem[len(prefix) :].isdigit():
            return True
    return False


def plan(root: str, paths: Iterable[str]) -> Iterator[EpisodeSource | DeadLetter | IgnoredFile]:
    """Turn the file list under `root` into episode sources (plus orphan/ignored reports). Pure.

    Episode ids are unique: should a single screen's id equal a folder episode's (`a/b.xml` beside `a/b/`),
    the later one gets a `~2`, `~3`, ... suffix.
    """
    seen: dict[str, int] = {}
    for item in _plan(root, paths):
        if isinstance(item, EpisodeSource):
            episode_id = files.display(item.episode_id)  # ids go into protos: text, even from non-UTF-8 names
            n = seen.get(episode_id, 0) + 1
            seen[episode_id] = n
            if n > 1:
                episode_id = f"{episode_id}~{n}"
            if episode_id != item.episode_id:
                item = EpisodeSource(item.layout, episode_id, item.source_path, item.files)
        elif isinstance(item, DeadLetter):
            item = DeadLetter(item.source_path, item.step, item.reason, item.exception,
                              files.display(item.episode_id))  # fmt: skip
        yield item


def _plan(root: str, paths: Iterable[str]) -> Iterator[EpisodeSource | DeadLetter | IgnoredFile]:
    root = files.strip_slash(root)
    base_name = files.split(root)[1] or root
    by_rel: dict[str, str] = {}
    for path in paths:
        by_rel[files.relative(root, path)] = path
    if list(by_rel) == [""]:  # INPUT is one file
        yield from _single_file(root)
        return

    children: dict[str, list[str]] = defaultdict(list)
    for rel in by_rel:
        children[_parent(rel)].append(_name(rel))
    folders = set(children)
    for rel in list(folders):  # folders holding only sub-folders
        while rel:
            rel = _parent(rel)
            folders.add(rel)

    def has(folder: str, prefix: str, ext: str) -> bool:
        return any(n.startswith(prefix) and n.lower().endswith(ext) for n in children.get(folder, ()))

    claimed: list[tuple[str, str]] = []  # (folder, layout), outermost first
    for folder in sorted(folders, key=lambda f: (f.count("/") if f else -1, f)):
        if any(folder == c or folder.startswith(c + "/") or c == "" for c, _ in claimed):
            continue
        if has(_under(folder, "states"), "state_", ".json") and has(
            _under(folder, "events"), "event_", ".json"
        ):
            claimed.append((folder, "droidbot"))
        elif has(_under(folder, "view_hierarchies"), "", ".json"):
            claimed.append((folder, "rico_trace"))
        elif has(_under(folder, "ui_states"), "", ".json"):
            claimed.append((folder, "droidrun"))
        elif has(_under(folder, "annotations"), "", ".json") and any(
            has(f, "", ext)
            for f in folders
            if f == _under(folder, "screenshots") or f.startswith(_under(folder, "screenshots") + "/")
            for ext in IMAGE_EXTS
        ):
            claimed.append((folder, "gui_odyssey"))

    used: set[str] = set()
    for folder, layout in claimed:
        prefix = folder + "/" if folder else ""
        subtree = sorted(rel for rel in by_rel if rel.startswith(prefix))
        if layout == "gui_odyssey":
            inner = {r[len(prefix) :]: by_rel[r] for r in subtree}
            rel_of_path = {by_rel[r]: r for r in subtree}
            for item in gui_odyssey.episode_sources(list(inner), inner):
                used.update(rel_of_path[p] for p in item.files)
                yield EpisodeSource(
                    item.layout, _under(folder, item.episode_id), item.source_path, item.files
                )
            continue
        # Only the files the layout's reader uses; anything else in the folder is reported as ignored.
        claims = _CLAIMS[layout]
        keep = [r for r in subtree if claims(r[len(prefix) :])]
        used.update(keep)
        yield EpisodeSource(
            layout=layout,
            episode_id=folder or base_name,
            source_path=files.join(root, folder) if folder else root,
            files=tuple(by_rel[r] for r in keep),
        )

    def is_claimed(folder: str) -> bool:
        return any(c == "" or folder == c or folder.startswith(c + "/") for c, _ in claimed)

    for folder in sorted(children, key=natural_key):
        if is_claimed(folder):
            continue
        names = sorted(children[folder], key=natural_key)
        for name in names:
            if is_record_file(name):
                used.add(_under(folder, name))
                yield _record_source(by_rel[_under(folder, name)], _under(folder, name))
        names = [n for n in names if not is_record_file(n)]
        folder_path = files.join(root, folder) if folder else root
        if LLAMATOUCH_EVENTS in names:  # its other files (N_drawed.png, N.json, agg_plot.png, ...) are ignored
            present = set(names)  # N.vh is read only for a step without N.xml
            keep = [n for n in names if _llamatouch_file(n) and not (
                n.endswith(".vh") and f"{files.stem_and_ext(n)[0]}.xml" in present)]  # fmt: skip
            used.update(_under(folder, n) for n in keep)
            yield EpisodeSource(
                layout="llamatouch",
                episode_id=folder or base_name,
                source_path=folder_path,
                files=tuple(by_rel[_under(folder, n)] for n in keep),
            )
            continue
        rel_of = {name: _under(folder, name) for name in names}
        folder_name = _name(folder) if folder else base_name
        if is_aitz_folder(folder_name, names):
            keep = [n for n in names if n == f"{folder_name}.json" or (
                files.stem_and_ext(n)[1] in IMAGE_EXTS and n.startswith(f"{folder_name}_"))]  # fmt: skip
            used.update(rel_of[n] for n in keep)
            yield EpisodeSource(
                "aitz", folder or base_name, folder_path, tuple(by_rel[rel_of[n]] for n in keep)
            )
            continue
        hierarchies, images = pair_screens(names)
        step_folder = ACTIONS in names or MANIFEST in names or _is_numbered(list(hierarchies))
        texts = [n for n in names if is_display_text(n)] if hierarchies else []
        display_texts = tuple(by_rel[rel_of[n]] for n in texts)
        if texts and (step_folder or any(stem not in images for stem in hierarchies)):  # a source reads them
            used.update(rel_of[n] for n in texts)
        if step_folder and hierarchies:
            keep = [n for n in names if n in (ACTIONS, MANIFEST) or _is_screen_file(n, hierarchies)]
            used.update(rel_of[n] for n in keep)
            yield EpisodeSource(
                layout="step_folder",
                episode_id=folder or base_name,
                source_path=folder_path,
                files=tuple(by_rel[rel_of[n]] for n in keep),
                context=display_texts,
            )
        else:
            shown = [by_rel[rel_of[images[s][0]]] for s in sorted(images, key=natural_key) if s in hierarchies]
            for stem in sorted(hierarchies, key=natural_key):
                group = hierarchies[stem] + images.get(stem, [])
                used.update(rel_of[n] for n in group)
                own = by_rel[rel_of[images[stem][0]]] if stem in images else None
                siblings = tuple(shown[:CONTEXT_SCREENSHOTS])  # this stem has none: all are siblings
                yield EpisodeSource(
                    layout="single_screen",
                    episode_id=_under(folder, stem),
                    source_path=by_rel[rel_of[hierarchies[stem][0]]],
                    files=tuple(by_rel[rel_of[n]] for n in group),
                    context=(display_texts + siblings) if not own else (),
                )
        for stem, image_names in images.items():
            if stem not in hierarchies:
                for n in image_names:
                    used.add(rel_of[n])
                    yield DeadLetter(
                        source_path=by_rel[rel_of[n]],
                        step=None,
                        reason="orphan_screenshot",
                        exception=f"screenshot {n} has no view hierarchy {stem}.xml or {stem}.json beside it",
                        episode_id=_under(folder, stem),
                    )
    for rel in sorted(by_rel):
        if rel not in used:
            yield IgnoredFile(by_rel[rel])


def _single_file(path: str) -> Iterator[EpisodeSource | DeadLetter | IgnoredFile]:
    folder, name = files.split(path)
    if is_record_file(name):
        yield _record_source(path, name)
        return
    stem, ext = files.stem_and_ext(name)
    if ext not in HIERARCHY_EXTS:
        yield IgnoredFile(path)
        return
    group = [path]
    for image_ext in IMAGE_EXTS:
        candidate = files.join(folder, stem + image_ext)
        try:
            if files.list_files(candidate) == [candidate]:
                group.append(candidate)
                break
        except Exception:  # no such file
            continue
    yield EpisodeSource(layout="single_screen", episode_id=stem, source_path=path, files=tuple(group))


def discover(root: str, exclude: tuple[str, ...] = ()) -> Iterator[EpisodeSource | DeadLetter | IgnoredFile]:
    """List `root` (any Beam filesystem) and plan its episodes, skipping everything under the `exclude` folders
    (the conversion's own output when it lies inside INPUT). Local symlinks named like an input that lead
    nowhere (a loop, a missing target), which listing cannot see, are `unreadable` dead letters."""
    skip = tuple(files.strip_slash(e).replace("\\", "/") + "/" for e in exclude)
    yield from plan(root, [p for p in files.list_files(root) if not p.replace("\\", "/").startswith(skip)])
    yield from _dead_links(root, skip)


def _is_input_name(name: str) -> bool:
    return is_record_file(name) or name in (ACTIONS, LLAMATOUCH_EVENTS, DROIDRUN_MACRO, *RESERVED) or files.stem_and_ext(name)[1] in (
        HIERARCHY_EXTS + IMAGE_EXTS
    )


def _dead_links(root: str, skip: tuple[str, ...]) -> Iterator[DeadLetter]:
    """Symlinks under a local `root` that cannot be followed, named like input files (Beam's listing drops
    them without a word)."""
    if not files.is_local(root) or not os.path.isdir(root):
        return
    top = files.strip_slash(root)
    for folder, dirs, names in os.walk(top):
        dirs.sort()
        for name in sorted(dirs + names):
            path = os.path.join(folder, name)
            if path.replace("\\", "/").startswith(skip) or not _is_input_name(name) or not os.path.islink(path):
                continue
            try:
                os.stat(path)
                continue
            except OSError as exc:
                why = "a symlink loop" if exc.errno == errno.ELOOP else f"a symlink to nothing ({exc.strerror})"
            rel = files.relative(top, path)
            yield DeadLetter(path, None, "unreadable", f"{files.display(path)}: {why}: not read", files.display(rel))

"""Exported episodes as a Minari dataset (`--format minari`) that `minari.load_dataset` and
`minari.MinariDataset` open unchanged (Minari 0.5.3's HDF5 layout; fields: `schemas/dataset_spec.md`, "Minari").

Layout, as Minari 0.5.3 writes it: `<dataset>/data/main_data.hdf5` (one group `episode_<k>` per episode, k =
0..M-1 in episode order) and `<dataset>/data/metadata.json` (dataset id, counts, `data_format` "hdf5", the
observation/action spaces in Minari's JSON form — the same text as every format's `stepmark_export` spaces).
Each worker writes its episode's group into its own small HDF5 file in the export's work folder
(`write_episode`); the last step copies them, in episode order, into `main_data.hdf5` (`finish_dataset`).
Memory is bounded by one episode. HDF5 object timestamps are off and link creation order is tracked, so the
same selection and options give byte-identical files.

The step contract maps to Minari's convention (an episode of N transitions):
- `observations`: N+1 entries (step k's observation, the final one included); `actions`, `rewards`,
  `terminations`, `truncations`: N entries (the final step's padding action, reward 0 and discount 0 are not
  stored); `terminations[-1]` = the final step's `is_terminal`, `truncations[-1]` = its negation (a cut, a step
  limit, the end of a UI trace); all other entries false;
- `infos`: N+1 entries, entry k being what arrived with observation k: `json` and `keys` of the action that led
  to it (k−1; `{}` / `[]` at k = 0), and observation k's own `tag:<label>`, `episode/{r,l,s,mask}` (mask on
  the last entry), `image` (recorded frame, when the observation has no image leaf) and the observation's
  text/bytes leaves (`observation/<path>`: no gymnasium space); action text leaves are `action/<path>`
  (entry k: action k−1);
- image observations (uint8 Box leaves Minari treats as images, `minari.dataset.minari_storage.
  is_image_space`: 2-3 dims, at least 32x32, bounds 0..255) are stored as encoded images, one row per
  observation, as Minari stores them (its reader decodes them with Pillow): PNG, so the observation comes back
  exactly as recorded (Minari's own writer would JPEG it); with `--jpeg-frames` (lossy) the frame leaf holds
  the recorded JPEG frames as they are (as in TFDS and Parquet; `frames.decode_frame` is every format's decoder).
Episode-level fields (`episode_id`, `split`, `tags`, ...) are the episode group's attributes
(`dataset.storage.get_episode_metadata([k])`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from pipelines.errors import StepmarkError
from pipelines.exporters import frames as frames_codec
from pipelines.exporters import spaces
from pipelines.exporters.transform import KIND_UI, ExportEpisode, info_json
from pipelines.hierarchy.screenshot import sniff_format

DATA_DIR = "data"
MAIN_FILE = "main_data.hdf5"
METADATA_FILE = "metadata.json"
MINARI_VERSION = "0.5.3"  # the release whose layout this writes (pinned in pyproject.toml)
EPISODE_GROUP = "episode"  # the group of a worker's per-episode file
# Minari's dataset id: (namespace/)name-vN (minari.dataset.minari_dataset.DATASET_ID_RE, with the version,
# which `parse_dataset_id` requires).
_NAME = re.compile(r"^(?P<name>[-_\w]+?)-v(?P<version>\d+)$", re.ASCII)
_NAMESPACE = re.compile(r"^[-_\w][-_\w]*[-_\w]+$", re.ASCII)
_ORDER = h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED


# --- dataset ids and what can be exported -------------------------------------------------------------------


def dataset_ids(out: Path, archive: bool, group_names: list[str]) -> dict[str, str]:
    """group name -> (dataset id, folder relative to OUT). One dataset: OUT's folder name (without `.zip`) is the
    id and must read `NAME-vN`, so that `minari.load_dataset(id)` finds it with MINARI_DATASETS_PATH set to
    OUT's parent. `--split-by-spec`: OUT is the namespace, each dataset `OUT/<group>-v0` (id `OUT/<group>-v0`)."""
    name = out.name[: -len(".zip")] if archive and out.name.endswith(".zip") else out.name
    if len(group_names) == 1:
        if not _NAME.match(name):
            raise StepmarkError(
                f"--format minari: --out {str(out)!r}: the folder name is the Minari dataset id and must look "
                "like NAME-vN (e.g. coinrun-human-v0), so that minari.load_dataset(NAME-vN) finds it"
            )
        return {group_names[0]: name}
    if not _NAMESPACE.match(name):
        raise StepmarkError(
            f"--format minari --split-by-spec: --out {str(out)!r}: the folder name is the Minari namespace of the "
            "datasets and may hold only letters, digits, '-' and '_'"
        )
    return {g: f"{name}/{folder_name(g)}" for g in group_names}


def folder_name(group_name: str) -> str:
    """A dataset's folder under OUT with `--split-by-spec` (Minari ids allow letters, digits, '-' and '_', and
    need a version)."""
    return re.sub(r"[^-_\w]", "_", group_name, flags=re.ASCII) + "-v0"


def check_request() -> None:
    """Refuses a missing `minari` install before any work."""
    try:
        import minari  # noqa: F401
    except ImportError as exc:
        raise StepmarkError(
            f"--format minari needs minari[hdf5]=={MINARI_VERSION} (the [formats] extra): {exc}"
        ) from None


def check_group(kind: str, ui_objects_padded: int, group_name: str) -> None:
    """UI object tables are ragged and Minari has no ragged space: only the padded form can be exported."""
    if kind == KIND_UI and not ui_objects_padded:
        raise StepmarkError(
            f"--format minari: dataset {group_name!r} holds UI episodes, whose object tables vary per screen "
            "(Minari has no ragged space); pass --ui-objects padded:N for fixed-shape object tensors"
        )


# --- the layout every worker shares ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """What a worker needs to write an episode: the dataset's spaces (Minari JSON), the observation leaf the
    recorded JPEG frames depict (None: none), and whether internal metadata is stripped."""

    observation_space: str
    action_space: str
    frame_leaf: tuple[str, ...] | None
    strip: bool

    def to_json(self) -> str:
        d = {
            "observation_space": self.observation_space,
            "action_space": self.action_space,
            "frame_leaf": list(self.frame_leaf) if self.frame_leaf is not None else None,
            "strip": self.strip,
        }
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Layout:
        d = json.loads(text)
        leaf = tuple(d["frame_leaf"]) if d["frame_leaf"] is not None else None
        return cls(d["observation_space"], d["action_space"], leaf, bool(d["strip"]))


def layout_for(specs: dict[str, Any] | None, frame_leaf: tuple[str, ...] | None, strip: bool) -> Layout:
    """The dataset's layout from its dm_env specs (the same spaces `stepmark_export` carries)."""
    meta = spaces.spaces_metadata(specs)
    if not meta:
        raise StepmarkError("--format minari: the dataset has no fixed observation/action spec")
    return Layout(meta["observation_space"], meta["action_space"], frame_leaf, strip)


class EpisodeWriter:
    """A worker's view of the layout: the gymnasium spaces, deserialized once."""

    def __init__(self, layout_json: str) -> None:
        self.layout = Layout.from_json(layout_json)
        self.observation_space = spaces.space_from_json(self.layout.observation_space)
        self.action_space = spaces.space_from_json(self.layout.action_space)


# --- HDF5 without timestamps ---------------------------------------------------------------------------------


def _create_file(path: str, in_memory: bool = False) -> h5py.File:
    """A new HDF5 file; `in_memory`: built in memory only (the core driver without a backing store), so its
    bytes can be written by Python (`_file_image`)."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_link_creation_order(_ORDER)
    fcpl.set_obj_track_times(False)
    fapl = None
    if in_memory:
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        fapl.set_fapl_core(1 << 20, False)
    return h5py.File(h5py.h5f.create(os.fsencode(path), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl))


# HDF5 writing to a full disk can crash the process in native code (seen: SIGSEGV after h5py tracebacks), so
# no HDF5 write here meets a full disk: an episode's file is built in memory and written by Python (a failure
# is an OSError naming the file), and the one file HDF5 writes itself, main_data.hdf5, is written only after
# checking that the disk has room for it.
_ROOM_MARGIN = 256 << 10


def _write_bytes(path: str, data: bytes) -> None:
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as exc:
        try:
            os.remove(path)
        except OSError:
            pass
        if exc.filename is None:  # a buffered write names no file
            raise OSError(exc.errno, exc.strerror, path) from exc
        raise


def check_room(folder: str | Path, needed: int) -> None:
    """OSError ENOSPC naming `folder` unless its disk has `needed` bytes free (plus a margin)."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    if free < needed + _ROOM_MARGIN:
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({needed} bytes needed, {free} free)",
                      str(folder))  # fmt: skip


def _group(parent: h5py.Group, name: str) -> h5py.Group:
    """A sub-group in creation order with no timestamps (h5py's own groups carry the creation time)."""
    if name in parent:
        return parent[name]
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    gcpl.set_link_creation_order(_ORDER)
    return h5py.Group(h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl))


def _dataset(group: h5py.Group, name: str, data: Any) -> int:
    """A dataset as Minari writes it (chunked, growable along the first axis); returns its bytes."""
    if isinstance(data, list):  # encoded frames or bytes: one row each, variable length unless all equal
        rows = [np.frombuffer(bytes(b), np.uint8) for b in data]
        if rows and all(len(r) == len(rows[0]) for r in rows) and len(rows[0]):
            arr = np.stack(rows)
            group.create_dataset(name, data=arr, chunks=True, track_times=False)
            return arr.nbytes
        ds = group.create_dataset(name, (len(rows),), dtype=h5py.vlen_dtype(np.uint8), chunks=True,
                                  track_times=False)  # fmt: skip
        if rows:  # one write of all rows (row by row, h5py's selection machinery took half the export's time)
            column = np.empty(len(rows), dtype=object)
            for i, r in enumerate(rows):  # (a slice assignment would let numpy broadcast equal-length rows)
                column[i] = r
            ds[...] = column
        return sum(len(r) for r in rows)
    arr = np.asarray(data)
    if arr.dtype.kind == "U":
        group.create_dataset(name, data=arr.astype(object), dtype=h5py.string_dtype("utf-8"), chunks=True,
                             maxshape=(None, *arr.shape[1:]), track_times=False)  # fmt: skip
        return sum(len(str(s).encode()) for s in arr.reshape(-1))
    group.create_dataset(name, data=arr, chunks=True, maxshape=(None, *arr.shape[1:]), track_times=False)
    return arr.nbytes


def _write_tree(group: h5py.Group, tree: dict[str, Any]) -> int:
    """Nested dicts as groups, leaves as datasets (iterative; names sorted, so the order is fixed)."""
    size = 0
    stack = [(group, tree)]
    while stack:
        g, node = stack.pop()
        for name in sorted(node):
            value = node[name]
            if isinstance(value, dict):
                stack.append((_group(g, name), value))
            else:
                size += _dataset(g, name, value)
    return size


# --- one episode ----------------------------------------------------------------------------------------------


def _space_columns(
    space: Any, values: list[Any], path: tuple[str, ...], frames: tuple[tuple[str, ...] | None, list[Any]]
) -> Any:
    """The stacked data of one space over the episode's values: arrays cast to the space's dtype (shapes
    checked), JPEG rows for image leaves, groups for Dict/Tuple spaces."""
    from gymnasium import spaces as gym_spaces
    from minari.dataset.minari_storage import is_image_space

    if isinstance(space, gym_spaces.Dict):
        return {
            k: _space_columns(s, [v[k] for v in values], path + (k,), frames) for k, s in space.spaces.items()
        }
    if isinstance(space, gym_spaces.Tuple):
        return {
            f"_index_{i}": _space_columns(s, [v[i] for v in values], path + (str(i),), frames)
            for i, s in enumerate(space.spaces)
        }
    if isinstance(space, gym_spaces.Discrete):
        return np.asarray([int(np.asarray(v)) for v in values], np.int64)
    if is_image_space(space):
        leaf, jpegs = frames
        out = []
        for value, jpeg in zip(values, jpegs, strict=True):
            if leaf == path and jpeg and sniff_format(jpeg) == "jpeg":
                out.append(bytes(jpeg))  # the recorded frame, as it is
            else:
                out.append(frames_codec.encode_png(value, path))
        return out
    arr = np.stack([np.asarray(v) for v in values]) if values else np.zeros((0, *space.shape), space.dtype)
    if arr.shape[1:] != tuple(space.shape):
        raise StepmarkError(
            f"{'/'.join(path) or 'value'}: shape {list(arr.shape[1:])}, the space's {list(space.shape)}"
        )
    return arr.astype(space.dtype, copy=False)


def _leaves(value: Any) -> list[tuple[tuple[str, ...], Any]]:
    out = []
    stack: list[tuple[tuple[str, ...], Any]] = [((), value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, dict):
            stack.extend((path + (str(k),), x) for k, x in v.items())
        elif isinstance(v, tuple):  # Tuple spaces: members by position, as `_space_paths` names them
            stack.extend((path + (str(i),), x) for i, x in enumerate(v))
        else:
            out.append((path, v))
    return out


def _space_paths(space: Any) -> set[tuple[str, ...]]:
    from gymnasium import spaces as gym_spaces

    out = set()
    stack: list[tuple[tuple[str, ...], Any]] = [((), space)]
    while stack:
        path, s = stack.pop()
        if isinstance(s, gym_spaces.Dict):
            stack.extend((path + (k,), x) for k, x in s.spaces.items())
        elif isinstance(s, gym_spaces.Tuple):
            stack.extend((path + (str(i),), x) for i, x in enumerate(s.spaces))
        else:
            out.add(path)
    return out


def _text_leaves(prefix: str, space: Any, values: list[Any]) -> dict[str, Any]:
    """The leaves of `values` without a space (text and bytes) as info columns `<prefix>/<path>`: text as
    strings, bytes as variable-length uint8 rows."""
    if not values:
        return {}
    covered = _space_paths(space)
    out: dict[str, Any] = {}
    for path, sample in _leaves(values[0]):
        if path in covered:
            continue
        column = [_get(v, path) for v in values]
        name = "/".join((prefix, *path))
        if isinstance(sample, bytes):
            out[name] = [bytes(c) for c in column]
        else:
            out[name] = np.stack([np.asarray(c, dtype=np.str_) for c in column])
    return out


def _get(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        value = value[int(key)] if isinstance(value, tuple) else value[key]
    return value


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """`{"a/b": x}` -> `{"a": {"b": x}}` (Minari reads nested info groups as nested dicts)."""
    out: dict[str, Any] = {}
    for name, value in flat.items():
        node = out
        *parents, last = name.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def episode_attributes(episode: ExportEpisode) -> dict[str, Any]:
    """The episode group's attributes: the episode metadata of every format (`ExportEpisodeMeta.to_dict`) plus
    Minari's `total_steps` (transitions); `id` is set when the dataset is assembled."""
    attrs: dict[str, Any] = {"total_steps": np.int64(episode.num_steps - 1)}
    for key, value in episode.meta.to_dict().items():
        if isinstance(value, list):
            attrs[key] = np.array([str(v) for v in value], dtype=h5py.string_dtype("utf-8"))
        elif isinstance(value, bool):
            attrs[key] = np.bool_(value)
        elif isinstance(value, int):
            attrs[key] = np.int64(value)
        elif isinstance(value, float):
            attrs[key] = np.float64(value)
        else:
            attrs[key] = str(value)
    return attrs


def episode_columns(writer: EpisodeWriter, episode: ExportEpisode) -> dict[str, Any]:
    """One episode's groups and datasets in Minari's layout (the mapping of the module docstring)."""
    layout = writer.layout
    steps = episode.steps
    n = len(steps) - 1  # transitions
    observations = [s.observation for s in steps]
    actions = [s.action for s in steps[:n]]
    frames = (layout.frame_leaf, [s.image for s in steps])
    final = steps[-1]
    infos: dict[str, Any] = {
        "episode/r": np.asarray([s.episode["r"] for s in steps], np.float64),
        "episode/l": np.asarray([s.episode["l"] for s in steps], np.int64),
        "episode/s": np.asarray([s.episode["s"] for s in steps], np.bool_),
        "episode/mask": np.asarray([s.episode["mask"] for s in steps], np.bool_),
    }
    for label in sorted(steps[0].tags):
        infos[label] = np.asarray([s.tags[label] for s in steps], np.bool_)
    for name, first in steps[0].fields.items():  # study fields (exporters/study_fields.py), typed per kind
        dtype = np.str_ if isinstance(first, str) else np.float64 if isinstance(first, float) else np.bool_
        infos[name] = np.asarray([s.fields[name] for s in steps], dtype)
    if not layout.strip:
        # What the action that led to observation k returned, and the keys pressed for it (none before k = 0).
        infos["json"] = np.asarray(["{}"] + [info_json(s.info) for s in steps[:n]], dtype=np.str_)
        infos["keys"] = np.asarray(
            ["[]"] + [json.dumps(list(s.keys or [])) for s in steps[:n]], dtype=np.str_
        )
        if layout.frame_leaf is None and episode.meta.kind != KIND_UI:
            infos["image"] = [bytes(s.image or b"") for s in steps]
    infos.update(_text_leaves("observation", writer.observation_space, observations))
    # Action k's text leaves arrive with observation k+1: entry 0 is empty text / bytes.
    action_text = _text_leaves("action", writer.action_space, actions)
    for name, column in action_text.items():
        if isinstance(column, list):
            infos[name] = [b""] + column
        else:
            infos[name] = np.concatenate([np.zeros((1, *column.shape[1:]), column.dtype), column])
    return {
        "observations": _space_columns(writer.observation_space, observations, (), frames),
        "actions": _space_columns(writer.action_space, actions, (), (None, [None] * n)),
        "rewards": np.asarray([s.reward for s in steps[:n]], np.float64),
        "terminations": np.asarray([False] * (n - 1) + [bool(final.is_terminal)], np.bool_),
        "truncations": np.asarray([False] * (n - 1) + [not final.is_terminal], np.bool_),
        "infos": _nest(infos),
    }


def work_file(work_dir: str, index: int) -> str:
    return f"{work_dir.rstrip('/')}/{index:08d}.hdf5"  # a local folder or a bucket's prefix


def _size(path: str) -> int:
    """A work file's size, local or in a bucket."""
    from pipelines import storage

    return os.path.getsize(path) if not storage.is_remote(path) else storage.match(path)[0].size_in_bytes


@contextlib.contextmanager
def _local_copy(path: str) -> Iterator[str]:
    """`path` itself when local; else a downloaded copy in a temporary file, removed afterwards."""
    from pipelines import storage

    if not storage.is_remote(path):
        yield path
        return
    fd, local = tempfile.mkstemp(prefix="stepmark-minari-episode-", suffix=".hdf5")
    os.close(fd)
    try:
        storage.download(path, local)
        yield local
    finally:
        os.unlink(local)


def write_episode(writer: EpisodeWriter, episode: ExportEpisode, work_dir: str) -> int:
    """Writes one episode's group into its own HDF5 file in the work folder (written aside, then renamed:
    idempotent on retries); returns the bytes of its data."""
    columns = episode_columns(writer, episode)
    path = work_file(work_dir, episode.meta.episode_index)
    tmp = f"{path}.part-{os.getpid()}"
    with _create_file(tmp, in_memory=True) as f:
        group = _group(f, EPISODE_GROUP)
        group.attrs.update(episode_attributes(episode))
        _write_tree(group, columns)
        f.flush()
        image = f.id.get_file_image()
    _write_bytes(tmp, image)
    os.replace(tmp, path)
    return os.path.getsize(path)


# --- the last step ---------------------------------------------------------------------------------------------


def finish_dataset(
    staging_dir: str,
    work_dir: str,
    dataset_id: str,
    episodes: list[tuple[int, str, int]],
    layout_json: str,
    export_info: dict[str, Any],
    description: str,
    splits: tuple[str, ...] = ("train",),
) -> int:
    """Copies the episodes' files (`(index, split, transitions)`, in episode order) into `main_data.hdf5` as
    `episode_0..M-1`, then writes `metadata.json`; returns the number of episodes written. `stepmark_splits`
    lists every split of `splits` (an empty one as []), `train` holding every episode without `--split`.

    Both files are written into a local folder, uploaded when the dataset goes to a bucket: Minari's one
    `main_data.hdf5` needs local space for the dataset, plus one episode's file downloaded at a time."""
    from minari.serialization import serialize_space

    from pipelines import storage

    with storage.local_folder(staging_dir, prefix="stepmark-minari-") as local_dir:
        return _write_local(Path(local_dir), work_dir, episodes, splits, serialize_space, {
            "dataset_id": dataset_id, "layout_json": layout_json, "export_info": export_info,
            "description": description,
        })  # fmt: skip


def _write_local(
    staging: Path, work_dir: str, episodes: list[tuple[int, str, int]], splits: tuple[str, ...],
    serialize_space: Any, about: dict[str, Any],
) -> int:  # fmt: skip
    """`finish_dataset` into the local folder `staging`; `about`: its dataset id, layout, export info and
    description."""
    from pipelines import storage

    data = staging / DATA_DIR
    data.mkdir(parents=True, exist_ok=True)
    ordered = sorted(episodes)
    split_indices: dict[str, list[int]] = {name: [] for name in splits}
    check_room(data, sum(_size(work_file(work_dir, index)) for index, _, _ in ordered) * 11 // 10)
    with _create_file(str(data / MAIN_FILE)) as main:
        for k, (index, split, _) in enumerate(ordered):
            with _local_copy(work_file(work_dir, index)) as local:
                with h5py.File(local, "r") as src:
                    src.copy(src[EPISODE_GROUP], main, name=f"episode_{k}")
            main[f"episode_{k}"].attrs["id"] = np.int64(k)
            main[f"episode_{k}"].attrs["episode_index"] = np.int64(k)  # its position: Minari's id (selection_index kept)
            split_indices.setdefault(split or "train", []).append(k)
    storage.delete([work_file(work_dir, index) for index, _, _ in ordered])
    size = (data / MAIN_FILE).stat().st_size
    writer = EpisodeWriter(about["layout_json"])
    metadata: dict[str, Any] = {  # Minari's own keys first, in the order Minari writes them
        "total_episodes": len(ordered),
        "total_steps": sum(int(t) for _, _, t in ordered),
        "data_format": "hdf5",
        # Minari's own serialization of the same spaces (bounds in full: Minari's reader does not broadcast
        # the one-number bounds of `stepmark_export`'s form under gymnasium 1.x).
        "observation_space": serialize_space(writer.observation_space),
        "action_space": serialize_space(writer.action_space),
        "dataset_id": about["dataset_id"],
        "description": about["description"],
        "minari_version": MINARI_VERSION,
        "dataset_size": round(size / 1_000_000, 1),
        "stepmark_export": about["export_info"],
        "stepmark_splits": split_indices,
    }
    with open(data / METADATA_FILE, "w", encoding="utf-8") as f:
        json.dump(metadata, f)
    return len(ordered)

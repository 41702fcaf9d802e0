"""Exported episodes as one Parquet table of steps (`--format parquet`), for pyarrow, pandas and Hugging Face
`datasets.load_dataset("parquet", ...)`.

One row per step, in the step contract of `schemas/dataset_spec.md`; the table is split into one file per
episode, `data/<split>-<episode_index:08d>.parquet` (`train` without `--split`), all with one schema, so each
worker writes its own episode (memory bounded by one episode; any Beam runner) and the files read as one
table in episode order. The schema is fixed in planning from a sample episode (`schema_for`), so every file
has the same columns and types, and it carries the dataset metadata (`stepmark_export`, JSON) in its
key/value metadata. Columns:
- episode fields (repeated on each row): `episode_id`, `episode_index`, `step_index`, `split`, ids, kind,
  state, statistics, `truncated_by_tag`, `tags`, `notes`, UI `app_package`/`goal`/`source`;
- step fields: `reward`, `discount`, `is_first`, `is_last`, `is_terminal`, `tag:<label>`,
  `info_episode_{r,l,s,mask}`, `info_json`, `keys`, `image`;
- `observation/<path>` and `action/<path>` leaves: scalars as themselves, arrays flattened to lists (their
  shapes in the metadata's `shapes`), text as strings, bytes as binary: the observation as recorded (with the
  lossy `--jpeg-frames`, the frame leaf holds the recorded JPEG bytes, as in TFDS and Minari); UI `observation/objects` is a
  list of structs (one per object), `observation/windows` one struct per window, and the UI action's fields are
  `action/<field>` columns.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.exporters import frames, study_fields
from pipelines.exporters.transform import (
    KIND_UI,
    UI_OBJECT_FIELDS,
    UI_WINDOW_FIELDS,
    ExportEpisode,
    ExportStep,
    info_json,
)

DATA_DIR = "data"
METADATA_KEY = b"stepmark_export"
SHAPES_KEY = b"stepmark_shapes"  # JSON {column: shape} of array leaves (stored flattened)
FRAME_KEY = b"stepmark_frame_column"  # the observation column holding recorded JPEG frames ("" if none)


def _arrow_type(value: Any) -> pa.DataType:
    """The Arrow type of one leaf value (arrays: a list of their dtype)."""
    if isinstance(value, bytes):
        return pa.binary()
    if isinstance(value, str):
        return pa.string()
    if isinstance(value, bool | np.bool_):
        return pa.bool_()
    if isinstance(value, int) and not isinstance(value, np.generic):
        return pa.int64()
    if isinstance(value, float) and not isinstance(value, np.generic):
        return pa.float64()
    arr = np.asarray(value)
    if arr.dtype.kind in "OUS":
        return pa.list_(pa.string()) if arr.ndim else pa.string()
    base = pa.from_numpy_dtype(arr.dtype)
    return pa.list_(base) if arr.ndim else base


def _leaves(prefix: str, value: Any) -> list[tuple[str, Any]]:
    """(column name, leaf) pairs of a nested observation/action (iterative, sorted by name)."""
    out: list[tuple[str, Any]] = []
    stack = [(prefix, value)]
    while stack:
        name, v = stack.pop()
        if isinstance(v, dict):
            stack.extend((f"{name}/{k}", x) for k, x in v.items())
        else:
            out.append((name, v))
    return sorted(out, key=lambda p: p[0])


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | str | bool | int | float) and not isinstance(value, np.generic):
        return value
    arr = np.asarray(value)
    if arr.ndim:
        return arr.reshape(-1).tolist()
    return arr.item()


def _objects_type() -> pa.DataType:
    text = {"id", "android_class", "text", "content_desc", "resource_id", "labels"}
    flags = {"is_leaf", "is_actionable", "clickable", "visible", "enabled", "scrollable", "checked", "human_drawn",
             "box_corrected"}  # fmt: skip
    fields = []
    for name in UI_OBJECT_FIELDS:
        if name in text:
            fields.append(pa.field(name, pa.string()))
        elif name in flags:
            fields.append(pa.field(name, pa.bool_()))
        elif name == "bbox":
            fields.append(pa.field(name, pa.list_(pa.int32(), 4)))
        else:
            fields.append(pa.field(name, pa.int32()))
    return pa.list_(pa.struct(fields))


def _objects_rows(table: dict[str, list[Any]], fields: tuple[str, ...] = UI_OBJECT_FIELDS) -> list[dict[str, Any]]:
    n = len(table["id"])
    return [{k: _plain(table[k][i]) for k in fields} for i in range(n)]


def _windows_type() -> pa.DataType:
    """`observation/windows` (UI, full object form): one struct per window of the step's forest."""
    kinds = {"type": pa.string(), "title": pa.string(), "focused": pa.bool_(), "active": pa.bool_()}
    return pa.list_(pa.struct([pa.field(name, kinds.get(name, pa.int32())) for name in UI_WINDOW_FIELDS]))


class RowBuilder:
    """Step rows of one dataset (the frame leaf, with `--jpeg-frames`, holds the recorded JPEG bytes)."""

    def __init__(self, frame_leaf: tuple[str, ...] | None, strip: bool) -> None:
        self.frame_column = "observation/" + "/".join(frame_leaf) if frame_leaf is not None else None
        if frame_leaf == ():
            self.frame_column = "observation"
        self.strip = strip
        # Numeric array columns that `write_episode` builds from numpy (left out of the rows).
        self.arrays: frozenset[str] = frozenset()

    def observation_columns(self, step: ExportStep, kind: str) -> dict[str, Any]:
        if kind == KIND_UI:
            obs = step.observation
            cols = {
                "observation/screenshot": obs["screenshot"],
                "observation/has_screenshot": bool(obs["has_screenshot"]),
                "observation/screen_width": int(obs["screen_width"]),
                "observation/screen_height": int(obs["screen_height"]),
                "observation/proto": obs["proto"],
                **{f"observation/step_text/{name}": text for name, text in obs["step_text"].items()},
            }
            if "objects" in obs:
                cols["observation/objects"] = _objects_rows(obs["objects"])
                cols["observation/windows"] = _objects_rows(obs["windows"], UI_WINDOW_FIELDS)
            else:  # --ui-objects padded:N: fixed-length columns
                padded = obs["objects_padded"]
                cols.update({name: _plain(v) for name, v in _leaves("observation/objects_padded", padded)
                             if name not in self.arrays})  # fmt: skip
            return cols
        frame = self.frame_column
        # `--jpeg-frames`: the frame leaf holds the recorded JPEG (a step without one: its array as PNG); its
        # pixels are never flattened.
        cols = {}
        for name, v in _leaves("observation", step.observation):
            if name in self.arrays:
                continue
            if name != frame:
                cols[name] = _plain(v)
            else:
                cols[name] = bytes(step.image) if step.image is not None else frames.encode_png(v)
        return cols

    def rows(self, episode: ExportEpisode, padding: dict[str, Any]) -> list[dict[str, Any]]:
        meta = episode.meta.to_dict()
        rows = []
        for i, step in enumerate(episode.steps):
            row: dict[str, Any] = dict(meta)
            row["step_index"] = i
            row.update(self.observation_columns(step, meta["kind"]))
            if step.action is None:
                row.update(padding)
            else:
                row.update({name: _plain(v) for name, v in _leaves("action", step.action) if name not in self.arrays})
            row.update(
                {
                    "reward": float(step.reward),
                    "discount": float(step.discount),
                    "is_first": bool(step.is_first),
                    "is_last": bool(step.is_last),
                    "is_terminal": bool(step.is_terminal),
                    "info_episode_r": float(step.episode["r"]),
                    "info_episode_l": int(step.episode["l"]),
                    "info_episode_s": bool(step.episode["s"]),
                    "info_episode_mask": bool(step.episode["mask"]),
                    **{k: bool(v) for k, v in step.tags.items()},
                    **step.fields,
                }
            )
            if not self.strip:
                row["info_json"] = info_json(step.info)
                row["keys"] = list(step.keys or [])
                if self.frame_column is None and meta["kind"] != KIND_UI:
                    row["image"] = bytes(step.image) if step.image is not None else b""
            rows.append(row)
        return rows


def _padding_of(action: Any) -> dict[str, Any]:
    """The padding action's columns: zeros of every numeric leaf, empty text/bytes."""
    out = {}
    for name, v in _leaves("action", action):
        if isinstance(v, str):
            out[name] = ""
        elif isinstance(v, bytes):
            out[name] = b""
        else:
            out[name] = _plain(np.zeros_like(np.asarray(v)))
    return out


def schema_for(
    sample: ExportEpisode, frame_leaf: tuple[str, ...] | None, strip: bool, metadata: dict[str, Any]
) -> pa.Schema:
    """The one schema of every file of the dataset, derived from a sample episode (all share its spec)."""
    builder = RowBuilder(frame_leaf, strip)
    action = next(s.action for s in sample.steps if s.action is not None)
    first = builder.rows(sample, _padding_of(action))[0]
    fields = []
    shapes: dict[str, list[int]] = {}
    for name, value in first.items():
        if name == "observation/objects":
            typ = _objects_type()
        elif name == "observation/windows":
            typ = _windows_type()
        elif name.startswith(study_fields.PREFIX):  # typed by the field's kind (exporters/study_fields.py)
            typ = pa.list_(pa.bool_()) if isinstance(value, list) else _arrow_type(value)
        elif name in ("tags", "keys"):
            typ = pa.list_(pa.string())
        elif name == builder.frame_column:
            typ = pa.binary()
        elif name in ("info_episode_l", "step_index", "episode_index", "selection_index", "episode_length", "num_steps"):
            typ = pa.int64()
        elif name in ("episode_return", "total_reward", "reward", "discount", "info_episode_r"):
            typ = pa.float64()
        else:
            leaf = _leaf_value(sample.steps[0], action, name)
            typ = _arrow_type(leaf if leaf is not None else value)
            if leaf is not None and isinstance(leaf, np.ndarray) and leaf.ndim:
                shapes[name] = list(leaf.shape)
        fields.append(pa.field(name, typ))
    schema_metadata = {
        METADATA_KEY: json.dumps(metadata, sort_keys=True).encode(),
        SHAPES_KEY: json.dumps(shapes, sort_keys=True).encode(),
        FRAME_KEY: (builder.frame_column or "").encode(),
    }
    return pa.schema(fields, metadata=schema_metadata)


def _leaf_value(step: ExportStep, action: Any, name: str) -> Any:
    """The original leaf behind an observation/action column (for its dtype and shape), else None."""
    for prefix, value in (("observation", step.observation), ("action", action)):
        if name == prefix or name.startswith(prefix + "/"):
            for col, leaf in _leaves(prefix, value):
                if col == name:
                    return leaf
    return None


def schema_to_bytes(schema: pa.Schema) -> bytes:
    return schema.serialize().to_pybytes()


def schema_from_bytes(data: bytes) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(data))


def file_name(split: str, index: int) -> str:
    return f"{DATA_DIR}/{split or 'train'}-{index:08d}.parquet"


def write_episode(episode: ExportEpisode, schema: pa.Schema, staging_dir: str) -> int:
    """Writes one episode's rows as its own Parquet file (written aside, then renamed); returns its size."""
    strip = "info_json" not in schema.names
    builder = RowBuilder(None, strip)
    builder.frame_column = schema.metadata.get(FRAME_KEY, b"").decode() or None
    shapes = json.loads(schema.metadata.get(SHAPES_KEY, b"{}"))
    builder.arrays = frozenset(_numeric_array_columns(schema))
    padding = {
        f.name: _zero_of(f.type, shapes.get(f.name))
        for f in schema
        if (f.name == "action" or f.name.startswith("action/")) and f.name not in builder.arrays
    }
    rest = pa.schema([f for f in schema if f.name not in builder.arrays])
    table = pa.Table.from_pylist(builder.rows(episode, padding), schema=rest)
    arrays = _array_columns(episode, schema, builder.arrays)
    table = pa.Table.from_arrays(
        [arrays[name] if name in arrays else table[name] for name in schema.names], schema=schema
    )
    path = os.path.join(staging_dir, file_name(episode.meta.split, episode.meta.episode_index))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.part-{os.getpid()}"
    # Parquet's dictionary encoding stays on for the frames' bytes: without it writing was ~2x faster but the
    # files 1.9x (Procgen maze) to 3.4x (starpilot) larger (bench_export.py --bytes).
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)
    return os.path.getsize(path)


def move_episode_file(staging_dir: str, split: str, index: int, position: int) -> None:
    """The last step's renumbering: the file written for the episode at selection index `index` becomes the
    one at `position` (its position in the dataset once skipped episodes and dead letters are left out), its
    `episode_index` column = `position` (the rest as written; one episode's rows read at a time)."""
    from pipelines import storage

    src = storage.join(staging_dir, file_name(split, index))
    with storage.local_folder(staging_dir, prefix="stepmark-parquet-renumber-") as local:
        if local == staging_dir:
            table = pq.ParquetFile(src).read()
        else:
            with storage.open_read(src) as f:
                table = pq.ParquetFile(pa.BufferReader(f.read())).read()
        column = table.schema.get_field_index("episode_index")
        table = table.set_column(column, table.schema.field(column), pa.array([position] * table.num_rows, pa.int64()))
        path = os.path.join(local, file_name(split, position))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.part-{os.getpid()}"
        pq.write_table(table, tmp, compression="zstd")  # as `write_episode` writes it
        os.replace(tmp, path)
    storage.delete([src])


def _numeric_array_columns(schema: pa.Schema) -> list[str]:
    """Observation/action columns holding flattened numeric or boolean arrays (a list of numbers per row)."""
    out = []
    for f in schema:
        if not (f.name.startswith(("observation", "action")) and pa.types.is_list(f.type)):
            continue
        value = f.type.value_type
        if pa.types.is_integer(value) or pa.types.is_floating(value) or pa.types.is_boolean(value):
            out.append(f.name)
    return out


def _array_columns(episode: ExportEpisode, schema: pa.Schema, names: frozenset[str]) -> dict[str, pa.Array]:
    """The numeric array columns of one episode as Arrow list arrays built from the stacked numpy arrays (the
    same values as a list per row; `tolist` of a 64x64x3 frame and Arrow's conversion back cost ~50 us a step,
    more than reading the step). The final step's padding action is zeros."""
    if not names:
        return {}
    values: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for step in episode.steps:
        leaves = dict(_leaves("observation", step.observation))
        if step.action is not None:
            leaves.update(_leaves("action", step.action))
        for name, column in values.items():
            column.append(np.asarray(leaves[name]).reshape(-1) if name in leaves else None)
    out = {}
    for name, column in values.items():
        size = next((len(v) for v in column if v is not None), 0)
        value_type = schema.field(name).type.value_type
        dtype = value_type.to_pandas_dtype()
        rows = [v if v is not None else np.zeros(size, dtype) for v in column]
        flat = np.concatenate(rows) if rows else np.zeros(0, dtype)
        offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int32)
        out[name] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.asarray(flat, dtype), type=value_type))
    return out


def _zero_of(typ: pa.DataType, shape: list[int] | None) -> Any:
    """The padding value of an action column: zero, empty text/bytes, or a list of zeros of its shape."""
    if pa.types.is_string(typ):
        return ""
    if pa.types.is_binary(typ):
        return b""
    if pa.types.is_boolean(typ):
        return False
    if pa.types.is_list(typ):
        return [_zero_of(typ.value_type, None)] * int(np.prod(shape or [0]))
    if pa.types.is_floating(typ):
        return 0.0
    return 0


CARD_FILE = "README.md"


def _card_config(name: str, counts: dict[str, int], folder: str = "") -> list[str]:
    """One `configs` entry: each split with episodes under its own name, from its files below `folder`."""
    lines = [f"- config_name: {name}", "  data_files:"]
    prefix = f"{folder}/" if folder else ""
    for split, n in counts.items():
        if n:
            lines += [f"  - split: {split}", f"    path: {prefix}{DATA_DIR}/{split}-*.parquet"]
    return lines


def _card(configs: list[str]) -> str:
    text = "A stepmark export: one table of steps; every field in stepmark's `schemas/dataset_spec.md`."
    return "\n".join(["---", "configs:", *configs, "---", "", text, ""])


def dataset_card(counts: dict[str, int]) -> str:
    """`README.md` with the dataset card's YAML `configs`: Hugging Face `datasets.load_dataset(OUT)` then names
    every split as `--split` does (it would rename `val` to `validation` from the file names alone). A split
    without episodes is left out: `datasets` refuses a split without rows ("corresponds to no data")."""
    return _card(_card_config("default", counts))


def index_card(datasets: dict[str, tuple[str, dict[str, int]]]) -> str:
    """`--split-by-spec`: `OUT/README.md` naming one config per dataset (`{name: (folder, split counts)}`), so
    `datasets.load_dataset(OUT, NAME)` reads that dataset with the `--split` names (the datasets have other
    columns: one config each; without a card `datasets` would merge them and rename `val` to `validation`)."""
    return _card([line for name, (folder, counts) in datasets.items() for line in _card_config(name, counts, folder)])


def write_index_card(root: str, datasets: dict[str, tuple[str, dict[str, int]]]) -> None:
    from pipelines import storage

    storage.write_bytes(storage.join(root, CARD_FILE), index_card(datasets).encode("utf-8"))


def finish_dataset(staging_dir: str, schema_bytes: bytes, counts: dict[str, int]) -> None:
    """The last step: an empty file (the schema, no row group) for each split without episodes, so that every
    split named in `--split` is in the table's files, and the dataset card (`dataset_card`)."""
    from pipelines import storage

    schema = schema_from_bytes(schema_bytes)
    with storage.local_folder(staging_dir, prefix="stepmark-parquet-") as local:  # uploaded when in a bucket
        os.makedirs(os.path.join(local, DATA_DIR), exist_ok=True)
        for split, n in counts.items():
            if not n:
                pq.ParquetWriter(os.path.join(local, DATA_DIR, f"{split}-empty.parquet"), schema).close()
        with open(os.path.join(local, CARD_FILE), "w", encoding="utf-8") as f:
            f.write(dataset_card(counts))

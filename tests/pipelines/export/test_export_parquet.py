"""`--format parquet` on real recorded and converted episodes, read back with pyarrow, pandas and Hugging Face
`datasets`: one table of steps following the step contract, with the dataset metadata in its schema."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines import export
from pipelines.episodes import open_episode
from tests.pipelines.export import readback
from tests.pipelines.export.export_data import ExportData


def _export(data: ExportData, out: Path, **kw) -> export.ExportSummary:
    return export.export_episodes(
        export.ExportRequest(data_dir=str(data.data_dir), out=str(out), format="parquet", **kw)
    )


def test_env_steps_match_the_envlogger_export(export_data: ExportData, tmp_path: Path) -> None:
    refs = [export_data.ref(e) for e in export_data.procgen]
    kw = {"refs": refs, "end_of_episode_tags": ["goal"], "splits": "train=0.5,val=0.5", "split_seed": 3}
    summary = _export(export_data, tmp_path / "pq", **kw)
    export.export_episodes(
        export.ExportRequest(data_dir=str(export_data.data_dir), out=str(tmp_path / "el"), **kw)
    )
    assert summary.episodes == 2 and not summary.dead_letters
    table = pq.read_table(tmp_path / "pq" / "data")
    info = json.loads(table.schema.metadata[b"stepmark_export"])
    assert json.loads(info["action_space"]) == {"type": "Discrete", "dtype": "int64", "start": 0, "n": 15}
    assert json.loads(info["environment_spec"])["procgen"]["id"] == "coinrun"
    df = table.to_pandas()
    envlogger_episodes = readback.read_envlogger(tmp_path / "el")
    assert sorted(df["episode_id"].unique()) == sorted(e["metadata"]["episode_id"] for e in envlogger_episodes)
    for episode in envlogger_episodes:
        meta, records = episode["metadata"], episode["records"]
        rows = df[df["episode_id"] == meta["episode_id"]].sort_values("step_index")
        n = len(records)
        assert len(rows) == n and rows["split"].iloc[0] == meta["split"] in ("train", "val")
        # The step contract: step i's action is record i+1's; the final step is padding with reward and
        # discount 0; info["episode"] on the final step; length = transitions.
        assert rows["action"].tolist() == [int(r["action"]) for r in records[1:]] + [0]
        assert rows["reward"].tolist() == pytest.approx([r["reward"] for r in records[1:]] + [0.0])
        assert rows["discount"].tolist()[-1] == 0.0 and rows["is_last"].tolist() == [False] * (n - 1) + [True]
        assert rows["info_episode_mask"].tolist() == [False] * (n - 1) + [True]
        assert int(rows["info_episode_l"].iloc[-1]) == meta["episode_length"] == n - 1
        assert rows["keys"].map(list).tolist() == [list(r["custom_data"]["keys"]) for r in records]
        assert rows["truncated_by_tag"].iloc[0] == meta["truncated_by_tag"]
        # The observation as recorded (flattened uint8 arrays), and the recorded JPEG frame beside it.
        frames = [np.asarray(v, np.uint8).reshape(64, 64, 3) for v in rows["observation/image"]]
        for frame, record in zip(frames, records, strict=True):
            np.testing.assert_array_equal(frame, record["observation"]["image"])
        assert rows["image"].tolist() == [r["custom_data"]["image"] for r in records]


def test_the_observation_is_exported_as_recorded(export_data: ExportData, tmp_path: Path) -> None:
    episode = export_data.procgen[1]
    _export(export_data, tmp_path / "pq", refs=[export_data.ref(episode)])
    table = pq.read_table(tmp_path / "pq" / "data")
    shapes = json.loads(table.schema.metadata[b"stepmark_shapes"])
    shape = shapes["observation/image"]
    frames = [np.asarray(v, np.uint8).reshape(shape) for v in table["observation/image"].to_pylist()]
    with open_episode(episode, export_data.data_dir) as reader:
        steps = list(reader)
    for frame, step in zip(frames, steps, strict=True):
        np.testing.assert_array_equal(frame, step.observation["image"])
    assert table["image"].to_pylist() == [s.image for s in steps]


def test_ui_table_loads_with_hugging_face_datasets(export_data: ExportData, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "ui"
    summary = _export(export_data, out, study_id=export_data.ui_study_id)
    assert summary.episodes == 1 and len(summary.skipped) == len(export_data.ui) - 1
    ds = datasets.load_dataset(str(out), split="train")  # the dataset card names the splits
    n = export_data.ui[0].num_steps + 1  # screens plus the placeholder after the last recorded action
    assert ds.num_rows == n
    first = ds[0]
    assert first["observation/screenshot"][:2] in (b"\xff\xd8", b"\x89P")
    objects = first["observation/objects"]
    assert objects and set(objects[0]) >= {"bbox", "type", "text", "is_actionable", "resource_id"}
    assert len(objects[0]["bbox"]) == 4 and first["action/type_name"] != ""
    assert first["environment_id"] == "android-ui" and first["kind"] == "ui"
    last = ds[n - 1]
    assert last["is_last"] and last["observation/objects"] == [] and last["action/type_name"] == ""
    assert last["info_episode_l"] == n - 1 and last["discount"] == 0.0


def test_repeated_parquet_exports_are_byte_identical(export_data: ExportData, tmp_path: Path) -> None:
    refs = [export_data.ref(e) for e in [*export_data.procgen]]
    _export(export_data, tmp_path / "a", refs=refs)
    _export(export_data, tmp_path / "b", refs=refs)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len(files) == 4  # two episodes, the summary, the dataset card (README.md)
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_padded_ui_objects_as_fixed_length_columns(export_data: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "padded"
    _export(export_data, out, study_id=export_data.ui_study_id, ui_objects="padded:16")
    table = pq.read_table(out / "data")
    shapes = json.loads(table.schema.metadata[b"stepmark_shapes"])
    assert shapes["observation/objects_padded/bbox"] == [16, 4]
    masks = table["observation/objects_padded/mask"].to_pylist()
    assert all(len(m) == 16 for m in masks) and any(all(m) for m in masks) and not any(masks[-1])
    targets = table["action/target_index"].to_pylist()
    assert all(-1 <= t < 16 for t in targets)
    assert "observation/objects" not in table.schema.names

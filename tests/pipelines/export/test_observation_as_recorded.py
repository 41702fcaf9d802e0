"""What an export gives a policy to train on (issue 23): the observation as recorded by default in every format;
the lossy `--jpeg-frames` decoding to one array whatever the format; the return as the float64 sum of the
exported rewards; `--ui-objects padded:N` never cutting the action's target or an annotated object."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import minari
import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines import export
from pipelines.episodes import open_episode
from pipelines.exporters import frames
from pipelines.exporters.transform import TransformOptions, padded_rows, transform_episode, ui_action
from pipelines.exporters.ui_objects import PaddingOverflow
from tests.pipelines.export import readback
from tests.pipelines.export.export_data import ExportData


def _export(data: ExportData, out: Path, fmt: str, **kw: Any) -> export.ExportSummary:
    return export.export_episodes(export.ExportRequest(data_dir=str(data.data_dir), out=str(out), format=fmt, **kw))


def _recorded(data: ExportData, episode) -> list[Any]:  # noqa: ANN001
    with open_episode(episode, data.data_dir) as reader:
        return list(reader)


def _minari(out: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN202
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(out.parent))
    return minari.load_dataset(out.name)


def test_every_format_gives_the_recorded_observation(
    export_data: ExportData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Procgen frames and NetHack's arrays come back exactly, in Parquet and Minari (TFDS: the tfds test)."""
    for episode, leaves in ((export_data.procgen[1], ("image",)), (export_data.nethack[0], ("glyphs", "inv_strs"))):
        steps = _recorded(export_data, episode)
        name = episode.environment_id.replace("-", "_")
        (tmp_path / name).mkdir()
        _export(export_data, tmp_path / name / "pq", "parquet", refs=[export_data.ref(episode)])
        _export(export_data, tmp_path / name / f"{name}-v0", "minari", refs=[export_data.ref(episode)])
        table = pq.read_table(tmp_path / name / "pq" / "data")
        assert json.loads(table.schema.metadata[b"stepmark_export"])["images"] == "as_recorded"
        shapes = json.loads(table.schema.metadata[b"stepmark_shapes"])
        ep = next(_minari(tmp_path / name / f"{name}-v0", monkeypatch).iterate_episodes())
        for leaf in leaves:
            column = table[f"observation/{leaf}"].to_pylist()
            for k, step in enumerate(steps):
                expected = np.asarray(step.observation[leaf])
                got = np.asarray(column[k], expected.dtype).reshape(shapes[f"observation/{leaf}"])
                np.testing.assert_array_equal(got, expected, err_msg=f"parquet {leaf} step {k}")
                np.testing.assert_array_equal(ep.observations[leaf][k], expected, err_msg=f"minari {leaf} step {k}")


def test_jpeg_frames_are_lossy_and_decode_to_one_array(
    export_data: ExportData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--jpeg-frames`: Parquet's bytes through `frames.decode_frame` and Minari's own reader give the same
    array for every step; it is the recorded JPEG's, not the observation (named so in the metadata)."""
    episode = export_data.procgen[1]
    steps = _recorded(export_data, episode)
    _export(export_data, tmp_path / "pq", "parquet", refs=[export_data.ref(episode)], jpeg_frames=True)
    _export(export_data, tmp_path / "coinrun-v0", "minari", refs=[export_data.ref(episode)], jpeg_frames=True)
    table = pq.read_table(tmp_path / "pq" / "data")
    assert json.loads(table.schema.metadata[b"stepmark_export"])["images"] == "jpeg_frames"
    ds = _minari(tmp_path / "coinrun-v0", monkeypatch)
    assert json.loads(ds.storage.metadata["stepmark_export"]["observation_space"])  # spaces unchanged
    minari_frames = next(ds.iterate_episodes()).observations["image"]
    differs = 0
    for k, (data, step) in enumerate(zip(table["observation/image"].to_pylist(), steps, strict=True)):
        assert data == step.image  # the recorded JPEG, as it is
        decoded = frames.decode_frame(data)
        np.testing.assert_array_equal(decoded, minari_frames[k], err_msg=f"step {k}")
        differs += int(np.abs(decoded.astype(int) - step.observation["image"].astype(int)).max() > 0)
    assert differs == len(steps)  # lossy: every frame differs from the observation


def test_the_return_is_the_float64_sum_of_the_exported_rewards(export_data: ExportData, tmp_path: Path) -> None:
    """NetHack's rewards in a float32 store would give 0.7799999713897705 for 0.78: every figure is fsum."""
    refs = [export_data.ref(e) for e in export_data.nethack]
    _export(export_data, tmp_path / "pq", "parquet", refs=refs)
    _export(export_data, tmp_path / "el", "envlogger", refs=refs, end_of_episode_tags=["door"])
    df = pq.read_table(tmp_path / "pq" / "data").to_pandas()
    for _, rows in df.groupby("episode_id"):
        r = math.fsum(rows["reward"].tolist())
        last = rows[rows.is_last].iloc[0]
        assert last["info_episode_r"] == last["episode_return"] == last["total_reward"] == r
    for episode in readback.read_envlogger(tmp_path / "el"):  # cut episodes too
        records = episode["records"]
        r = math.fsum(float(x["reward"]) for x in records[1:])
        assert records[-1]["custom_data"]["info"]["episode"]["r"] == episode["metadata"]["episode_return"] == r


def test_fractional_rewards_give_the_float64_return_not_the_stores_float32(export_data: ExportData) -> None:
    """The store keeps `total_reward` as a float32 (0.78 reads back as 0.7799999713897705); the export's return
    is the float64 sum of the rewards it exports, on the cut path too."""
    from protos.rlds_creator import study_pb2

    source = export_data.procgen[1]
    steps = _recorded(export_data, source)
    for k, step in enumerate(steps[:-1]):
        step.reward = (0.26, 0.52, 0.01)[k % 3]
    episode = study_pb2.Episode()
    episode.CopyFrom(source)
    episode.total_reward = math.fsum(s.reward for s in steps[:-1])
    assert episode.total_reward != math.fsum(s.reward for s in steps[:-1])  # float32 in the store
    for options in (TransformOptions(), TransformOptions(end_of_episode_tags=("jump",), step_tag_labels=("jump",))):
        out = transform_episode(0, episode, steps, options, {})
        r = math.fsum(s.reward for s in out.steps)
        assert out.meta.episode_return == out.steps[-1].episode["r"] == r == math.fsum(
            s.reward for s in steps[: len(out.steps) - 1]
        )


def _ui_steps(data: ExportData) -> tuple[Any, list[Any]]:
    episode = data.ui[0]
    return episode, _recorded(data, episode)


def test_padding_keeps_the_target_and_annotated_objects(export_data: ExportData) -> None:
    episode, steps = _ui_steps(export_data)
    step = next(s for s in steps if s.action is not None and s.action.HasField("target_index")
                and s.action.target_index >= 2)  # fmt: skip
    n_objects = len(step.observation.objects)
    target = step.action.target_index
    drawn = n_objects - 1  # a box an annotator drew comes after the converted objects
    notes = [{"object_index": drawn, "human_drawn": True, "labels": ["cart"]}]
    rows = padded_rows(step.observation, 2, step.action, notes)
    assert rows == sorted({target, drawn})  # the first two objects (the old rows) are not the ones kept
    action = ui_action(step.action, strip=False, padded=2, selected=rows)
    assert int(action["target_index"]) == rows.index(target)
    with pytest.raises(PaddingOverflow, match="padded:1"):
        padded_rows(step.observation, 1, step.action, notes)


def test_an_overflowing_screen_names_the_episode_and_step(export_data: ExportData) -> None:
    episode, steps = _ui_steps(export_data)
    k = next(i for i, s in enumerate(steps) if s.action is not None and s.action.HasField("target_index"))
    other = 0 if steps[k].action.target_index else 1
    steps[k].info = dict(steps[k].info or {}, object_annotations=[{"object_index": other, "labels": ["x"]}])
    with pytest.raises(PaddingOverflow, match=rf"episode .*{episode.id} step {k}: --ui-objects padded:1"):
        transform_episode(0, episode, steps, TransformOptions(ui_objects_padded=1), {})


@pytest.mark.tfds
def test_tfds_gives_the_recorded_observation_and_one_decoder_for_jpeg_frames(
    export_data: ExportData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TFDS: the recorded arrays by default; with `--jpeg-frames` the recorded JPEG bytes, which
    `frames.decode_frame` and TensorFlow's `decode_jpeg(dct_method=frames.TF_DCT_METHOD)` decode to the array
    Minari's reader gives (TensorFlow's default decoder, which TFDS's `Image` feature uses, does not)."""
    import tensorflow as tf

    episode = export_data.procgen[1]
    steps = _recorded(export_data, episode)
    refs = [export_data.ref(episode)]
    _export(export_data, tmp_path / "tf", "tfds", refs=refs)
    _export(export_data, tmp_path / "tfj", "tfds", refs=refs, jpeg_frames=True)
    _export(export_data, tmp_path / "coinrun-v0", "minari", refs=refs, jpeg_frames=True)
    (exact,) = readback.read_tfds(tmp_path / "tf")
    for k, (step, recorded) in enumerate(zip(exact["steps"], steps, strict=True)):
        np.testing.assert_array_equal(step["observation"]["image"], recorded.observation["image"], err_msg=str(k))
    assert readback.tfds_metadata(tmp_path / "tfj")["stepmark_export"]["images"] == "jpeg_frames"
    (lossy,) = readback.read_tfds(tmp_path / "tfj")
    minari_frames = next(_minari(tmp_path / "coinrun-v0", monkeypatch).iterate_episodes()).observations["image"]
    fast_differs = 0
    for k, (step, recorded) in enumerate(zip(lossy["steps"], steps, strict=True)):
        data = step["observation"]["image"]
        assert data == recorded.image
        ours = frames.decode_frame(data)
        tf_exact = tf.io.decode_jpeg(data, channels=3, dct_method=frames.TF_DCT_METHOD).numpy()
        np.testing.assert_array_equal(ours, minari_frames[k], err_msg=f"step {k}")
        np.testing.assert_array_equal(tf_exact, ours, err_msg=f"step {k}")
        fast_differs += int(not np.array_equal(tf.io.decode_jpeg(data, channels=3).numpy(), ours))
    assert fast_differs  # why TFDS's Image feature is not used for the frames


@pytest.mark.parametrize("shape", [(64, 64, 3), (55, 80), (7, 5, 4), (1, 1, 3), (96, 128, 3)])
def test_png_frames_decode_to_the_array_with_pillow(shape: tuple[int, ...]) -> None:
    """The PNG encoder (rows unfiltered, zlib) against Pillow's decoder, which Minari's reader uses."""
    import io

    from PIL import Image

    array = np.random.default_rng(len(shape)).integers(0, 256, shape).astype(np.uint8)
    data = frames.encode_png(array)
    Image.open(io.BytesIO(data)).verify()  # chunk CRCs and structure
    decoded = np.asarray(Image.open(io.BytesIO(data)), np.uint8)
    assert decoded.shape == array.shape and np.array_equal(decoded, array)
    with pytest.raises(Exception, match="channels must be 3 or 4"):
        frames.encode_png(np.zeros((4, 4, 2), np.uint8), ("obs",))


def test_the_lossy_form_is_the_opt_in_flag() -> None:
    """`--jpeg-frames` asks for the recorded JPEG frames; without it (and with the old `--lossless-images`,
    now the default) the observation is exported as recorded."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="d")
    parser.add_argument("--store", default=None)
    export.add_export_arguments(parser)
    for argv, jpeg in ((["--out", "o"], False), (["--out", "o", "--lossless-images"], False),
                       (["--out", "o", "--jpeg-frames"], True)):  # fmt: skip
        assert export.request_from_args(parser.parse_args(argv), []).jpeg_frames is jpeg
    assert "LOSSY" in parser.format_help()

"""`episode_index` in the TFDS export with episodes left out (issue 32, item 8): 0..n-1 over the dataset, each
split's shards in that order, read with TFDS's own `builder_from_directory`; `selection_index` keeps the
selection's position (see test_export_positions.py). Runs in its own process: `pytest -m tfds`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pipelines.export.export_data import ExportData
from tests.pipelines.export.test_export_positions import (
    SPLITS,
    check_summary,
    data_with_gaps,
    expected,
    run_export,
)

pytestmark = pytest.mark.tfds


def test_tfds_episode_index_is_the_position_in_the_dataset(export_data: ExportData, tmp_path: Path) -> None:
    import tensorflow_datasets as tfds

    data_dir, study_id, ids = data_with_gaps(export_data, tmp_path)
    out = tmp_path / "tfds"
    check_summary(run_export(data_dir, study_id, out, "tfds", splits=SPLITS))
    kept_ids, selection = expected(ids)
    builder = tfds.builder_from_directory(str(out))
    found: dict[str, tuple[int, int, str]] = {}
    for split, info in builder.info.splits.items():
        if not info.num_examples:
            continue
        positions = []
        for ep in tfds.as_numpy(builder.as_dataset(split=split)):
            episode_id = ep["episode_id"].decode()
            found[episode_id] = (int(ep["episode_index"]), int(ep["selection_index"]), ep["split"].decode())
            positions.append(int(ep["episode_index"]))
        assert positions == sorted(positions)  # each split's shards in episode order
        assert {found[e][2] for e in found if found[e][0] in positions} == {split}
    assert sorted(found) == sorted(kept_ids)
    assert [found[e][:2] for e in kept_ids] == [(p, s) for p, s in enumerate(selection)]


@pytest.mark.parametrize(("old", "new"), [(5, 2), (300, 0), (2**40, 127), (0, 2**33)])
def test_renumbered_example_is_the_example_written_at_that_position(old: int, new: int) -> None:
    """The wire-level renumbering gives the bytes TensorFlow's deterministic serialization gives for the
    episode at its new position (only the `episode_index` entry and the lengths around it change)."""
    import tensorflow as tf

    from pipelines.exporters.tfds_writer import renumbered_example

    def example(index: int) -> bytes:
        feature = {
            "episode_id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"e" * 300])),
            "episode_index": tf.train.Feature(int64_list=tf.train.Int64List(value=[index])),
            "selection_index": tf.train.Feature(int64_list=tf.train.Int64List(value=[old])),
            "steps/reward": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5] * 5000)),
        }
        return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)

    assert renumbered_example(example(old), new) == example(new)

"""The one step contract (schemas/dataset_spec.md, "The step contract"): the same selection exported as
envlogger and as TFDS reads back the same, field by field, when the envlogger export goes through TFDS's own
`tensorflow_datasets.rlds.envlogger_reader` and through TFDS's own RLDS builder (`rlds_base`), unmodified.
Environment and UI episodes, cut and uncut. Also: repeated exports are byte-identical."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipelines import export
from tests.pipelines.export import readback
from tests.pipelines.export.export_data import NETHACK_ENV, PROCGEN_ENV, ExportData

pytestmark = pytest.mark.tfds

# The only difference between the two paths, on purpose (named in the spec): TFDS hands text back as bytes.
# The observations are the recorded arrays in both (the lossy `--jpeg-frames` is tested in
# test_observation_as_recorded.py).


def _plain(value: Any) -> Any:
    """A comparable leaf: text as str (TFDS gives bytes), everything else as a numpy array."""
    if isinstance(value, bytes):
        try:
            return np.asarray(value.decode("utf-8"))
        except UnicodeDecodeError:
            return np.asarray(value, dtype=object)
    if isinstance(value, list | tuple) or (isinstance(value, np.ndarray) and value.dtype == object):
        items = [_plain(v) for v in value]
        return np.asarray([i.item() if i.ndim == 0 else i for i in items]) if items else np.zeros((0,))
    return np.asarray(value)


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    stack = [(prefix, tree)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            stack.extend((f"{path}/{k}" if path else str(k), v) for k, v in node.items())
        else:
            out[path] = node
    return out


def _assert_leaf_equal(where: str, got: Any, expected: Any) -> None:
    a, b = _plain(got), _plain(expected)
    if a.size == 0 and b.size == 0:
        return
    assert a.shape == b.shape, f"{where}: shape {a.shape} != {b.shape}"
    if a.dtype.kind in "fc":
        assert a.dtype == b.dtype, f"{where}: dtype {a.dtype} != {b.dtype}"
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        if a.shape and a.dtype == np.uint8 and a.tolist() != b.tolist():
            raise AssertionError(f"{where}: mean abs diff {np.abs(a.astype(int) - b.astype(int)).mean()}")
        assert a.tolist() == b.tolist(), f"{where}: {a!r} != {b!r}"


def _envlogger_via_tfds_reader(path: Path) -> list[dict[str, Any]]:
    """Episodes as TFDS's own envlogger -> RLDS conversion produces them: steps as one list per field."""
    import envlogger
    from tensorflow_datasets.rlds import envlogger_reader

    with envlogger.Reader(str(path)) as reader:
        return list(envlogger_reader.generate_episodes(reader))


def _compare_episode(name: str, rlds: dict[str, Any], tfds_episode: dict[str, Any]) -> None:
    """RLDS episode from the envlogger export (field -> list of steps) vs the TFDS export's episode."""
    meta_rlds = {k: v for k, v in rlds.items() if k != "steps"}
    meta_tfds = {k: v for k, v in tfds_episode.items() if k != "steps"}
    assert set(meta_rlds) == set(meta_tfds), f"{name}: metadata fields differ"
    for key in meta_rlds:
        _assert_leaf_equal(f"{name}:{key}", meta_tfds[key], meta_rlds[key])
    steps_rlds = _flatten(rlds["steps"])
    steps_tfds = [_flatten(s) for s in tfds_episode["steps"]]
    assert set(steps_rlds) == set(steps_tfds[0]), f"{name}: step fields differ"
    for field, values in steps_rlds.items():
        assert len(values) == len(steps_tfds), f"{name}: {field}: {len(values)} steps vs {len(steps_tfds)}"
        for i, value in enumerate(values):
            _assert_leaf_equal(f"{name}: step {i} {field}", steps_tfds[i][field], value)


def _export(data: ExportData, out: Path, fmt: str, **kw: Any) -> export.ExportSummary:
    return export.export_episodes(
        export.ExportRequest(data_dir=str(data.data_dir), out=str(out), format=fmt, **kw)
    )


SELECTIONS = {
    "env": lambda d: {"study_id": d.study_id, "split_by_spec": True, "end_of_episode_tags": ["goal"]},
    "env_stripped": lambda d: {"study_id": d.study_id, "split_by_spec": True, "strip_internal_metadata": True},
    "ui": lambda d: {"study_id": d.ui_study_id, "end_of_episode_tags": ["done"]},
    "ui_uncut": lambda d: {"study_id": d.ui_study_id},
}


@pytest.mark.parametrize("selection", sorted(SELECTIONS))
def test_envlogger_through_tfds_reader_equals_the_tfds_export(
    export_data: ExportData, tmp_path: Path, selection: str
) -> None:
    kw = SELECTIONS[selection](export_data)
    _export(export_data, tmp_path / "el", "envlogger", **kw)
    _export(export_data, tmp_path / "tf", "tfds", **kw)
    folders = [PROCGEN_ENV, NETHACK_ENV] if kw.get("split_by_spec") else ["."]
    for folder in folders:
        rlds = _envlogger_via_tfds_reader(tmp_path / "el" / folder)
        ours = readback.read_tfds(tmp_path / "tf" / folder)
        assert [e["episode_id"] for e in rlds] == [e["episode_id"].decode() for e in ours]
        for a, b in zip(rlds, ours, strict=True):
            _compare_episode(f"{folder}/{a['episode_id']}", a, b)
        for episode in ours:
            steps = episode["steps"]
            last = steps[-1]
            # The final step: padding action, reward 0, discount 0, info["episode"] with mask, length = transitions.
            assert last["is_last"] and float(last["reward"]) == 0.0 and float(last["discount"]) == 0.0
            padding = _flatten({"a": last["action"]}).values()
            assert all(not (v if isinstance(v, bytes) else np.any(v)) for v in padding)
            assert int(last["info"]["episode"]["l"]) == int(episode["episode_length"]) == len(steps) - 1
            assert [bool(s["info"]["episode"]["mask"]) for s in steps] == [False] * (len(steps) - 1) + [True]
            if "tags" in episode:
                assert isinstance(episode["tags"], np.ndarray)


def test_cut_and_uncut_follow_one_rule(export_data: ExportData, tmp_path: Path) -> None:
    """A cut final step, an uncut one and TFDS's reader agree: discount 0, reward 0; is_terminal only when the
    environment terminated (never after a cut); the LAST envlogger record keeps the finishing discount."""
    _export(export_data, tmp_path / "el", "envlogger", refs=[export_data.ref(e) for e in export_data.procgen],
            end_of_episode_tags=["goal"])  # fmt: skip
    episodes = {e["metadata"]["episode_id"]: e for e in readback.read_envlogger(tmp_path / "el")}
    cut = episodes[export_data.procgen[0].id]
    assert len(cut["records"]) == 6 and cut["metadata"]["truncated_by_tag"] == "goal"
    assert cut["records"][-1]["discount"] == 1.0  # a truncation in dm_env terms
    assert cut["records"][-1]["custom_data"]["keys"] == []  # the final step takes no action
    converted = _envlogger_via_tfds_reader(tmp_path / "el")
    for episode in converted:
        assert float(episode["steps"]["discount"][-1]) == 0.0 and float(episode["steps"]["reward"][-1]) == 0.0
    first = next(e for e in converted if e["episode_id"] == export_data.procgen[0].id)
    assert not first["steps"]["is_terminal"][-1]
    # The keys/info on step i are those of step i's own action (both paths).
    assert all(isinstance(k, list) for k in first["steps"]["keys"])


def test_tfds_own_rlds_builder_over_the_envlogger_export(export_data: ExportData, tmp_path: Path) -> None:
    """TFDS's own RLDS dataset builder parts (`rlds_base.build_info` + `generate_examples`, then the features'
    encode/serialize/decode a builder runs) take the envlogger export with the TFDS export's features,
    unmodified (no None -> [] mapping), and give the TFDS export's episodes."""
    import tensorflow_datasets as tfds
    from tensorflow_datasets.core import example_serializer
    from tensorflow_datasets.rlds import rlds_base

    kw = {"refs": [export_data.ref(e) for e in export_data.procgen], "end_of_episode_tags": ["goal"]}
    _export(export_data, tmp_path / "el", "envlogger", **kw)
    _export(export_data, tmp_path / "tf", "tfds", **kw)  # the observation as recorded, as envlogger has it
    features = tfds.builder_from_directory(str(tmp_path / "tf")).info.features
    step_features = features["steps"].feature
    flags = ("is_first", "is_last", "is_terminal", "observation", "action", "reward", "discount")
    config = rlds_base.DatasetConfig(
        name="stepmark_envlogger",
        observation_info=step_features["observation"],
        action_info=step_features["action"],
        reward_info=step_features["reward"],
        discount_info=step_features["discount"],
        step_metadata_info={k: f for k, f in step_features.items() if k not in flags},
        episode_metadata_info={k: f for k, f in features.items() if k != "steps"},
    )
    # What the builder does with each generated example: encode with its features, serialize, read back.
    info = rlds_base.build_info(config, tfds.core.DatasetIdentity(
        name="stepmark_envlogger", version="1.0.0", data_dir=str(tmp_path), module_name="stepmark"))  # fmt: skip
    serializer = example_serializer.ExampleSerializer(info.features.get_serialized_info())
    built = []
    for _, example in rlds_base.generate_examples(tmp_path / "el"):
        blob = serializer.serialize_example(info.features.encode_example(example))
        built.append(info.features.deserialize_example_np(blob))
    built.sort(key=lambda e: int(e["episode_index"]))
    ours = readback.read_tfds(tmp_path / "tf")
    assert len(built) == len(ours) == len(export_data.procgen)
    for a, b in zip(built, ours, strict=True):
        a = dict(a)
        a["steps"] = list(a["steps"])
        assert set(a) == set(b)
        for key in a:
            if key != "steps":
                _assert_leaf_equal(key, a[key], b[key])
        assert len(a["steps"]) == len(b["steps"])
        for i, (sa, sb) in enumerate(zip(a["steps"], b["steps"], strict=True)):
            fa, fb = _flatten(sa), _flatten(sb)
            assert set(fa) == set(fb)
            for field in fa:
                _assert_leaf_equal(f"step {i} {field}", fa[field], fb[field])


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("fmt", ["envlogger", "tfds"])
def test_repeated_exports_are_byte_identical(export_data: ExportData, tmp_path: Path, fmt: str) -> None:
    kw = {"study_id": export_data.study_id, "split_by_spec": True, "end_of_episode_tags": ["goal"]}
    _export(export_data, tmp_path / "a", fmt, **kw)
    _export(export_data, tmp_path / "b", fmt, **kw)
    first, second = _digests(tmp_path / "a"), _digests(tmp_path / "b")
    assert first == second and len(first) > 4

"""Export to TFDS/RLDS on real recorded and converted episodes, loaded back with tfds.builder_from_directory."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import numpy as np
import pytest

from pipelines import export
from pipelines.episodes import open_episode
from pipelines.exporters import archive
from tests.pipelines.export import readback
from tests.pipelines.export.export_data import NETHACK_ENV, PROCGEN_ENV, ExportData

pytestmark = pytest.mark.tfds


def request(data: ExportData, out: Path, **kw) -> export.ExportRequest:
    return export.ExportRequest(data_dir=str(data.data_dir), out=str(out), format="tfds", **kw)


def test_round_trip_matches_the_store(export_data: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "tfds"
    summary = export.export_episodes(
        request(
            export_data, out, study_id=export_data.study_id, split_by_spec=True, end_of_episode_tags=["goal"]
        )
    )
    assert summary.episodes == 4 and not summary.dead_letters
    stored = {e.id: e for e in [*export_data.procgen, *export_data.nethack]}
    for name, expected in ((PROCGEN_ENV, export_data.procgen), (NETHACK_ENV, export_data.nethack)):
        episodes = readback.read_tfds(out / name)
        assert [e["episode_id"].decode() for e in episodes] == [e.id for e in expected]
        for e in episodes:
            episode = stored[e["episode_id"].decode()]
            with open_episode(episode, export_data.data_dir) as reader:
                steps = list(reader)
            cut = 5 if episode.id == export_data.procgen[0].id else None
            n = cut + 1 if cut is not None else len(steps)
            got = e["steps"]
            assert len(got) == n
            assert [bool(s["is_first"]) for s in got] == [True] + [False] * (n - 1)
            assert [bool(s["is_last"]) for s in got] == [False] * (n - 1) + [True]
            assert [float(s["reward"]) for s in got[:-1]] == pytest.approx([s.reward for s in steps[: n - 1]])
            labels = ("door", "goal", "jump")
            for i, s in enumerate(got):
                tags = (
                    {t.label for t in episode.step_metadata[i].tags} if i in episode.step_metadata else set()
                )
                assert {k: bool(s[f"tag:{k}"]) for k in labels} == {k: k in tags for k in labels}
            for i in range(n - 1):
                np.testing.assert_array_equal(got[i]["action"], steps[i].action)
            mask = [bool(s["info"]["episode"]["mask"]) for s in got]
            assert mask.index(True) == n - 1 and sum(mask) == 1
            info = got[n - 1]["info"]["episode"]
            assert int(info["l"]) == int(e["episode_length"]) == n - 1
            assert float(info["r"]) == pytest.approx(float(e["episode_return"]))
            assert float(e["episode_return"]) == pytest.approx(
                sum(s.reward for s in steps[: n - 1]), abs=1e-5
            )
            if cut is not None:
                assert e["truncated_by_tag"] == b"goal" and not got[-1]["is_terminal"]
                assert float(got[-1]["discount"]) == 0.0 and got[-1]["tag:goal"]  # the one final-step rule
                assert list(e["tags"]) == [b"good run"] and e["notes"] == b"reached the ledge"
    nethack = readback.read_tfds(out / NETHACK_ENV)[0]["steps"][0]["observation"]
    with open_episode(export_data.nethack[0], export_data.data_dir) as reader:
        first = reader.step(0).observation
    assert set(nethack) == set(first)
    for key in first:
        np.testing.assert_array_equal(nethack[key], first[key])


def test_strip_gives_fixed_shape_steps(export_data: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "strip"
    export.export_episodes(
        request(
            export_data,
            out,
            refs=[export_data.ref(e) for e in export_data.procgen],
            strip_internal_metadata=True,
        )
    )
    import tensorflow_datasets as tfds

    builder = tfds.builder_from_directory(str(out))
    step_features = builder.info.features["steps"].feature
    assert set(step_features.keys()) == {
        "observation", "action", "reward", "discount", "is_first", "is_last", "is_terminal", "info",
        "tag:goal", "tag:jump",
    }  # fmt: skip
    assert set(builder.info.features.keys()) >= {
        "episode_id",
        "episode_return",
        "episode_length",
        "episode_success",
    }
    assert "tags" not in builder.info.features and "notes" not in builder.info.features

    def fixed(feature) -> bool:
        if hasattr(feature, "items") and not hasattr(feature, "shape"):
            return all(fixed(f) for _, f in feature.items())
        return None not in tuple(feature.shape)

    assert fixed(step_features)
    # Batchable: every step has the same fields and shapes, so steps of all episodes stack.
    ds = builder.as_dataset(split="train").flat_map(lambda e: e["steps"]).batch(64)
    batch = next(iter(tfds.as_numpy(ds)))
    assert batch["observation"]["image"].shape[1:] == (64, 64, 3)
    jsonschema.validate(readback.tfds_instance(out), readback.schema())


def test_ui_episodes_as_rlds(export_data: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "ui"
    summary = export.export_episodes(request(export_data, out, study_id=export_data.ui_study_id))
    assert summary.episodes == 1 and len(summary.skipped) == len(export_data.ui) - 1  # one-screen traces
    episodes = {e["episode_id"].decode(): e for e in readback.read_tfds(out)}
    multi = episodes[export_data.ui[0].id]
    # The last screen's recorded action leads to an empty placeholder screen: one step more than screens.
    assert len(multi["steps"]) == export_data.ui[0].num_steps + 1
    final = multi["steps"][-1]["observation"]
    assert final["screenshot"] == b"" and final["objects"]["bbox"].shape == (0, 4)
    assert int(multi["episode_length"]) == export_data.ui[0].num_steps
    assert [bool(s["tag:login"]) for s in multi["steps"][:3]] == [False, True, False]
    obs = multi["steps"][0]["observation"]
    assert obs["screenshot"][:2] in (b"\xff\xd8", b"\x89P")
    n = obs["objects"]["bbox"].shape[0]
    assert n > 0 and obs["objects"]["bbox"].shape == (n, 4) and len(obs["objects"]["text"]) == n
    from protos.llm4mobile import episode_pb2

    proto = episode_pb2.Observation.FromString(obs["proto"])
    assert len(proto.objects) == n and not proto.screenshot
    action = multi["steps"][0]["action"]
    assert action["type_name"] != b"" and "raw_json" in action
    assert multi["kind"] == b"ui" and multi["app_package"] and multi["environment_id"] == b"android-ui"
    jsonschema.validate(readback.tfds_instance(out), readback.schema())


def test_tfds_archive_and_schema(export_data: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "ds.zip"
    export.export_episodes(
        request(export_data, out, refs=[export_data.ref(e) for e in export_data.nethack], archive=True)
    )
    dest = archive.safe_extract(out, tmp_path / "x")
    assert len(readback.read_tfds(dest)) == 2
    jsonschema.validate(readback.tfds_instance(dest), readback.schema())


def test_envlogger_export_converts_with_tfds_own_rlds_reader(export_data: ExportData, tmp_path: Path) -> None:
    """TFDS's RLDS tooling (`tfds.rlds.rlds_base`, what RLDS dataset builders use on envlogger logs) reads the
    envlogger export: one RLDS episode per exported episode, same steps, tag fields and statistics."""
    from tensorflow_datasets.rlds import rlds_base

    out = tmp_path / "el"
    export.export_episodes(
        export.ExportRequest(
            data_dir=str(export_data.data_dir),
            out=str(out),
            refs=[export_data.ref(e) for e in export_data.procgen],
            end_of_episode_tags=["goal"],
        )
    )
    converted = [episode for _, episode in rlds_base.generate_examples(out)]
    assert [e["episode_id"] for e in converted] == [e.id for e in export_data.procgen]
    first = converted[0]["steps"]
    assert len(first["is_last"]) == 6 and list(first["is_last"]) == [False] * 5 + [True]
    assert list(first["tag:goal"]) == [False] * 5 + [True] and list(first["tag:jump"])[2]
    assert list(first["info"]["episode"]["mask"]) == [False] * 5 + [True] and first["info"]["episode"]["l"][-1] == 5


def test_a_normal_tfds_export_prints_no_tensorflow_log_lines(export_data: ExportData, tmp_path: Path) -> None:
    """The command in a process of its own (TensorFlow's C++ start-up lines go straight to fd 2), without
    TF_CPP_MIN_LOG_LEVEL in the environment: stderr holds no TensorFlow/absl line."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_")}
    out = tmp_path / "quiet"
    ref = export_data.ref(export_data.procgen[0])
    done = subprocess.run(
        [sys.executable, "-m", "stepmark", "export", "--data", str(export_data.data_dir), "--format", "tfds",
         "--episode", f"{ref.study_id}/{ref.session_id}/{ref.episode_id}", "--out", str(out)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    noisy = [
        line
        for line in done.stderr.splitlines()
        if any(w in line for w in ("tensorflow", "TensorFlow", "oneDNN", "absl", "cpu_feature", "deprecated"))
    ]
    assert noisy == []
    assert "exported 1 episode(s)" in done.stdout


def test_a_tfds_export_never_imports_tensorflow(export_data: ExportData, tmp_path: Path) -> None:
    """TFDS encodes and serializes with numpy and its own protos: importing TensorFlow (~3 s) would only add a
    fixed cost to every export and worker. UI and environment episodes (nested `keys` sequences included)."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    refs = [export_data.ref(export_data.procgen[0]), export_data.ref(export_data.ui[0])]
    code = (
        "import sys\n"
        "from pipelines import export\n"
        "from pipelines.store.access import parse_ref\n"
        f"refs = [parse_ref(r) for r in {[f'{r.study_id}/{r.session_id}/{r.episode_id}' for r in refs]!r}]\n"
        "for n, ref in enumerate(refs):\n"
        f"    export.export_episodes(export.ExportRequest(data_dir={str(export_data.data_dir)!r}, "
        f"out={str(tmp_path)!r} + f'/out{{n}}', format='tfds', refs=[ref]))\n"
        "print('tensorflow' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"
    assert readback.read_tfds(tmp_path / "out0") and readback.read_tfds(tmp_path / "out1")


def test_steps_encoded_by_column_serialize_like_tfds_itself(export_data: ExportData) -> None:
    """`EpisodeSerializer` encodes the steps column by column (`encode_steps`); the serialized example is byte
    for byte what TFDS's own `features.encode_example` gives: environment and UI episodes (full and padded
    object tables), with and without internal metadata, with step tag fields."""
    from pipelines.exporters import tfds_writer
    from pipelines.exporters.transform import TransformOptions, transform_episode

    cases = [
        (export_data.procgen[0], TransformOptions(step_tag_labels=("goal", "jump"))),
        (export_data.nethack[0], TransformOptions(strip_internal_metadata=True)),
        (export_data.ui[0], TransformOptions()),
        (export_data.ui[0], TransformOptions(ui_objects_padded=8)),
    ]
    for episode, options in cases:
        with open_episode(episode, export_data.data_dir) as reader:
            steps, meta = list(reader), reader.metadata
        exported = transform_episode(0, episode, steps, options, meta)
        features = tfds_writer.build_features(exported, options)
        serializer = tfds_writer.EpisodeSerializer(tfds_writer.features_to_json(features))
        theirs = serializer.features.encode_example(tfds_writer.episode_example(exported, serializer.features))
        expected = serializer._serializer.get_tf_example(theirs).SerializeToString(deterministic=True)
        assert serializer.serialize(exported) == expected, (episode.id, options)


def test_tf_example_takes_whole_columns_without_tfds_item_walk(export_data: ExportData, monkeypatch) -> None:
    """`tfds_columns.tf_example` gives TFDS's own message for Procgen, NetHack and UI episodes without TFDS's
    per-item walk of the step fields (made to fail here): the fast path really covers them, it does not
    just fall back to TFDS. Byte equality with TFDS's path is `test_steps_encoded_by_column_...` above."""
    from tensorflow_datasets.core import example_serializer

    from pipelines.exporters import tfds_columns, tfds_writer
    from pipelines.exporters.transform import TransformOptions, transform_episode

    cases = [
        (export_data.procgen[0], TransformOptions(step_tag_labels=("goal",))),
        (export_data.nethack[0], TransformOptions()),
        (export_data.ui[0], TransformOptions(ui_objects_padded=8)),
    ]
    prepared = []
    for episode, options in cases:
        with open_episode(episode, export_data.data_dir) as reader:
            steps, meta = list(reader), reader.metadata
        exported = transform_episode(0, episode, steps, options, meta)
        serializer = tfds_writer.EpisodeSerializer(tfds_writer.features_to_json(tfds_writer.build_features(exported, options)))
        encoded = serializer.encode(exported)
        expected = serializer._serializer.get_tf_example(encoded).SerializeToString(deterministic=True)
        prepared.append((serializer, encoded, expected, episode.id))

    def walk(*_args, **_kwargs):
        raise AssertionError("TFDS's per-item walk was used")

    monkeypatch.setattr(example_serializer, "_fill_ragged_attribute", walk)
    for serializer, encoded, expected, episode_id in prepared:
        got = tfds_columns.tf_example(serializer._serializer, encoded).SerializeToString(deterministic=True)
        assert got == expected, episode_id

"""Spaces and specs in the dataset metadata (recorded environments' own specs, as JSON a trainer loads) and
`--split` by hashed episode id (stable when episodes are added)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines import export
from pipelines.episodes import open_episode
from pipelines.errors import StepmarkError
from pipelines.exporters import spaces
from pipelines.exporters.splits import parse_splits
from tests.pipelines.export import readback
from tests.pipelines.export.export_data import NETHACK_ENV, PROCGEN_ENV, ExportData


def _metadata(path: Path) -> dict:
    import envlogger

    with envlogger.Reader(str(path)) as reader:
        return reader.metadata()["stepmark_export"]


def test_spaces_and_specs_describe_the_recorded_data(export_data: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "el"
    export.export_episodes(
        export.ExportRequest(
            data_dir=str(export_data.data_dir), out=str(out), study_id=export_data.study_id, split_by_spec=True
        )
    )
    for name, episodes in ((PROCGEN_ENV, export_data.procgen), (NETHACK_ENV, export_data.nethack)):
        info = _metadata(out / name)
        assert info["environment_id"] == name and json.loads(info["environment_spec"])["id"] == name
        action_space = spaces.space_from_json(info["action_space"])
        observation_space = spaces.space_from_json(info["observation_space"])
        action_spec = json.loads(info["action_spec"])
        assert action_spec["type"] == "DiscreteArray" and action_space.n == action_spec["num_values"]
        # Every recorded observation and action lies in the exported spaces (no hard-coded num_values/bounds).
        with open_episode(episodes[0], export_data.data_dir) as reader:
            steps = list(reader)
        for step in steps:
            assert observation_space.contains(step.observation)
            if step.action is not None:
                assert action_space.contains(int(step.action))
    assert spaces.space_from_json(_metadata(out / PROCGEN_ENV)["action_space"]).n == 15


def test_ui_datasets_carry_their_environment_id_and_spaces(export_data: ExportData, tmp_path: Path) -> None:
    """UI datasets have an action space in the same JSON form as environment datasets (its text fields left
    out), and an observation space only with padded:N (the full object table varies per screen)."""
    for mode in ("full", "padded:16"):
        out = tmp_path / mode.replace(":", "")
        export.export_episodes(
            export.ExportRequest(data_dir=str(export_data.data_dir), out=str(out), study_id=export_data.ui_study_id,
                                 ui_objects=mode)  # fmt: skip
        )
        info = _metadata(out)
        assert info["environment_id"] == "android-ui" and info["kind"] == "ui" and info["environment_spec"] == ""
        action_space = spaces.space_from_json(info["action_space"])
        assert json.loads(info["action_spec"])["type"] == "dict"
        assert set(action_space.spaces) >= {"type", "x", "y", "target_index", "target_candidates"}
        assert "type_name" not in action_space.spaces  # text has no gymnasium space
        (episode,) = readback.read_envlogger(out)
        for record in episode["records"][1:]:
            numeric = {k: v for k, v in record["action"].items() if k in action_space.spaces}
            assert action_space.contains(numeric)
        if mode == "full":
            assert "observation_space" not in info and "observation_spec" not in info
        else:
            observation_space = spaces.space_from_json(info["observation_space"])
            assert observation_space["objects_padded"]["mask"].shape == (16,)


def test_split_by_hashed_episode_id_is_stable_when_episodes_are_added(
    export_data: ExportData, tmp_path: Path
) -> None:
    spec = parse_splits("train=0.5,val=0.25,test=0.25", seed=7)
    ids = [f"episode-{i}" for i in range(400)]
    first = {i: spec.split_of(i) for i in ids[:200]}
    assert {i: spec.split_of(i) for i in ids}.items() >= first.items()  # adding episodes moves none
    counts = {n: list({i: spec.split_of(i) for i in ids}.values()).count(n) for n in spec.names}
    assert 150 <= counts["train"] <= 250 and counts["val"] > 50 and counts["test"] > 50
    assert parse_splits("train=0.5,val=0.25,test=0.25", seed=8).split_of("episode-1") in spec.names
    # Through an export: each episode carries its split, recorded in the dataset metadata.
    refs = [export_data.ref(e) for e in export_data.procgen]
    out = tmp_path / "el"
    export.export_episodes(
        export.ExportRequest(
            data_dir=str(export_data.data_dir), out=str(out), refs=refs, splits="train=0.5,val=0.5", split_seed=7
        )
    )
    read = readback.read_envlogger(out)
    splits = parse_splits("train=0.5,val=0.5", seed=7)
    assert [e["metadata"]["split"] for e in read] == [splits.split_of(e.id) for e in export_data.procgen]
    assert _metadata(out)["splits"]["fractions"] == {"train": 0.5, "val": 0.5}


@pytest.mark.parametrize(
    "text,message",
    [
        ("train=0.8,val=0.1", "add up to 0.9"),
        ("train=0.5,train=0.5", "given twice"),
        ("Train=1", "not NAME=FRACTION"),
        ("train=abc", "not a number"),
        ("train=1.5", "must be in"),
        ("", "give 1 to"),
        ("train=0.9,all=0.1", "'all' is reserved .Hugging Face datasets and TFDS"),  # refused before any work
    ],
)
def test_bad_split_options_are_clear_errors(text: str, message: str) -> None:
    with pytest.raises(StepmarkError, match=message):
        parse_splits(text)


def test_padded_ui_objects_are_fixed_shape_with_a_mask(export_data: ExportData, tmp_path: Path) -> None:
    from protos.llm4mobile import episode_pb2

    out = tmp_path / "padded"
    export.export_episodes(
        export.ExportRequest(
            data_dir=str(export_data.data_dir), out=str(out), study_id=export_data.ui_study_id, ui_objects="padded:8"
        )
    )
    assert _metadata(out)["ui_objects"] == "padded:8"
    (episode,) = readback.read_envlogger(out)
    records = episode["records"]
    for t, record in enumerate(records):
        obs = record["observation"]
        table = obs["objects_padded"]
        assert "objects" not in obs and table["mask"].shape == (8,) and table["bbox"].shape == (8, 4)
        screen = episode_pb2.Observation.FromString(obs["proto"])
        k = min(8, len(screen.objects))
        assert int(table["num_objects"]) == len(screen.objects)
        assert table["mask"].tolist() == [True] * k + [False] * (8 - k)
        assert float(table["bbox"].min()) >= 0.0 and float(table["bbox"].max()) <= 1.0
        rows = table["object_index"].tolist()
        assert rows[:k] == sorted(rows[:k]) and rows[k:] == [-1] * (8 - k)  # the converter's order
        for i in range(k):
            o = screen.objects[rows[i]]
            assert table["bbox"][i][2] * screen.screen_width == pytest.approx(o.bbox.right, abs=1e-2)
            assert (table["pre_order"][i], table["text"][i]) == (o.dom_position.pre_order_id, o.text)
        if t:  # the action that led here was taken on the previous screen: its target is a real row there
            target = int(record["action"]["target_index"])
            previous = records[t - 1]["observation"]["objects_padded"]
            assert -1 <= target < 8 and (target == -1 or bool(previous["mask"][target]))
    with pytest.raises(StepmarkError, match="padded:N"):
        export.export_episodes(
            export.ExportRequest(
                data_dir=str(export_data.data_dir), out=str(tmp_path / "bad"), study_id=export_data.ui_study_id,
                ui_objects="padded:0",
            )
        )

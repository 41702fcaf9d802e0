"""`--format minari` on real recorded and converted episodes, loaded with Minari's own `minari.load_dataset` and
`minari.MinariDataset` and compared field by field with the envlogger export of the same selection (the step
contract mapped to Minari's N+1 observations / N transitions, schemas/dataset_spec.md "Minari")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipelines import export
from pipelines.errors import StepmarkError
from pipelines.exporters.spaces import space_from_json
from tests.pipelines.export import readback
from tests.pipelines.export.export_data import ExportData, copy_data

minari = pytest.importorskip("minari")


def _export(data: ExportData, out: Path, fmt: str = "minari", data_dir: Path | None = None, **kw):
    return export.export_episodes(
        export.ExportRequest(data_dir=str(data_dir or data.data_dir), out=str(out), format=fmt, **kw)
    )


def _load(monkeypatch: pytest.MonkeyPatch, root: Path, dataset_id: str):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return minari.load_dataset(dataset_id)


def _episode_metadata(ds, k: int) -> dict:
    return next(iter(ds.storage.get_episode_metadata([k])))


def _check_transitions(ep, records: list[dict], meta: dict) -> None:
    """Minari's arrays against the envlogger records of the same episode (record t+1 = transition t)."""
    n = len(records) - 1
    assert len(ep.rewards) == len(ep.terminations) == len(ep.truncations) == n == meta["episode_length"]
    np.testing.assert_array_equal(ep.rewards, np.asarray([r["reward"] for r in records[1:]], np.float64))
    assert ep.rewards.dtype == np.float64
    terminal = records[-1]["discount"] == 0.0  # envlogger: LAST discount 0 on termination, 1 on a truncation
    assert ep.terminations.tolist() == [False] * (n - 1) + [terminal]
    assert ep.truncations.tolist() == [False] * (n - 1) + [not terminal]
    infos = ep.infos
    assert infos["episode"]["mask"].tolist() == [False] * n + [True]
    assert int(infos["episode"]["l"][-1]) == n and float(infos["episode"]["r"][-1]) == pytest.approx(
        meta["episode_return"]
    )
    # Entry k is what arrived with observation k: the info/keys of action k-1, observation k's own tags.
    assert [j.decode() for j in infos["json"]] == ["{}"] + [
        r["custom_data"]["info"]["json"] for r in records[:-1]
    ]
    assert [json.loads(k) for k in infos["keys"]] == [[]] + [
        list(r["custom_data"]["keys"]) for r in records[:-1]
    ]
    for label in [k for k in records[0]["custom_data"] if k.startswith("tag:")]:
        assert infos[label].tolist() == [bool(r["custom_data"][label]) for r in records]


def test_procgen_images_match_the_envlogger_export(
    export_data: ExportData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refs = [export_data.ref(e) for e in export_data.procgen]
    kw = {"refs": refs, "end_of_episode_tags": ["goal"], "splits": "train=0.5,val=0.5", "split_seed": 3}
    summary = _export(export_data, tmp_path / "coinrun-human-v0", **kw)
    _export(export_data, tmp_path / "el", fmt="envlogger", **kw)
    assert summary.episodes == 2 and not summary.dead_letters
    assert sorted(p.name for p in (tmp_path / "coinrun-human-v0" / "data").iterdir()) == [
        "main_data.hdf5",
        "metadata.json",
    ]
    ds = _load(monkeypatch, tmp_path, "coinrun-human-v0")
    same = minari.MinariDataset(tmp_path / "coinrun-human-v0" / "data")
    assert ds.id == same.id == "coinrun-human-v0" and ds.total_episodes == same.total_episodes == 2

    # Spaces: the same as every format's `stepmark_export` spaces (here: the envlogger export's).
    import envlogger

    with envlogger.Reader(str(tmp_path / "el")) as reader:
        el_info = reader.metadata()["stepmark_export"]
    metadata = ds.storage.metadata
    info = metadata["stepmark_export"]
    for key in ("observation_space", "action_space"):
        assert info[key] == el_info[key]
        assert space_from_json(el_info[key]) == getattr(ds, key)
    assert ds.action_space == minari.serialization.deserialize_space(
        json.dumps({"type": "Discrete", "dtype": "int64", "start": 0, "n": 15})
    )
    assert (
        info["environment_id"] == "coinrun"
        and json.loads(info["environment_spec"])["procgen"]["id"] == "coinrun"
    )

    episodes = {e["metadata"]["episode_id"]: e for e in readback.read_envlogger(tmp_path / "el")}
    seen = []
    for ep in ds.iterate_episodes():
        attrs = _episode_metadata(ds, ep.id)
        assert attrs["id"] == ep.id and attrs["total_steps"] == len(ep)
        el = episodes[attrs["episode_id"]]
        meta, records = el["metadata"], el["records"]
        for key in ("split", "truncated_by_tag", "episode_index", "environment_id", "episode_length"):
            assert attrs[key] == meta[key], key
        assert list(attrs["tags"]) == list(meta["tags"])  # an empty list stays an empty list
        _check_transitions(ep, records, meta)
        np.testing.assert_array_equal(ep.actions, np.asarray([int(r["action"]) for r in records[1:]]))
        # Frames: the observations as recorded (stored as PNG, which Minari decodes), N+1 of them; the recorded
        # JPEG frame is the info column `image`.
        frames = ep.observations["image"]
        assert frames.shape == (len(records), 64, 64, 3) and frames.dtype == np.uint8
        for k, (frame, record) in enumerate(zip(frames, records, strict=True)):
            np.testing.assert_array_equal(frame, record["observation"]["image"])
            assert bytes(ep.infos["image"][k]) == record["custom_data"]["image"]
        assert all(ds.observation_space.contains({"image": f}) for f in frames)
        seen.append((ep.id, attrs["split"]))
    assert sorted(attrs_id for attrs_id, _ in seen) == [0, 1]
    # Splits: the fractions in stepmark_export, the episode positions per split beside them.
    assert info["splits"]["fractions"] == {"train": 0.5, "val": 0.5}
    by_split: dict[str, list[int]] = {}
    for k, split in seen:
        by_split.setdefault(split, []).append(k)
    assert metadata["stepmark_splits"] == {s: sorted(by_split.get(s, [])) for s in ("train", "val")}  # empty too
    for split, indices in metadata["stepmark_splits"].items():  # a split as a Minari dataset (README loader)
        part = minari.MinariDataset(ds.storage, episode_indices=np.array(indices, dtype=np.int64))
        assert part.total_episodes == len(indices)  # an empty split is an empty dataset
        assert {_episode_metadata(ds, e.id)["split"] for e in part.iterate_episodes()} == ({split} if indices else set())
    (sampled,) = ds.sample_episodes(1)
    assert len(sampled.rewards) == _episode_metadata(ds, sampled.id)["total_steps"]
    assert ds.total_steps == sum(int(_episode_metadata(ds, k)["total_steps"]) for k in range(2))


def test_nethack_dict_observations_match_the_envlogger_export(
    export_data: ExportData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refs = [export_data.ref(e) for e in export_data.nethack]
    _export(export_data, tmp_path / "nethack-v1", refs=refs)
    _export(export_data, tmp_path / "el", fmt="envlogger", refs=refs)
    ds = _load(monkeypatch, tmp_path, "nethack-v1")
    assert ds.action_space.n == 23
    episodes = {e["metadata"]["episode_id"]: e for e in readback.read_envlogger(tmp_path / "el")}
    assert ds.total_episodes == len(episodes) == 2
    for ep in ds.iterate_episodes():
        el = episodes[_episode_metadata(ds, ep.id)["episode_id"]]
        records = el["records"]
        _check_transitions(ep, records, el["metadata"])
        np.testing.assert_array_equal(ep.actions, np.asarray([int(r["action"]) for r in records[1:]]))
        for name, column in ep.observations.items():
            expected = np.stack([np.asarray(r["observation"][name]) for r in records])
            assert column.dtype == expected.dtype, name
            np.testing.assert_array_equal(column, expected)
        # No image observation: the recorded frames are an info column, as recorded.
        assert [bytes(b) for b in ep.infos["image"]] == [r["custom_data"]["image"] for r in records]


def test_repeated_minari_exports_are_byte_identical(export_data: ExportData, tmp_path: Path) -> None:
    refs = [export_data.ref(e) for e in [*export_data.procgen]]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _export(export_data, tmp_path / "a" / "coinrun-v0", refs=refs, splits="train=0.5,val=0.5")
    _export(export_data, tmp_path / "b" / "coinrun-v0", refs=refs, splits="train=0.5,val=0.5")
    a, b = tmp_path / "a" / "coinrun-v0", tmp_path / "b" / "coinrun-v0"
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert [str(f) for f in files] == ["data/main_data.hdf5", "data/metadata.json", "stepmark_export.json"]
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


def test_ui_episodes_load_with_padded_objects(
    export_data: ExportData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = _export(
        export_data, tmp_path / "ui-v0", study_id=export_data.ui_study_id, ui_objects="padded:16"
    )
    assert summary.episodes == 1 and len(summary.skipped) == len(export_data.ui) - 1
    _export(
        export_data,
        tmp_path / "el",
        fmt="envlogger",
        study_id=export_data.ui_study_id,
        ui_objects="padded:16",
    )
    ds = _load(monkeypatch, tmp_path, "ui-v0")
    info = ds.storage.metadata["stepmark_export"]
    assert info["environment_id"] == "android-ui" and info["ui_objects"] == "padded:16"
    assert space_from_json(info["observation_space"]) == ds.observation_space
    (el,) = readback.read_envlogger(tmp_path / "el")
    records = el["records"]
    (ep,) = list(ds.iterate_episodes())
    n = export_data.ui[0].num_steps  # screens; the placeholder after the last recorded action makes N + 1
    assert len(ep) == n and len(records) == n + 1
    _check_transitions(ep, records, el["metadata"])
    assert not ep.terminations.any() and ep.truncations[-1]  # traces end in a truncation
    padded = ep.observations["objects_padded"]
    assert padded["bbox"].shape == (n + 1, 16, 4) and padded["mask"].dtype == np.int8
    for k, record in enumerate(records):
        obs = {
            "screen_width": np.asarray(ep.observations["screen_width"][k]),
            "has_screenshot": np.asarray(ep.observations["has_screenshot"][k]),
            "screen_height": np.asarray(ep.observations["screen_height"][k]),
            "objects_padded": {name: np.asarray(v[k]) for name, v in padded.items()},
        }
        assert ds.observation_space.contains(obs)
        expected = record["observation"]["objects_padded"]
        np.testing.assert_array_equal(padded["mask"][k], expected["mask"].astype(np.int8))
        np.testing.assert_array_equal(padded["bbox"][k], expected["bbox"])
        # Text and bytes leaves (no gymnasium space) are info columns beside the observation.
        text = [t.decode() for t in ep.infos["observation"]["objects_padded"]["text"][k]]
        assert text == list(expected["text"])
        assert bytes(ep.infos["observation"]["screenshot"][k]) == record["observation"]["screenshot"]
    assert ep.observations["screen_width"][-1] == 0  # the empty placeholder screen
    targets = ep.actions["target_index"]
    assert targets.tolist() == [int(r["action"]["target_index"]) for r in records[1:]]
    assert all(-1 <= t < 16 for t in targets)
    names = [t.decode() for t in ep.infos["action"]["type_name"]]
    assert names == [""] + [r["action"]["type_name"] for r in records[1:]]


def test_stripped_archive_keeps_statistics_and_drops_internal_metadata(
    export_data: ExportData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refs = [export_data.ref(e) for e in export_data.nethack]
    summary = _export(
        export_data, tmp_path / "nethack-v2.zip", refs=refs, archive=True, strip_internal_metadata=True
    )
    assert summary.episodes == 2
    from pipelines.exporters.archive import safe_extract

    safe_extract(tmp_path / "nethack-v2.zip", tmp_path / "unpacked" / "nethack-v2")
    ds = _load(monkeypatch, tmp_path / "unpacked", "nethack-v2")
    ep = ds[0]
    assert sorted(ep.infos) == ["episode", "tag:door"]  # no json, keys, image when stripped
    assert ep.infos["episode"]["mask"][-1] and len(ep.infos["episode"]["r"]) == len(ep) + 1
    attrs = _episode_metadata(ds, 0)
    assert "tags" not in attrs and "notes" not in attrs and attrs["episode_length"] == len(ep)
    assert ds.storage.metadata["stepmark_export"]["strip_internal_metadata"] is True


def test_split_by_spec_writes_one_minari_dataset_per_environment(
    export_data: ExportData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = _export(export_data, tmp_path / "study", study_id=export_data.study_id, split_by_spec=True)
    assert sorted(d.path for d in summary.datasets) == ["coinrun-v0", "nethack-score-v0"]
    coinrun = _load(monkeypatch, tmp_path, "study/coinrun-v0")
    nethack = minari.load_dataset("study/nethack-score-v0")
    assert coinrun.total_episodes == len(export_data.procgen) and nethack.total_episodes == len(
        export_data.nethack
    )
    assert sorted(minari.list_local_datasets(prefix="study")) == [
        "study/coinrun-v0",
        "study/nethack-score-v0",
    ]


def test_unreadable_episode_is_a_dead_letter_and_ids_stay_sequential(
    export_data: ExportData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = copy_data(export_data, tmp_path / "data")
    victim = export_data.procgen[0]
    folder = data_dir / victim.storage.environment_logger.tag_directory
    for steps in folder.rglob("steps.riegeli"):
        steps.write_bytes(b"not riegeli")
    refs = [export_data.ref(e) for e in export_data.procgen]
    (tmp_path / "out").mkdir()
    summary = _export(export_data, tmp_path / "out" / "coinrun-v0", data_dir=data_dir, refs=refs)
    (letter,) = summary.dead_letters
    assert letter.episode == export.episode_name(victim) and letter.reason in ("unreadable", "inconsistent")
    ds = _load(monkeypatch, tmp_path / "out", "coinrun-v0")
    assert ds.total_episodes == 1 and _episode_metadata(ds, 0)["episode_id"] == export_data.procgen[1].id
    assert (tmp_path / "out" / "coinrun-v0" / export.DEAD_LETTERS_FILE).exists()


def test_bad_requests_name_the_problem(export_data: ExportData, tmp_path: Path) -> None:
    ui = {"study_id": export_data.ui_study_id}
    with pytest.raises(StepmarkError, match=r"--ui-objects padded:N"):
        _export(export_data, tmp_path / "ui-v0", **ui)
    refs = {"refs": [export_data.ref(export_data.procgen[1])]}
    with pytest.raises(StepmarkError, match=r"must look like NAME-vN"):
        _export(export_data, tmp_path / "no_version", **refs)
    (tmp_path / "taken-v0").mkdir()
    with pytest.raises(StepmarkError, match=r"taken-v0"):
        _export(export_data, tmp_path / "taken-v0", **refs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken-v0"]  # nothing written anywhere


def test_cli_help_lists_minari(capsys: pytest.CaptureFixture[str]) -> None:
    from stepmark import cli

    with pytest.raises(SystemExit):
        cli.main(["export", "--help"])
    text = capsys.readouterr().out
    assert "minari" in text and "padded:N" in text


@pytest.mark.slow
def test_minari_export_on_a_dask_cluster_equals_the_local_run(
    export_data: ExportData, tmp_path: Path
) -> None:
    """Workers in other processes write the per-episode files; the last step assembles the same bytes."""
    from distributed import LocalCluster

    from tests.pipelines.export.test_dask import digests

    refs = [export_data.ref(e) for e in [*export_data.procgen, *export_data.nethack]]
    (tmp_path / "local").mkdir()
    (tmp_path / "dask").mkdir()
    local = _export(export_data, tmp_path / "local" / "study", refs=refs, split_by_spec=True)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        dask_args = [
            "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
            f"--dask_client_address={cluster.scheduler_address}",
        ]
        summary = _export(
            export_data, tmp_path / "dask" / "study", refs=refs, split_by_spec=True, beam_args=dask_args
        )
    assert (summary.episodes, summary.steps) == (local.episodes, local.steps) and summary.episodes == 4
    assert digests(tmp_path / "local") == digests(tmp_path / "dask")


@pytest.mark.parametrize("lengths", [[3, 3, 2], [2, 3, 3], [1, 2], [4, 4, 4, 0]])
def test_variable_length_rows_are_written_as_they_are(tmp_path: Path, lengths: list[int]) -> None:
    """Byte rows of unequal lengths (JPEG frames) go into one vlen dataset in a single write; rows as long as
    the column (which numpy would broadcast in a slice assignment) or empty keep their own bytes."""
    import h5py

    from pipelines.exporters import minari_writer

    rows = [bytes(range(i * 10, i * 10 + n)) for i, n in enumerate(lengths)]
    with minari_writer._create_file(str(tmp_path / "f.hdf5")) as f:
        size = minari_writer._dataset(f, "rows", rows)
    assert size == sum(lengths)
    with h5py.File(tmp_path / "f.hdf5", "r") as f:
        assert [bytes(r) for r in f["rows"][:]] == rows

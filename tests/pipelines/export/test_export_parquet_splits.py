"""Hugging Face `datasets.load_dataset` on Parquet exports with `--split` names (issue 32, item 7): every split
with episodes loads under its `--split` name (`val`, never `validation`), with `--split-by-spec` too (one config
per dataset in `OUT/README.md`); a name `datasets` reserves is refused before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines import export
from pipelines.errors import StepmarkError
from pipelines.exporters.splits import parse_splits
from pipelines.store import open_store
from tests.pipelines.export.export_data import (
    ALICE,
    NETHACK_ENV,
    PROCGEN_ENV,
    ExportData,
    copy_data,
    register_copies,
)

SPLITS = "train=0.8,val=0.1,test=0.1"


def _seed_filling(text: str, groups: list[list[str]]) -> int:
    """The first --split-seed that puts at least one episode of each group into every split (the split is a
    pure function of the id and the seed)."""
    for seed in range(10_000):
        spec = parse_splits(text, seed)
        if all({spec.split_of(i) for i in ids} == set(spec.names) for ids in groups):
            return seed
    raise AssertionError("no seed fills every split")


def _load(out: Path, cache: Path, name: str | None = None):  # type: ignore[no-untyped-def]
    import datasets

    return datasets.load_dataset(str(out), name, cache_dir=str(cache))


def test_train_val_test_load_under_their_names_with_split_by_spec(export_data: ExportData, tmp_path: Path) -> None:
    """Two datasets (Procgen, NetHack) in one export: `load_dataset(OUT, ENV)` gives train/val/test by name."""
    data_dir = copy_data(export_data, tmp_path / "data")
    groups: dict[str, list] = {}
    for env, episode in ((PROCGEN_ENV, export_data.procgen[0]), (NETHACK_ENV, export_data.nethack[0])):
        study_id = register_copies(data_dir, episode, 8)
        with open_store(None, data_dir) as repo:
            groups[env] = repo.list_episodes(study_id=study_id)
            spec = repo.get_study(study_id)
            spec.name = f"many copies of {env}"  # study names are unique per creator
            repo.save_study(spec, ALICE)
    seed = _seed_filling(SPLITS, [[e.id for e in g] for g in groups.values()])
    refs = [export_data.ref(e) for g in groups.values() for e in g]
    out = tmp_path / "pq"
    summary = export.export_episodes(export.ExportRequest(
        data_dir=str(data_dir), out=str(out), format="parquet", refs=refs, split_by_spec=True, splits=SPLITS,
        split_seed=seed,
    ))  # fmt: skip
    assert summary.bytes == sum(p.stat().st_size for p in out.rglob("*") if p.is_file())  # the card included
    spec = parse_splits(SPLITS, seed)
    for env, episodes in groups.items():
        loaded = _load(out, tmp_path / "cache", env)
        assert list(loaded) == ["train", "val", "test"]  # never `validation`
        for name, ds in loaded.items():
            assert set(ds["split"]) == {name} and set(ds["environment_id"]) == {env}
            assert {spec.split_of(e) for e in ds["episode_id"]} == {name}
        assert {e for ds in loaded.values() for e in ds["episode_id"]} == {e.id for e in episodes}


def test_a_reserved_split_name_is_refused_before_any_work(export_data: ExportData, tmp_path: Path) -> None:
    with pytest.raises(StepmarkError, match="'all' is reserved"):
        export.export_episodes(export.ExportRequest(data_dir=str(export_data.data_dir), out=str(tmp_path / "pq"),
                                                    format="parquet", study_id=export_data.study_id,
                                                    splits="train=0.9,all=0.1"))  # fmt: skip
    assert not list(tmp_path.iterdir())

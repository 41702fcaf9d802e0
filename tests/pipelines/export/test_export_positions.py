"""`episode_index` is the episode's position in the written dataset (issue 32, item 8): with episodes left out
(`no_transition`: an end-of-episode tag on step 0; dead letters) it is 0..n-1, in every format, read with each
consumer's own library (envlogger.Reader, Hugging Face datasets, Minari; TFDS in test_export_positions_tfds.py),
and `selection_index` keeps the episode's position in the selection (with the gaps)."""

from __future__ import annotations

from pathlib import Path

import envlogger
import pytest

from pipelines import export
from pipelines.store import open_store
from tests.pipelines.export.export_data import ALICE, ExportData, copy_data, register_copies

SPLITS = "train=0.5,val=0.5"
CUT = "cut"
N = 6
SKIPPED = (0, 2, 3)  # selection positions cut at step 0: no transition left


def data_with_gaps(export_data: ExportData, root: Path) -> tuple[Path, str, list[str]]:
    """A copy of the data with a study of N registrations of a recorded Procgen episode, three of which carry
    the end-of-episode tag on step 0; returns (data folder, study id, episode ids in selection order)."""
    data_dir = copy_data(export_data, root / "data")
    study_id = register_copies(data_dir, export_data.procgen[1], N)
    with open_store(None, data_dir) as repo:
        episodes = repo.list_episodes(study_id=study_id)  # the order the export selects them in
        for k in SKIPPED:
            repo.add_step_tag(repo.ref(episodes[k]), 0, CUT, ALICE)
    return data_dir, study_id, [e.id for e in episodes]


def run_export(data_dir: Path, study_id: str, out: Path, fmt: str, **kw) -> export.ExportSummary:
    return export.export_episodes(
        export.ExportRequest(data_dir=str(data_dir), out=str(out), format=fmt, study_id=study_id,
                             end_of_episode_tags=[CUT], **kw)  # fmt: skip
    )


def expected(ids: list[str]) -> tuple[list[str], list[int]]:
    """The written episodes' ids and their selection indexes."""
    kept = [k for k in range(N) if k not in SKIPPED]
    return [ids[k] for k in kept], kept


def check_summary(summary: export.ExportSummary) -> None:
    assert summary.episodes == N - len(SKIPPED) and len(summary.skipped) == len(SKIPPED)
    assert all(s["reason"].startswith("no_transition") for s in summary.skipped)


@pytest.fixture(scope="module")
def gaps(export_data: ExportData, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    return data_with_gaps(export_data, tmp_path_factory.mktemp("positions"))


def test_envlogger_episode_index_is_the_readers_position(gaps, tmp_path: Path) -> None:
    data_dir, study_id, ids = gaps
    out = tmp_path / "env"
    check_summary(run_export(data_dir, study_id, out, "envlogger", splits=SPLITS))
    kept_ids, selection = expected(ids)
    with envlogger.Reader(str(out)) as r:
        metas = list(r.episode_metadata())
        assert [m["episode_index"] for m in metas] == list(range(len(kept_ids)))
        assert [m["episode_id"] for m in metas] == kept_ids
        assert [m["selection_index"] for m in metas] == selection
        for m in metas:  # the index addresses the reader's episode
            episode = r.episodes[m["episode_index"]]
            assert len(episode) == m["num_steps"] + 1
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [f"{k:08d}" for k in range(len(kept_ids))]
    # per split: in the dataset's order, each split's episodes keep increasing positions
    for split in ("train", "val"):
        positions = [m["episode_index"] for m in metas if m["split"] == split]
        assert positions == sorted(positions)


def test_parquet_episode_index_loads_with_hugging_face_datasets(gaps, tmp_path: Path) -> None:
    import datasets

    data_dir, study_id, ids = gaps
    out = tmp_path / "pq"
    check_summary(run_export(data_dir, study_id, out, "parquet", splits=SPLITS))
    kept_ids, selection = expected(ids)
    loaded = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "hf-cache"))
    by_episode: dict[str, tuple[int, int, str]] = {}
    for split, ds in loaded.items():
        seen = []
        for row in ds.select_columns(["episode_id", "episode_index", "selection_index", "split"]):
            by_episode[row["episode_id"]] = (row["episode_index"], row["selection_index"], row["split"])
            if not seen or seen[-1] != row["episode_index"]:
                seen.append(row["episode_index"])
        assert seen == sorted(seen) and {by_episode[e][2] for e in by_episode if by_episode[e][0] in seen} == {split}
    assert sorted(by_episode) == sorted(kept_ids)
    assert [by_episode[e][:2] for e in kept_ids] == [(p, s) for p, s in enumerate(selection)]
    files = sorted(p.name for p in (out / "data").glob("*.parquet") if "-empty" not in p.name)
    assert files == sorted(f"{by_episode[e][2]}-{by_episode[e][0]:08d}.parquet" for e in kept_ids)


def test_minari_episode_index_is_minaris_id(gaps, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import minari

    data_dir, study_id, ids = gaps
    (tmp_path / "m").mkdir()
    check_summary(run_export(data_dir, study_id, tmp_path / "m" / "gaps-v0", "minari", splits=SPLITS))
    kept_ids, selection = expected(ids)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "m"))
    ds = minari.load_dataset("gaps-v0")
    metas = list(ds.storage.get_episode_metadata(range(ds.total_episodes)))
    assert [int(m["id"]) for m in metas] == [int(m["episode_index"]) for m in metas] == list(range(len(kept_ids)))
    assert [int(m["selection_index"]) for m in metas] == selection
    assert [str(m["episode_id"]) for m in metas] == kept_ids
    splits = ds.storage.metadata["stepmark_splits"]
    assert sorted(k for v in splits.values() for k in v) == list(range(len(kept_ids)))
    assert all(str(metas[k]["split"]) == name for name, ks in splits.items() for k in ks)

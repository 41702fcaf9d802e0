"""A selection larger than one batch of the store (issue 21: studies of up to a million episodes): the driver
reads it a batch at a time and streams each episode, with its split, step tags and field values, into the work
files; the pipeline starts from chunk references, never from episodes; the files written are the same bytes as
when the whole selection fits one batch. Real recorded NetHack episodes, and the UI episodes converted from
../shared/fixtures."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import pytest

from pipelines import export
from pipelines.episodes import open_episode
from pipelines.exporters import selection, work_file
from pipelines.store import Repository, grounding, open_store
from pipelines.store import field_values as fv
from pipelines.store.field_defs import parse_text
from tests.pipelines.export.export_data import ALICE, ExportData, copy_data, register_copies

EPISODES = 7
FIELDS = "fields: [{name: verdict, scope: episode, kind: text}]"


def _export(data_dir: Path, study_id: str, out: Path) -> export.ExportSummary:
    request = export.ExportRequest(
        data_dir=str(data_dir), out=str(out), format="parquet", study_id=study_id, splits="train=0.5,test=0.5",
        annotations="all", beam_args=["--runner=FnApiRunner"],
    )  # fmt: skip
    return export.export_episodes(request)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def study(export_data: ExportData, tmp_path: Path) -> tuple[Path, str]:
    """EPISODES registrations of a recorded episode; the last one alone carries a step tag and a field value,
    so what only the last batch holds must reach the dataset's metadata and that episode's rows."""
    data_dir = copy_data(export_data, tmp_path / "data")
    study_id = register_copies(data_dir, export_data.nethack[0], EPISODES)
    with open_store(None, data_dir) as repo:
        fv.define(repo, study_id, parse_text(FIELDS, "fields.yaml"), ALICE)
        last = repo.list_episodes(study_id=study_id)[-1]
        ref = Repository.ref(last)
        repo.add_step_tag(ref, 1, "late_label", ALICE)
        fv.set_value(repo, ref, "verdict", ALICE, "fine")
    return data_dir, study_id


def test_a_selection_of_many_batches_is_streamed_and_exports_the_same_bytes(
    study: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir, study_id = study
    whole = _export(data_dir, study_id, tmp_path / "one-batch")
    assert whole.episodes == EPISODES

    pages: list[tuple[int, int]] = []  # (batch asked, episode keys returned) of every page of the selection
    iter_episode_ids = Repository.iter_episode_ids

    def counted(self: Repository, q, batch=500):  # noqa: ANN001, ANN202
        for ids in iter_episode_ids(self, q, batch):
            pages.append((batch, len(ids)))
            yield ids

    def whole_list(*args: object, **kwargs: object) -> None:
        raise AssertionError("the export listed the whole selection into memory")

    started: list[object] = []  # the elements the pipeline starts from
    create = beam.Create

    def recorded(values, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        started.extend(values)
        return create(values, *args, **kwargs)

    monkeypatch.setattr(selection, "BATCH", 3)
    monkeypatch.setattr(work_file, "SPREAD", 2)  # chunks of 1, then of 2 episodes
    monkeypatch.setattr(work_file, "MAX_CHUNK", 2)
    monkeypatch.setattr(Repository, "iter_episode_ids", counted)
    monkeypatch.setattr(Repository, "list_episodes", whole_list)
    monkeypatch.setattr(export.beam, "Create", recorded)
    streamed = _export(data_dir, study_id, tmp_path / "batches")

    assert [n for _, n in pages] == [3, 3, 1]  # a batch at a time, never more
    assert all(limit == 3 for limit, _ in pages)
    assert started and all(isinstance(c, work_file.Chunk) for c in started)  # references, not episodes
    assert sum(c.count for c in started) == EPISODES and max(c.count for c in started) == 2
    assert streamed.episodes == EPISODES and streamed.dead_letters == []
    assert _files(tmp_path / "batches") == _files(tmp_path / "one-batch")

    table = pq.read_table(tmp_path / "batches" / "data")
    assert b"late_label" in table.schema.metadata[b"stepmark_export"]  # the last batch's step tag
    verdicts = set(zip(table["episode_id"].to_pylist(), table["field:verdict"].to_pylist(), strict=True))
    assert {v for _, v in verdicts} == {"", "fine"} and sum(v == "fine" for _, v in verdicts) == 1


def test_grounding_annotations_travel_with_each_episode(
    export_data: ExportData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The UI study, one episode per batch: each episode's grounding annotations go with it into the work file
    (no dataset-wide table in the job), and the dataset is the same bytes as when read in one batch."""
    assert export_data.ui, "the UI fixtures were not imported"
    data_dir = copy_data(export_data, tmp_path / "data")
    with open_store(None, data_dir) as repo:
        episode = repo.get_episode(export_data.ref(export_data.ui[0]))
        with open_episode(episode, data_dir) as reader:
            objects = reader.record.episode.time_steps[1].observation.objects
            converter = reader.record.actions[1].target_index
        chosen = next(i for i, o in enumerate(objects) if o.visible and i != converter)
        grounding.add(repo, export_data.ref(episode), 1, "target", ALICE, object_id=objects[chosen].id,
                      object_index=chosen)  # fmt: skip

    def run(out: Path, annotations: str) -> dict[str, bytes]:
        request = export.ExportRequest(
            data_dir=str(data_dir), out=str(out), format="parquet", study_id=episode.study_id,
            annotations=annotations, beam_args=["--runner=FnApiRunner"],
        )  # fmt: skip
        summary = export.export_episodes(request)  # one-screen episodes: skipped (no transition)
        assert summary.episodes >= 1 and summary.episodes + len(summary.skipped) == len(export_data.ui)
        return _files(out)

    whole = run(tmp_path / "one-batch", "all")
    monkeypatch.setattr(selection, "BATCH", 1)
    assert run(tmp_path / "batches", "all") == whole
    assert run(tmp_path / "none", "none") != whole  # the annotation reached its episode's rows

"""Grounding annotations in exports: the same rule on the envlogger and Parquet paths, for each --annotations
mode, read back with envlogger's and pyarrow's own readers (converted DroidBot run from ../shared/fixtures)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines import export
from pipelines.episodes import open_episode
from pipelines.errors import StepmarkError
from pipelines.store import grounding, open_store
from tests.pipelines.export.export_data import ALICE, ExportData, copy_data
from tests.pipelines.export.readback import read_envlogger

BOB = "bob@example.com"


@pytest.fixture(scope="module")
def annotated(export_data: ExportData, tmp_path_factory: pytest.TempPathFactory):
    """Alice retargets step 1, labels an object there and draws a box on step 2; Bob picks another target on
    step 1 (so the two disagree there)."""
    assert export_data.ui, "the UI fixtures were not imported"
    data_dir = copy_data(export_data, tmp_path_factory.mktemp("grounding") / "data")
    repo = open_store(None, data_dir)
    episode = repo.get_episode(export_data.ref(export_data.ui[0]))
    ref = export_data.ref(episode)
    with open_episode(episode, data_dir) as reader:
        record = reader.record
    objects = record.episode.time_steps[1].observation.objects
    converter = record.actions[1].target_index
    chosen = next(i for i, o in enumerate(objects) if o.visible and i != converter and o.bbox.right > o.bbox.left)
    bobs = next(i for i, o in enumerate(objects) if o.visible and i not in (converter, chosen))
    grounding.add(repo, ref, 1, "target", ALICE, object_id=objects[chosen].id, object_index=chosen)
    grounding.add(repo, ref, 1, "label", ALICE, object_id=objects[0].id, object_index=0, label="decorative")
    grounding.add(repo, ref, 2, "box", ALICE, box=[10, 20, 110, 220], type="BUTTON", text="Sign in")
    grounding.add(repo, ref, 1, "target", BOB, object_id=objects[bobs].id, object_index=bobs)
    return {"data_dir": data_dir, "episode": episode, "chosen": chosen, "converter": converter, "bob": bobs,
            "n_objects_2": len(record.episode.time_steps[2].observation.objects), "study": episode.study_id}  # fmt: skip


def _export(annotated, out: Path, fmt: str, mode: str, user: str = "") -> Path:
    request = export.ExportRequest(
        data_dir=str(annotated["data_dir"]), out=str(out), format=fmt, study_id=annotated["study"],
        annotations=mode, user=user,
    )  # fmt: skip
    summary = export.export_episodes(request)
    assert not summary.dead_letters, summary.dead_letters
    return out


def _envlogger_view(path: Path, episode_id: str) -> dict:
    """What an envlogger export says about the annotated episode: targets by (source, index), drawn objects."""
    episode = next(e for e in read_envlogger(path) if e["metadata"]["episode_id"] == episode_id)
    actions = [r["action"] for r in episode["records"] if isinstance(r["action"], dict)]
    annotator = [(int(a["target_index"]), int(a["converter_target_index"])) for a in actions
                 if a["target_source"] == "annotator"]  # fmt: skip
    observations = [r["observation"]["objects"] for r in episode["records"]]
    drawn = sum(bool(x) for objs in observations for x in objs["human_drawn"])
    labels = sorted({label for objs in observations for label in objs["labels"] if label})
    return {"annotator_targets": annotator, "drawn": drawn, "labels": labels}


def _parquet_view(path: Path, episode_id: str) -> dict:
    table = pq.read_table(path / "data").to_pandas()
    rows = table[table["episode_id"] == episode_id].sort_values("step_index")
    annotator = [
        (int(row["action/target_index"]), int(row["action/converter_target_index"]))
        for _, row in rows.iterrows()
        if row["action/target_source"] == "annotator"
    ]
    drawn = sum(bool(o["human_drawn"]) for objs in rows["observation/objects"] for o in objs)
    labels = sorted({o["labels"] for objs in rows["observation/objects"] for o in objs if o["labels"]})
    return {"annotator_targets": annotator, "drawn": drawn, "labels": labels}


@pytest.mark.parametrize("fmt", ["envlogger", "parquet"])
def test_each_mode_applies_the_same_annotations_on_every_path(annotated, tmp_path: Path, fmt: str) -> None:
    view = _envlogger_view if fmt == "envlogger" else _parquet_view
    episode_id = annotated["episode"].id
    chosen, bob, converter = annotated["chosen"], annotated["bob"], annotated["converter"]

    everyone = view(_export(annotated, tmp_path / "all", fmt, "all"), episode_id)
    assert everyone["annotator_targets"] == [(bob, converter)]  # the newest target wins
    assert everyone["drawn"] == 1 and everyone["labels"] == ["decorative"]

    mine = view(_export(annotated, tmp_path / "mine", fmt, "mine", ALICE), episode_id)
    assert mine["annotator_targets"] == [(chosen, converter)]
    assert mine["drawn"] == 1 and mine["labels"] == ["decorative"]

    # Step 1: Alice and Bob disagree on the target and only Alice labelled: no majority, the converter's
    # record stays. Step 2: Alice alone drew a box: a majority of one.
    agreed = view(_export(annotated, tmp_path / "consensus", fmt, "consensus"), episode_id)
    assert agreed == {"annotator_targets": [], "drawn": 1, "labels": []}

    nothing = view(_export(annotated, tmp_path / "none", fmt, "none"), episode_id)
    assert nothing == {"annotator_targets": [], "drawn": 0, "labels": []}


def test_mine_without_a_user_and_an_unknown_mode_are_refused(annotated, tmp_path: Path) -> None:
    with pytest.raises(StepmarkError, match="needs --user"):
        _export(annotated, tmp_path / "a", "envlogger", "mine")
    with pytest.raises(StepmarkError, match="choose one of"):
        _export(annotated, tmp_path / "b", "envlogger", "most")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()

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


def test_padding_keeps_annotated_objects_and_targets_or_says_why_not(annotated, tmp_path: Path) -> None:
    """`--ui-objects padded:3`: step 1's target (Bob's, the newest), the converter's target it replaced and the
    labelled object, and step 2's drawn box (appended after every converted object), are all in the table;
    with padded:2 step 1 cannot hold its three: the export refuses, naming the episode and that step (its only
    episode with a transition; beside other episodes it would be a `padding_overflow` dead letter)."""
    episode_id = annotated["episode"].id
    request = export.ExportRequest(
        data_dir=str(annotated["data_dir"]), out=str(tmp_path / "p3"), study_id=annotated["study"],
        annotations="all", ui_objects="padded:3",
    )  # fmt: skip
    assert not export.export_episodes(request).dead_letters
    episode = next(e for e in read_envlogger(tmp_path / "p3") if e["metadata"]["episode_id"] == episode_id)
    records = episode["records"]
    one, two = records[1]["observation"]["objects_padded"], records[2]["observation"]["objects_padded"]
    action = records[2]["action"]  # the action taken on step 1 (envlogger: the record it led to)
    rows = one["object_index"].tolist()
    assert rows[int(action["target_index"])] == annotated["bob"]
    assert rows[int(action["converter_target_index"])] == annotated["converter"]
    assert one["labels"][rows.index(0)] == "decorative"
    drawn = [i for i, flag in enumerate(two["human_drawn"].tolist()) if flag]
    assert len(drawn) == 1 and int(two["object_index"][drawn[0]]) == annotated["n_objects_2"]  # the last object

    request = export.ExportRequest(
        data_dir=str(annotated["data_dir"]), out=str(tmp_path / "p2"), study_id=annotated["study"],
        annotations="all", ui_objects="padded:2",
    )  # fmt: skip
    with pytest.raises(StepmarkError, match=rf"{episode_id} step 1: --ui-objects padded:2: 3 objects must be kept"):
        export.export_episodes(request)


def test_an_overflowing_episode_beside_others_is_a_padding_overflow_dead_letter(annotated, tmp_path: Path) -> None:
    from tests.pipelines.export.export_data import register_copies

    episode = annotated["episode"]
    copies = register_copies(annotated["data_dir"], episode, 1)  # the same record, without annotations
    with open_store(None, annotated["data_dir"]) as repo:
        (copy,) = repo.list_episodes(study_id=copies)
        refs = [export.parse_ref(f"{e.study_id}/{e.session_id}/{e.id}") for e in (episode, copy)]
    summary = export.export_episodes(export.ExportRequest(
        data_dir=str(annotated["data_dir"]), out=str(tmp_path / "p2"), refs=refs, annotations="all",
        ui_objects="padded:2",
    ))  # fmt: skip
    assert summary.episodes == 1
    (letter,) = summary.dead_letters
    assert letter.reason == "padding_overflow" and f"{episode.id} step 1: --ui-objects padded:2" in letter.error
    assert (tmp_path / "p2" / export.DEAD_LETTERS_FILE).read_text().count("padding_overflow") == 1

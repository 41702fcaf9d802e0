"""Applying grounding annotations to converted UI episodes for export (pipelines/exporters/grounding.py), on the
real Rico trace and DroidBot run of ../shared/fixtures."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from pipelines import convert, ui_records
from pipelines.exporters import grounding as eg
from pipelines.hierarchy import targets
from pipelines.store import Repository, open_store
from pipelines.store import grounding as store
from pipelines.traces import EpisodeSource, discover, read_episode
from pipelines.traces.files import read_bytes
from pipelines.ui_episode import convert_episode
from pipelines.ui_import import import_ui
from protos.llm4mobile import episode_pb2
from tests.pipelines.hierarchy.test_targets import GESTURES
from tests.pipelines.test_traces import FAASOS, build_rico_trace

ALICE, BOB, CAROL = "alice@example.com", "bob@example.com", "carol@example.com"
T0 = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def rico(tmp_path_factory, fixtures_dir):
    root = build_rico_trace(
        tmp_path_factory.mktemp("rico") / "trace", fixtures_dir, FAASOS, json.loads(GESTURES.read_text())
    )
    (source,) = [s for s in discover(str(root)) if isinstance(s, EpisodeSource)]
    return convert_episode(read_episode(source, read_bytes), read_bytes).episode


def note(n: int, user: str, step: int, kind: str, object_id: str | None = None, **payload) -> store.Annotation:
    """An annotation as the store returns it (id n, n minutes after T0)."""
    return store.Annotation(n, "ep", step, kind, object_id, user, T0 + timedelta(minutes=n), payload)


def objs(episode, step):
    return episode.episode.time_steps[step].observation.objects


def test_none_keeps_the_converter_record_and_says_so(rico):
    out = eg.apply_annotations(rico, [note(1, ALICE, 0, "no_target")], "none")
    assert out.actions[0].target_index == 53 and out.actions[0].target_source == "converter"
    assert out.episode == rico.episode
    assert all(not i.object_annotations for i in out.step_info)


def test_retarget_label_draw_and_fix_a_box(rico):
    pager = objs(rico, 0)[31]
    nxt = objs(rico, 0)[53]
    annotations = [
        note(1, ALICE, 0, "target", pager.id, object_index=31),
        note(2, ALICE, 0, "label", nxt.id, label="goal_element", object_index=53),
        note(3, ALICE, 0, "label", nxt.id, label="decorative", object_index=53),
        note(4, ALICE, 0, "box", "h00000000000001", box=[10, 40, 110, 90], type="BUTTON", text="Skip tour"),
        note(5, ALICE, 0, "wrong_box", nxt.id, box=[440, 30, 540, 100], object_index=53),
    ]
    out = eg.apply_annotations(rico, annotations, "mine", ALICE)
    a, o, info = out.actions[0], objs(out, 0), out.step_info[0]
    assert (a.target_index, a.target_id, a.target_source, a.target_rule) == (31, pager.id, "annotator", "annotator")
    assert a.converter_target_index == 53
    drawn = o[len(objs(rico, 0))]
    assert (drawn.id, drawn.text, drawn.name, drawn.type) == ("h00000000000001", "Skip tour", "Skip tour",
                                                               episode_pb2.ObjectType.BUTTON)  # fmt: skip
    assert (drawn.bbox.left, drawn.bbox.top, drawn.bbox.right, drawn.bbox.bottom) == (10, 40, 110, 90)
    assert drawn.parent_index == -1 and drawn.grid_location == episode_pb2.GridLocation.TOP_LEFT
    assert (o[53].bbox.left, o[53].bbox.top, o[53].bbox.right, o[53].bbox.bottom) == (440, 30, 540, 100)
    marks = {m.object_index: m for m in info.object_annotations}
    assert list(marks) == [53, drawn.index]
    assert list(marks[53].labels) == ["decorative", "goal_element"] and marks[53].box_corrected
    assert marks[53].original_bbox == nxt.bbox and list(marks[53].authors) == [ALICE]
    assert marks[drawn.index].human_drawn and marks[drawn.index].object_id == drawn.id
    # the input record is untouched; other steps keep the converter's targets
    assert rico.actions[0].target_index == 53 and len(objs(rico, 0)) + 1 == len(o)
    assert [x.target_index for x in out.actions[1:6]] == [x.target_index for x in rico.actions[1:6]]
    # BOB exporting "mine" sees none of it
    assert eg.apply_annotations(rico, annotations, "mine", BOB).actions[0].target_index == 53
    with pytest.raises(ValueError, match="needs the exporting user"):
        eg.apply_annotations(rico, annotations, "mine")


def test_no_target_and_the_newest_wins_in_all(rico):
    pager = objs(rico, 0)[31]
    annotations = [note(1, ALICE, 0, "target", pager.id), note(2, BOB, 0, "no_target")]
    a = eg.apply_annotations(rico, annotations, "all").actions[0]
    assert not a.HasField("target_index") and a.target_id == "" and a.target_source == "annotator"
    assert a.converter_target_index == 53
    assert eg.apply_annotations(rico, annotations[:1], "all").actions[0].target_index == 31


def test_consensus_is_the_majority_of_the_steps_annotators(rico):
    nxt, pager = objs(rico, 0)[53], objs(rico, 0)[31]
    annotations = [
        note(1, ALICE, 0, "target", pager.id), note(2, BOB, 0, "target", pager.id), note(3, CAROL, 0, "no_target"),
        note(4, ALICE, 0, "label", nxt.id, label="goal_element"),
        note(5, BOB, 0, "label", nxt.id, label="goal_element"),
        note(6, CAROL, 0, "label", nxt.id, label="decorative"),
        note(7, ALICE, 0, "wrong_box", nxt.id, box=[440, 30, 540, 100]),
        note(8, BOB, 0, "wrong_box", nxt.id, box=[444, 34, 536, 104]),
        note(9, ALICE, 0, "box", "h1", box=[10, 40, 110, 90], type="BUTTON", text="a"),
        note(10, BOB, 0, "box", "h2", box=[12, 42, 108, 92], type="BUTTON", text="b"),
        note(11, CAROL, 0, "box", "h3", box=[300, 300, 400, 400], type="TEXTVIEW", text="c"),
    ]
    out = eg.apply_annotations(rico, annotations, "consensus")
    a, info, o = out.actions[0], out.step_info[0], objs(out, 0)
    assert a.target_index == 31 and a.target_source == "annotator"  # 2 of 3
    marks = {m.object_id: m for m in info.object_annotations}
    assert list(marks[nxt.id].labels) == ["goal_element"]  # decorative: 1 of 3
    assert (o[53].bbox.left, o[53].bbox.top, o[53].bbox.right, o[53].bbox.bottom) == (440, 30, 536, 100)
    assert [x.id for x in o if x.id.startswith("h")] == ["h1"]  # ALICE's and BOB's boxes agree; CAROL's alone
    # two of four is no majority: the converter's target stays
    split = [*annotations[:3], note(12, "dan@example.com", 0, "no_target")]
    assert eg.apply_annotations(rico, split, "consensus").actions[0].target_source == "converter"


def test_orphaned_annotations_are_skipped_with_a_warning(rico):
    annotations = [note(1, ALICE, 1, "label", "ffffffffffffffff", label="decorative"), note(2, ALICE, 40, "no_target")]
    out = eg.apply_annotations(rico, annotations, "all")
    assert any(w.startswith("grounding: a label names object ffffffffffffffff") for w in out.step_info[1].warnings)
    assert "annotation(s) on steps [40] not in this record" in out.metadata["warnings"]
    assert not out.step_info[1].object_annotations


def test_effective_target_for_the_player(rico):
    pager = objs(rico, 0)[31]
    got = eg.effective_target(rico.actions[0], objs(rico, 0), [note(1, BOB, 0, "target", pager.id)])
    assert got == {"index": 31, "object_id": pager.id, "source": "annotator", "rule": "annotator",
                   "authors": [BOB], "converter_index": 53}  # fmt: skip
    plain = eg.effective_target(rico.actions[0], objs(rico, 0), [])
    assert plain["index"] == 53 and plain["source"] == "converter" and plain["rule"] == targets.POINT_ACTIONABLE


def test_load_from_the_store_and_apply(tmp_path, fixtures_dir):
    out = tmp_path / "converted"
    assert convert.run([str(fixtures_dir / "droidbot"), str(out), "--runner=FnApiRunner", "--quiet"]) in (0, None)
    with open_store(None, tmp_path / "data") as repo:
        study = import_ui(repo, str(out), "export", ALICE)
        (episode,) = repo.list_episodes(study_id=study.id)
        ref = Repository.ref(episode)
        (record,) = list(ui_records.iter_episodes(str(out)))
        other = objs(record, 2)[record.actions[2].target_candidates[0]]
        store.add(repo, ref, 2, "target", BOB, object_id=other.id, object_index=other.index)
        store.add(repo, ref, 2, "label", ALICE, object_id=other.id, label="goal_element")
        loaded = eg.load_annotations(repo, [episode])
        applied = eg.apply_annotations(record, loaded[episode.id], "all")
        assert applied.actions[2].target_id == other.id and applied.actions[2].target_source == "annotator"
        (mark,) = applied.step_info[2].object_annotations
        assert list(mark.labels) == ["goal_element"] and list(mark.authors) == [ALICE]
        repo.undo_last(BOB, ref)
        again = eg.apply_annotations(record, eg.load_annotations(repo, [episode.id])[episode.id], "all")
        assert again.actions[2].target_index == record.actions[2].target_index
        assert again.actions[2].target_source == "converter"

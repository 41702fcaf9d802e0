"""Grounding annotations in the store (pipelines/store/grounding.py) on UI episodes converted from the real
DroidBot run in ../shared/fixtures: authors, slots, permissions, audit, undo/redo, and orphans after the
objects change."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pipelines import convert, ui_records
from pipelines.store import Conflict, PermissionDenied, Repository, StoreError
from pipelines.store import grounding as g
from pipelines.ui_import import import_ui
from protos.stepmark import ui_episode_pb2

ALICE, BOB, CAROL = "alice@example.com", "bob@example.com", "carol@example.com"


@pytest.fixture(scope="module")
def converted(tmp_path_factory, fixtures_dir) -> Path:
    out = tmp_path_factory.mktemp("grounding") / "converted"
    assert convert.run([str(fixtures_dir / "droidbot"), str(out), "--runner=FnApiRunner", "--quiet"]) in (0, None)
    return out


@pytest.fixture
def ui(repo: Repository, converted: Path):
    """(ref of the imported DroidBot episode, its UiEpisode record); ALICE's study and episode."""
    study = import_ui(repo, str(converted), "grounding", ALICE)
    (episode,) = repo.list_episodes(study_id=study.id)
    (record,) = list(ui_records.iter_episodes(str(converted)))
    return Repository.ref(episode), record


def obj(record: ui_episode_pb2.UiEpisode, step: int, index: int):
    return record.episode.time_steps[step].observation.objects[index]


def test_two_annotators_keep_their_own_annotations(repo, ui):
    ref, record = ui
    a = record.actions[0]
    mine = g.add(repo, ref, 0, g.TARGET, ALICE, object_id=a.target_id, object_index=a.target_index)
    other = obj(record, 0, a.target_candidates[0])
    theirs = g.add(repo, ref, 0, g.TARGET, BOB, object_id=other.id, object_index=other.index)
    g.add(repo, ref, 0, g.LABEL, BOB, object_id=other.id, label="decorative")
    got = g.for_step(repo, ref, 0)
    assert [(x.user, x.kind, x.object_id) for x in got] == [
        (ALICE, "target", a.target_id), (BOB, "target", other.id), (BOB, "label", other.id)
    ]
    assert got[0].payload == {"object_index": a.target_index} and mine.id == got[0].id and theirs.user == BOB
    # a second choice of the same author replaces the first (no_target shares the target slot)
    g.add(repo, ref, 0, g.NO_TARGET, ALICE)
    assert [(x.user, x.kind) for x in g.for_step(repo, ref, 0)] == [
        (BOB, "target"), (BOB, "label"), (ALICE, "no_target")
    ]
    assert g.for_step(repo, ref, 1) == []


def test_boxes_are_checked_and_drawn_boxes_get_their_own_id(repo, ui):
    ref, record = ui
    drawn = g.add(repo, ref, 1, g.BOX, ALICE, box=[10, 20, 300.4, 400], type="button", text="Skip")
    assert drawn.object_id.startswith(g.DRAWN_PREFIX) and len(drawn.object_id) == 16
    assert drawn.payload == {"box": [10, 20, 300, 400], "type": "BUTTON", "text": "Skip"}
    target = obj(record, 1, record.actions[1].target_index)
    fixed = g.add(repo, ref, 1, g.WRONG_BOX, ALICE, object_id=target.id, box=[0, 0, 50, 60])
    assert fixed.box == [0, 0, 50, 60]
    for bad, message in [
        (dict(kind=g.BOX, box=[5, 5, 5, 9]), "empty"),
        (dict(kind=g.BOX, box=[0, 0, 1]), r"\[left, top, right, bottom\]"),
        (dict(kind=g.BOX, box=[0, 0, float("nan"), 3]), "numbers"),
        (dict(kind=g.BOX, box=[0, 0, 3, 3], type="SPACESHIP"), "unknown object type"),
        (dict(kind=g.LABEL, object_id=target.id, label="  "), "non-empty label"),
        (dict(kind=g.TARGET), "needs the object's id"),
        (dict(kind="paint"), "unknown annotation kind"),
    ]:
        kind = bad.pop("kind")
        with pytest.raises(StoreError, match=message):
            g.add(repo, ref, 1, kind, ALICE, **bad)
    with pytest.raises(StoreError, match="out of range"):
        g.add(repo, ref, len(record.actions), g.NO_TARGET, ALICE)


def test_removing_someone_elses_annotation_needs_the_review_right(repo, ui):
    ref, record = ui
    label = g.add(repo, ref, 2, g.LABEL, BOB, object_id=obj(record, 2, 0).id, label="goal_element")
    with pytest.raises(PermissionDenied, match="carol@example.com may not remove bob@example.com's label"):
        g.remove(repo, ref, label.id, CAROL)
    repo.set_reviewers(ref.study_id, [CAROL], ALICE)
    assert g.remove(repo, ref, label.id, CAROL) == label
    assert g.remove(repo, ref, label.id, CAROL) is None  # gone already
    assert g.for_step(repo, ref, 2) == []


def test_changes_are_audited_and_undone_and_redone(repo, ui):
    ref, record = ui
    first = obj(record, 0, record.actions[0].target_index)
    second = obj(record, 0, 0)
    g.add(repo, ref, 0, g.TARGET, ALICE, object_id=first.id)
    replaced = g.add(repo, ref, 0, g.TARGET, ALICE, object_id=second.id)
    log = repo.audit_log(ref)  # newest first
    assert [e.action for e in log[:2]] == ["grounding.add", "grounding.add"]
    newest = log[0]
    assert newest.before["object_id"] == first.id and newest.after["object_id"] == second.id
    assert newest.after["user"] == ALICE and newest.step_index == 0

    undo = repo.undo_last(ALICE, ref)  # back to the first choice, under its original time
    assert undo is not None and undo.action == "undo" and undo.reverted_action == "grounding.add"
    (back,) = g.for_step(repo, ref, 0)
    assert back.object_id == first.id
    assert back.time.isoformat() == newest.before["created_time"]
    repo.redo_last(ALICE, ref)
    (again,) = g.for_step(repo, ref, 0)
    assert again.object_id == second.id and again.time == replaced.time

    g.remove(repo, ref, again.id, ALICE)
    assert g.for_step(repo, ref, 0) == []
    repo.undo_last(ALICE, ref)  # the removal is undone: the annotation is back with its author
    (restored,) = g.for_step(repo, ref, 0)
    assert (restored.user, restored.object_id) == (ALICE, second.id)


def test_undoing_a_removal_of_someone_elses_annotation_restores_its_author(repo, ui):
    ref, record = ui
    bobs = g.add(repo, ref, 1, g.LABEL, BOB, object_id=obj(record, 1, 1).id, label="missing_text")
    g.remove(repo, ref, bobs.id, ALICE)  # ALICE owns the episode
    repo.undo_last(ALICE, ref)
    (back,) = g.for_step(repo, ref, 1)
    assert (back.user, back.label, back.time) == (BOB, "missing_text", bobs.time)
    # BOB changed his label slot since ALICE's removal? Here: he removes it, and ALICE's redo finds nothing
    g.remove(repo, ref, back.id, BOB)
    entry = repo.redo_last(ALICE, ref)
    assert entry is not None and entry.before is None and entry.after is None


def test_undo_refuses_when_the_slot_changed_since(repo, ui):
    ref, record = ui
    mine = g.add(repo, ref, 3, g.WRONG_BOX, BOB, object_id=obj(record, 3, 2).id, box=[1, 2, 3, 4])
    g.remove(repo, ref, mine.id, ALICE)  # ALICE's change, then BOB puts a different box there
    g.add(repo, ref, 3, g.WRONG_BOX, BOB, object_id=obj(record, 3, 2).id, box=[5, 6, 7, 8])
    with pytest.raises(Conflict, match="has another wrong_box annotation"):
        repo.undo_last(ALICE, ref)


def test_orphans_after_reconversion_are_reported(repo, ui):
    ref, record = ui
    keep = obj(record, 0, 3)
    lost = obj(record, 1, 4)
    g.add(repo, ref, 0, g.LABEL, ALICE, object_id=keep.id, label="goal_element")
    g.add(repo, ref, 1, g.TARGET, ALICE, object_id=lost.id)
    drawn = g.add(repo, ref, 1, g.BOX, ALICE, box=[0, 0, 9, 9])
    g.add(repo, ref, 1, g.LABEL, BOB, object_id=drawn.object_id, label="missing_text")
    annotations = g.for_episodes(repo, [ref.episode_id])[ref.episode_id]
    assert g.orphans(annotations, record) == []
    # a re-conversion where step 1's object changed (its id is a hash of its DOM path, class and box)
    again = ui_episode_pb2.UiEpisode()
    again.CopyFrom(record)
    again.episode.time_steps[1].observation.objects[4].id = "0000000000000000"
    (orphan,) = g.orphans(annotations, again)
    assert orphan.annotation.object_id == lost.id and "not on step 1" in orphan.reason
    del again.episode.time_steps[1:]
    assert [o.reason for o in g.orphans(annotations, again)] == ["step 1 is not in the episode (1 steps)"] * 3


def test_label_set_offers_defaults_then_labels_used_in_the_study(repo, ui):
    ref, record = ui
    assert g.label_set(repo, ref.study_id) == list(g.DEFAULT_LABELS)
    g.add(repo, ref, 0, g.LABEL, BOB, object_id=obj(record, 0, 1).id, label="ad banner")
    assert g.label_set(repo, ref.study_id) == [*g.DEFAULT_LABELS, "ad banner"]


def test_concurrent_annotators_on_one_step_all_land(repo, ui):
    ref, record = ui
    objects = record.episode.time_steps[4].observation.objects
    users = [f"annotator{i}@example.com" for i in range(6)]

    def annotate(user: str) -> None:
        for k in range(3):
            g.add(repo, ref, 4, g.LABEL, user, object_id=objects[k].id, label="decorative")
        g.add(repo, ref, 4, g.TARGET, user, object_id=objects[1].id)

    with ThreadPoolExecutor(max_workers=len(users)) as pool:
        list(pool.map(annotate, users))
    got = g.for_step(repo, ref, 4)
    assert sorted((a.user, a.kind) for a in got) == sorted(
        [(u, "label") for u in users for _ in range(3)] + [(u, "target") for u in users]
    )


def test_deleting_the_episode_deletes_its_annotations(repo, ui):
    ref, record = ui
    g.add(repo, ref, 0, g.NO_TARGET, ALICE)
    assert repo.delete_episode(ref, ALICE)
    assert g.for_episodes(repo, [ref.episode_id]) == {}

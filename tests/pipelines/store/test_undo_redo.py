"""Undo/redo scoped to one episode, tag authors kept both ways, segment tags, and plain-words descriptions."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from pipelines.store import Repository, StoreError
from pipelines.store.audit import AuditEntry, describe
from protos.rlds_creator import client_pb2, study_pb2
from tests.pipelines.store.conftest import env_episode, study_spec

Episode = study_pb2.Episode
OWNER = "bob@example.com"


@pytest.fixture
def study(repo: Repository) -> study_pb2.StudySpec:
    return repo.create_study(study_spec(), "alice@example.com")


@pytest.fixture
def two(repo: Repository, study) -> tuple[client_pb2.EpisodeRef, client_pb2.EpisodeRef]:
    session = repo.create_session(study.id, OWNER)
    a = repo.add_episode(env_episode(study.id, session, num_steps=30))
    b = repo.add_episode(env_episode(study.id, session, num_steps=30))
    return Repository.ref(a), Repository.ref(b)


def step_labels(repo: Repository, ref: client_pb2.EpisodeRef) -> dict[int, list[str]]:
    got = repo.get_episode(ref)
    return {i: sorted(t.label for t in m.tags) for i, m in sorted(got.step_metadata.items()) if m.tags}


def tag_rows(repo: Repository, episode_id: str) -> list[tuple]:
    with repo.engine.connect() as conn:
        return conn.execute(
            sa.text(
                'SELECT step_index, label, "user", created_time FROM step_tags WHERE episode_id = :e '
                "ORDER BY step_index, label"
            ),
            {"e": episode_id},
        ).all()


def test_undo_in_episode_b_never_touches_episode_a(repo: Repository, two) -> None:
    a, b = two
    repo.add_step_tag(a, 1, "a1", OWNER)
    repo.add_step_tag(a, 2, "a2", OWNER)
    repo.add_step_tag(b, 5, "b5", OWNER)
    repo.add_step_tag(a, 3, "a3", OWNER)  # the user's newest change is in A

    undo = repo.undo_last(OWNER, ref=b)
    assert undo.episode_id == b.episode_id and undo.undo_of is not None
    assert step_labels(repo, b) == {}
    # Nothing left to undo in B: a second and third press change nothing anywhere.
    assert repo.undo_last(OWNER, ref=b) is None
    assert repo.undo_last(OWNER, ref=b) is None
    assert step_labels(repo, a) == {1: ["a1"], 2: ["a2"], 3: ["a3"]}

    # Without a ref the old behaviour holds: the newest change anywhere.
    assert repo.undo_last(OWNER).step_index == 3
    assert step_labels(repo, a) == {1: ["a1"], 2: ["a2"]}


def test_redo_restores_in_stack_order_and_a_new_change_clears_the_chain(repo: Repository, two) -> None:
    a, b = two
    for i in range(3):
        repo.add_step_tag(a, i, f"t{i}", OWNER)
    assert repo.redo_last(OWNER, a) is None  # nothing undone yet
    repo.undo_last(OWNER, a)
    repo.undo_last(OWNER, a)
    assert step_labels(repo, a) == {0: ["t0"]}
    assert repo.redo_last(OWNER, b) is None  # the undos were in A
    redo = repo.redo_last(OWNER, a)
    assert (redo.action, redo.step_index, redo.reverted_action) == ("redo", 1, "step.tag.add")
    assert step_labels(repo, a) == {0: ["t0"], 1: ["t1"]}
    # undo after redo undoes the redo; redo again re-applies it
    assert repo.undo_last(OWNER, a).undo_of == redo.id
    assert step_labels(repo, a) == {0: ["t0"]}
    assert repo.redo_last(OWNER, a).step_index == 1
    assert repo.redo_last(OWNER, a).step_index == 2
    assert repo.redo_last(OWNER, a) is None
    assert step_labels(repo, a) == {0: ["t0"], 1: ["t1"], 2: ["t2"]}

    # A new change on the episode clears the redo chain; one on another episode does not.
    repo.undo_last(OWNER, a)
    repo.add_step_tag(b, 9, "elsewhere", OWNER)
    assert repo.redo_last(OWNER, a).step_index == 2
    repo.undo_last(OWNER, a)
    repo.add_step_tag(a, 7, "new", OWNER)
    assert repo.redo_last(OWNER, a) is None
    assert step_labels(repo, a) == {0: ["t0"], 1: ["t1"], 7: ["new"]}


def test_undoing_a_removal_restores_the_original_author_and_time(repo: Repository, study, two) -> None:
    a, _ = two
    repo.add_step_tag(a, 4, "jump", "carol@example.com")
    repo.add_episode_tag(a, "good", "carol@example.com")
    [(_, _, author, created)] = tag_rows(repo, a.episode_id)
    assert author == "carol@example.com"
    # The episode's own user may remove carol's tags; undo gives them back as carol's, created when she did.
    assert repo.remove_step_tag(a, 4, "jump", OWNER)
    assert repo.remove_episode_tag(a, "good", OWNER)
    assert repo.undo_last(OWNER, a).reverted_action == "episode.tag.remove"
    undo = repo.undo_last(OWNER, a)
    assert undo.after["user"] == "carol@example.com"
    assert tag_rows(repo, a.episode_id) == [(4, "jump", "carol@example.com", created)]
    with repo.engine.connect() as conn:
        [(label, author)] = conn.execute(
            sa.text('SELECT label, "user" FROM episode_tags WHERE episode_id = :e'), {"e": a.episode_id}
        ).all()
    assert (label, author) == ("good", "carol@example.com")
    # redo removes it again, undo restores it again: still carol's
    repo.redo_last(OWNER, a)
    assert tag_rows(repo, a.episode_id) == []
    repo.undo_last(OWNER, a)
    assert tag_rows(repo, a.episode_id) == [(4, "jump", "carol@example.com", created)]


def test_removals_logged_before_version_4_fall_back_to_the_adding_entry(repo: Repository, two) -> None:
    """Old remove entries hold only the label: the author is the newest add of that label there."""
    a, _ = two
    repo.add_step_tag(a, 2, "old", "carol@example.com")
    added = repo.audit_log(a, limit=1)[0]
    with repo.engine.begin() as conn:  # what version 3 wrote for a removal
        conn.execute(sa.text("DELETE FROM step_tags WHERE episode_id = :e"), {"e": a.episode_id})
        conn.execute(
            sa.text(
                "INSERT INTO audit_log (time, \"user\", action, study_id, session_id, episode_id, step_index, "
                "before) VALUES (:t, :u, 'step.tag.remove', :s, :ss, :e, 2, :b)"
            ),
            {"t": added.time, "u": OWNER, "s": a.study_id, "ss": a.session_id, "e": a.episode_id,
             "b": '{"label": "old"}'},
        )  # fmt: skip
    undo = repo.undo_last(OWNER, a)
    assert undo.after["user"] == "carol@example.com"
    [(step, label, author, _)] = tag_rows(repo, a.episode_id)
    assert (step, label, author) == (2, "old", "carol@example.com")


def test_segment_tag_is_one_change(repo: Repository, two) -> None:
    a, _ = two
    repo.add_step_tag(a, 5, "walk", "carol@example.com")  # tagged before: the segment leaves it alone
    assert repo.add_segment_tag(a, 3, 8, "walk", OWNER) == 5
    assert repo.add_segment_tag(a, 3, 8, "walk", OWNER) == 0  # nothing new: no entry
    entry = repo.audit_log(a, limit=1)[0]
    assert entry.action == "step.segment.add"
    assert (entry.after["start"], entry.after["end"]) == (3, 8)
    assert [t["step"] for t in entry.after["tags"]] == [3, 4, 6, 7, 8]
    assert {i for i, labels in step_labels(repo, a).items() if "walk" in labels} == set(range(3, 9))

    undo = repo.undo_last(OWNER, a)
    assert describe(undo).startswith("Undid: tag 'walk' added to steps 3–8 (5 steps)")
    assert step_labels(repo, a) == {5: ["walk"]}
    assert [r[2] for r in tag_rows(repo, a.episode_id)] == ["carol@example.com"]
    repo.redo_last(OWNER, a)
    assert {i for i, labels in step_labels(repo, a).items() if "walk" in labels} == set(range(3, 9))

    # removal: one entry with every removed tag's author; undo gives each back to its author
    assert repo.remove_segment_tag(a, 0, 29, "walk", OWNER) == 6
    assert step_labels(repo, a) == {}
    removed = repo.audit_log(a, limit=1)[0]
    assert removed.action == "step.segment.remove" and len(removed.before["tags"]) == 6
    repo.undo_last(OWNER, a)
    authors = {r[0]: r[2] for r in tag_rows(repo, a.episode_id)}
    assert authors == {3: OWNER, 4: OWNER, 5: "carol@example.com", 6: OWNER, 7: OWNER, 8: OWNER}


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (5, 4, "start 5 is after its end 4"),
        (-1, 3, "step -1 is out of range"),
        (3, 31, "step 31 is out of range"),
    ],
)
def test_segment_bounds_are_checked(repo: Repository, two, start: int, end: int, message: str) -> None:
    a, _ = two
    with pytest.raises(StoreError, match=message):
        repo.add_segment_tag(a, start, end, "x", OWNER)
    assert step_labels(repo, a) == {}
    assert repo.add_segment_tag(a, 0, 30, "all", OWNER) == 31  # 30 transitions + the final observation


def test_state_and_notes_undo_redo_and_describe(repo: Repository, two) -> None:
    a, _ = two
    repo.set_episode_state(a, Episode.STATE_REJECTED, OWNER)
    repo.set_notes(a, "first", OWNER)
    undo = repo.undo_last(OWNER, a)
    assert describe(undo, "episode 3 of Maze") == "Undid: notes edited (episode 3 of Maze)"
    undo = repo.undo_last(OWNER, a)
    assert describe(undo) == f"Undid: state changed from completed to rejected (episode {a.episode_id[:6]}…)"
    assert repo.get_episode(a).state == Episode.STATE_COMPLETED
    redo = repo.redo_last(OWNER, a)
    assert describe(redo).startswith("Redid: state changed from completed to rejected")
    assert repo.get_episode(a).state == Episode.STATE_REJECTED


def test_describe_plain_changes() -> None:
    from datetime import UTC, datetime

    entry = AuditEntry(
        id=1, time=datetime.now(UTC), user="u", action="undo", episode_id="3f2a5c9e" * 4, step_index=12,
        before={"label": "jump", "user": "u", "created_time": None}, after=None, undo_of=0,
        reverted_action="step.tag.add",
    )  # fmt: skip
    assert describe(entry) == "Undid: tag 'jump' added to step 12 (episode 3f2a5c…)"


def test_an_undo_that_finds_nothing_to_change_says_so(repo: Repository, study, two) -> None:
    a, _ = two
    repo.add_step_tag(a, 6, "gone", OWNER)
    repo.remove_step_tag(a, 6, "gone", "alice@example.com")  # the creator removed it meanwhile
    undo = repo.undo_last(OWNER, a)  # bob's add: the tag is already gone
    assert (undo.before, undo.after) == (None, None)
    assert describe(undo).startswith("Undid: step.tag.add on step 6: nothing was left to change")
    redo = repo.redo_last(OWNER, a)  # and its redo changes nothing either
    assert (redo.before, redo.after) == (None, None) and step_labels(repo, a) == {}

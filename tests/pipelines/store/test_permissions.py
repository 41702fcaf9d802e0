"""Who may change others' work (episode owner, study creator, reviewers), tag palettes, unique study names."""

from __future__ import annotations

import pytest

from pipelines.store import AlreadyExists, PermissionDenied, Repository, StoreError
from protos.rlds_creator import study_pb2
from tests.pipelines.store.conftest import env_episode, study_spec

Episode = study_pb2.Episode
CREATOR, OWNER, REVIEWER, OTHER = "alice@x", "bob@x", "rita@x", "mallory@x"


@pytest.fixture
def study(repo: Repository) -> study_pb2.StudySpec:
    return repo.create_study(study_spec(), CREATOR)


@pytest.fixture
def ref(repo: Repository, study):
    session = repo.create_session(study.id, OWNER)
    return Repository.ref(repo.add_episode(env_episode(study.id, session)))


def test_others_may_add_tags_but_not_remove_others_tags_or_change_the_state(
    repo: Repository, study, ref
) -> None:
    # annotation is the point: anyone adds tags, and removes their own
    assert repo.add_step_tag(ref, 1, "mine", OTHER) and repo.remove_step_tag(ref, 1, "mine", OTHER)
    assert repo.add_episode_tag(ref, "mine", OTHER) and repo.remove_episode_tag(ref, "mine", OTHER)
    repo.add_step_tag(ref, 2, "owners", OWNER)
    repo.add_episode_tag(ref, "owners", OWNER)
    before = len(repo.audit_log(ref))
    with pytest.raises(PermissionDenied, match=r"mallory@x may not remove bob@x's tag 'owners' .* reviewer"):
        repo.remove_step_tag(ref, 2, "owners", OTHER)
    with pytest.raises(PermissionDenied):
        repo.remove_episode_tag(ref, "owners", OTHER)
    with pytest.raises(PermissionDenied):
        repo.remove_segment_tag(ref, 0, 5, "owners", OTHER)
    with pytest.raises(PermissionDenied, match="may not change the state"):
        repo.set_episode_state(ref, Episode.STATE_REJECTED, OTHER)
    assert not repo.can_review(ref, OTHER)
    got = repo.get_episode(ref)  # nothing changed, nothing logged
    assert got.state == Episode.STATE_COMPLETED and [t.label for t in got.tags] == ["owners"]
    assert [t.label for t in got.step_metadata[2].tags] == ["owners"] and len(repo.audit_log(ref)) == before

    # a user's undo/redo is bound by the same rule: mallory's own removal needs the right again at redo time
    repo.set_reviewers(study.id, [OTHER], CREATOR)
    assert repo.remove_step_tag(ref, 2, "owners", OTHER)
    repo.undo_last(OTHER, ref)
    repo.set_reviewers(study.id, [], CREATOR)
    with pytest.raises(PermissionDenied):
        repo.redo_last(OTHER, ref)
    assert [t.label for t in repo.get_episode(ref).step_metadata[2].tags] == ["owners"]


@pytest.mark.parametrize("who", [OWNER, CREATOR, REVIEWER])
def test_owner_creator_and_reviewers_may(repo: Repository, study, ref, who: str) -> None:
    repo.set_reviewers(study.id, [REVIEWER], CREATOR)
    repo.add_step_tag(ref, 2, "someone's", OTHER)
    repo.add_segment_tag(ref, 4, 6, "span", OTHER)
    assert repo.can_review(ref, who)
    assert repo.remove_step_tag(ref, 2, "someone's", who)
    assert repo.remove_segment_tag(ref, 0, 20, "span", who) == 3
    assert repo.set_episode_state(ref, Episode.STATE_REJECTED, who).state == Episode.STATE_REJECTED


def test_reviewers_are_chosen_by_the_creator_and_audited(repo: Repository, study) -> None:
    assert repo.set_reviewers(study.id, [" rita@x ", "sam@x", "rita@x", ""], CREATOR) == ["rita@x", "sam@x"]
    assert repo.list_reviewers(study.id) == ["rita@x", "sam@x"]
    with pytest.raises(PermissionDenied, match="only the creator"):
        repo.set_reviewers(study.id, [OTHER], "rita@x")
    assert repo.set_reviewers(study.id, ["sam@x"], CREATOR) == ["sam@x"]
    entry = repo.audit_log(study_id=study.id, limit=1)[0]
    assert (entry.action, entry.before, entry.after) == (
        "study.reviewers", {"reviewers": ["rita@x", "sam@x"]}, {"reviewers": ["sam@x"]},
    )  # fmt: skip


def test_palette_rules(repo: Repository, study) -> None:
    assert repo.get_palette(study.id) == []
    assert repo.set_palette(study.id, [" jump ", "fall", "goal"], CREATOR) == ["jump", "fall", "goal"]
    assert repo.get_palette(study.id) == ["jump", "fall", "goal"]
    entry = repo.audit_log(study_id=study.id, limit=1)[0]
    assert (entry.action, entry.before, entry.after) == (
        "study.palette", {"labels": []}, {"labels": ["jump", "fall", "goal"]},
    )  # fmt: skip
    for labels, message in [
        ([f"l{i}" for i in range(10)], "at most 9 labels"),
        (["a", "b", "a"], "'a' repeated"),
        (["ok", "  "], "must not be empty"),
        (["x" * 257], "the limit is 256"),
    ]:
        with pytest.raises(StoreError, match=message):
            repo.set_palette(study.id, labels, CREATOR)
    with pytest.raises(PermissionDenied, match="creator .* or a reviewer"):
        repo.set_palette(study.id, ["mine"], OTHER)
    repo.set_reviewers(study.id, [REVIEWER], CREATOR)
    assert repo.set_palette(study.id, [str(i) for i in range(1, 10)], REVIEWER) == [
        str(i) for i in range(1, 10)
    ]
    assert repo.set_palette(study.id, [], CREATOR) == [] and repo.get_palette(study.id) == []


def test_study_names_are_unique_per_creator(repo: Repository, study) -> None:
    with pytest.raises(AlreadyExists, match="alice@x already has a study named 'Maze study'"):
        repo.create_study(study_spec(), CREATOR)
    other = repo.create_study(study_spec(), OWNER)  # another creator may use the name
    renamed = repo.create_study(study_spec("Second"), CREATOR)
    renamed.name = "Maze study"
    with pytest.raises(AlreadyExists, match="already has a study named"):
        repo.save_study(renamed, CREATOR)
    assert [s.id for s in repo.find_study_by_name("Maze study")] == [study.id, other.id]
    assert [s.id for s in repo.find_study_by_name("Maze study", creator=OWNER)] == [other.id]


def test_locked_tags_are_exactly_those_the_user_may_not_remove(repo: Repository, study, ref) -> None:
    repo.set_reviewers(study.id, [REVIEWER], CREATOR)
    repo.add_step_tag(ref, 2, "owners", OWNER)
    repo.add_step_tag(ref, 2, "mine", OTHER)
    repo.add_segment_tag(ref, 4, 5, "span", OWNER)
    repo.add_episode_tag(ref, "owners", OWNER)
    repo.add_episode_tag(ref, "mine", OTHER)
    assert repo.locked_tags(ref, OTHER) == (["owners"], {2: ["owners"], 4: ["span"], 5: ["span"]})
    for who in (OWNER, CREATOR, REVIEWER):
        assert repo.locked_tags(ref, who) == ([], {})
    # what it says is what removing does: each locked tag is refused, each other one removed
    for label in repo.locked_tags(ref, OTHER)[0]:
        with pytest.raises(PermissionDenied):
            repo.remove_episode_tag(ref, label, OTHER)
    with pytest.raises(PermissionDenied):
        repo.remove_step_tag(ref, 4, "span", OTHER)
    assert repo.remove_step_tag(ref, 2, "mine", OTHER) and repo.remove_episode_tag(ref, "mine", OTHER)

"""Repository rules, on a real SQLite file and a real PostgreSQL database (see conftest)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipelines.store import (
    AlreadyExists,
    AuditAction,
    Conflict,
    InvalidSpec,
    NotFound,
    PermissionDenied,
    Repository,
    StoreError,
    StudyDisabled,
    open_store,
)
from protos.rlds_creator import client_pb2, study_pb2
from tests.pipelines.store.conftest import env_episode, study_spec

Episode = study_pb2.Episode


@pytest.fixture
def study(repo: Repository) -> study_pb2.StudySpec:
    return repo.create_study(study_spec(), "alice@example.com")


@pytest.fixture
def session(repo: Repository, study: study_pb2.StudySpec) -> study_pb2.Session:
    return repo.create_session(study.id, "bob@example.com")


@pytest.fixture
def episode(repo: Repository, study: study_pb2.StudySpec, session: study_pb2.Session) -> Episode:
    return repo.add_episode(env_episode(study.id, session))


def ref_of(episode: Episode) -> client_pb2.EpisodeRef:
    return Repository.ref(episode)


# -- studies --------------------------------------------------------------------------------------------------


def test_create_study_sets_read_only_fields_and_round_trips_environments(repo: Repository) -> None:
    spec = study_spec()
    spec.creator.email = "mallory@example.com"  # read-only: ignored
    spec.state = study_pb2.StudySpec.STATE_DISABLED
    spec.creation_time.FromSeconds(1)
    before = datetime.now(UTC) - timedelta(seconds=5)
    created = repo.create_study(spec, "alice@example.com")

    assert len(created.id) == 32
    assert created.creator.email == "alice@example.com"
    assert created.state == study_pb2.StudySpec.STATE_ENABLED
    assert created.creation_time.ToDatetime(tzinfo=UTC) > before
    # Environment specs come back exactly, presence bits and proto2 defaults included.
    assert list(created.environment_specs) == list(spec.environment_specs)
    assert not created.environment_specs[0].procgen.HasField("level_repeats")
    assert created.environment_specs[0].procgen.level_repeats == 1
    assert repo.get_study(created.id) == created
    assert repo.get_environment(created.id, "pong") == spec.environment_specs[1]
    with pytest.raises(NotFound, match="no environment 'nope'"):
        repo.get_environment(created.id, "nope")
    with pytest.raises(NotFound, match="study 'nope' not found"):
        repo.get_environment("nope", "pong")


def test_create_study_with_given_id_and_duplicates(repo: Repository) -> None:
    spec = study_spec()
    spec.id = "maze-2026"
    assert repo.create_study(spec, "alice").id == "maze-2026"
    with pytest.raises(AlreadyExists, match="maze-2026"):
        repo.create_study(spec, "alice")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.ClearField("name"), "field 'name' is required"),
        (lambda s: s.environment_specs[1].ClearField("id"), r"field environment_specs\[1\].id is required"),
        (
            lambda s: setattr(s.environment_specs[1], "id", "maze"),
            r"environment_specs\[1\].id .maze. is used twice",
        ),
    ],
)
def test_invalid_specs_are_refused(repo: Repository, mutate, message: str) -> None:
    spec = study_spec()
    mutate(spec)
    with pytest.raises(InvalidSpec, match=message):
        repo.create_study(spec, "alice")
    assert repo.list_studies() == []


def test_save_study_ignores_read_only_fields_and_only_creator_may(repo: Repository, study) -> None:
    update = study_pb2.StudySpec()
    update.CopyFrom(study)
    update.name = "Renamed"
    update.ClearField("description")
    update.creator.email = "mallory@example.com"
    update.state = study_pb2.StudySpec.STATE_DISABLED
    update.creation_time.FromSeconds(5)
    update.environment_specs[0].max_episode_steps = 99
    new_env = update.environment_specs.add(id="hack", name="NetHack")
    new_env.net_hack.id = "NetHackScore-v0"

    with pytest.raises(PermissionDenied, match=r"only the creator \(alice@example.com\)"):
        repo.save_study(update, "mallory@example.com")
    saved = repo.save_study(update, "alice@example.com")
    assert saved.name == "Renamed"
    assert not saved.HasField("description")
    assert saved.creator.email == "alice@example.com"
    assert saved.state == study_pb2.StudySpec.STATE_ENABLED
    assert saved.creation_time == study.creation_time
    assert [e.id for e in saved.environment_specs] == ["maze", "pong", "hack"]
    assert saved.environment_specs[0].max_episode_steps == 99
    assert repo.get_study(study.id) == saved

    unknown = study_pb2.StudySpec(id="nope", name="x")
    with pytest.raises(NotFound):
        repo.save_study(unknown, "alice@example.com")
    with pytest.raises(InvalidSpec, match="has no id"):
        repo.save_study(study_pb2.StudySpec(name="x"), "alice@example.com")


def test_save_study_refuses_to_drop_an_environment_with_episodes(repo: Repository, study, episode) -> None:
    update = study_pb2.StudySpec()
    update.CopyFrom(study)
    del update.environment_specs[0]  # "maze" has an episode
    with pytest.raises(InvalidSpec, match="environment 'maze' has 1 episode"):
        repo.save_study(update, "alice@example.com")
    keep_maze = study_pb2.StudySpec()
    keep_maze.CopyFrom(study)
    del keep_maze.environment_specs[1]  # "pong" has none
    assert [e.id for e in repo.save_study(keep_maze, "alice@example.com").environment_specs] == ["maze"]


def test_enable_disable_creator_only_and_disabled_takes_nothing_new(repo: Repository, study, session) -> None:
    with pytest.raises(PermissionDenied, match="disable"):
        repo.enable_study(study.id, False, "bob@example.com")
    disabled = repo.enable_study(study.id, False, "alice@example.com")
    assert disabled.state == study_pb2.StudySpec.STATE_DISABLED
    with pytest.raises(StudyDisabled, match="no new sessions"):
        repo.create_session(study.id, "bob@example.com")
    with pytest.raises(StudyDisabled, match="no new episodes"):
        repo.add_episode(env_episode(study.id, session))
    assert repo.list_episodes(study_id=study.id) == []
    assert repo.enable_study(study.id, True, "alice@example.com").state == study_pb2.StudySpec.STATE_ENABLED
    repo.add_episode(env_episode(study.id, session))
    assert len(repo.list_episodes(study_id=study.id)) == 1
    actions = [e.action for e in repo.audit_log(study_id=study.id)]
    assert actions[:3] == ["episode.add", "study.enable", "study.disable"]


def test_list_studies_by_creator(repo: Repository) -> None:
    a = repo.create_study(study_spec("A"), "alice")
    b = repo.create_study(study_spec("B"), "bob")
    assert [s.id for s in repo.list_studies()] == [a.id, b.id]
    assert [s.id for s in repo.list_studies(creator="bob")] == [b.id]
    with pytest.raises(NotFound):
        repo.get_study("missing")


# -- sessions and episodes ------------------------------------------------------------------------------------


def test_sessions(repo: Repository, study, session) -> None:
    assert session.state == study_pb2.Session.STATE_VALID
    assert session.user.email == "bob@example.com" and session.HasField("start_time")
    assert repo.get_session(session.id) == session
    other = repo.create_session(study.id, "carol")
    assert [s.id for s in repo.list_sessions(study.id)] == [session.id, other.id]
    assert [s.id for s in repo.list_sessions(user="carol")] == [other.id]
    ended = repo.end_session(session.id)
    assert ended.HasField("end_time")
    with pytest.raises(NotFound):
        repo.get_session("missing")
    with pytest.raises(NotFound):
        repo.create_session("missing", "bob")


def test_episode_round_trips_every_field(repo: Repository, study, session) -> None:
    sent = env_episode(study.id, session)
    sent.notes = "first try"
    sent.tags.add(label="good")
    sent.step_metadata[3].tags.add(label="jump")
    stored = repo.add_episode(sent)
    assert len(stored.id) == 32
    expected = study_pb2.Episode()
    expected.CopyFrom(sent)
    expected.id = stored.id
    assert stored == expected
    assert repo.get_episode(ref_of(stored)) == expected

    pickled = env_episode(study.id, session, "pong")
    pickled.id = "given-id"
    pickled.storage.pickle.path = "a/b.pkl"
    stored = repo.add_episode(pickled)
    assert stored.id == "given-id"
    assert stored.storage.WhichOneof("type") == "pickle" and stored.storage.pickle.path == "a/b.pkl"
    with pytest.raises(AlreadyExists):
        repo.add_episode(pickled)


def test_add_episode_checks_references(repo: Repository, study, session) -> None:
    with pytest.raises(NotFound, match="no environment 'atlantis'"):
        repo.add_episode(env_episode(study.id, session, "atlantis"))
    other_study = repo.create_study(study_spec("other"), "alice@example.com")
    with pytest.raises(NotFound, match="session .* not found in study"):
        repo.add_episode(env_episode(other_study.id, session))
    with pytest.raises(StoreError, match="no user"):
        repo.add_episode(env_episode(study.id, None))
    with pytest.raises(NotFound, match="study 'missing'"):
        repo.add_episode(env_episode("missing", session))


def test_get_episode_checks_the_whole_reference(repo: Repository, episode) -> None:
    ref = ref_of(episode)
    ref.study_id = "another"
    with pytest.raises(NotFound, match="in study 'another'"):
        repo.get_episode(ref)
    with pytest.raises(NotFound):
        repo.get_episode(client_pb2.EpisodeRef(episode_id="missing"))
    assert repo.get_episode(client_pb2.EpisodeRef(episode_id=episode.id)) == episode


def test_invalid_session_episodes_are_ignored(repo: Repository, study, session, episode) -> None:
    other = repo.create_session(study.id, "carol")
    kept = repo.add_episode(env_episode(study.id, other))
    repo.set_session_state(session.id, study_pb2.Session.STATE_INVALID, "alice@example.com")
    assert [e.id for e in repo.list_episodes(study_id=study.id)] == [kept.id]
    assert repo.episode_counts() == {study.id: 1}
    assert {e.id for e in repo.list_episodes(study_id=study.id, include_invalid_sessions=True)} == {
        episode.id,
        kept.id,
    }
    assert repo.episode_counts(include_invalid_sessions=True) == {study.id: 2}
    refs = [ref_of(episode), ref_of(kept)]
    assert [e.id for e in repo.episodes_by_refs(refs)] == [episode.id, kept.id]  # export reports the skip
    repo.set_session_state(session.id, study_pb2.Session.STATE_VALID)
    assert len(repo.list_episodes(study_id=study.id)) == 2


def test_list_episode_filters(repo: Repository, study, session) -> None:
    a = repo.add_episode(env_episode(study.id, session, "maze"))
    b = repo.add_episode(env_episode(study.id, session, "pong"))
    carol = repo.create_session(study.id, "carol")
    c = repo.add_episode(env_episode(study.id, carol, "maze"))
    repo.set_episode_state(ref_of(b), Episode.STATE_REJECTED, "bob@example.com")
    repo.add_episode_tag(ref_of(a), "crash", "bob")
    repo.add_step_tag(ref_of(c), 4, "crash", "carol")
    repo.set_notes(ref_of(b), "Agent got STUCK at 50%", "bob")

    def ids(**filters) -> list[str]:
        return [e.id for e in repo.list_episodes(**filters)]

    assert ids(study_id=study.id) == [a.id, b.id, c.id]
    assert ids(env_id="maze") == [a.id, c.id]
    assert ids(states=[Episode.STATE_REJECTED]) == [b.id]
    assert ids(states=[Episode.STATE_COMPLETED, Episode.STATE_REJECTED]) == [a.id, b.id, c.id]
    assert ids(tag="crash") == [a.id, c.id]
    assert ids(user="carol") == [c.id]
    assert ids(session_id=carol.id) == [c.id]
    assert ids(notes_query="stuck") == [b.id]
    assert ids(notes_query="50%") == [b.id]
    assert ids(notes_query="5_%") == []  # LIKE wildcards are escaped
    assert ids(study_id="missing") == []
    assert [e.id for e in repo.episodes_by_refs([ref_of(c), ref_of(a)])] == [c.id, a.id]
    with pytest.raises(NotFound):
        repo.episodes_by_refs([client_pb2.EpisodeRef(episode_id="missing")])


# -- tags, notes, state ---------------------------------------------------------------------------------------


def test_tags_are_a_set(repo: Repository, episode) -> None:
    ref = ref_of(episode)
    assert repo.add_episode_tag(ref, "good", "bob") is True
    assert repo.add_episode_tag(ref, " good ", "carol") is False
    assert repo.add_episode_tag(ref, "replay", "bob") is True
    assert [t.label for t in repo.get_episode(ref).tags] == ["good", "replay"]
    assert repo.remove_episode_tag(ref, "missing", "bob") is False
    assert repo.remove_episode_tag(ref, "good", "bob") is True
    assert [t.label for t in repo.get_episode(ref).tags] == ["replay"]

    assert repo.add_step_tag(ref, 0, "start", "bob") is True
    assert repo.add_step_tag(ref, 0, "start", "bob") is False
    assert repo.add_step_tag(ref, 19, "start", "bob") is True
    assert repo.add_step_tag(ref, 19, "end", "bob") is True
    # An environment episode's reader has one final-observation step after its 20 transitions: index 20.
    assert repo.add_step_tag(ref, 20, "final", "bob") is True
    with pytest.raises(StoreError, match="step 21 is out of range .* with 20 steps"):
        repo.add_step_tag(ref, 21, "late", "bob")
    with pytest.raises(StoreError, match="must not be empty"):
        repo.add_step_tag(ref, 1, "  ", "bob")
    assert repo.remove_step_tag(ref, 0, "end", "bob") is False
    assert repo.remove_step_tag(ref, 19, "end", "bob") is True
    got = repo.get_episode(ref)
    assert {i: [t.label for t in m.tags] for i, m in got.step_metadata.items()} == {
        0: ["start"],
        19: ["start"],
        20: ["final"],
    }
    with pytest.raises(NotFound):
        repo.add_episode_tag(client_pb2.EpisodeRef(episode_id="missing"), "x", "bob")


def test_notes_and_state(repo: Repository, episode) -> None:
    ref = ref_of(episode)
    assert repo.set_notes(ref, "looks fine", "bob") is True
    assert repo.set_notes(ref, "looks fine", "carol") is False
    assert repo.get_episode(ref).notes == "looks fine"
    rejected = repo.set_episode_state(ref, Episode.STATE_REJECTED, "bob@example.com")  # its own user
    assert rejected.state == Episode.STATE_REJECTED
    with pytest.raises(StoreError, match="unknown episode state 42"):
        repo.set_episode_state(ref, 42, "bob")


def test_recent_tags(repo: Repository, study, session, episode) -> None:
    other = repo.add_episode(env_episode(study.id, session, "pong"))
    for ep, label in [(episode, "a"), (other, "b"), (episode, "c")]:
        repo.add_episode_tag(ref_of(ep), label, "bob")
    repo.add_step_tag(ref_of(other), 2, "d", "bob")
    repo.add_step_tag(ref_of(episode), 1, "a", "bob")  # "a" used again, so most recent
    assert repo.recent_tags(study.id) == ["a", "d", "c", "b"]
    assert repo.recent_tags(study.id, limit=2) == ["a", "d"]
    assert repo.recent_tags("missing") == []


# -- delete ---------------------------------------------------------------------------------------------------


def test_delete_permissions(repo: Repository, study, session, episode) -> None:
    assert repo.can_delete(episode, "bob@example.com")  # its own user
    assert repo.can_delete(episode, "alice@example.com")  # the study's creator
    assert not repo.can_delete(episode, "carol@example.com")
    with pytest.raises(PermissionDenied, match="only its user"):
        repo.delete_episode(ref_of(episode), "carol@example.com")
    repo.add_step_tag(ref_of(episode), 1, "x", "bob")
    assert repo.delete_episode(ref_of(episode), "alice@example.com") is True
    assert repo.delete_episode(ref_of(episode), "alice@example.com") is False
    with pytest.raises(NotFound):
        repo.get_episode(ref_of(episode))
    entry = repo.audit_log(ref_of(episode), limit=1)[0]
    assert entry.action == "episode.delete" and entry.user == "alice@example.com"
    assert entry.before["id"] == episode.id and entry.before["step_metadata"]["1"]["tags"] == [{"label": "x"}]
    own = repo.add_episode(env_episode(study.id, session))
    assert repo.delete_episode(ref_of(own), "bob@example.com") is True


# -- audit log and undo ---------------------------------------------------------------------------------------


def test_every_change_is_audited_with_before_and_after(repo: Repository, study, session, episode) -> None:
    ref = ref_of(episode)
    repo.set_reviewers(study.id, ["carol"], "alice@example.com")  # carol may change bob's state and tags
    repo.add_episode_tag(ref, "good", "bob")
    repo.add_episode_tag(ref, "good", "bob")  # no change, no entry
    repo.add_step_tag(ref, 3, "jump", "carol")
    repo.set_notes(ref, "n1", "bob")
    repo.set_episode_state(ref, Episode.STATE_REJECTED, "carol")
    repo.remove_episode_tag(ref, "good", "carol")
    with pytest.raises(PermissionDenied):  # refused: no entry
        repo.delete_episode(ref, "mallory")

    log = repo.audit_log(ref)
    assert [(e.action, e.user) for e in log] == [
        ("episode.tag.remove", "carol"),
        ("episode.state", "carol"),
        ("episode.notes", "bob"),
        ("step.tag.add", "carol"),
        ("episode.tag.add", "bob"),
        ("episode.add", "bob@example.com"),
    ]
    assert log[0].after is None and log[0].before["label"] == "good"
    assert log[0].before["user"] == "bob" and log[0].before["created_time"] <= log[0].time.isoformat()
    assert (log[1].before, log[1].after) == ({"state": "STATE_COMPLETED"}, {"state": "STATE_REJECTED"})
    assert (log[2].before, log[2].after) == ({"notes": ""}, {"notes": "n1"})
    assert (log[3].step_index, log[3].after) == (3, {"label": "jump"})
    assert all(
        e.study_id == study.id and e.session_id == session.id and e.episode_id == episode.id for e in log
    )
    assert all(e.time.tzinfo is not None for e in log)
    assert [e.id for e in repo.audit_log(ref, limit=2)] == [log[0].id, log[1].id]
    assert {e.action for e in repo.audit_log(user="carol")} == {
        "episode.tag.remove",
        "episode.state",
        "step.tag.add",
    }
    assert repo.audit_log(study_id=study.id)[-1].action == AuditAction.STUDY_CREATE


def test_undo_reverts_the_users_own_changes_in_reverse_order(repo: Repository, study, episode) -> None:
    ref = ref_of(episode)
    repo.set_reviewers(study.id, ["bob"], "alice@example.com")
    assert repo.undo_last("bob") is None
    repo.add_episode_tag(ref, "good", "bob")
    repo.add_step_tag(ref, 2, "jump", "bob")
    repo.set_notes(ref, "n1", "bob")
    repo.set_notes(ref, "n2", "bob")
    repo.set_episode_state(ref, Episode.STATE_REJECTED, "bob")
    repo.add_episode_tag(ref, "carols", "carol")  # someone else's change: not bob's to undo
    repo.remove_episode_tag(ref, "good", "bob")

    undo = repo.undo_last("bob")
    assert undo is not None and undo.action == "undo" and undo.after["label"] == "good"
    assert [t.label for t in repo.get_episode(ref).tags] == ["carols", "good"]
    repo.undo_last("bob")  # state
    assert repo.get_episode(ref).state == Episode.STATE_COMPLETED
    repo.undo_last("bob")  # notes n2 -> n1
    assert repo.get_episode(ref).notes == "n1"
    undo = repo.undo_last("bob")  # notes n1 -> none
    assert (undo.before, undo.after) == ({"notes": "n1"}, {"notes": ""})
    assert not repo.get_episode(ref).HasField("notes")
    undo = repo.undo_last("bob")  # step tag
    assert undo.step_index == 2 and not repo.get_episode(ref).step_metadata
    repo.undo_last("bob")  # episode tag add
    assert [t.label for t in repo.get_episode(ref).tags] == ["carols"]
    assert repo.undo_last("bob") is None  # episode.add is not undoable
    undos = [e for e in repo.audit_log(ref) if e.action == "undo"]
    assert len(undos) == 6 and all(e.user == "bob" and e.undo_of for e in undos)
    assert repo.undo_last("carol").before["label"] == "carols"


def test_undo_skips_deleted_episodes(repo: Repository, study, session, episode) -> None:
    other = repo.add_episode(env_episode(study.id, session))
    repo.add_episode_tag(ref_of(episode), "keep", "bob@example.com")
    repo.add_episode_tag(ref_of(other), "gone", "bob@example.com")
    repo.delete_episode(ref_of(other), "bob@example.com")
    undo = repo.undo_last("bob@example.com")
    assert undo.episode_id == episode.id
    assert list(repo.get_episode(ref_of(episode)).tags) == []


def test_add_episodes_skips_imported_sources(repo: Repository, study, session) -> None:
    def ui(record_id: str) -> Episode:
        ep = env_episode(study.id, session)
        ep.ClearField("storage")
        ep.metadata.update({"kind": "ui", "ui_record": {"shard": "s", "offset": 0, "episode_id": record_id}})
        return ep

    assert len(repo.add_episodes([ui("r1"), ui("r2")])) == 2
    assert [e.metadata["ui_record"]["episode_id"] for e in repo.add_episodes([ui("r2"), ui("r3")])] == ["r3"]
    assert set(repo.source_keys(study.id)) == {"ui:r1", "ui:r2", "ui:r3"}
    with pytest.raises(AlreadyExists, match="ui:r1"):
        repo.add_episode(ui("r1"))
    with pytest.raises(AlreadyExists):
        repo.add_episodes([ui("r1")], skip_existing_sources=False)
    assert len(repo.list_episodes(study_id=study.id)) == 3
    long_id = "droidbot/" + "deep/" * 150 + "run"  # ids come from source paths: no length limit
    assert len(repo.add_episodes([ui(long_id), ui(long_id)])) == 1
    assert f"ui:{long_id}" in repo.source_keys(study.id)


def test_overlong_ids_are_refused_clearly(repo: Repository, study, session) -> None:
    spec = study_spec()
    spec.id = "s" * 65
    with pytest.raises(InvalidSpec, match="field id is longer than 64 characters"):
        repo.create_study(spec, "alice")
    episode = env_episode(study.id, session)
    episode.id = "e" * 65
    with pytest.raises(StoreError, match="longer than 64 characters"):
        repo.add_episode(episode)


def test_undo_refuses_to_drop_a_later_change_by_someone_else(repo: Repository, study, episode) -> None:
    ref = ref_of(episode)
    repo.set_reviewers(study.id, ["bob", "carol"], "alice@example.com")
    repo.set_notes(ref, "bob's note", "bob")
    repo.set_notes(ref, "carol's note", "carol")
    with pytest.raises(Conflict, match="its notes changed since by carol at 20"):
        repo.undo_last("bob")
    assert repo.get_episode(ref).notes == "carol's note"
    assert repo.undo_last("carol").after == {"notes": "bob's note"}  # carol undoes hers: bob's is back
    assert repo.undo_last("bob").after == {"notes": ""}  # and now bob's undo is safe

    repo.set_episode_state(ref, Episode.STATE_REJECTED, "bob")
    repo.set_episode_state(ref, Episode.STATE_CANCELLED, "carol")
    with pytest.raises(Conflict, match="its state changed since by carol"):
        repo.undo_last("bob")
    assert repo.get_episode(ref).state == Episode.STATE_CANCELLED


def test_notes_expected_refuses_a_stale_editor(repo: Repository, episode) -> None:
    """The compare-and-set runs in the write transaction: a stale editor is refused, nothing is overwritten."""
    ref = ref_of(episode)
    assert repo.set_notes(ref, "first", "bob", expected="") is True
    assert repo.set_notes(ref, "carol's", "carol", expected="first") is True
    with pytest.raises(Conflict, match="changed by someone else"):
        repo.set_notes(ref, "bob's stale edit", "bob", expected="first")
    assert repo.get_episode(ref).notes == "carol's"
    assert repo.set_notes(ref, "carol's", "bob", expected="first") is False  # same text: nothing to do
    # newest first: only the two accepted edits were written
    assert [e.user for e in repo.audit_log(ref) if e.action == AuditAction.EPISODE_NOTES] == ["carol", "bob"]


def test_a_source_registered_between_the_check_and_the_insert_is_skipped(
    repo: Repository, store_url: str | None, data_dir, study, session, monkeypatch
) -> None:
    """PostgreSQL reads each statement's newest commits: another import's commit can land between a batch's
    source check and its insert's own. The batch then starts over and skips that source (it was an error)."""
    if store_url is None:
        pytest.skip("SQLite serializes writers: no commit can land inside a write transaction")

    def ui(record_id: str) -> Episode:
        ep = env_episode(study.id, session)
        ep.ClearField("storage")
        ep.metadata.update({"kind": "ui", "ui_record": {"shard": "s", "offset": 0, "episode_id": record_id}})
        return ep

    original = Repository._insert_episode
    raced: list[str] = []

    def racing(self, s, episode, studies):  # noqa: ANN001, ANN202
        if not raced:  # the other import commits r1 now, after this batch checked it
            raced.append(episode.id)
            with open_store(store_url, data_dir) as other:
                other.add_episodes([ui("r1")])
        return original(self, s, episode, studies)

    monkeypatch.setattr(Repository, "_insert_episode", racing)
    added = repo.add_episodes([ui("r1"), ui("r2")])
    assert [e.metadata["ui_record"]["episode_id"] for e in added] == ["r2"]
    assert set(repo.source_keys(study.id)) == {"ui:r1", "ui:r2"}
    assert len(repo.list_episodes(study_id=study.id)) == 2
    with pytest.raises(AlreadyExists, match="already has ui:r1 as episode"):
        repo.add_episodes([ui("r1")], skip_existing_sources=False)

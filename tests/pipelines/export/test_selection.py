"""Selection helpers and spec grouping: names of groups, and mismatched data caught by the workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines import export
from pipelines.errors import StepmarkError
from pipelines.exporters.selection import group_by_spec, parse_state
from pipelines.store import open_store
from pipelines.store.access import parse_ref
from protos.rlds_creator import study_pb2
from tests.pipelines.export.export_data import ALICE, PROCGEN_ENV, ExportData, copy_data


@pytest.mark.parametrize(
    ("text", "value"),
    [("completed", study_pb2.Episode.STATE_COMPLETED), ("STATE_REJECTED", study_pb2.Episode.STATE_REJECTED),
     (" Abandoned ", study_pb2.Episode.STATE_ABANDONED)],
)  # fmt: skip
def test_parse_state(text: str, value: int) -> None:
    assert parse_state(text) == value


def test_parse_state_and_ref_errors_name_the_input() -> None:
    with pytest.raises(StepmarkError, match="'done'.*completed"):
        parse_state("done")
    for bad in ("a/b", "a//c", "a/b/c/d", ""):
        with pytest.raises(StepmarkError, match="STUDY/SESSION/EPISODE"):
            parse_ref(bad)
    ref = parse_ref("s/x/e")
    assert (ref.study_id, ref.session_id, ref.episode_id) == ("s", "x", "e")


def _study_with(repo, env: study_pb2.EnvironmentSpec, episode: study_pb2.Episode) -> study_pb2.Episode:  # type: ignore[no-untyped-def]
    """A new study with one environment and one registration of `episode`'s files under it."""
    # A creator's study names are unique (schema version 4): number the twins.
    taken = {s.name for s in repo.list_studies(creator=ALICE)}
    name = next(n for n in (f"grouping {env.id} {i}" for i in range(1, 100)) if n not in taken)
    spec = study_pb2.StudySpec(name=name)
    spec.environment_specs.append(env)
    study = repo.create_study(spec, ALICE)
    session = repo.create_session(study.id, ALICE)
    copy = study_pb2.Episode()
    copy.CopyFrom(episode)
    copy.ClearField("id")
    copy.ClearField("step_metadata")
    copy.study_id, copy.session_id, copy.environment_id = study.id, session.id, env.id
    return repo.add_episode(copy)


def test_same_env_id_with_other_settings_is_another_group(export_data: ExportData, tmp_path: Path) -> None:
    data_dir = copy_data(export_data, tmp_path / "data")
    with open_store(None, data_dir) as repo:
        env = repo.get_environment(export_data.study_id, PROCGEN_ENV)
        env.procgen.distribution_mode = study_pb2.EnvironmentSpec.Procgen.DISTRIBUTION_HARD
        other = _study_with(repo, env, export_data.procgen[1])
        same = study_pb2.EnvironmentSpec()
        same.CopyFrom(repo.get_environment(export_data.study_id, PROCGEN_ENV))
        twin = _study_with(repo, same, export_data.procgen[1])
        groups = group_by_spec(repo, [export_data.procgen[0], other, twin])
    # Equal settings share a group across studies; other settings get their own, named apart.
    assert [(g.name, g.first.id, g.count) for g in groups] == [
        (PROCGEN_ENV, export_data.procgen[0].id, 2),
        (f"{PROCGEN_ENV}-2", other.id, 1),
    ]


def test_data_that_does_not_match_its_spec_is_never_merged(export_data: ExportData, tmp_path: Path) -> None:
    """An episode registered under the Procgen environment but holding NetHack data: the workers compare each
    episode's observation/action shapes with the dataset's and the export fails, naming it."""
    data_dir = copy_data(export_data, tmp_path / "data")
    with open_store(None, data_dir) as repo:
        impostor = study_pb2.Episode()
        impostor.CopyFrom(export_data.nethack[0])
        impostor.ClearField("id")
        impostor.ClearField("step_metadata")
        impostor.environment_id = PROCGEN_ENV
        impostor.session_id = export_data.procgen[0].session_id
        impostor = repo.add_episode(impostor)
    out = tmp_path / "out"
    refs = [export_data.ref(export_data.procgen[0]), export_data.ref(impostor)]
    with pytest.raises(StepmarkError, match=f"another observation/action spec.*{impostor.id}"):
        export.export_episodes(export.ExportRequest(data_dir=str(data_dir), out=str(out), refs=refs))
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith("out")]


def test_an_empty_selection_says_what_the_filters_left_out_by_aggregates(tmp_path: Path, monkeypatch) -> None:
    """`stepmark export --study S` with nothing completed names what the filters left out, counted by one GROUP
    BY over the study (it listed every episode of the study into memory for this message)."""
    from pipelines.exporters.selection import SelectionQuery, select_episodes
    from pipelines.store import Repository
    from tests.pipelines.store.conftest import env_episode, study_spec

    repo = open_store(None, tmp_path)
    study = repo.create_study(study_spec(), ALICE)
    session = repo.create_session(study.id, ALICE)
    episodes = [env_episode(study.id, session) for _ in range(5)]
    for e, state in zip(episodes, [study_pb2.Episode.STATE_REJECTED] * 3 + [study_pb2.Episode.STATE_ABANDONED] * 2,
                        strict=True):  # fmt: skip
        e.state = state
    repo.add_episodes(episodes)
    listed: list[int] = []
    original = Repository.iter_episode_ids

    def counted(self, *args, **kwargs):  # noqa: ANN001, ANN202
        for ids in original(self, *args, **kwargs):
            listed.append(len(ids))
            yield ids

    monkeypatch.setattr(Repository, "iter_episode_ids", counted)
    with pytest.raises(StepmarkError) as info:
        select_episodes(repo, SelectionQuery(study_id=study.id))
    message = str(info.value)
    assert listed == []  # the selection itself (completed: none), not the whole study again for the message
    assert "the filters left out 5 episode(s) (2 abandoned, 3 rejected, counting invalid sessions)" in message

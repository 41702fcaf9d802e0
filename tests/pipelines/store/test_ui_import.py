"""Importing real convert-ui output (converted from ../shared/fixtures) into the store."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from pipelines import ui_records
from pipelines.errors import StepmarkError
from pipelines.store import PermissionDenied, Repository, StoreError, StudyDisabled
from pipelines.store.listing import EpisodeQuery
from pipelines.ui_import import UI_ENV_ID, import_records, import_ui
from protos.rlds_creator import study_pb2
from stepmark.cli import main
from tests.pipelines.store.conftest import study_spec


@pytest.fixture(scope="module")
def ui_output(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> Path:
    """All UI fixtures (Rico screens, uiautomator dumps, the DroidBot run) through `stepmark convert-ui`."""
    out = tmp_path_factory.mktemp("convert") / "out"
    assert main(["convert-ui", str(fixtures_dir), str(out), "--shards", "3", "--quiet"]) == 0
    return out


def test_import_registers_one_episode_per_record(repo: Repository, ui_output: Path) -> None:
    records = ui_records.index_records(str(ui_output))
    assert len(records) > 10

    study = import_ui(repo, ui_output, "Android traces", "ann@example.com")
    assert study.name == "Android traces" and study.creator.email == "ann@example.com"
    [env] = study.environment_specs
    assert (env.id, env.name, env.WhichOneof("type")) == (UI_ENV_ID, "Android UI", None)
    [session] = repo.list_sessions(study.id)
    assert session.user.email == "ann@example.com" and session.HasField("end_time")

    episodes = repo.list_episodes(study_id=study.id)
    assert len(episodes) == len(records)
    by_ui_id = {e.metadata["ui_record"]["episode_id"]: e for e in episodes}
    assert set(by_ui_id) == {r.episode_id for r in records}
    for record in records:
        episode = by_ui_id[record.episode_id]
        assert episode.state == study_pb2.Episode.STATE_COMPLETED
        assert episode.num_steps == record.num_steps and episode.total_reward == 0.0
        assert episode.session_id == session.id and episode.user.email == "ann@example.com"
        assert not episode.HasField("storage")
        meta = episode.metadata
        assert (meta["kind"], meta["app_package"], meta["source"], meta["success"]) == (
            "ui",
            record.app_package,
            record.source,
            False,
        )
        # Nothing copied: the reference leads back to the record itself, by absolute path and byte offset.
        shard, offset = meta["ui_record"]["shard"], int(meta["ui_record"]["offset"])
        assert Path(shard).is_absolute() and Path(shard).samefile(record.shard) and offset == record.offset
    sample = by_ui_id[records[-1].episode_id].metadata["ui_record"]
    ui = ui_records.read_episode(sample["shard"], int(sample["offset"]))
    assert ui.episode_id == records[-1].episode_id


def test_reimport_adds_nothing_and_a_partial_import_is_completed(repo: Repository, ui_output: Path) -> None:
    shards = ui_records.shard_paths(str(ui_output))
    first = import_records(repo, shards[0], "traces", "ann")
    assert first.added == len(ui_records.index_records(shards[0])) > 0
    rest = import_records(repo, ui_output, "traces", "ann")
    assert rest.study.id == first.study.id
    assert rest.skipped == first.added
    total = len(ui_records.index_records(str(ui_output)))
    assert first.added + rest.added == total
    again = import_records(repo, ui_output, first.study.id, "bob")  # by id this time
    assert (again.added, again.skipped) == (0, total)
    assert len(repo.list_episodes(study_id=first.study.id)) == total
    assert len(repo.list_sessions(first.study.id)) == 2  # no session for an import that added nothing


def test_import_into_an_existing_study(repo: Repository, ui_output: Path) -> None:
    other = repo.create_study(study_spec("mixed"), "ann")
    with pytest.raises(PermissionDenied, match="only its creator"):
        import_ui(repo, ui_output, "mixed", "bob")
    study = import_ui(repo, ui_output, "mixed", "ann")
    assert study.id == other.id
    assert [e.id for e in study.environment_specs] == ["maze", "pong", UI_ENV_ID]
    repo.enable_study(study.id, False, "ann")
    repo.create_study(study_spec("twice"), "bob")
    repo.create_study(study_spec("twice"), "carol")
    with pytest.raises(StoreError, match="2 studies have this name"):
        import_ui(repo, ui_output, "twice", "ann")
    own = repo.create_study(study_spec("twice"), "ann")  # the importer's own study of that name is the one
    assert import_ui(repo, ui_output, "twice", "ann").id == own.id


def test_disabled_study_and_bad_paths(repo: Repository, ui_output: Path, tmp_path: Path) -> None:
    study = import_ui(repo, ui_records.shard_paths(str(ui_output))[0], "ui", "ann")
    repo.enable_study(study.id, False, "ann")
    with pytest.raises(StudyDisabled):
        import_ui(repo, ui_output, "ui", "ann")
    with pytest.raises(StepmarkError, match="no such file or folder"):
        import_ui(repo, tmp_path / "missing", "ui", "ann")
    (tmp_path / "folder").mkdir()  # neither shards nor summary.json
    with pytest.raises(StepmarkError, match="folder: empty folder, not a convert-ui output"):
        import_ui(repo, tmp_path / "folder", "ui", "ann")
    assert len(repo.list_episodes(study_id=study.id)) == len(
        ui_records.index_records(ui_records.shard_paths(str(ui_output))[0])
    )


def _import(argv: list[str], barrier) -> None:  # noqa: ANN001
    barrier.wait(timeout=120)
    raise SystemExit(main(argv))


def test_concurrent_imports_of_one_study_name_make_one_study(
    repo: Repository, store_url: str | None, data_dir: Path, ui_output: Path
) -> None:
    """4 concurrent `stepmark import-ui --study SAME` (issue 13: duplicate studies on SQLite and PostgreSQL):
    one study, every record once."""
    argv = ["import-ui", str(ui_output), "--study", "SAME", "--user", "ann", "--data", str(data_dir)]
    if store_url is not None:
        argv += ["--store", store_url]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    workers = [ctx.Process(target=_import, args=(argv, barrier)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=600)
    assert [w.exitcode for w in workers] == [0] * 4
    [study] = repo.find_study_by_name("SAME")
    assert [s.id for s in repo.list_studies()] == [study.id]
    episodes = repo.list_episodes(study_id=study.id)
    assert len(episodes) == len(ui_records.index_records(str(ui_output)))
    assert len({e.metadata["ui_record"]["episode_id"] for e in episodes}) == len(episodes)


def test_record_headers_equal_the_parsed_records(ui_output: Path) -> None:
    """The wire-level header gives what a full parse gives, for every record of the real conversion."""
    from pipelines.ui_import import iter_headers

    headers = list(iter_headers(ui_output))
    parsed = ui_records.index_records(str(ui_output))
    assert [(h.episode_id, h.shard, h.offset, h.num_steps, h.app_package, h.source) for h in headers] == [
        (r.episode_id, r.shard, r.offset, r.num_steps, r.app_package, r.source) for r in parsed
    ]
    assert any(h.num_steps > 1 for h in headers) and all(h.episode_id for h in headers)


@pytest.mark.parametrize("data", [b"\x0a\x05ab", b"\xff", b"\x0a\x02\xc3\x28", b"\x13"])
def test_a_record_that_is_not_a_ui_episode_is_named(data: bytes) -> None:
    from pipelines.ui_import import record_header

    with pytest.raises(StepmarkError, match=r"^shard-7 at byte 42: not a serialized UiEpisode"):
        record_header(data, "shard-7", 42)


def test_import_streams_in_bounded_batches_without_parsing_records(
    repo: Repository, ui_output: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registered `batch` records per transaction, never a whole record parsed; a re-import (its keys looked
    up per batch) adds nothing."""
    total = len(ui_records.index_records(str(ui_output)))
    sizes: list[int] = []
    add = repo.add_episodes

    def add_batch(episodes, **kw):  # noqa: ANN001, ANN003
        batch = list(episodes)
        sizes.append(len(batch))
        return add(batch, **kw)

    def no_full_parse(*_a, **_k):  # noqa: ANN002, ANN003
        raise AssertionError("a record was parsed whole")

    monkeypatch.setattr(repo, "add_episodes", add_batch)
    monkeypatch.setattr(ui_records, "parse_episode", no_full_parse)
    result = import_records(repo, ui_output, "batched", "ann", batch=4)
    assert result.added == total and result.skipped == 0
    assert max(sizes) == 4 and sum(sizes) == total and len(sizes) == -(-total // 4)
    again = import_records(repo, ui_output, "batched", "ann", batch=3)
    assert (again.added, again.skipped) == (0, total)
    assert repo.count_episodes(EpisodeQuery(study_id=result.study.id)) == total

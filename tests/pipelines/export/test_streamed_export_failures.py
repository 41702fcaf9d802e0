"""The streamed export when things go wrong: a failure while the driver writes the work file leaves nothing in the
bucket; outcomes come back one file per chunk of the work file (not per episode) and still name every failed
episode; a page of the selection whose rows vanish between reading its keys and its rows does not end the
selection. Real recorded NetHack episodes, moto's S3 server (tests/object_store.py)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipelines import export
from pipelines.errors import StepmarkError
from pipelines.exporters import episode_fn, selection, work_file
from pipelines.store import Repository, listing, open_store
from tests.object_store import Bucket
from tests.pipelines.export.export_data import ALICE, ExportData, copy_data, register_copies
from tests.pipelines.store.conftest import env_episode, study_spec


def _request(data_dir: Path, study_id: str, out: str, fmt: str = "parquet") -> export.ExportRequest:
    return export.ExportRequest(
        data_dir=str(data_dir), out=out, format=fmt, study_id=study_id, beam_args=["--runner=FnApiRunner"]
    )


def _after_page(
    monkeypatch: pytest.MonkeyPatch, store: Repository, batch: int, page: int, change: Callable[[Repository], None]
) -> list[list[str]]:
    """Select `batch` episodes a page; right after page `page`'s keys are read, `change` the store through its
    own connection and transaction (committed there). Returns the pages' ids, as read."""
    monkeypatch.setattr(selection, "BATCH", batch)
    pages: list[list[str]] = []
    page_ids = listing.page_ids

    def hooked(s, q, sort, after, limit):  # noqa: ANN001, ANN202
        found = page_ids(s, q, sort, after, limit)
        pages.append([i for i, _ in found])
        if len(pages) == page:
            change(Repository(store.engine))
        return found

    monkeypatch.setattr(listing, "page_ids", hooked)
    return pages


@pytest.fixture
def many(export_data: ExportData, tmp_path: Path) -> tuple[Path, str]:
    data_dir = copy_data(export_data, tmp_path / "data")
    return data_dir, register_copies(data_dir, export_data.nethack[0], 7)


def test_a_failure_mid_selection_leaves_no_object_in_the_bucket(
    many: tuple[Path, str], s3: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The work file's writer held the first batches when the third batch failed: nothing of it is uploaded,
    neither when the error leaves the writer nor later when the writer is collected (an S3 writer's close,
    which garbage collection calls, would upload what it holds after the staging folder was removed)."""
    data_dir, study_id = many
    monkeypatch.setattr(selection, "BATCH", 2)
    batches = []
    grounding_of = export._grounding_of

    def third_batch_fails(repo, episodes, mode):  # noqa: ANN001, ANN202
        batches.append(len(episodes))
        if len(batches) == 3:
            raise RuntimeError("store went away mid-selection")
        return grounding_of(repo, episodes, mode)

    monkeypatch.setattr(export, "_grounding_of", third_batch_fails)
    with pytest.raises(RuntimeError, match="mid-selection") as failed:
        export.export_episodes(_request(data_dir, study_id, s3.url("out")))
    assert batches == [2, 2, 2]
    del failed  # its traceback holds the writer's frames: collected now, as at the end of a command
    gc.collect()
    assert s3.keys() == []
    assert s3.server.client().list_multipart_uploads(Bucket=s3.name).get("Uploads", []) == []

    monkeypatch.setattr(export, "_grounding_of", grounding_of)  # the next export to the same place works
    summary = export.export_episodes(_request(data_dir, study_id, s3.url("out")))
    assert summary.episodes == 7 and "out/stepmark_export.json" in s3.keys()


def test_outcomes_come_back_one_file_per_chunk_and_name_every_failed_episode(
    export_data: ExportData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """30 episodes, 6 of them registered with files that do not exist: the workers write one outcome file per
    chunk of the work file (what the last step reads), not one per episode, and each failed episode is still
    a dead letter with its reason."""
    data_dir = copy_data(export_data, tmp_path / "data")
    study_id = register_copies(data_dir, export_data.nethack[0], 24)
    with open_store(None, data_dir) as repo:
        good = repo.list_episodes(study_id=study_id)
        broken = []
        for i in range(6):
            copy = type(good[0])()
            copy.CopyFrom(good[i])
            copy.ClearField("id")
            copy.storage.environment_logger.tag_directory = f"missing-{i}"
            broken.append(copy)
        broken = repo.add_episodes(broken)

    monkeypatch.setattr(work_file, "SPREAD", 2)  # chunks of 1, 2, 3, then 4 episodes
    monkeypatch.setattr(work_file, "MAX_CHUNK", 4)
    chunks: list[work_file.Chunk] = []
    create = export.beam.Create

    def recorded(values, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        chunks.extend(values)
        return create(values, *args, **kwargs)

    progress: list[list[str]] = []  # what the progress folder holds when the last step reads it
    finish = export._finish_dataset

    def listed(plan, *args):  # noqa: ANN001, ANN002, ANN202
        below = export.storage.files_below(plan.job.progress_dir)
        progress.append([m.path.removeprefix(plan.job.progress_dir + "/") for m in below])
        return finish(plan, *args)

    monkeypatch.setattr(export.beam, "Create", recorded)
    monkeypatch.setattr(export, "_finish_dataset", listed)
    summary = export.export_episodes(_request(data_dir, study_id, str(tmp_path / "out"), "envlogger"))

    assert summary.episodes == 24 and sum(c.count for c in chunks) == 30
    assert len(chunks) == 12 and max(c.count for c in chunks) == 4
    files = progress[0]
    assert len(files) == len(chunks) == 12  # one per chunk: 12 files for 30 episodes
    assert all(f.startswith(episode_fn.DONE_DIR + "/") for f in files)
    names = [f"{b.study_id}/{b.session_id}/{b.id}" for b in broken]
    assert [d.episode for d in summary.dead_letters] == names  # in the selection's order
    assert {d.reason for d in summary.dead_letters} == {"unreadable"}
    assert all("missing-" in d.error for d in summary.dead_letters)
    letters = (tmp_path / "out" / export.DEAD_LETTERS_FILE).read_text().splitlines()
    assert len(letters) == 6 and all(n in "".join(letters) for n in names)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Repository]:
    """A real store: a SQLite file, and a fresh PostgreSQL database (tests/pg_fixture.py)."""
    url = None if request.param == "sqlite" else request.getfixturevalue("pg_url")
    with open_store(url, tmp_path / "store") as repo:
        yield repo


def test_a_page_whose_rows_vanish_after_its_keys_were_read_does_not_end_the_selection(
    store: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10 episodes read 3 at a time; the second page's 3 episodes are deleted (committed, by another
    connection) right after their keys were read. On PostgreSQL the rows of that page then read as nothing:
    the selection must go on from the page's last key, not take the empty page for the end."""
    study = store.create_study(study_spec(), ALICE)
    session = store.create_session(study.id, ALICE)
    added = store.add_episodes(env_episode(study.id, session) for _ in range(10))
    def delete_them(other: Repository) -> None:
        for episode in added[3:6]:
            assert other.delete_episode(Repository.ref(episode), ALICE)

    pages = _after_page(monkeypatch, store, 3, 2, delete_them)
    chosen = selection.select_episodes(store, selection.SelectionQuery(study_id=study.id))
    assert pages[1] == [e.id for e in added[3:6]]
    assert [e.id for e in chosen.episodes] == [e.id for e in added[:3] + added[6:]]
    assert chosen.skipped == []


_UNPICKLED: list[str] = []


def _ran_on_unpickling() -> str:
    _UNPICKLED.append("ran")
    return "ran"


class _Payload:
    def __reduce__(self):  # noqa: ANN204 - what a planted pickle would run when loaded
        return _ran_on_unpickling, ()


def test_a_work_file_is_read_only_by_the_export_that_wrote_it(
    export_data: ExportData, tmp_path: Path
) -> None:
    """Work files are pickles: a reader refuses one another writer made, or one replaced in the staging folder
    by a valid TFRecord holding a planted pickle, before unpickling anything."""
    from pipelines import tfrecord

    episode = export_data.nethack[0].SerializeToString()
    with work_file.WorkWriter(str(tmp_path / "mine")) as mine:
        for index in range(3):
            mine.add("ds", work_file.WorkItem(index, "train", episode))
    with work_file.WorkWriter(str(tmp_path / "other")) as other:
        other.add("ds", work_file.WorkItem(0, "train", episode))
    assert [i.index for i in work_file.iter_items(mine.path("ds"), mine.key)] == [0, 1, 2]
    assert [i.index for c in mine.chunks for i in work_file.read_chunk(c)] == [0, 1, 2]

    with pytest.raises(work_file.ForeignWorkFile, match="not a work file of this export"):
        list(work_file.iter_items(other.path("ds"), mine.key))  # another export's file
    unkeyed = work_file.Chunk("ds", mine.path("ds"), 0, 1, mine.chunks[0].size)
    with pytest.raises(work_file.ForeignWorkFile):
        list(work_file.read_chunk(unkeyed))  # a reference without the writer's key

    import pickle

    planted = tfrecord.encode(bytes(32) + pickle.dumps(_Payload()))
    Path(mine.path("ds")).write_bytes(planted)
    with pytest.raises(work_file.ForeignWorkFile):
        list(work_file.iter_items(mine.path("ds"), mine.key))
    with pytest.raises(work_file.ForeignWorkFile):
        list(work_file.read_chunk(work_file.Chunk("ds", mine.path("ds"), 0, 1, len(planted), mine.key)))
    assert _UNPICKLED == []
    pickle.loads(pickle.dumps(_Payload()))  # noqa: S301 - the payload does run when unpickled
    assert _UNPICKLED == ["ran"]


def _reads_held_open(store: Repository, writer: Repository, episode: object, note: str) -> object:
    """What another connection sees of the selection's reads between two of its pages. PostgreSQL: the
    connections idle in a transaction (they block ALTER TABLE, hold back VACUUM and end at a server's
    idle_in_transaction_session_timeout). SQLite: after a write, the WAL frames a checkpoint could not copy back
    (a read open since before the write pins them)."""
    import sqlite3

    import sqlalchemy as sa

    if store.engine.dialect.name == "postgresql":
        with store.engine.connect() as c:
            return c.execute(sa.text(
                "SELECT pid, state, query FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'"
            )).all()  # fmt: skip
    assert writer.set_notes(Repository.ref(episode), note, ALICE)
    with contextlib.closing(sqlite3.connect(store.engine.url.database)) as c:
        busy, frames, copied = c.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return [] if (busy, frames) == (0, copied) else [(busy, frames, copied)]


def test_no_read_of_the_selection_stays_open_between_its_pages(
    store: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10 episodes read 3 at a time, with the export's work between pages: each page is its own short read, so
    between pages no transaction of the selection is open (it held one read across every page)."""
    study = store.create_study(study_spec(), ALICE)
    session = store.create_session(study.id, ALICE)
    added = store.add_episodes(env_episode(study.id, session) for _ in range(10))
    monkeypatch.setattr(selection, "BATCH", 3)
    writer = Repository(store.engine)
    held, pages = [], []
    for batch in selection.iter_selected(store, selection.SelectionQuery(study_id=study.id), []):
        pages.append([e.id for e in batch])
        held.append(_reads_held_open(store, writer, added[0], f"written after page {len(pages)}"))
    assert [i for page in pages for i in page] == [e.id for e in added] and len(pages) == 4
    assert held == [[]] * 4


def test_a_session_marked_invalid_or_a_tag_removed_during_the_selection_is_honoured(
    store: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """12 episodes of two sessions, all tagged `keep`, selected by --tag 4 at a time. Right after the first
    page's keys are read, another connection marks one session INVALID and removes the tag from one episode of
    the first page and one of the last. The first page's rows are checked again when loaded (its episodes of
    the INVALID session are skipped as such, the untagged one left out); later pages are read after the change.
    Before, every key came from the first read's snapshot (SQLite) or the loaded rows were checked for their
    state only, and all of them were exported."""
    from pipelines.exporters.transform import episode_name
    from protos.rlds_creator import study_pb2

    study = store.create_study(study_spec(), ALICE)
    invalid, valid = store.create_session(study.id, ALICE), store.create_session(study.id, ALICE)
    added = store.add_episodes([env_episode(study.id, invalid if i % 2 else valid) for i in range(12)])
    for episode in added:
        assert store.add_episode_tag(Repository.ref(episode), "keep", ALICE)
    def change_them(other: Repository) -> None:
        other.set_session_state(invalid.id, study_pb2.Session.STATE_INVALID)
        for episode in (added[2], added[10]):
            assert other.remove_episode_tag(Repository.ref(episode), "keep", ALICE)

    pages = _after_page(monkeypatch, store, 4, 1, change_them)
    chosen = selection.select_episodes(store, selection.SelectionQuery(tag="keep"))
    assert pages[0] == [e.id for e in added[:4]]
    assert [e.id for e in chosen.episodes] == [
        e.id for i, e in enumerate(added) if i % 2 == 0 and i not in (2, 10)
    ]
    assert [(s.episode, s.reason) for s in chosen.skipped] == [
        (episode_name(added[1]), "session marked invalid"),
        (episode_name(added[3]), "session marked invalid"),
    ]


def test_the_work_key_stays_out_of_the_drivers_reprs() -> None:
    """The seal key is the work files' only protection: a logged or printed selection, plan or chunk (an error
    report, a debugger) must not show it."""
    key = b"\x07sealing-key-not-for-logs\x07" + bytes(6)
    chunk = work_file.Chunk("ds", "s3://b/_work/ds.tfrecord", 0, 1, 10, key)
    selected = export._Selected(
        groups=[], skipped=[], step_tag_labels=(), field_defs=(), work_files={"ds": chunk.path}, work_key=key,
        chunks=[chunk], episodes=1,
    )  # fmt: skip
    for shown in (repr(selected), repr(chunk)):
        assert "sealing-key" not in shown and repr(key) not in shown


def test_an_outcome_file_cut_short_fails_the_export_naming_it(
    many: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk's outcome file cut mid-record (a worker killed while writing it on a disk that shows partial
    files): the export fails with the file and the line named, not with a bare JSONDecodeError, and publishes
    nothing."""
    data_dir, study_id = many
    monkeypatch.setattr(work_file, "SPREAD", 1)  # chunks of 1, then 2 episodes
    monkeypatch.setattr(work_file, "MAX_CHUNK", 2)
    cut: list[tuple[str, int]] = []
    finish = export._finish_dataset

    def cut_short(plan, *args):  # noqa: ANN001, ANN002, ANN202
        done = [m.path for m in export.storage.files_below(plan.job.progress_dir) if m.path.endswith("-2")]
        data = Path(done[0]).read_bytes()
        keep = data[: data.index(b"\n") + 10]  # the first record and the start of the second
        Path(done[0]).write_bytes(keep)
        cut.append((done[0], 2))
        return finish(plan, *args)

    monkeypatch.setattr(export, "_finish_dataset", cut_short)
    out = tmp_path / "out"
    with pytest.raises(StepmarkError) as info:
        export.export_episodes(_request(data_dir, study_id, str(out)))
    path, line = cut[0]
    assert f"{path}: line {line} is not a whole outcome record" in str(info.value)
    assert not out.exists()

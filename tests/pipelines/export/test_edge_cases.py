"""Edges a training team hits: end-of-episode tags on the first and on the final step, and the temporary
folders of killed exports (removed by the next export to the same --out only when their process is gone)."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import export
from pipelines.errors import StepmarkError
from pipelines.exporters import staging
from pipelines.store import open_store
from tests.pipelines.export import readback
from tests.pipelines.export.export_data import ALICE, ExportData, copy_data


@pytest.fixture(scope="module")
def tagged(export_data: ExportData, tmp_path_factory: pytest.TempPathFactory) -> ExportData:
    """A private copy where Procgen episode 1 carries "stop" on step 0 and episode 0 on its final step."""
    data_dir = copy_data(export_data, tmp_path_factory.mktemp("edge") / "data")
    p0, p1 = export_data.procgen[:2]
    with open_store(None, data_dir) as repo:
        assert repo.add_step_tag(repo.ref(p1), 0, "stop", ALICE)
        assert repo.add_step_tag(repo.ref(p0), p0.num_steps, "stop", ALICE)  # the final observation
    return ExportData(
        data_dir=data_dir, study_id=export_data.study_id, procgen=export_data.procgen, nethack=[]
    )


def _request(data: ExportData, out: Path, **kw) -> export.ExportRequest:
    refs = [data.ref(e) for e in data.procgen]
    return export.ExportRequest(
        data_dir=str(data.data_dir), out=str(out), refs=refs, end_of_episode_tags=["stop"], **kw
    )


def test_end_tag_on_step_0_and_on_the_final_step_envlogger(tagged: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "el"
    summary = export.export_episodes(_request(tagged, out))
    p0, p1 = tagged.procgen[:2]
    # Cut at step 0: no transition is left (and dm_env has no one-record episode): left out, and said so.
    assert not summary.dead_letters and summary.episodes == 1
    (skipped,) = summary.skipped
    assert skipped["episode"] == export.episode_name(p1) and skipped["reason"].startswith("no_transition")
    assert "step 0" in skipped["reason"] and "stop" in skipped["reason"]
    read = {e["metadata"]["episode_id"]: e for e in readback.read_envlogger(out)}
    assert p1.id not in read
    # A tag on the final observation cuts nothing: the episode is whole with the store's statistics.
    whole = read[p0.id]
    assert len(whole["records"]) == p0.num_steps + 1 and whole["metadata"]["truncated_by_tag"] == ""
    assert whole["records"][-1]["step_type"] == 2 and whole["records"][-1]["custom_data"]["tag:stop"]
    assert whole["metadata"]["episode_length"] == p0.num_steps
    assert whole["metadata"]["episode_return"] == pytest.approx(p0.total_reward)
    assert whole["records"][-1]["custom_data"]["info"]["episode"]["l"] == p0.num_steps
    # info["episode"]: exactly r, l, s, mask with their types on every record; mask true on the last only.
    for episode in read.values():
        entries = [r["custom_data"]["info"]["episode"] for r in episode["records"]]
        for e in entries:  # envlogger's codec hands floats back as numpy.float64 (a float subclass)
            assert sorted(e) == ["l", "mask", "r", "s"]
            assert isinstance(e["r"], float) and type(e["l"]) is int
            assert type(e["s"]) is bool and type(e["mask"]) is bool
        assert [e["mask"] for e in entries] == [False] * (len(entries) - 1) + [True]


@pytest.mark.tfds
def test_end_tag_on_step_0_and_on_the_final_step_tfds(tagged: ExportData, tmp_path: Path) -> None:
    out = tmp_path / "tfds"
    summary = export.export_episodes(_request(tagged, out, format="tfds", strip_internal_metadata=True))
    p0, p1 = tagged.procgen[:2]
    assert not summary.dead_letters and summary.episodes == 1 and len(summary.skipped) == 1
    read = {e["episode_id"].decode(): e for e in readback.read_tfds(out)}
    assert p1.id not in read
    whole = read[p0.id]["steps"]
    assert len(whole) == p0.num_steps + 1 and whole[-1]["is_last"] and whole[-1]["tag:stop"]
    assert read[p0.id]["truncated_by_tag"] == b""
    assert int(whole[-1]["info"]["episode"]["l"]) == p0.num_steps
    assert float(whole[-1]["discount"]) == 0.0 and float(whole[-1]["reward"]) == 0.0
    for step in whole:
        entry = step["info"]["episode"]
        assert sorted(entry) == ["l", "mask", "r", "s"]
        assert [entry[k].dtype.name for k in ("r", "l", "s", "mask")] == ["float64", "int64", "bool", "bool"]


# --- temporary folders of killed exports --------------------------------------------------------------------


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _fake_staging(out: Path, pid: int, owner: dict | None, suffix: str) -> Path:
    folder = out.with_name(f"{out.name}.tmp-{pid}-{suffix}")
    folder.mkdir()
    (folder / "metadata.riegeli").write_bytes(b"half-written")
    if owner is not None:
        (folder / staging.OWNER_FILE).write_text(json.dumps(owner))
    return folder


def test_next_export_removes_temp_folders_of_dead_exports_only(
    export_data: ExportData, tmp_path: Path
) -> None:
    out = tmp_path / "ds"
    host, me, dead = socket.gethostname(), os.getpid(), _dead_pid()
    my_start = staging.process_start(me)
    assert my_start  # /proc is there: the start time identifies this process
    gone = _fake_staging(out, dead, {"host": host, "pid": dead, "start": "1"}, "0" * 12)
    gone_no_owner = _fake_staging(out, dead, None, "1" * 12)
    reused_pid = _fake_staging(out, me, {"host": host, "pid": me, "start": "1"}, "2" * 12)
    live = _fake_staging(out, me, {"host": host, "pid": me, "start": my_start}, "3" * 12)
    other_host = _fake_staging(out, dead, {"host": host + "-elsewhere", "pid": dead, "start": "1"}, "4" * 12)
    # Other outputs in the folder (the annotator names every export anew): only provable export folders.
    other_out = _fake_staging(
        tmp_path / "export-1", dead, {"host": host, "pid": dead, "start": "1"}, "5" * 12
    )
    other_out_live = _fake_staging(
        tmp_path / "export-2", me, {"host": host, "pid": me, "start": my_start}, "6" * 12
    )
    not_ours = tmp_path / f"dsx.tmp-{dead}-{'7' * 12}"
    not_ours.mkdir()

    export.export_episodes(
        export.ExportRequest(
            data_dir=str(export_data.data_dir), out=str(out), refs=[export_data.ref(export_data.procgen[0])]
        )
    )
    assert not gone.exists() and not gone_no_owner.exists() and not reused_pid.exists()
    assert not other_out.exists()
    assert live.exists() and other_host.exists() and other_out_live.exists() and not_ours.exists()
    assert len(readback.read_envlogger(out)) == 1
    assert not (out / staging.OWNER_FILE).exists()  # the owner file never ends up in a dataset


def test_episode_without_success_is_a_dead_letter_naming_it(export_data: ExportData, tmp_path: Path) -> None:
    """A statistic neither stored nor in the steps is an error at export, never a zero/false default."""
    if len(export_data.ui) < 2:
        pytest.fail("needs two converted UI traces")
    data_dir = copy_data(export_data, tmp_path / "data")
    victim = export_data.ui[1]
    with sqlite3.connect(data_dir / "stepmark.db") as db:  # a store row written before success was recorded
        changed = db.execute(
            "UPDATE episodes SET metadata = json_remove(metadata, '$.success') WHERE id = ?", (victim.id,)
        ).rowcount
    assert changed == 1
    out = tmp_path / "out"
    summary = export.export_episodes(
        export.ExportRequest(data_dir=str(data_dir), out=str(out), study_id=export_data.ui_study_id)
    )
    (letter,) = [d for d in summary.dead_letters if d.episode == export.episode_name(victim)]
    assert letter.reason == "missing_statistic"
    assert victim.id in letter.error and "success" in letter.error
    exported = [e["metadata"]["episode_id"] for e in readback.read_envlogger(out)]
    # The other one-screen trace has no recorded action: no transition, left out (listed in `skipped`).
    assert victim.id not in exported and exported == [export_data.ui[0].id]
    assert json.loads((out / export.DEAD_LETTERS_FILE).read_text())["reason"] == "missing_statistic"


@pytest.mark.parametrize("as_zip", [True, False])
def test_output_appearing_during_the_export_is_never_replaced(
    export_data: ExportData, tmp_path: Path, as_zip: bool
) -> None:
    """Two exports to one --out both pass the up-front check; the one finishing second must not replace the
    first one's result (a plain rename would silently overwrite a ZIP, or replace an empty folder)."""
    out = tmp_path / ("ds.zip" if as_zip else "ds")

    def someone_else_writes_out(percent: float) -> None:
        if percent == 0.0 and not out.exists():  # reported after the check, before anything is written
            if as_zip:
                out.write_text("the other export")
            else:
                out.mkdir()

    request = export.ExportRequest(
        data_dir=str(export_data.data_dir),
        out=str(out),
        refs=[export_data.ref(export_data.procgen[0])],
        archive=as_zip,
    )
    with pytest.raises(StepmarkError, match="appeared while exporting"):
        export.export_episodes(request, someone_else_writes_out)
    if as_zip:
        assert out.read_text() == "the other export"
    else:
        assert out.is_dir() and not any(out.iterdir())
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary folder left either


def test_the_cycle_collector_is_off_only_inside_one_episode():
    """The export turns Python's cycle collector off while it handles one episode, and gives it back as it
    was: on after the episode, on after a failing one, still off when the caller had turned it off."""
    import gc

    from pipelines.exporters.episode_fn import _no_cycle_collection

    assert gc.isenabled()
    with _no_cycle_collection():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), _no_cycle_collection():
        raise ValueError("a bad episode")
    assert gc.isenabled()
    gc.disable()
    try:
        with _no_cycle_collection():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()

"""Long runs written in record parts (issue 32 item 3, schemas/ui_episode.md "Episodes in parts"): the real
DroidBot run converted with a small part size is split into several records, and every reader (inspect, the
record readers the player uses, import-ui, an export) sees one episode with every step in order, the same bytes
as the run converted whole; an output missing a part is refused, never read as a shorter episode."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pipelines import export, tfrecord, ui_episode, ui_import, ui_records
from pipelines.episodes import open_episode
from pipelines.errors import StepmarkError
from pipelines.store import open_store
from protos.stepmark import ui_episode_pb2
from stepmark.cmd_convert import folder_summary
from tests.pipelines.export import readback
from tests.pipelines.test_convert import convert
from tests.pipelines.test_traces import build_droidbot

#: A part size a few of the run's 32 steps fill (each carries a 0.1-0.3 MB screenshot and its state's JSON).
SMALL_PART = 1 << 20


def records(output: Path) -> list[tuple[str, int, bytes]]:
    return list(ui_records.iter_records(str(output)))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> tuple[Path, Path]:
    """(the yelp run converted whole, the same run converted in parts)."""
    tmp = tmp_path_factory.mktemp("long")
    run = build_droidbot(tmp / "runs" / "yelp", fixtures_dir)
    whole = tmp / "whole"
    convert(run.parent, whole)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ui_episode, "PART_BYTES", SMALL_PART)
        parted = tmp / "parted"
        summary = convert(run.parent, parted)
    assert summary["episodes"] == 1 and summary["steps"] == 32
    return whole, parted


def test_parts_are_written_in_order_and_merge_to_the_whole_episode(outputs: tuple[Path, Path]) -> None:
    whole, parted = outputs
    ((_, _, data),) = records(whole)
    assert not ui_episode_pb2.UiEpisode.FromString(data).HasField("part")
    parts = [ui_episode_pb2.UiEpisode.FromString(d) for _, _, d in records(parted)]
    assert len(parts) >= 3
    assert [(p.part.episode_id, p.part.index, p.part.count) for p in parts] == [
        ("yelp", i, len(parts)) for i in range(len(parts))
    ]
    sizes = [len(p.episode.time_steps) for p in parts]
    assert [p.part.first_step for p in parts] == [sum(sizes[:i]) for i in range(len(parts))]
    assert all(p.episode_id == "yelp" and p.metadata["source_steps"] == "35" for p in parts)
    # Lossless: the parts merged are the whole conversion, byte for byte.
    (merged,) = list(ui_records.iter_episodes(str(parted)))
    assert merged.SerializeToString(deterministic=True) == data
    assert [ts.index for ts in merged.episode.time_steps] == list(range(32))
    assert ui_records.find_episode(str(parted), "yelp").SerializeToString(deterministic=True) == data
    (ref,) = ui_records.index_records(str(parted))
    assert (ref.offset, ref.num_steps) == (0, 32)
    assert ui_records.read_episode(ref.shard, ref.offset).SerializeToString(deterministic=True) == data


def test_inspect_import_player_and_export_see_one_episode(outputs: tuple[Path, Path], tmp_path: Path) -> None:
    whole, parted = outputs
    (expected,) = list(ui_records.iter_episodes(str(whole)))
    inspected = folder_summary(str(parted))
    assert (inspected["episodes"], inspected["steps"]) == (1, 32)
    assert {k: v for k, v in inspected.items() if k != "path"} == {
        k: v for k, v in folder_summary(str(whole)).items() if k != "path"
    }
    data_dir = tmp_path / "data"
    os.makedirs(data_dir)
    with open_store(None, data_dir) as repo:
        result = ui_import.import_records(repo, parted, "Long runs", "alice@example.com")
        assert (result.added, result.skipped) == (1, 0)
        (stored,) = repo.list_episodes(study_id=result.study.id)
    assert stored.num_steps == 32
    with open_episode(stored, data_dir) as reader:  # the player's data path
        assert len(reader) == 32
        shots = [reader.record.episode.time_steps[i].observation.screenshot for i in range(len(reader))]
    assert shots == [ts.observation.screenshot for ts in expected.episode.time_steps]
    out = tmp_path / "export"
    summary = export.export_episodes(export.ExportRequest(data_dir=str(data_dir), out=str(out),
                                                          study_id=result.study.id))  # fmt: skip
    assert summary.episodes == 1 and not summary.dead_letters
    (read,) = readback.read_envlogger(out)
    exported = [r["observation"]["screenshot"] for r in read["records"]]
    assert exported[:32] == shots and len(exported) == 33  # + the placeholder after the last action


def rewrite(output: Path, dest: Path, gone: int) -> Path:
    """A copy of the output without its record number `gone`."""
    shutil.copytree(output, dest)
    (shard,) = sorted(dest.glob("episodes-*.tfrecord"))
    kept = [data for i, (_, _, data) in enumerate(records(output)) if i != gone]
    shard.write_bytes(b"".join(tfrecord.encode(d) for d in kept))
    return dest


@pytest.mark.parametrize("missing", ["first", "middle", "last"])
def test_a_missing_part_is_refused(outputs: tuple[Path, Path], tmp_path: Path, missing: str) -> None:
    _, parted = outputs
    n = len(records(parted))
    gone = {"first": 0, "middle": n // 2, "last": n - 1}[missing]
    cut = rewrite(parted, tmp_path / "cut", gone)
    with pytest.raises(StepmarkError, match="missing"):
        list(ui_records.iter_episodes(str(cut)))
    with pytest.raises(StepmarkError, match="missing"):
        ui_records.index_records(str(cut))
    with pytest.raises(StepmarkError, match="missing"):
        list(ui_import.iter_headers(cut))
    (shard,) = sorted(cut.glob("episodes-*.tfrecord"))
    if missing != "first":  # the player opens the episode at its first part
        with pytest.raises(StepmarkError, match="missing"):
            ui_records.read_episode(str(shard), 0)


def test_guessed_sizes_wait_for_a_later_screenshot_across_parts(tmp_path: Path, fixtures_dir: Path) -> None:
    """Steps are converted one at a time: dialogs without a screenshot (their size a guess) are held back until
    a later step shows the display, then sized on it, though parts were spilled in between (item 5's rule)."""
    from pipelines.traces import discover, files, read_episode
    from tests.pipelines.screenshot_first import screenshot
    from tests.pipelines.test_display_size import dialog_dump

    folder = tmp_path / "run"
    folder.mkdir()
    home = (fixtures_dir / "uiautomator" / "fractal-forge_ui_controls.xml").read_bytes()
    for i in range(6):  # dialogs 0-2 and 4-5, the home screen with its screenshot at 3
        (folder / f"{i}.xml").write_bytes(home if i == 3 else dialog_dump(fixtures_dir))
    (folder / "3.png").write_bytes(screenshot((1080, 2400), 5))
    (source,) = [s for s in discover(str(folder)) if hasattr(s, "files")]
    spilled: list[bytes] = []
    result = ui_episode.convert_episode(read_episode(source, files.read_bytes), files.read_bytes,
                                        spill=spilled.append, part_bytes=1)  # fmt: skip
    assert len(spilled) == 5 and result.spilled == [0, 1, 2, 3, 4] and result.num_steps == 6
    steps = [ui_episode_pb2.UiEpisode.FromString(p) for p in spilled] + [result.episode]
    assert [s.episode.time_steps[0].index for s in steps] == list(range(6))
    for part in steps:
        obs = part.episode.time_steps[0].observation
        assert (obs.screen_width, obs.screen_height) == (1080, 2400)
    assert "from step 3's screenshot" in " ".join(steps[0].step_info[0].warnings)
    whole = ui_episode.convert_episode(read_episode(source, files.read_bytes), files.read_bytes).episode
    merged = ui_episode_pb2.UiEpisode()
    merged.CopyFrom(result.episode)
    for name in ("episode", "actions", "step_info"):
        merged.ClearField(name)
    for part in steps:  # the spilled parts hold steps only (convert_guarded adds the header to each)
        merged.episode.time_steps.extend(part.episode.time_steps)
        merged.actions.extend(part.actions)
        merged.step_info.extend(part.step_info)
    assert merged.SerializeToString(deterministic=True) == whole.SerializeToString(deterministic=True)

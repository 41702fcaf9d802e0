"""The duplicate rule of convert-ui (schemas/layouts.md, "Duplicate records"), on inputs written by the tests'
independent writers from the real fixtures: records that repeat byte for byte are read once (counted with the
`duplicate_records_collapsed` metric and noted in the episode's warnings); differing records claiming one
AndroidControl episode id (or one id across AndroidControl and AITW) are all `duplicate_episode` dead letters;
an AITW step id with differing records keeps none of them; a record id equal to a folder episode's gets a `~2`
suffix; forest files of one screen in two forms, and a single screen beside a step folder of the same name,
keep distinct episodes."""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from google.protobuf import text_format

from pipelines import ui_records
from pipelines.convert import run
from pipelines.convert_records import ReadRecordInputs
from pipelines.traces.discover import RECORD_FILE
from pipelines.traces.model import EpisodeSource
from tests.pipelines.record_writers import forest_from_dump, png_from, write_tfrecord
from tests.pipelines.test_aitw import step as aitw_step
from tests.pipelines.test_android_control import ACTIONS, FRACTAL, VISION, H, W
from tests.pipelines.test_android_control import _episode as control_episode


def _control(fixtures_dir: Path, episode_id: int, goal: bytes, screens: list[str]) -> bytes:
    """An AndroidControl episode record of `screens` with a click then a scroll (as far as there are steps)."""
    shot = png_from(fixtures_dir / "rico" / "33600.jpg", W, H)
    forests = [forest_from_dump((fixtures_dir / "uiautomator" / n).read_bytes()).SerializeToString() for n in screens]
    actions = [json.dumps(a) for a in (ACTIONS[0], ACTIONS[2])][: len(screens) - 1]
    instructions = [b"tap the ocean palette", b"scroll down"][: len(actions)]
    return control_episode(fixtures_dir, episode_id, forests, actions, instructions, goal, [shot] * len(screens))


def _record_inputs(fixtures_dir: Path, folder: Path) -> tuple[Path, Path, Path]:
    """Three GZIP TFRecord files with the duplicate cases; returns their paths."""
    same = _control(fixtures_dir, 201, b"Same episode in two files", [FRACTAL, FRACTAL, VISION])
    first = _control(fixtures_dir, 202, b"One id", [FRACTAL, VISION])
    other = _control(fixtures_dir, 202, b"Another episode, same id", [VISION, FRACTAL])
    control_203 = _control(fixtures_dir, 203, b"AndroidControl 203", [FRACTAL, VISION])
    aitw_203 = aitw_step(fixtures_dir, "203", 0, 1, "336", 10)
    steps = [aitw_step(fixtures_dir, "copied", i, 3, s, 5) for i, s in enumerate(["336", "3360", "33603"])]
    mixed = [aitw_step(fixtures_dir, "mixed", i, 3, s, 6) for i, s in enumerate(["336", "3360", "33603"])]
    mixed_again = aitw_step(fixtures_dir, "mixed", 1, 3, "33605", 6)  # step 1 again, another screen
    a = write_tfrecord(folder / "a.tfrecord.gz", [same, first, control_203, *steps[:2], mixed[0], mixed[1]])
    b = write_tfrecord(folder / "b.tfrecord.gz", [other, same, aitw_203, *steps, mixed_again, mixed[2]])
    c = write_tfrecord(folder / "c.tfrecord.gz", [steps[2], same])  # more copies, in a third file
    return a, b, c


def test_duplicate_records_end_to_end(tmp_path: Path, fixtures_dir: Path) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    _record_inputs(fixtures_dir, inp)
    assert run([str(inp), str(out), "--quiet", "--shards=2"]) == 0
    episodes = {e.episode_id: e for e in ui_records.iter_episodes(str(out))}
    assert sorted(episodes) == ["201", "copied", "mixed"]  # each id once in the output

    # byte-identical copies (three of 201, two of each "copied" step): read once, noted, no dead letter
    same = episodes["201"]
    assert len(same.episode.time_steps) == 3 and same.goal == "Same episode in two files"
    note = same.metadata["warnings"]
    assert "2 record(s) repeat another record of this episode byte for byte" in note
    assert "b.tfrecord.gz@" in note and "c.tfrecord.gz@" in note
    copied = episodes["copied"]
    assert [i.index for i in copied.step_info] == [0, 1, 2]
    assert "3 record(s) repeat" in copied.metadata["warnings"]

    dead = list(ui_records.read_dead_letters(str(out)))
    by_id: dict[str, list] = {}
    for d in dead:
        by_id.setdefault(d.episode_id, []).append(d)
    assert sorted(by_id) == ["202", "203", "mixed"]
    # differing AndroidControl records with one id: none converted, each a dead letter naming both records
    assert [d.reason for d in by_id["202"]] == ["duplicate_episode"] * 2
    assert sorted(Path(d.source_path).name for d in by_id["202"]) == ["a.tfrecord.gz", "b.tfrecord.gz"]
    for d in by_id["202"]:
        assert "episode id 202 is claimed by 2 differing records (android_control)" in d.exception
        assert "a.tfrecord.gz@" in d.exception and "b.tfrecord.gz@" in d.exception
        assert "none is converted" in d.exception
    # one id claimed by an AndroidControl episode and an AITW step
    assert [d.reason for d in by_id["203"]] == ["duplicate_episode"] * 2
    assert "(aitw, android_control)" in by_id["203"][0].exception
    # an AITW step id with two differing records keeps neither; the other steps stay
    assert sorted((d.reason, d.step) for d in by_id["mixed"]) == [("duplicate_step", 1), ("duplicate_step", 1)]
    assert [i.index for i in episodes["mixed"].step_info] == [0, 2]
    assert episodes["mixed"].metadata["dropped_steps"] == "1"

    summary = ui_records.read_summary(str(out))
    assert summary["discovered_episodes"] == 5  # distinct ids: 201, 202, 203, copied, mixed
    assert summary["episodes"] == 3
    assert summary["dead_letters_by_reason"] == {"duplicate_episode": 4, "duplicate_step": 2}
    assert summary["duplicate_records_collapsed"] == 2 + 3  # two copies of 201, three repeated "copied" steps


def test_collapsed_copies_are_counted(tmp_path: Path, fixtures_dir: Path) -> None:
    """The `duplicate_records_collapsed` counter of the record transforms, read from the runner's metrics."""
    paths = _record_inputs(fixtures_dir, tmp_path)
    pipeline = beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"]))
    sources = [EpisodeSource(RECORD_FILE, p.name, str(p), (str(p),)) for p in paths]
    _ = pipeline | beam.Create(sources) | ReadRecordInputs("test")
    result = pipeline.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name("duplicate_records_collapsed"))["counters"]
    assert sum(c.committed for c in counters) == 2 + 3  # two copies of 201, three repeated "copied" steps
    dead = result.metrics().query(MetricsFilter().with_name("dead_letter_duplicate_episode"))["counters"]
    assert sum(c.committed for c in dead) == 4


def test_forest_files_of_one_name(tmp_path: Path, fixtures_dir: Path) -> None:
    """`.pb` and `.textproto` forests of one screen are one step (the first form by the documented order is
    read, the other named in a warning); a single screen and a step folder of one name stay two episodes."""
    inp, out = tmp_path / "in", tmp_path / "out"
    (inp / "screens" / "home").mkdir(parents=True)
    fractal = forest_from_dump((fixtures_dir / "uiautomator" / FRACTAL).read_bytes())
    vision = forest_from_dump((fixtures_dir / "uiautomator" / VISION).read_bytes())
    shot = png_from(fixtures_dir / "rico" / "33600.jpg", 1080, 2400)
    (inp / "screens" / "home.pb").write_bytes(fractal.SerializeToString())
    (inp / "screens" / "home.textproto").write_text(text_format.MessageToString(vision))
    (inp / "screens" / "home.png").write_bytes(shot)
    folder = inp / "screens" / "home"  # a step folder named like the single screen beside it
    (folder / "0.pb").write_bytes(fractal.SerializeToString())
    (folder / "0.textproto").write_text(text_format.MessageToString(fractal))
    (folder / "1.textproto").write_text(text_format.MessageToString(vision))
    assert run([str(inp), str(out), "--quiet", "--shards=1"]) == 0
    episodes = {e.episode_id: e for e in ui_records.iter_episodes(str(out))}
    assert sorted(episodes) == ["screens/home", "screens/home~2"]
    by_source = {e.source: e for e in episodes.values()}
    single, steps = by_source["single_screen"], by_source["step_folder"]
    assert single.step_info[0].hierarchy_path.endswith("home.pb")
    assert "also found home.textproto for this screen; not used" in single.step_info[0].warnings
    assert len(single.episode.time_steps[0].observation.objects) == sum(len(w.tree.nodes) for w in fractal.windows)
    assert [i.hierarchy_path.rsplit("/", 1)[1] for i in steps.step_info] == ["0.pb", "1.textproto"]
    assert "also found 0.textproto for this step; not used" in steps.step_info[0].warnings
    assert list(ui_records.read_dead_letters(str(out))) == []


def test_record_id_equal_to_a_folder_episode(tmp_path: Path, fixtures_dir: Path) -> None:
    """An AndroidControl id that a file layout's episode also has (a folder `301/`): the folder keeps its id,
    the record episode gets discovery's `~2` suffix and a note; nothing is dropped."""
    inp, out = tmp_path / "in", tmp_path / "out"
    (inp / "301").mkdir(parents=True)
    fractal = forest_from_dump((fixtures_dir / "uiautomator" / FRACTAL).read_bytes())
    (inp / "301" / "0.pb").write_bytes(fractal.SerializeToString())
    (inp / "301" / "1.pb").write_bytes(fractal.SerializeToString())
    write_tfrecord(inp / "control.tfrecord.gz", [_control(fixtures_dir, 301, b"Record 301", [FRACTAL, VISION])])
    assert run([str(inp), str(out), "--quiet", "--shards=3"]) == 0
    episodes = {e.episode_id: e for e in ui_records.iter_episodes(str(out))}
    assert sorted(episodes) == ["301", "301~2"]
    assert episodes["301"].source == "step_folder"
    record = episodes["301~2"]
    assert record.source == "android_control" and record.goal == "Record 301"
    assert "episode id 301 is also a file layout's episode: converted as 301~2" in record.metadata["warnings"]
    assert list(ui_records.read_dead_letters(str(out))) == []

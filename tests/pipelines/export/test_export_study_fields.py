"""Study fields in exports (pipelines/exporters/study_fields.py): one typed column per field, its origin and its
source (a model's name for a value accepted from its suggestion), on the Parquet, envlogger, Minari and TFDS paths, for each --annotations mode, read back with pyarrow's and envlogger's own
readers (the UI episode converted from the DroidBot run in ../shared/fixtures)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines import export
from pipelines.exporters import parquet_writer
from pipelines.store import field_values as fv
from pipelines.store import open_store
from pipelines.store.field_defs import parse_text
from tests.object_store import Bucket
from tests.pipelines.export.export_data import ALICE, ExportData, copy_data
from tests.pipelines.export.readback import read_envlogger

BOB = "bob@example.com"
MODEL = "model:demo-vlm@1"
FIELDS = """
fields:
  - {name: step_instruction, scope: step, kind: text}
  - {name: action_correct, scope: step, kind: choice, options: [yes, no, unsure]}
  - {name: task_success, scope: episode, kind: boolean}
  - {name: confidence, scope: step, kind: number, min: 0, max: 5}
  - {name: problems, scope: segment, kind: multi_choice, options: [slow, wrong_app, loop]}
  - {name: old_field, scope: step, kind: text}
"""


@pytest.fixture(scope="module")
def annotated(export_data: ExportData, tmp_path_factory: pytest.TempPathFactory):
    data_dir = copy_data(export_data, tmp_path_factory.mktemp("fields") / "data")
    repo = open_store(None, data_dir)
    episode = repo.get_episode(export_data.ref(export_data.ui[0]))
    ref = export_data.ref(episode)
    creator = repo.get_study(episode.study_id).creator.email
    fv.define(repo, episode.study_id, parse_text(FIELDS, "f.yaml"), creator)
    fv.set_value(repo, ref, "step_instruction", ALICE, "open the menu", step=1, suggested=["open the menu"])
    fv.set_value(repo, ref, "step_instruction", BOB, "open the menu", step=1)
    fv.set_value(repo, ref, "action_correct", ALICE, "yes", step=1)
    fv.set_value(repo, ref, "action_correct", BOB, "no", step=1)
    fv.set_value(repo, ref, "task_success", ALICE, True)
    fv.set_value(repo, ref, "confidence", ALICE, 4, step=2)
    suggestions = tmp_path_factory.mktemp("suggestions") / "model.jsonl"
    suggestions.write_text(json.dumps({"episode": episode.id, "step": 2, "field": "action_correct", "value": "unsure",
                                       "source": MODEL}) + "\n")  # fmt: skip
    fv.import_values(repo, episode.study_id, suggestions, creator)
    fv.set_value(repo, ref, "action_correct", ALICE, "unsure", step=2)  # accepted from the model
    fv.set_value(repo, ref, "problems", ALICE, ["loop", "slow"], step=1, end=2)
    fv.set_value(repo, ref, "old_field", ALICE, "kept", step=0)
    # the field is removed from the study afterwards: its value stays exported
    fv.define(repo, episode.study_id, parse_text(FIELDS.split("  - {name: old_field")[0], "f.yaml"), creator)
    repo.close()
    return {"data_dir": data_dir, "episode": episode}


def _export(annotated, out: Path | str, fmt: str, mode: str, user: str = "") -> Path | str:
    request = export.ExportRequest(data_dir=str(annotated["data_dir"]), out=str(out), format=fmt,
                                   study_id=annotated["episode"].study_id, annotations=mode, user=user)  # fmt: skip
    assert not export.export_episodes(request).dead_letters
    return out


def _parquet_rows(path: Path, episode_id: str):
    table = pq.read_table(path / "data")
    rows = [r for r in table.to_pylist() if r["episode_id"] == episode_id]
    return table.schema, sorted(rows, key=lambda r: r["step_index"])


def test_parquet_columns_are_typed_and_say_where_each_value_came_from(annotated, tmp_path: Path) -> None:
    schema, rows = _parquet_rows(_export(annotated, tmp_path / "c", "parquet", "consensus"), annotated["episode"].id)
    types = {n: str(schema.field(n).type) for n in schema.names if n.startswith("field:")}
    assert types == {
        **{f"field:{name}:{what}": "string" for name in ("step_instruction", "action_correct", "task_success",
                                                          "confidence", "problems", "old_field")
           for what in ("origin", "source")},
        "field:step_instruction": "string", "field:action_correct": "string", "field:task_success": "bool",
        "field:confidence": "double", "field:problems": "list<element: bool>", "field:old_field": "string",
    }  # fmt: skip
    meta = json.loads(schema.metadata[parquet_writer.METADATA_KEY])
    fields = {d["name"]: d for d in meta["study_fields"]}
    assert fields["old_field"]["active"] is False and fields["problems"]["options"] == ["slow", "wrong_app", "loop"]
    # consensus: both annotators wrote the same instruction (Alice accepted the suggestion); they split on
    # action_correct (no majority: empty); Alice alone gave the rest (a majority of one)
    assert (rows[1]["field:step_instruction"], rows[1]["field:step_instruction:origin"]) == ("open the menu", "accepted")
    assert (rows[1]["field:action_correct"], rows[1]["field:action_correct:origin"]) == ("", "")
    assert [r["field:task_success"] for r in rows] == [True] * len(rows)
    assert rows[2]["field:confidence"] == 4.0 and math.isnan(rows[0]["field:confidence"])
    assert [r["field:problems"] for r in rows[:4]] == [[False] * 3, [True, False, True], [True, False, True], [False] * 3]
    assert rows[0]["field:old_field"] == "kept" and rows[0]["field:old_field:origin"] == "scratch"
    # who each value came from: the model whose suggestion Alice accepted, the converted step text, the annotator
    sources = {(i, name): (rows[i][f"field:{name}"], rows[i][f"field:{name}:origin"], rows[i][f"field:{name}:source"])
               for i, name in ((2, "action_correct"), (1, "step_instruction"), (0, "old_field"), (2, "confidence"),
                               (0, "action_correct"))}  # fmt: skip
    assert sources == {
        (2, "action_correct"): ("unsure", "accepted", MODEL), (1, "step_instruction"): ("open the menu", "accepted", "episode"),
        (0, "old_field"): ("kept", "scratch", ALICE), (2, "confidence"): (4.0, "scratch", ALICE),
        (0, "action_correct"): ("", "", ""),
    }  # fmt: skip


def test_parquet_with_fields_written_to_a_bucket_is_the_local_one(
    annotated, s3: Bucket, tmp_path: Path
) -> None:
    """The README's promise for `--out s3://...`: the same dataset, byte for byte, `field:` columns included
    (the bucket is tests/object_store.py's local S3 server)."""
    local = tmp_path / "local"
    _export(annotated, local, "parquet", "consensus")
    _export(annotated, s3.url("fields"), "parquet", "consensus")
    remote = {k.removeprefix("fields/"): s3.get(k) for k in s3.keys("fields/")}
    files = {p.relative_to(local).as_posix(): p.read_bytes() for p in local.rglob("*") if p.is_file()}
    assert sorted(remote) == sorted(files) and any(name.endswith(".parquet") for name in files)
    for name, data in files.items():
        assert remote[name] == data, name
    table = pq.read_table(io.BytesIO(next(d for n, d in remote.items() if n.endswith(".parquet"))))
    assert "field:problems" in table.schema.names and "field:step_instruction:origin" in table.schema.names


def test_each_mode_on_parquet_and_envlogger(annotated, tmp_path: Path) -> None:
    episode_id = annotated["episode"].id
    _, mine = _parquet_rows(_export(annotated, tmp_path / "m", "parquet", "mine", BOB), episode_id)
    assert (mine[1]["field:action_correct"], mine[1]["field:step_instruction:origin"]) == ("no", "scratch")
    assert (mine[1]["field:step_instruction:source"], mine[2]["field:action_correct:source"]) == (BOB, "")
    assert mine[0]["field:task_success"] is False and mine[0]["field:task_success:origin"] == ""
    _, everyone = _parquet_rows(_export(annotated, tmp_path / "a", "parquet", "all"), episode_id)
    assert everyone[1]["field:action_correct"] == "no"  # the newest wins
    schema, _ = _parquet_rows(_export(annotated, tmp_path / "n", "parquet", "none"), episode_id)
    assert not [n for n in schema.names if n.startswith("field:")]

    out = _export(annotated, tmp_path / "e", "envlogger", "consensus")
    episode = next(e for e in read_envlogger(out) if e["metadata"]["episode_id"] == episode_id)
    custom = [r["custom_data"] for r in episode["records"]]
    assert custom[1]["field:step_instruction"] == "open the menu"
    assert custom[1]["field:step_instruction:origin"] == "accepted"
    assert (custom[2]["field:action_correct:origin"], custom[2]["field:action_correct:source"]) == ("accepted", MODEL)
    assert np.asarray(custom[2]["field:problems"]).tolist() == [True, False, True]
    assert custom[2]["field:confidence"] == 4.0 and bool(custom[0]["field:task_success"]) is True


def test_minari_infos_carry_the_fields(annotated, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    minari = pytest.importorskip("minari")
    request = export.ExportRequest(data_dir=str(annotated["data_dir"]), out=str(tmp_path / "fields-v0"),
                                   format="minari", study_id=annotated["episode"].study_id, annotations="consensus",
                                   ui_objects="padded:16")  # fmt: skip
    assert not export.export_episodes(request).dead_letters
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    ds = minari.load_dataset("fields-v0")
    fields = {d["name"] for d in ds.storage.metadata["stepmark_export"]["study_fields"]}
    assert "action_correct" in fields and "old_field" in fields
    (ep,) = [e for e in ds.iterate_episodes()]
    infos = ep.infos
    assert infos["field:step_instruction"][1] == b"open the menu"  # HDF5 text comes back as UTF-8 bytes
    assert infos["field:step_instruction:origin"][1] == b"accepted"
    assert infos["field:action_correct:source"][2] == MODEL.encode() and infos["field:old_field:source"][0] == ALICE.encode()
    assert np.asarray(infos["field:problems"][2]).tolist() == [True, False, True]
    assert float(infos["field:confidence"][2]) == 4.0 and bool(infos["field:task_success"][0]) is True


@pytest.mark.tfds
def test_tfds_features_carry_the_fields(annotated, tmp_path: Path) -> None:
    from tests.pipelines.export.readback import read_tfds

    out = _export(annotated, tmp_path / "t", "tfds", "consensus")
    (episode,) = [e for e in read_tfds(out) if e["episode_id"].decode() == annotated["episode"].id]
    steps = episode["steps"]
    assert steps[1]["field:step_instruction"] == b"open the menu"
    assert steps[1]["field:step_instruction:origin"] == b"accepted"
    assert steps[2]["field:action_correct:source"] == MODEL.encode() and steps[1]["field:step_instruction:source"] == b"episode"
    assert steps[2]["field:problems"].tolist() == [True, False, True]
    assert steps[2]["field:confidence"] == 4.0 and bool(steps[0]["field:task_success"]) is True


def test_where_segments_overlap_the_newest_chosen_value_wins(export_data: ExportData, tmp_path: Path) -> None:
    """Two overlapping segments whose places were created in the opposite order of their values' times, and an
    adjudicated place (its own time) older than a segment's values: the newest chosen value wins, whatever the
    order the places were created in."""
    from pipelines.exporters import study_fields

    data_dir = copy_data(export_data, tmp_path / "data")
    repo = open_store(None, data_dir)
    episode = repo.get_episode(export_data.ref(export_data.ui[0]))
    ref = export_data.ref(episode)
    creator = repo.get_study(episode.study_id).creator.email
    fv.define(repo, episode.study_id, parse_text(FIELDS, "f.yaml"), creator)
    fv.set_value(repo, ref, "problems", ALICE, ["slow"], step=1, end=3)  # place A is created first
    fv.set_value(repo, ref, "problems", ALICE, ["loop"], step=2, end=4)  # place B
    fv.set_value(repo, ref, "problems", BOB, ["wrong_app"], step=1, end=3)  # then A holds the newest value
    defs, resolved = study_fields.load(repo, [episode], "all", None)
    flags = [study_fields.step_columns(defs, resolved[episode.id], i)["field:problems"] for i in range(5)]
    assert flags[2:4] == [[False, True, False]] * 2  # A's newest value (wrong_app), not B's older one (loop)
    assert flags[4] == [False, False, True]

    # consensus: an adjudication decided before B's values is older than B, although its place comes last
    fv.adjudicate(repo, ref, "problems", creator, ["slow"], step=0, end=2)  # nobody holds 0..2
    fv.set_value(repo, ref, "problems", BOB, ["loop"], step=2, end=4)  # B: ALICE and BOB agree, newer
    defs, resolved = study_fields.load(repo, [episode], "consensus", None)
    row = [study_fields.step_columns(defs, resolved[episode.id], i) for i in range(5)]
    assert [(r["field:problems"], r["field:problems:origin"], r["field:problems:source"]) for r in row[:3]] == [
        ([True, False, False], "adjudicated", creator), ([True, False, False], "adjudicated", creator),
        ([False, False, True], "scratch", ALICE),
    ]  # fmt: skip
    repo.close()


def test_the_field_columns_with_their_source_are_in_the_closed_schema(annotated, tmp_path: Path) -> None:
    """The envlogger export with study fields validates against schemas/dataset_spec.schema.json (closed
    objects: an undocumented `field:<name>:source` would fail), and the prose spec names the column."""
    import jsonschema

    from tests.conftest import REPO_ROOT
    from tests.pipelines.export import readback

    instance = readback.envlogger_instance(_export(annotated, tmp_path / "e", "envlogger", "consensus"))
    jsonschema.validate(instance, readback.schema())
    written = {k for e in instance["episodes"] for r in e["records"] for k in r["custom_data"] if k.endswith(":source")}
    assert "field:action_correct:source" in written
    assert "`field:<name>:source`" in (REPO_ROOT / "schemas" / "dataset_spec.md").read_text(encoding="utf-8")

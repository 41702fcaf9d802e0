"""Screenshot-first episodes (issue 25) through every export path: a GUI-Odyssey episode (screenshot-only: no
hierarchy, no objects, actions in pixels) and an Android-in-the-Zoo episode (detector boxes as objects,
chain-of-action-thought texts) converted by convert-ui, imported into a store, exported as envlogger, Parquet,
Minari and TFDS and read back with each ecosystem's reader. Every name of `STEP_TEXT_FIELDS` is a named
column/feature with the converted record's values. TFDS runs in its own process (`-m tfds`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines import convert, export, ui_import, ui_records
from pipelines.step_text import STEP_TEXT_FIELDS, step_texts
from pipelines.store import open_store
from protos.stepmark import ui_episode_pb2
from tests.pipelines.export import readback
from tests.pipelines.screenshot_first import build_aitz, build_gui_odyssey

USER = "alice@example.com"


@dataclass
class Converted:
    data_dir: Path
    study_id: str
    records: dict[str, ui_episode_pb2.UiEpisode]  # by source layout


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Converted:
    tmp = tmp_path_factory.mktemp("screenshot_first_export")
    data_dir, inp, out = tmp / "data", tmp / "in", tmp / "data" / "converted"
    data_dir.mkdir()
    build_aitz(inp / "aitz")
    build_gui_odyssey(inp / "odyssey")
    assert convert.run([str(inp), str(out), "--quiet", "--shards=1", "--runner=FnApiRunner"]) == 0
    records = {e.source: e for e in ui_records.iter_episodes(str(out))}
    assert set(records) == {"aitz", "gui_odyssey"}
    with open_store(None, data_dir) as repo:
        study = ui_import.import_ui(repo, str(out), study_name="Screenshot first", user=USER)
    return Converted(data_dir, study.id, records)


def _export(data: Converted, out: Path, fmt: str, **kw: Any) -> None:
    summary = export.export_episodes(
        export.ExportRequest(data_dir=str(data.data_dir), out=str(out), format=fmt, study_id=data.study_id, **kw)
    )
    assert summary.episodes == 2 and not summary.dead_letters


def _expected_texts(record: ui_episode_pb2.UiEpisode) -> list[dict[str, str]]:
    """Per exported step: the step's texts; the placeholder screen after the last recorded action has none."""
    texts = [step_texts(record, i) for i in range(len(record.episode.time_steps))]
    return texts + [dict.fromkeys(STEP_TEXT_FIELDS, "")]


def _str(v: Any) -> str:
    v = v.item() if isinstance(v, np.ndarray | np.generic) else v
    return v.decode("utf-8") if isinstance(v, bytes) else v


def test_the_converted_episodes_have_what_the_exports_must_carry(converted: Converted) -> None:
    odyssey, aitz = converted.records["gui_odyssey"], converted.records["aitz"]
    assert all(not ts.observation.objects for ts in odyssey.episode.time_steps)
    assert odyssey.actions[0].instruction == "Open the DuckDuckGo app."
    assert all(len(ts.observation.objects) > 0 for ts in aitz.episode.time_steps)
    assert aitz.step_info[2].text.action_description.startswith("click on the Clock app")


def test_envlogger_and_parquet_carry_every_step_text(converted: Converted, tmp_path: Path) -> None:
    _export(converted, tmp_path / "el", "envlogger")
    _export(converted, tmp_path / "pq", "parquet")
    episodes = {e["metadata"]["source"]: e for e in readback.read_envlogger(tmp_path / "el")}
    table = pq.read_table(tmp_path / "pq" / "data").to_pandas()
    for source, record in converted.records.items():
        want = _expected_texts(record)
        records = episodes[source]["records"]
        rows = table[table["source"] == source].sort_values("step_index")
        assert len(records) == len(rows) == len(want)
        for t, texts in enumerate(want):
            for name in STEP_TEXT_FIELDS:
                assert _str(records[t]["observation"]["step_text"][name]) == texts[name], (source, t, name)
                assert rows.iloc[t][f"observation/step_text/{name}"] == texts[name], (source, t, name)
    # Screenshot-only steps: an empty object table, the screenshot kept, the action point in screenshot pixels.
    odyssey = episodes["gui_odyssey"]["records"]
    assert list(odyssey[0]["observation"]["objects"]["id"]) == [] and odyssey[0]["observation"]["screenshot"]
    assert (int(odyssey[1]["action"]["x"]), int(odyssey[1]["action"]["y"])) == (135, 72)
    assert int(odyssey[1]["action"]["target_index"]) == -1  # an action point with no object
    rows = table[table["source"] == "gui_odyssey"].sort_values("step_index")
    assert list(rows.iloc[0]["observation/objects"]) == [] and rows.iloc[0]["action/x"] == 135
    # AitZ: detector objects with their texts and a tap resolved to one of them.
    aitz = table[table["source"] == "aitz"].sort_values("step_index")
    assert [o["text"] for o in aitz.iloc[0]["observation/objects"]][:3] == ["M", "Set", "up email"]
    assert aitz.iloc[2]["action/target_index"] == converted.records["aitz"].actions[2].target_index
    jsonschema.validate(readback.envlogger_instance(tmp_path / "el"), readback.schema())


def test_stripped_exports_keep_the_step_texts(converted: Converted, tmp_path: Path) -> None:
    _export(converted, tmp_path / "pq", "parquet", strip_internal_metadata=True)
    table = pq.read_table(tmp_path / "pq" / "data")
    for name in STEP_TEXT_FIELDS:
        assert f"observation/step_text/{name}" in table.schema.names
    thoughts = set(table["observation/step_text/action_thought"].to_pylist())
    assert "The Clock app is displayed in the list: tap it." in thoughts


def test_minari_carries_every_step_text(converted: Converted, tmp_path: Path) -> None:
    import minari

    _export(converted, tmp_path / "sf-v0", "minari", ui_objects="padded:8")
    dataset = minari.MinariDataset(str(tmp_path / "sf-v0" / "data"))
    for episode in dataset.iterate_episodes():
        texts = episode.infos["observation"]["step_text"]
        record = next(r for r in converted.records.values() if len(r.episode.time_steps) + 1 == len(texts["instruction"]))
        want = _expected_texts(record)
        for name in STEP_TEXT_FIELDS:
            assert [_str(v) for v in texts[name]] == [w[name] for w in want], name
        assert np.asarray(episode.observations["screen_width"]).tolist()[:-1] == [
            ts.observation.screen_width for ts in record.episode.time_steps
        ]


@pytest.mark.tfds
def test_tfds_carries_every_step_text(converted: Converted, tmp_path: Path) -> None:
    _export(converted, tmp_path / "tf", "tfds")
    episodes = {e["source"].decode(): e for e in readback.read_tfds(tmp_path / "tf")}
    for source, record in converted.records.items():
        steps = episodes[source]["steps"]
        want = _expected_texts(record)
        assert len(steps) == len(want)
        for t, texts in enumerate(want):
            for name in STEP_TEXT_FIELDS:
                assert _str(steps[t]["observation"]["step_text"][name]) == texts[name], (source, t, name)
    assert len(episodes["gui_odyssey"]["steps"][0]["observation"]["objects"]["id"]) == 0
    jsonschema.validate(readback.tfds_instance(tmp_path / "tf"), readback.schema())

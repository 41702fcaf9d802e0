"""An AndroidControl episode through every export path (schemas/dataset_spec.md, "UI episodes"): written with the
tests' independent TFRecord/Example writer from real fixture screens (tests/pipelines/record_writers.py), converted
by convert-ui, imported into a store as the UI export tests do, then exported as envlogger, Parquet, Minari and TFDS.
The fields UI-agent trainers read — the step instruction, the scroll direction, the target rule and candidates,
the forest's windows and each object's window, the episode's goal, app and source — arrive with the same values
on every path, equal to the converted record's. TFDS runs in its own process (`-m tfds`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines import convert, export, ui_import, ui_records
from pipelines.store import open_store
from protos.stepmark import ui_episode_pb2
from tests.pipelines.export import readback
from tests.pipelines.record_writers import WindowInfo, forest_from_dump, png_from, write_tfrecord
from tests.pipelines.test_android_control import FRACTAL, VISION, H, W
from tests.pipelines.test_android_control import _episode as control_episode

USER = "alice@example.com"
# (screen, action, instruction): a click on "Ocean", a scroll on the two-window screen, typed text, and a last
# screen without an action.
STEPS = [
    (FRACTAL, {"action_type": "click", "x": 135, "y": 872}, b"Tap the ocean palette"),
    (VISION, {"action_type": "scroll", "direction": "down"}, b"Scroll down to the settings \xe2\x9c\x93"),
    (FRACTAL, {"action_type": "input_text", "text": "Z\u00fcrich"}, b"Type the city"),
    (VISION, None, None),
]
WINDOW_FIELDS = ("id", "type", "title", "layer", "focused", "active", "first_object", "num_objects")


@dataclass
class ControlData:
    data_dir: Path
    study_id: str
    record: ui_episode_pb2.UiEpisode  # the converted episode, as convert-ui wrote it


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> ControlData:
    tmp = tmp_path_factory.mktemp("android_control_export")
    data_dir, inp, out = tmp / "data", tmp / "in", tmp / "data" / "converted"
    inp.mkdir()
    data_dir.mkdir()
    shot = png_from(fixtures_dir / "rico" / "33600.jpg", W, H)
    types = {FRACTAL: None, VISION: [WindowInfo.TYPE_SYSTEM, WindowInfo.TYPE_APPLICATION]}
    forests = [
        forest_from_dump((fixtures_dir / "uiautomator" / s).read_bytes(), window_types=types[s]).SerializeToString()
        for s, _, _ in STEPS
    ]
    actions = [json.dumps(a) for _, a, _ in STEPS if a is not None]
    instructions = [i for _, _, i in STEPS if i is not None]
    record = control_episode(fixtures_dir, 4242, forests, actions, instructions, b"Set the palette to ocean",
                             [shot] * len(STEPS))  # fmt: skip
    write_tfrecord(inp / "android_control-00000-of-00001", [record])
    assert convert.run([str(inp), str(out), "--quiet", "--shards=1", "--runner=FnApiRunner"]) == 0
    (converted,) = ui_records.iter_episodes(str(out))
    with open_store(None, data_dir) as repo:
        study = ui_import.import_ui(repo, str(out), study_name="AndroidControl", user=USER)
    return ControlData(data_dir, study.id, converted)


def _export(data: ControlData, out: Path, fmt: str, **kw: Any) -> export.ExportSummary:
    summary = export.export_episodes(
        export.ExportRequest(data_dir=str(data.data_dir), out=str(out), format=fmt, study_id=data.study_id, **kw)
    )
    assert summary.episodes == 1 and not summary.dead_letters
    return summary


def _expected_actions(record: ui_episode_pb2.UiEpisode) -> list[dict[str, Any]]:
    """What every path must carry for the recorded actions (the final padding step excluded)."""
    out = []
    for a in record.actions[: len(STEPS) - 1]:
        candidates = list(a.target_candidates)[:4]
        out.append(
            {
                "instruction": a.instruction,
                "direction": a.direction,
                "target_rule": a.target_rule,
                "target_candidates": candidates + [-1] * (4 - len(candidates)),
                "target_index": a.target_index if a.HasField("target_index") else -1,
                "type_name": ui_episode_pb2.Action.Type.Name(a.type),
            }
        )
    return out


def _expected_windows(record: ui_episode_pb2.UiEpisode) -> list[dict[str, list[Any]]]:
    return [
        {
            "id": [w.id for w in info.windows],
            "type": [w.type for w in info.windows],
            "title": [w.title for w in info.windows],
            "layer": [w.layer for w in info.windows],
            "focused": [w.focused for w in info.windows],
            "active": [w.active for w in info.windows],
            "first_object": [w.first_object for w in info.windows],
            "num_objects": [w.num_objects for w in info.windows],
        }
        for info in record.step_info
    ]


def _expected_object_windows(record: ui_episode_pb2.UiEpisode) -> list[list[int]]:
    out = []
    for ts, info in zip(record.episode.time_steps, record.step_info, strict=True):
        rows = [-1] * len(ts.observation.objects)
        for r, w in enumerate(info.windows):
            for i in range(w.first_object, w.first_object + w.num_objects):
                rows[i] = r
        out.append(rows)
    return out


def _text(v: Any) -> Any:
    return v.decode("utf-8") if isinstance(v, bytes) else v


def _column(values: Any) -> list[Any]:
    """A table column as plain Python values, whatever the path handed over (lists, arrays, bytes)."""
    return [_text(v.item() if isinstance(v, np.generic) else v) for v in list(values)]


def test_the_converted_record_has_what_the_exports_must_carry(control: ControlData) -> None:
    """The fixture is what the assertions below need: instructions, a scroll direction, candidates, windows."""
    expected = _expected_actions(control.record)
    assert [a["instruction"] for a in expected] == ["Tap the ocean palette", "Scroll down to the settings \u2713",
                                                     "Type the city"]  # fmt: skip
    assert [a["direction"] for a in expected] == ["", "down", ""]
    assert expected[0]["target_rule"] and expected[0]["target_index"] >= 0
    assert any(c >= 0 for a in expected for c in a["target_candidates"])
    windows = _expected_windows(control.record)
    assert windows[1]["type"] == ["SYSTEM", "APPLICATION"] and windows[1]["focused"] == [False, True]
    assert len(windows[0]["id"]) == 1
    assert control.record.goal == "Set the palette to ocean" and control.record.source == "android_control"


def test_envlogger_and_parquet_carry_the_same_ui_fields(control: ControlData, tmp_path: Path) -> None:
    _export(control, tmp_path / "el", "envlogger")
    _export(control, tmp_path / "pq", "parquet")
    record = control.record
    (episode,) = readback.read_envlogger(tmp_path / "el")
    meta, records = episode["metadata"], episode["records"]
    rows = pq.read_table(tmp_path / "pq" / "data").to_pandas().sort_values("step_index")
    n = len(STEPS)
    assert len(records) == len(rows) == n  # the last screen has no action: it is the final observation

    # episode level: goal, app, source on both paths
    for key, value in (("goal", record.goal), ("app_package", record.app_package), ("source", "android_control")):
        assert meta[key] == value and set(rows[key]) == {value}, key

    # actions: envlogger record t+1 holds the action taken on screen t; Parquet row t holds it
    expected = _expected_actions(record)
    for t, want in enumerate(expected):
        el = records[t + 1]["action"]
        row = rows.iloc[t]
        for key, value in want.items():
            assert _column(np.atleast_1d(el[key])) == _column(np.atleast_1d(value)), (t, key)
            got = row[f"action/{key}"]
            assert _column(np.atleast_1d(got)) == _column(np.atleast_1d(value)), (t, key)
        assert json.loads(el["raw_json"]) == json.loads(row["action/raw_json"])  # unstripped: kept
    last = rows.iloc[-1]
    assert last["action/instruction"] == "" and list(last["action/target_candidates"]) == [0, 0, 0, 0]

    # windows and each object's window, per screen
    windows = _expected_windows(record)
    object_windows = _expected_object_windows(record)
    for t in range(n):
        obs = records[t]["observation"]
        table = rows.iloc[t]["observation/windows"]
        for field in WINDOW_FIELDS:
            assert _column(obs["windows"][field]) == windows[t][field], (t, field)
            assert [w[field] for w in table] == windows[t][field], (t, field)
        assert _column(obs["objects"]["window"]) == object_windows[t]
        assert [o["window"] for o in rows.iloc[t]["observation/objects"]] == object_windows[t]
    # the documented schema holds with real windows and instructions in the data
    jsonschema.validate(readback.envlogger_instance(tmp_path / "el"), readback.schema())


def test_stripped_exports_keep_the_instruction(control: ControlData, tmp_path: Path) -> None:
    """--strip-internal-metadata drops raw_json only: instruction, direction, target rule and windows stay."""
    _export(control, tmp_path / "el", "envlogger", strip_internal_metadata=True)
    _export(control, tmp_path / "pq", "parquet", strip_internal_metadata=True)
    (episode,) = readback.read_envlogger(tmp_path / "el")
    table = pq.read_table(tmp_path / "pq" / "data")
    want = [a["instruction"] for a in _expected_actions(control.record)]
    assert [r["action"]["instruction"] for r in episode["records"][1:]] == want
    assert table["action/instruction"].to_pylist()[:-1] == want
    assert "raw_json" not in episode["records"][1]["action"] and "action/raw_json" not in table.schema.names
    assert table["observation/windows"].to_pylist()[1][0]["type"] == "SYSTEM"


def test_padded_objects_carry_each_objects_window(control: ControlData, tmp_path: Path) -> None:
    n = 64
    _export(control, tmp_path / "el", "envlogger", ui_objects=f"padded:{n}")
    _export(control, tmp_path / "pq", "parquet", ui_objects=f"padded:{n}")
    (episode,) = readback.read_envlogger(tmp_path / "el")
    table = pq.read_table(tmp_path / "pq" / "data")
    windows, object_windows = _expected_windows(control.record), _expected_object_windows(control.record)
    for t, record in enumerate(episode["records"]):
        padded = record["observation"]["objects_padded"]
        rows = object_windows[t][:n]
        k = len(rows)
        want = {
            "window": rows + [0] * (n - k),
            "window_type": [windows[t]["type"][r] if r >= 0 else "" for r in rows] + [""] * (n - k),
            "window_layer": [windows[t]["layer"][r] if r >= 0 else 0 for r in rows] + [0] * (n - k),
            "window_focused": [windows[t]["focused"][r] if r >= 0 else False for r in rows] + [False] * (n - k),
        }
        for key, value in want.items():
            assert _column(padded[key]) == value, (t, key)
            assert table[f"observation/objects_padded/{key}"].to_pylist()[t] == value, (t, key)
    # a two-window screen has objects in both windows, with their types
    assert {"SYSTEM", "APPLICATION"} <= set(table["observation/objects_padded/window_type"].to_pylist()[1])
    assert "observation/windows" not in table.schema.names  # padded: fixed shapes only


@pytest.mark.tfds
def test_tfds_equals_envlogger_through_tfds_reader(control: ControlData, tmp_path: Path) -> None:
    """Field by field (TFDS's own envlogger_reader over the envlogger export vs the TFDS export), then the UI
    fields against the converted record."""
    from tests.pipelines.export.test_step_contract import _compare_episode, _envlogger_via_tfds_reader

    for kw in ({}, {"strip_internal_metadata": True}, {"ui_objects": "padded:32"}):
        name = "-".join(f"{k}={v}" for k, v in kw.items()) or "full"
        _export(control, tmp_path / f"el-{name}", "envlogger", **kw)
        _export(control, tmp_path / f"tf-{name}", "tfds", **kw)
        (rlds,) = _envlogger_via_tfds_reader(tmp_path / f"el-{name}")
        (ours,) = readback.read_tfds(tmp_path / f"tf-{name}")
        _compare_episode(name, rlds, ours)
        jsonschema.validate(readback.tfds_instance(tmp_path / f"tf-{name}"), readback.schema())

    (ours,) = readback.read_tfds(tmp_path / "tf-full")
    record = control.record
    assert ours["goal"].decode() == record.goal and ours["source"] == b"android_control"
    assert ours["app_package"].decode() == record.app_package
    steps = ours["steps"]
    for t, want in enumerate(_expected_actions(record)):
        action = steps[t]["action"]
        for key, value in want.items():
            assert _column(np.atleast_1d(action[key])) == _column(np.atleast_1d(value)), (t, key)
    windows, object_windows = _expected_windows(record), _expected_object_windows(record)
    for t, step in enumerate(steps):
        for field in WINDOW_FIELDS:
            assert _column(step["observation"]["windows"][field]) == windows[t][field], (t, field)
        assert _column(step["observation"]["objects"]["window"]) == object_windows[t]



def test_minari_carries_the_same_ui_fields(control: ControlData, tmp_path: Path) -> None:
    """Minari (UI only with padded objects): numbers are the action space, text goes to `infos["action"]` with
    entry k describing the action that led to observation k (schemas/dataset_spec.md, "Minari")."""
    import minari

    n = 64
    _export(control, tmp_path / "ac-v0", "minari", ui_objects=f"padded:{n}")
    _export(control, tmp_path / "el", "envlogger", ui_objects=f"padded:{n}")
    (episode,) = minari.MinariDataset(str(tmp_path / "ac-v0" / "data")).iterate_episodes()
    (logged,) = readback.read_envlogger(tmp_path / "el")
    expected = _expected_actions(control.record)
    text = episode.infos["action"]
    for key in ("instruction", "direction", "target_rule", "type_name"):
        assert _column(text[key])[1:] == [a[key] for a in expected], key
    candidates = np.asarray(episode.actions["target_candidates"]).tolist()
    assert candidates == [a["target_candidates"] for a in expected]
    for key in ("window", "window_layer", "window_focused"):
        got = np.asarray(episode.observations["objects_padded"][key]).tolist()
        want = [np.asarray(r["observation"]["objects_padded"][key]).astype(np.asarray(got).dtype).tolist()
                for r in logged["records"]]  # fmt: skip
        assert got == want, key

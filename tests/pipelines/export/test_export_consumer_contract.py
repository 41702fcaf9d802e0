"""What a training team's own reader gets from a UI export, in every format (issue 34 item 4).

A screenshot field either decodes with Pillow or is flagged: `has_screenshot` false (the placeholder final
screen after a recorded last action, a screen recorded without one), and then it is empty. The step's `image`
is absent from UI exports in every format (the screenshot is the observation's; an empty `image` would not
decode), present in environment exports. Minari's reader gives the screenshot as a uint8 array whose
`.tobytes()` is the recorded bytes, as schemas/dataset_spec.md says. Each format is read with its consumer's
library: envlogger.Reader, pyarrow, minari (TFDS: `tfds` marker, own process).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from pipelines import export
from tests.conftest import REPO_ROOT
from tests.pipelines.export import readback
from tests.pipelines.export.export_data import ExportData


def _export(data: ExportData, out: Path, fmt: str, ui: bool) -> Path:
    kw: dict[str, Any] = {"study_id": data.ui_study_id} if ui else {"refs": [data.ref(data.procgen[0])]}
    if ui and fmt == "minari":
        kw["ui_objects"] = "padded:16"
    out.parent.mkdir(parents=True, exist_ok=True)
    export.export_episodes(export.ExportRequest(data_dir=str(data.data_dir), out=str(out), format=fmt, **kw))
    return out


def _check_screens(screens: list[tuple[bytes, bool]]) -> None:
    """Every flagged screenshot decodes; every unflagged one is empty; the placeholder is among them."""
    assert screens
    for k, (shot, has) in enumerate(screens):
        if has:
            Image.open(io.BytesIO(shot)).load()  # raises on bytes Pillow cannot decode
        else:
            assert shot == b"", f"screen {k}: has_screenshot false but {len(shot)} bytes"
    assert not screens[-1][1], "the placeholder final screen must say it has no screenshot"
    assert any(has for _, has in screens[:-1])


def test_envlogger_screenshots_decode_or_are_flagged_and_ui_has_no_image(
    export_data: ExportData, tmp_path: Path
) -> None:
    out = _export(export_data, tmp_path / "ui", "envlogger", ui=True)
    for episode in readback.read_envlogger(out):
        records = episode["records"]
        _check_screens([(r["observation"]["screenshot"], bool(r["observation"]["has_screenshot"])) for r in records])
        assert all("image" not in r["custom_data"] for r in records)
    env = _export(export_data, tmp_path / "env", "envlogger", ui=False)
    (episode,) = readback.read_envlogger(env)
    for r in episode["records"]:
        Image.open(io.BytesIO(r["custom_data"]["image"])).load()


def test_parquet_screenshots_decode_or_are_flagged_and_ui_has_no_image(
    export_data: ExportData, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(_export(export_data, tmp_path / "ui", "parquet", ui=True) / "data")
    assert "image" not in table.column_names
    rows = table.select(["episode_index", "observation/screenshot", "observation/has_screenshot"]).to_pylist()
    for index in sorted({r["episode_index"] for r in rows}):
        _check_screens(
            [(r["observation/screenshot"], r["observation/has_screenshot"]) for r in rows if r["episode_index"] == index]
        )
    env = pq.read_table(_export(export_data, tmp_path / "env", "parquet", ui=False) / "data")
    for frame in env.column("image").to_pylist():
        Image.open(io.BytesIO(frame)).load()


def test_minari_screenshots_are_bytes_by_one_call_and_decode_or_are_flagged(
    export_data: ExportData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    _export(export_data, tmp_path / "ui-v0", "minari", ui=True)
    el = readback.read_envlogger(_export(export_data, tmp_path / "el" / "ui", "envlogger", ui=True))
    ds = minari.load_dataset("ui-v0")
    for ep, episode in zip(ds.iterate_episodes(), el, strict=True):
        shots = ep.infos["observation"]["screenshot"]
        # What the spec says Minari's reader gives: one uint8 array per entry; `.tobytes()` is the bytes.
        assert all(isinstance(s, np.ndarray) and s.dtype == np.uint8 for s in shots)
        flags = np.asarray(ep.observations["has_screenshot"]).astype(bool).tolist()
        _check_screens([(s.tobytes(), f) for s, f in zip(shots, flags, strict=True)])
        assert [s.tobytes() for s in shots] == [r["observation"]["screenshot"] for r in episode["records"]]
        assert "image" not in ep.infos
    spec = (REPO_ROOT / "schemas" / "dataset_spec.md").read_text(encoding="utf-8")
    assert 'ep.infos["observation"]["screenshot"][k].tobytes()' in spec
    _export(export_data, tmp_path / "env-v0", "minari", ui=False)
    (env,) = list(minari.load_dataset("env-v0").iterate_episodes())
    for frame in env.infos["image"]:
        Image.open(io.BytesIO(bytes(frame))).load()


@pytest.mark.tfds
def test_tfds_screenshots_decode_or_are_flagged_and_ui_has_no_image(export_data: ExportData, tmp_path: Path) -> None:
    out = _export(export_data, tmp_path / "ui", "tfds", ui=True)
    for episode in readback.read_tfds(out):
        steps = episode["steps"]
        _check_screens([(bytes(s["observation"]["screenshot"]), bool(s["observation"]["has_screenshot"])) for s in steps])
        assert all("image" not in s for s in steps)
    (env,) = readback.read_tfds(_export(export_data, tmp_path / "env", "tfds", ui=False))
    for s in env["steps"]:
        Image.open(io.BytesIO(bytes(s["image"]))).load()

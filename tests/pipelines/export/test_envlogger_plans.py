"""The envlogger serializer's per-structure plans (pipelines/exporters/envlogger_data.py) write the same bytes as
its generic path, on every record of real Procgen, NetHack (dict observations) and UI episodes, and on episodes
whose structure changes mid-way (an extra tag, a None action, another leaf type, a longer list, another key),
where the plans must fall back or compile another plan; equal-looking values never share a plan's memo."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

import dm_env
import numpy as np
import pytest
from envlogger.converters import codec

from pipelines.episodes import open_episode
from pipelines.exporters import envlogger_data, envlogger_writer
from pipelines.exporters.transform import TransformOptions, transform_episode
from tests.pipelines.export.export_data import ExportData


@pytest.fixture(autouse=True)
def no_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without plans, so the first steps compile them."""
    monkeypatch.setattr(envlogger_data, "_plans", [])
    monkeypatch.setattr(envlogger_data, "_seen", {})


def records(data: ExportData, episode: Any) -> list[tuple[Any, ...]]:
    with open_episode(episode, data.data_dir) as reader:
        steps, meta = list(reader), reader.metadata
    exported = transform_episode(0, episode, steps, TransformOptions(step_tag_labels=("jump",)), meta)
    return [tuple(r) for r in envlogger_writer.episode_records(exported)]


def assert_same_bytes(values: list[Any]) -> None:
    for t, value in enumerate(values):
        assert envlogger_data.serialize(value) == envlogger_data.serialize_generic(value), t


def test_plans_write_the_generic_bytes_on_real_records(
    export_data: ExportData, monkeypatch: pytest.MonkeyPatch
) -> None:
    episodes = [
        *export_data.procgen,
        *export_data.nethack,
        *export_data.ui[:1],
    ]  # single screens: no transition
    assert export_data.procgen and export_data.nethack and export_data.ui
    for episode in episodes:
        monkeypatch.setattr(envlogger_data, "_plans", [])
        recs = records(export_data, episode)
        for _ in range(2):  # the second round through plans compiled in the first
            assert_same_bytes(recs)
        if len(recs) > 2:
            assert envlogger_data._plans, episode.id  # the records were written by a plan
    nethack = records(export_data, export_data.nethack[0])
    assert isinstance(nethack[1][0].observation, dict) and len(nethack[1][0].observation) > 1


def _edit(record: tuple[Any, ...], **changes: Any) -> tuple[Any, ...]:
    timestep, action, custom = record
    custom = dict(custom, **changes.pop("custom", {}))
    if "action" in changes:
        action = changes.pop("action")
    timestep = timestep._replace(**changes)
    return (timestep, action, custom)


def test_plans_fall_back_when_the_structure_changes_mid_episode(export_data: ExportData) -> None:
    recs = records(export_data, export_data.procgen[0])
    assert len(recs) >= 8
    changed = list(recs)
    changed[3] = _edit(recs[3], custom={"tag:extra": True})  # one more key
    changed[4] = _edit(recs[4], action=None)  # a None action mid-way
    changed[5] = _edit(recs[5], reward=-0.0, discount=np.float32(1.0))  # another leaf type, the sign of zero
    changed[6] = _edit(recs[6], custom={"keys": ["LEFT", "UP"]})  # a list of another length
    info = dict(recs[7][2]["info"], episode=dict(recs[7][2]["info"]["episode"], l=np.int64(3)))
    changed[7] = _edit(recs[7], custom={"info": info})
    changed.append(
        _edit(recs[-1], observation={"image": recs[-1][0].observation["image"][:8]})
    )  # other shape
    changed.append(_edit(recs[-1], step_type=dm_env.StepType.FIRST, reward=None, discount=None))
    for _ in range(3):  # new structures, seen twice (plans compiled), then through their plans
        assert_same_bytes(changed)
    assert len(envlogger_data._plans) > 1


def test_plan_memos_keep_equal_looking_values_apart() -> None:
    """Each value through its structure's plan, twice: it reads back as itself (type and sign of zero)."""
    leaves = [True, 1, 1.0, np.int64(1), np.bool_(True), -0.0, 0.0, False, 0, "x", "", "y" * 100]
    values = [{"info": {"episode": {"r": v, "l": 0}}, "tag": v, "t": (v, 1.0)} for v in leaves]
    for _ in range(3):
        for value in values:
            ours = envlogger_data.serialize(value)
            assert ours == envlogger_data.serialize_generic(value)
            back = codec.decode(envlogger_data.encode(value))
            leaf = back["info"]["episode"]["r"]
            want = value["tag"]
            assert leaf == want and type(leaf) is type(codec.decode(codec.encode(want))), value
            if isinstance(want, float):
                assert np.signbit(leaf) == np.signbit(want)


def test_long_strings_through_a_plan_read_back_as_themselves() -> None:
    """Long str leaves (a step's info JSON, new on every step) are written from a head kept by UTF-8 length:
    lengths around 64 characters and around the varint steps (127/128, 16383/16384 bytes), multi-byte text
    whose character and byte counts differ, and two texts of one byte length in a row."""
    texts = ["a" * n for n in (64, 65, 126, 127, 128, 129, 16383, 16384, 16385)]
    texts += [
        "é" * 70,
        "a" * 70,
        "é" * 40,
        "a" * 80,
        "€" * 43,
        "😀" * 40,
        '{"k": "' + "ü" * 70 + '"}',
        "b" * 129,
    ]
    values = [({"info": {"json": t, "episode": {"r": 1.0}}, "keys": ["x"]}, 0.5) for t in texts]
    assert len(texts[9]) == len(texts[10]) and len(texts[11].encode()) == len(texts[12].encode())
    for _ in range(3):
        assert_same_bytes(values)
        for value, text in zip(values, texts, strict=True):
            assert codec.decode(envlogger_data.encode(value))[0]["info"]["json"] == text
    assert envlogger_data._plans  # the second round onwards went through a plan


def test_a_plan_refuses_what_it_does_not_cover(export_data: ExportData) -> None:
    """A plan reads only its structure: anything else is None (the caller's fallback), never other bytes."""
    recs = records(export_data, export_data.procgen[0])
    plan = envlogger_data._PlanSource(recs[2]).compile()
    assert plan(recs[2]) == envlogger_data.serialize_generic(recs[2])
    assert plan(_edit(recs[2], custom={"tag:extra": False})) is None
    custom = {k: v for k, v in recs[2][2].items() if k != "keys"}
    assert plan((recs[2][0], recs[2][1], dict(custom, other=[]))) is None  # same size, another key
    assert plan(list(recs[2])) is None
    assert plan(dataclasses.replace) is None


def test_what_plans_do_not_cover_is_written_by_the_generic_path() -> None:
    """Wide and non-str-keyed roots, dict subclasses (a defaultdict answers for keys it lacks), deep nesting,
    lists of changing length: the same bytes as the generic path, every time."""
    values = [
        tuple(float(i) for i in range(100)),
        {1: "a", 2: "b"},
        ({"a": 1.0, "keys": defaultdict(int, {"a": 1, "c": 2})}, 0.0),
        ({"a": 1.0, "keys": defaultdict(int, {"a": 1, "b": 2})}, 0.0),
        ((((((((((((1.0,),),),),),),),),),),), "deep"),
        *(({"keys": list(range(n))}, True) for n in range(4)),
    ]
    for _ in range(3):
        assert_same_bytes(values)
    assert dict(values[2][0]["keys"]) == {"a": 1, "c": 2}  # not read through for keys it lacks


def test_array_leaves_of_every_buffer_dtype_through_plans() -> None:
    """Arrays whose elements are one big-endian buffer (uint8, int8, int16, uint16, float32), and bytes, are
    written by the plan from their dtype and shape (length); another shape, byte order, layout or dtype gives the
    generic bytes too."""
    rng = np.random.default_rng(3)
    base = rng.integers(-30000, 30000, size=(5, 7))
    arrays = [base.astype(d) for d in ("u1", "i1", "i2", "u2", "f4", "i4", "i8", "f8", "?", ">i2")]
    arrays += [base.astype("i2").T, base.astype("i2")[::2], base.astype("f4")[:1], np.zeros((0, 3), "i2")]
    values = [({"obs": a, "r": 0.5}, 1.0) for a in arrays]
    values += [({"obs": b"\xff" * n, "r": 0.5}, 1.0) for n in (0, 1, 127, 128, 20000, 0)]  # bytes leaves
    for _ in range(3):
        assert_same_bytes(values)
        for a in arrays:  # other values of the same dtype and shape, through the plan compiled for the first
            value = ({"obs": (a * 3 + 1).astype(a.dtype), "r": 0.5}, 1.0)
            assert envlogger_data.serialize(value) == envlogger_data.serialize_generic(value)

"""Plans (decoders compiled for one record layout) give the codec's values on every record they take, and
refuse every record laid out otherwise; `decode` learns them without compiling per record."""

from __future__ import annotations

import dm_env
import numpy as np
import pytest
from envlogger.converters import codec
from envlogger.proto import storage_pb2

from pipelines.episodes import decode_plans, fast_codec, fast_decode
from tests.pipelines.episodes.test_fast_decode import FAMILIES, RECORD, STEP, both_wires, family_records, same


def plan_for(raw: bytes):  # noqa: ANN201
    return decode_plans.compile_plan(raw, fast_decode._WALK)


def served(plan, raw: bytes) -> bool:  # noqa: ANN001
    """Whether `plan` takes `raw`; when it does, its value must be the codec's."""
    try:
        value = plan(raw)
    except fast_decode._MISSES:
        return False
    same(value, codec.decode(storage_pb2.Data.FromString(raw)))
    return True


@pytest.fixture
def fresh_plans():
    """An empty plan list and compile state for the test, the process's own restored after it."""
    saved_plans, saved_state = list(fast_decode._plans), dict(fast_decode._compile)
    fast_decode._plans.clear()
    fast_decode._compile.update(wait=0, backoff=1, fresh=False)
    yield fast_decode._plans
    fast_decode._plans[:] = saved_plans
    fast_decode._compile.update(saved_state)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_plan_reads_the_other_records_of_a_real_episode_like_the_codec(family):
    records, _ = family_records(family)
    mid = [tuple(r) for r in records[1:]]  # the first record has no action: another layout
    plan = plan_for(fast_codec.serialize(mid[0]))
    for value in mid:
        # Both writers' bytes (upb's map order differs from record to record): the plan takes them all.
        assert all(served(plan, raw) for raw in both_wires(value)), family
    assert not served(plan, fast_codec.serialize(tuple(records[0])))


LAYOUT_CHANGES = {
    "another image shape": ((STEP[0][:3] + ({"image": np.zeros((3, 4, 3), np.uint8)},)), STEP[1], STEP[2]),
    "another image dtype": ((STEP[0][:3] + ({"image": np.zeros((2, 4, 3), np.uint16)},)), STEP[1], STEP[2]),
    "a float32 reward": ((STEP[0][0], np.float32(1.0)) + STEP[0][2:], STEP[1], STEP[2]),
    "an extra key": (STEP[0], STEP[1], {**STEP[2], "tag:x": True}),
    "a missing key": (STEP[0], STEP[1], {k: v for k, v in STEP[2].items() if k != "keys"}),
    "a renamed key": (STEP[0], STEP[1], {("info2" if k == "info" else k): v for k, v in STEP[2].items()}),
    "a list for the tuple": ([STEP[1], STEP[1]], STEP[1], STEP[2]),
    "no action": (STEP[0], None, STEP[2]),
    "a str action": (STEP[0], "left", STEP[2]),
    "no keys (an empty list is written as no value)": (STEP[0], STEP[1], {**STEP[2], "keys": []}),
}
PAYLOAD_CHANGES = {
    "other pixels": ((STEP[0][:3] + ({"image": np.full((2, 4, 3), 9, np.uint8)},)), STEP[1], STEP[2]),
    "a negative action": (STEP[0], np.int64(-5), STEP[2]),
    "a large action": (STEP[0], np.int64(2**40), STEP[2]),
    "a NaN reward": ((STEP[0][0], np.float64("nan")) + STEP[0][2:], STEP[1], STEP[2]),
    "a long info text": (STEP[0], STEP[1], {**STEP[2], "info": "x" * 300}),
    "a 20 KB frame": (STEP[0], STEP[1], {**STEP[2], "image": bytes(20_000)}),
    "other key strings": (STEP[0], STEP[1], {**STEP[2], "keys": ["é", ""]}),
    "more keys": (STEP[0], STEP[1], {**STEP[2], "keys": ["a", "b", "ArrowLeft"]}),
    "the last step type": ((dm_env.StepType.LAST,) + STEP[0][1:], STEP[1], STEP[2]),
}


@pytest.mark.parametrize("value", list(LAYOUT_CHANGES.values()), ids=list(LAYOUT_CHANGES))
def test_a_plan_refuses_another_layout(value):
    plan = plan_for(RECORD)
    for raw in both_wires(value):
        assert not served(plan, raw)
        same(fast_decode.decode(raw), codec.decode(storage_pb2.Data.FromString(raw)))


@pytest.mark.parametrize("value", list(PAYLOAD_CHANGES.values()), ids=list(PAYLOAD_CHANGES))
def test_a_plan_takes_other_payloads_of_its_layout(value):
    plan = plan_for(RECORD)
    assert all(served(plan, raw) for raw in both_wires(value))


def test_damaged_bytes_through_a_plan_give_the_codecs_value_or_a_miss():
    plan = plan_for(RECORD)
    rng = np.random.default_rng(11)
    for _ in range(2000):
        raw = bytearray(RECORD)
        for _ in range(int(rng.integers(1, 3))):
            pos = int(rng.integers(len(raw)))
            if rng.integers(2):
                raw[pos] = int(rng.integers(256))
            else:
                del raw[pos : pos + int(rng.integers(1, 4))]
        try:
            value = plan(bytes(raw))
        except fast_decode._MISSES:
            continue
        same(value, codec.decode(storage_pb2.Data.FromString(bytes(raw))))


def test_decode_learns_a_repeated_layout(fresh_plans):
    raws = [
        fast_codec.serialize((STEP[0], np.int64(i), {**STEP[2], "info": f'{{"i": {i}}}'})) for i in range(20)
    ]
    for raw in raws:
        same(fast_decode.decode(raw), codec.decode(storage_pb2.Data.FromString(raw)))
    assert len(fresh_plans) == 1 and all(served(fresh_plans[0], raw) for raw in raws)


def test_layouts_that_never_repeat_do_not_compile_each_time(fresh_plans, monkeypatch):
    compiled = []
    compile_plan = decode_plans.compile_plan

    def counting(raw, walk):  # noqa: ANN001, ANN202
        compiled.append(len(raw))
        return compile_plan(raw, walk)

    monkeypatch.setattr(decode_plans, "compile_plan", counting)
    for n in range(1, 400):  # a new array shape every record
        raw = fast_codec.serialize({"a": np.arange(n, dtype=np.uint8)})
        same(fast_decode.decode(raw), codec.decode(storage_pb2.Data.FromString(raw)))
    assert 3 <= len(compiled) <= 12  # backs off: 1, 2, 4, ... records between compiles
    assert len(fresh_plans) <= fast_decode._MAX_PLANS
    # A layout that then repeats is learned again once the wait runs out, and the wait starts over.
    repeated = [fast_codec.serialize({"a": np.arange(5, dtype=np.uint8) + i}) for i in range(1100)]
    for raw in repeated:
        fast_decode.decode(raw)
    assert served(fresh_plans[0], repeated[-1])
    assert fast_decode._compile["backoff"] == 1

"""`fast_decode.decode(raw)` gives exactly what envlogger's codec decodes from `Data.FromString(raw)`: the
same types at every level, dtypes, shapes, values and array flags, or the same exception type; str-keyed dicts
in sorted key order. On real records of every environment family, every leaf type, irregular wire bytes."""

from __future__ import annotations

import warnings
from typing import Any

import dm_env
import envlogger
import numpy as np
import pytest
from envlogger import step_data
from envlogger.converters import codec
from envlogger.proto import storage_pb2

from annotator.envs import registry
from annotator.envs.render import encode_jpeg
from pipelines.episodes import decode_plans, fast_codec, fast_decode, open_episode
from pipelines.episodes.base import custom_data, make_timestep
from pipelines.protowire import varint
from protos.rlds_creator import study_pb2
from tests.pipelines.episodes.helpers import family_spec
from tests.pipelines.episodes.test_envlogger_store import record_episode


def _root_owns(a: np.ndarray) -> bool:
    """The array's memory belongs to an ndarray (a view on one at most), not to a bytes object."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a.base is None and a.flags.owndata


def _ordered_like(ours: list, theirs: list) -> bool:
    """Ours: the codec's keys with its leading (map, upb-ordered) str keys sorted, the kvs keys after."""
    return any(
        all(type(k) is str for k in ours[:n] + theirs[:n])
        and ours[:n] == sorted(theirs[:n])
        and ours[n:] == theirs[n:]
        for n in range(len(ours) + 1)
    )


def same(ours: Any, theirs: Any) -> None:
    stack = [(ours, theirs, "value")]
    while stack:
        a, b, where = stack.pop()
        assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
        if isinstance(b, list | tuple):
            assert len(a) == len(b), where
            stack.extend((x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True)))
        elif isinstance(b, dict):
            assert {(type(k), k) for k in a} == {(type(k), k) for k in b}, where
            assert _ordered_like(list(a), list(b)), f"{where}: key order {list(a)}"
            stack.extend((a[k], b[k], f"{where}[{k!r}]") for k in b)
        elif isinstance(b, np.ndarray):
            assert (a.dtype, a.shape) == (b.dtype, b.shape), where
            flags = (a.flags.writeable, a.flags.c_contiguous)
            assert flags == (b.flags.writeable, b.flags.c_contiguous), where
            assert _root_owns(a) and _root_owns(b), where
            if b.dtype == object:
                stack.extend(
                    (x, y, f"{where}.flat[{i}]") for i, (x, y) in enumerate(zip(a.flat, b.flat, strict=True))
                )
            else:
                assert a.tobytes() == b.tobytes(), where  # bit for bit: NaNs, -0.0
        elif isinstance(b, np.generic):
            assert a.tobytes() == b.tobytes(), where
        else:
            assert a == b, where  # None, bool, int, str, bytes, StepType


def assert_same(raw: bytes) -> Any:
    """Ours equals the codec's value, and came from the short path (not the fallback to the codec)."""
    fast_decode._data(raw, 0, len(raw))
    ours = fast_decode.decode(raw)
    same(ours, codec.decode(storage_pb2.Data.FromString(raw)))
    return ours


def same_outcome(raw: bytes) -> None:
    """Irregular bytes: the codec's value or its exception type (and no warning the codec does not give)."""
    try:
        theirs = codec.decode(storage_pb2.Data.FromString(raw))
    except Exception as exc:  # noqa: BLE001 - whatever the codec raises, ours must too
        with pytest.raises(type(exc)):
            fast_decode.decode(raw)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same(fast_decode.decode(raw), theirs)


def both_wires(value: Any) -> list[bytes]:
    return [fast_codec.serialize(value), codec.encode(value).SerializeToString()]


# ----- 1. real records of every environment family ---------------------------------------------------------
# Every family the recorder runs here; the MuJoCo ones take seconds to start.
FAMILIES = ["procgen", "atari", "nethack"] + [
    pytest.param(f, marks=pytest.mark.slow) for f in ("robosuite", "robodesk")
]


@pytest.mark.parametrize("family", FAMILIES)
def test_real_records_decode_like_the_codec(family):
    records, first = family_records(family)
    for record in records:
        for raw in both_wires(tuple(record)):
            decoded = assert_same(raw)
            assert set(decoded[0][3]) == set(first.observation)


def family_records(family: str) -> tuple[list[step_data.StepData], Any]:
    """Up to 6 records of a real episode of `family`, as the recorder builds them, and its first timestep."""
    env = registry.create(family_spec(family, max_steps=6), seed=0, render_size=64)
    rng = np.random.default_rng(0)
    first = env.reset()
    records = [step_data.StepData(dm_env.restart(first.observation), None, custom_data(None, [], first.info))]
    while len(records) < 6:
        action = env.sample_action(rng)
        t = env.step(action)
        ts = make_timestep(
            t.observation, t.reward, first=False, terminated=t.terminated, truncated=t.truncated
        )
        records.append(step_data.StepData(ts, action, custom_data(encode_jpeg(env.render()), ["a"], t.info)))
        if t.last:
            break
    env.close()
    return records, first


# ----- 2. every leaf type and shape ------------------------------------------------------------------------
DTYPES = [np.float32, np.float64, np.int8, np.int16, np.int32, np.int64]
DTYPES += [np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]


def _extremes(dtype: Any) -> np.ndarray:
    if dtype is np.bool_:
        return np.array([True, False, True])
    if np.issubdtype(dtype, np.floating):
        info = np.finfo(dtype)
        return np.array([np.nan, np.inf, -np.inf, -0.0, info.tiny / 4, info.min, info.max, 1.5], dtype)
    info = np.iinfo(dtype)
    return np.array([info.min, info.min + 1, 0, 1, info.max // 2, info.max], dtype)


LEAVES = [pytest.param(dtype(1), id=f"{dtype.__name__}-scalar") for dtype in DTYPES]
LEAVES += [pytest.param(np.array(1, dtype), id=f"{dtype.__name__}-0d") for dtype in DTYPES]
LEAVES += [pytest.param(_extremes(dtype), id=f"{dtype.__name__}-1d") for dtype in DTYPES]
LEAVES += [pytest.param(_extremes(dtype)[-1], id=f"{dtype.__name__}-max") for dtype in DTYPES]
LEAVES += [pytest.param(np.resize(_extremes(d), (2, 3, 4)), id=f"{d.__name__}-3d") for d in DTYPES]
LEAVES += [pytest.param(np.zeros((2, 0, 3), dtype), id=f"{dtype.__name__}-empty") for dtype in DTYPES]
LEAVES += [
    np.float32(np.nan), np.float64(-np.inf), np.float64(-0.0), np.int64(-5), np.int32(-(2**31)),
    np.int8(-128),
    0, -1, 2**63, -(2**63) - 1, 2**200, -(2**200), True, False, 1.5, float("nan"),
    "", "\u00e9t\u00e9 \u2603 \U0001f600", "x" * 300, b"", b"\x00\xff", None,
    np.array(["a", "", "\u00e9\U0001f600"]), np.array([b"a", b"\xff"]).reshape(2, 1),
    (), [], {}, ((), ((1,),), [()]), [np.int8(1), np.int8(-2)], ["a", "b"], [[1.5], [2.5, 3.5]],
    {"k": 1}, {f"key{i:03d}": i for i in range(60)},
    {"\u00e9": 1, "z": 2, "a": {}, "\U0001f600": None, "": b""},
    {1: "one", "s": 2, (1, 2): b"t", 2.5: None, np.int64(3): [1]}, {"outer": {5: {"inner": np.zeros(3)}}},
    np.arange(3000, dtype=np.int64) * 1_000_003 - 10**9,  # varints beyond _MAX_PY_VARINTS: upb for that leaf
    np.arange(800, dtype=np.uint64) << np.uint64(50),
    np.full((70, 70, 3), 7, np.uint8),
]  # fmt: skip


@pytest.mark.parametrize("value", LEAVES)
def test_every_leaf_type_decodes_like_the_codec(value):
    for raw in both_wires(value):
        assert_same(raw)


def test_long_varint_leaves_are_parsed_by_upb():
    raw = fast_codec.serialize(np.arange(3000, dtype=np.int64))
    _, start, stop = fast_decode._field(raw, 0, len(raw))
    with pytest.raises(fast_decode._LongVarints):
        fast_decode._leaf(raw, start, stop)
    assert_same(raw)


# ----- 3. irregular wire: the codec's value or its error --------------------------------------------------
def f(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + varint(len(payload)) + payload


def datum(values: bytes, shape: list[int] | None = None, extra: bytes = b"") -> bytes:
    """A Data holding one Datum whose Values message is `values` (serialized)."""
    dims = (
        b"" if shape is None else f(0x0A, b"".join(f(0x12, b"\x08" + varint(d) if d else b"") for d in shape))
    )
    return f(0x0A, dims + f(0x12, values) + extra)


def _entry(key: bytes, value: Any) -> bytes:
    """A str-keyed Dict map entry."""
    return f(0x0A, f(0x0A, key) + f(0x12, fast_codec.serialize(value)))


def _two_kinds(*fields: tuple[str, list]) -> bytes:
    data = storage_pb2.Data()
    data.datum.shape.dim.add().size = 2
    for name, values in fields:
        getattr(data.datum.values, name).extend(values)
    return data.SerializeToString()


STEP = (
    (dm_env.StepType.MID, np.float64(1.0), 0.5, {"image": np.arange(24, dtype=np.uint8).reshape(2, 4, 3)}),
    np.int64(3),
    {"keys": ["a", "b"], "info": "{}", "image": b"\xff\xd8jpeg"},
)
RECORD = fast_codec.serialize(STEP)
MIXED = fast_codec.serialize(
    {
        "i32": np.array([-1, 5, 2**31 - 1], np.int32), "u32": np.array([1, 2**32 - 1], np.uint32),
        "b": np.array([True, False]), "f": np.array([1.5, -2.0], np.float32), "d": np.float64(2.5),
        "u64": np.uint64(2**64 - 1), "i8": np.array([-3, 4], np.int8), "u16": np.uint16(7),
        "s": np.array(["a", "b"]), "t": (1, None, [b"x"]), 3: "k", "big": -(2**70),
        "i64": np.eye(2, dtype=int),
    }
)  # fmt: skip
IRREGULAR = {
    "unpacked int64": datum(b"\x20" + varint(5) + b"\x20" + varint(-1), [2]),
    "int64 in two packed runs": datum(f(0x22, varint(1)) + f(0x22, varint(2)), [2]),
    "datum then tuple": fast_codec.serialize(np.int64(1)) + fast_codec.serialize((1, 2)),
    "tuple then datum": fast_codec.serialize((1, 2)) + fast_codec.serialize(np.int64(1)),
    "datum twice (merged)": fast_codec.serialize(np.int64(1)) + fast_codec.serialize("a"),
    "unknown Data field": fast_codec.serialize([1.5]) + f(0x2A, b"junk"),
    "unknown Values field": datum(f(0x22, varint(7)) + b"\x80\x02\x01", [-438]),
    "unknown Datum varint": datum(f(0x22, varint(7)), [-438], extra=b"\x18\x05"),
    "values before shape": f(0x0A, f(0x12, f(0x22, varint(1) + varint(2))) + f(0x0A, f(0x12, b"\x08\x02"))),
    "duplicate map key": f(0x22, _entry(b"a", 1) * 2),
    "duplicate map key, other value": f(0x22, _entry(b"k", 1) + _entry(b"k", "two")),
    "map key in kvs too": f(0x22, f(0x0A, f(0x0A, b"a")) + f(0x12, f(0x0A, fast_codec.serialize(("a", 1))))),
    "kvs pair of three": f(0x22, f(0x12, f(0x0A, fast_codec.serialize((1, 2, 3))))),
    "kvs pair as list": f(0x22, f(0x12, f(0x0A, fast_codec.serialize([1, 2])))),
    "int64 and strings": _two_kinds(("int64_values", [1, 2]), ("string_values", ["a", "b"])),
    "floats and doubles": _two_kinds(("float_values", [1.5, 2.5]), ("double_values", [3.5, 4.5])),
    "bools and bytes": _two_kinds(("bool_values", [True, False]), ("bytes_values", [b"x", b"y"])),
    "uint8 scalar of 2 bytes": datum(f(0x6A, b"\x01\x02"), [-438]),
    "empty uint8 array bytes": datum(f(0x6A, b""), [3]),
    "int32 as 5-byte varint": datum(f(0x1A, varint(2**32 - 3)), [-438]),
    "int32 array as 5-byte varints": datum(f(0x1A, varint(2**32 - 3) + varint(1)), [2]),
    "uint32 beyond 32 bits": datum(f(0x2A, varint(2**32 + 5)), [1]),
    "bool of varint 2**64": datum(f(0x3A, b"\x80" * 9 + b"\x02"), [-438]),
    "bools of varint 2**64": datum(f(0x3A, b"\x80" * 9 + b"\x02" + b"\x01"), [2]),
    "int32 of 10-byte varint 2**63+5": datum(f(0x1A, b"\x85" + b"\x80" * 8 + b"\x01"), [1]),
    "shape dim of varint 2**64+1": f(0x0A, f(0x0A, f(0x12, b"\x08\x81" + b"\x80" * 8 + b"\x02"))
                                         + f(0x12, f(0x22, b"\x01"))),
    "11-byte varint": datum(f(0x22, b"\xff" * 10 + b"\x01"), [1]),
    "float32 payload of 5 bytes": datum(f(0x0A, bytes(5)), [1]),
    "invalid utf-8 string": datum(f(0x42, b"\xff"), [-438]),
    "big int array": datum(f(0x52, b"\x01") * 2, [2]),
    "no shape, two values": datum(f(0x22, varint(1) + varint(2))),
    "shape of -1": datum(f(0x22, varint(1) + varint(2)), [-1]),
    "two-byte tag": b"\x82\x01\x00",
    "truncated record": RECORD[: len(RECORD) // 2],
    "record cut by one byte": RECORD[:-1],
    "record plus a zero byte": RECORD + b"\x00",
}  # fmt: skip


@pytest.mark.parametrize("raw", list(IRREGULAR.values()), ids=list(IRREGULAR))
def test_irregular_wire_gives_the_codecs_value_or_error(raw):
    same_outcome(raw)


@pytest.mark.parametrize("base", [RECORD, MIXED], ids=["record", "mixed-leaves"])
def test_damaged_bytes_give_the_codecs_value_or_error(base):
    """Seeded damage (byte changes, cuts, splices), each compared with the codec."""
    assert_same(base)
    rng = np.random.default_rng(7)
    for _ in range(1000):
        raw = bytearray(base)
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(len(raw)))
            kind = rng.integers(3)
            if kind == 0:
                raw[pos] = int(rng.integers(256))
            elif kind == 1:
                del raw[pos : pos + int(rng.integers(1, 8))]
            else:
                raw[pos:pos] = base[int(rng.integers(len(base))) :][: int(rng.integers(1, 12))]
        same_outcome(bytes(raw))


# ----- 4. the leaf cache ----------------------------------------------------------------------------------
def test_cached_scalars_are_shared_immutables_and_arrays_never_are():
    for value in (np.float32(0.25), np.int64(-3), "step", b"b", 2**70, np.uint8(9), 1, True, 1.0):
        raw = fast_codec.serialize(value)
        first, again = fast_decode.decode(raw), fast_decode.decode(raw)  # by the walk or by a plan
        assert first == again == value
        assert fast_decode._data(raw, 0, len(raw)) is fast_decode._data(raw, 0, len(raw))  # the walk's cache
        assert type(first) is (np.float64 if type(value) is float else type(value))
    arrays = [
        np.arange(3, dtype=np.uint8),
        np.array([1.5, 2.5], np.float32),
        np.array([1, -2]),
        np.array(["a", "b"]),
    ]
    for value in arrays:
        raw = fast_codec.serialize(value)
        kept = bytes(raw)
        first = fast_decode.decode(raw)
        first[0] = first[1]
        again = fast_decode.decode(raw)
        assert (
            raw == kept
            and first[0] != value[0]
            and again[0] == value[0]
            and not np.shares_memory(first, again)
        )
    first = fast_decode.decode(RECORD)
    first[0][3]["image"][:] = 99
    first[2]["keys"].append("c")
    again = fast_decode.decode(RECORD)
    assert again[2]["keys"] == ["a", "b"] and again[0][3]["image"].max() == 23


# ----- 5. through the episode reader ----------------------------------------------------------------------
def test_reader_records_equal_envloggers_own(tmp_path):
    folder = tmp_path / "ep"
    written = record_episode(folder, n=30, seed=2)
    episode = study_pb2.Episode(id="ep1", storage=written["storage"])
    episode.storage.environment_logger.tag_directory = str(folder)
    with open_episode(episode, tmp_path) as reader, envlogger.Reader(str(folder)) as theirs:
        steps = theirs.episodes[0]
        assert len(reader) == len(steps) == len(written["actions"]) + 1
        for k in range(len(reader)):
            raw = reader._records.serialized_step(reader._start + k)
            fast_decode._data(raw, 0, len(raw))  # the files' bytes take the short path
            same(reader._load_record(k), steps[k])


@pytest.mark.parametrize("levels", [25, 40, 400])
def test_deeply_nested_records_give_the_codecs_value_or_error(levels):
    """Nested dicts: a plan is refused past its depth bound (Python compiles at most 20 nested blocks), the
    walk reads what the codec reads, and past Python's stack the codec's own parser error comes back."""
    value: Any = np.float64(1.0)
    for i in range(levels):
        value = {"k": value, "x": np.int64(i)}
    raw = fast_codec.serialize(value)
    with pytest.raises(decode_plans.NoPlan):
        decode_plans.compile_plan(raw, fast_decode._WALK)
    for _ in range(3):  # the walk, then again after a compile was tried
        same_outcome(raw)

"""The in-place encoder and the wire serializer give exactly the message envlogger's codec builds,
for real records and edge cases."""

from __future__ import annotations

import dm_env
import numpy as np
import pytest
from envlogger import step_data
from envlogger.converters import codec
from envlogger.proto import storage_pb2

from annotator.envs import registry
from annotator.envs.render import encode_jpeg
from pipelines.episodes import fast_codec
from pipelines.episodes.base import custom_data, make_timestep
from protos.rlds_creator import study_pb2


def same(value) -> None:  # noqa: ANN001
    ours, theirs = fast_codec.encode(value), codec.encode(value)
    assert ours == theirs
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)
    wire = storage_pb2.Data.FromString(fast_codec.serialize(value))
    assert wire == theirs
    assert wire.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)


def family_env(family: str):  # noqa: ANN201
    spec = study_pb2.EnvironmentSpec(id=family, sync=True)
    if family == "procgen":
        spec.procgen.id = "coinrun"
    elif family == "atari":
        spec.atari.id = "Breakout"
    else:
        spec.net_hack.id = "NetHackScore-v0"
    return registry.create(spec, seed=0)


@pytest.mark.parametrize("family", ["procgen", "atari", "nethack"])
def test_real_records_encode_identically(family):
    env = family_env(family)
    rng = np.random.default_rng(0)
    first = env.reset()
    records = [step_data.StepData(dm_env.restart(first.observation), None, custom_data(None, [], first.info))]
    for _ in range(8):
        action = env.sample_action(rng)
        t = env.step(action)
        ts = make_timestep(
            t.observation, t.reward, first=False, terminated=t.terminated, truncated=t.truncated
        )
        keys = ["ArrowLeft", "a"] if rng.random() < 0.5 else []
        records.append(step_data.StepData(ts, action, custom_data(encode_jpeg(env.render()), keys, t.info)))
        if t.last:
            break
    env.close()
    for record in records:
        same(record)
        decoded = codec.decode(fast_codec.encode(record))
        assert decoded[2]["image" if record.custom_data.get("image") else "info"] is not None


@pytest.mark.parametrize(
    "value",
    [
        None,
        [],
        (),
        {},
        (None, 1, None),
        {"a": None, "b": [], 3: "int key", (1, 2): b"tuple key"},
        [1, 2, 3],
        ["x", "y"],
        [np.zeros(2, np.float32), np.ones(3, np.float32)],
        np.array(5, np.int64),
        np.zeros((0, 3), np.uint8),
        np.arange(12, dtype=np.uint8).reshape(2, 2, 3)[:, ::-1],  # not C-contiguous
        np.linspace(0, 1, 7),
        np.array([True, False]),
        np.array(["a", "bc"]),
        np.arange(6, dtype=np.int16).reshape(3, 2),
        np.arange(4, dtype=np.uint16),
        np.arange(4, dtype=np.int8),
        np.float32(1.5),
        np.float64(2.5),
        2.5,
        np.int32(-3),
        np.uint64(7),
        2**70,
        -1,
        True,
        np.bool_(False),
        "text",
        b"\x00bytes",
        dm_env.StepType.LAST,
        np.int64(-5),
        np.int64(2**62),
        -(2**70),
        "",
        b"",
        "\u00e9t\u00e9 \U0001f600",
        {"k\u00e9y": {"nested": (np.zeros((2, 300), np.uint8), None, [b"a", b""])}},
        [None, None],
        [(1.5, "a"), (2.5, "b")],
        {"a": {}, "b": (), "c": [np.uint8(3)]},
        np.zeros((1, 0), np.uint8),
        np.full((70, 70, 3), 7, np.uint8),  # lengths over 127 and 16383: multi-byte varints
    ],
)
def test_edge_values_encode_identically(value):
    same(value)


def test_heterogeneous_list_is_refused_like_codec():
    with pytest.raises(TypeError):
        codec.encode([1, "a"])
    with pytest.raises(TypeError, match="element 1"):
        fast_codec.encode([1, "a"])
    with pytest.raises(TypeError, match="element 1"):
        fast_codec.serialize({"keys": ["a", 1]})

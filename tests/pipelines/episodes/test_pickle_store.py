"""Pickle episodes: our writer round trip, RLDS Creator's own files, and refusing unsafe pickles."""

from __future__ import annotations

import io
import os
import pickle
import sys
import types
from typing import Any, NamedTuple

import dm_env
import numpy as np
import numpy.dtypes
import pytest
from dm_env import specs

from pipelines.episodes import open_episode
from pipelines.episodes.envlogger_store import EnvloggerEpisodeReader
from pipelines.episodes.pickle_store import PickleEpisodeReader, _SafeUnpickler
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2
from tests.pipelines.episodes.helpers import assert_same_step
from tests.pipelines.episodes.test_envlogger_store import META, record_episode


def test_pickle_round_trip_matches_envlogger_for_the_same_play(tmp_path):
    # Same seed -> same play; both formats must give the same RLDS steps.
    pk = record_episode(tmp_path / "pk", kind="pickle", n=30, seed=5)
    el = record_episode(tmp_path / "el", kind="envlogger", n=30, seed=5)
    assert [int(a) for a in pk["actions"]] == [int(a) for a in el["actions"]]
    assert pk["storage"].pickle.path == "s1/se1/maze/ep1/episode.pkl"
    assert not list((tmp_path / "pk").glob("*.partial"))
    episode = study_pb2.Episode(id="ep1")
    episode.storage.pickle.path = str(tmp_path / "pk" / "episode.pkl")  # absolute paths are honoured
    with open_episode(episode, tmp_path / "elsewhere") as p, EnvloggerEpisodeReader(tmp_path / "el") as e:
        assert len(p) == len(e) == len(pk["actions"]) + 1
        assert p.metadata["agent_id"] == META.agent_id and p.metadata["format"] == "pickle"
        assert p.specs["observation_spec"]["image"].shape == (64, 64, 3)
        for a, b in zip(p, e, strict=True):
            assert_same_step(a, b)


class _CreatorStepData(NamedTuple):
    timestep: Any
    action: Any
    custom_data: Any = None


def test_reads_an_rlds_creator_pickle(tmp_path, monkeypatch):
    """RLDS Creator pickled its own `rlds_creator.episode_storage.StepData`, info as a dict, keys as a dict."""
    module = types.ModuleType("rlds_creator.episode_storage")
    _CreatorStepData.__module__ = module.__name__
    _CreatorStepData.__qualname__ = "StepData"
    module.StepData = _CreatorStepData
    monkeypatch.setitem(sys.modules, "rlds_creator", types.ModuleType("rlds_creator"))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    obs = [np.full((4, 4, 3), i, np.uint8) for i in range(3)]
    steps = [
        _CreatorStepData(dm_env.restart(obs[0]), None, {"image": b"i0", "keys": {}}),
        _CreatorStepData(
            dm_env.transition(1.0, obs[1]), 2, {"image": b"i1", "keys": {"Up": True}, "info": {"a": 1}}
        ),
        _CreatorStepData(dm_env.termination(5.0, obs[2]), 3, {"image": b"i2", "keys": {"Left": True}}),
    ]
    data = {
        "metadata": {"agent_id": "x", "episode_id": "e"},
        "steps": steps,
        "observation_spec": specs.Array((4, 4, 3), np.uint8),
        "action_spec": specs.DiscreteArray(4),
        "reward_spec": specs.Array((), float),
        "discount_spec": specs.BoundedArray((), float, 0.0, 1.0),
    }
    path = tmp_path / "0.pkl"
    path.write_bytes(pickle.dumps(data))
    monkeypatch.delitem(sys.modules, module.__name__)  # the reader must not need RLDS Creator installed
    monkeypatch.delitem(sys.modules, "rlds_creator")
    with PickleEpisodeReader(path) as reader:
        got = list(reader)
    assert [s.action for s in got] == [2, 3, None]
    assert [s.reward for s in got] == [1.0, 5.0, 0.0]
    assert [s.keys for s in got] == [["Up"], ["Left"], []]
    assert got[0].info == {"a": 1} and got[1].info == {}
    assert got[2].is_last and got[2].is_terminal and got[0].image == b"i0"


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_unsafe_pickle_is_refused_with_the_class_named(tmp_path):
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"steps": [_Evil()]}))
    with pytest.raises(StepmarkError, match=r"evil\.pkl: refusing to load class posix\.system"):
        PickleEpisodeReader(path)


def test_truncated_and_foreign_pickles_are_named(tmp_path):
    good = tmp_path / "t.pkl"
    good.write_bytes(pickle.dumps({"steps": [], "metadata": {}})[:-5])
    with pytest.raises(StepmarkError, match=r"t\.pkl: not a readable episode pickle"):
        PickleEpisodeReader(good)
    foreign = tmp_path / "f.pkl"
    foreign.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(StepmarkError, match="no 'steps' list"):
        PickleEpisodeReader(foreign)
    bad_step = tmp_path / "b.pkl"
    bad_step.write_bytes(pickle.dumps({"steps": [("not", "a", "timestep")]}))
    with pytest.raises(StepmarkError, match="step 0 is not"):
        PickleEpisodeReader(bad_step)
    with pytest.raises(StepmarkError, match="not found"):
        PickleEpisodeReader(tmp_path / "missing.pkl")


def _global_call_chain(module: str, name: str, *calls: str) -> bytes:
    """Protocol 4 bytes: STACK_GLOBAL(module, name), then call the result with each one-string argument."""

    def text(s: str) -> bytes:
        raw = s.encode()
        return b"\x8c" + bytes([len(raw)]) + raw  # SHORT_BINUNICODE

    body = text(module) + text(name) + b"\x93"
    for arg in calls:
        body += text(arg) + b"\x85R"  # TUPLE1, REDUCE
    return b"\x80\x04" + body + b"."


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("numpy.dtypes", "_add_dtype_helper.__builtins__.get"),
        ("numpy", "dtypes._add_dtype_helper.__builtins__.get"),
        ("numpy", "dtype.__init__.__globals__.get"),
        ("numpy.core.multiarray", "_reconstruct.__globals__.get"),
        ("dm_env", "TimeStep.__init__.__globals__.get"),
    ],
)
def test_dotted_names_cannot_walk_from_an_allowed_module_to_eval(tmp_path, module, name):
    """Protocol 4 resolves `a.b.c` attribute by attribute: an allowed module must not lead to builtins."""
    marker = tmp_path / "pwned"
    path = tmp_path / "dotted.pkl"
    path.write_bytes(_global_call_chain(module, name, "eval", f"open({str(marker)!r}, 'w').write('x')"))
    with pytest.raises(StepmarkError, match=r"dotted\.pkl: refusing to load class"):
        PickleEpisodeReader(path)
    assert not marker.exists()


def test_numpy_dtype_classes_still_load(tmp_path):
    """numpy>=1.25 pickles dtype classes by name; the exact class names stay allowed."""
    for module, name in (("numpy.dtypes", "Float32DType"), ("numpy", "dtypes.UInt8DType")):
        found = _SafeUnpickler(io.BytesIO(_global_call_chain(module, name)), tmp_path / "x.pkl").load()
        assert found is getattr(numpy.dtypes, name.removeprefix("dtypes."))
    with pytest.raises(StepmarkError, match="refusing to load class numpy.dtypes.DTypeMeta"):
        _SafeUnpickler(io.BytesIO(_global_call_chain("numpy.dtypes", "DTypeMeta")), tmp_path / "x.pkl").load()

"""What every episode format shares: the RLDS-aligned `Step`, the reader and writer interfaces.

Formats store steps the envlogger way: record k holds timestep k (observation k, and the reward/discount of
the transition that produced it), the action that led to it (None on the first record), and custom data
(`image` of observation k, the `keys` pressed for that action, the environment's `info` of that transition).
Readers turn that into RLDS steps (`Step`): observation i with the action taken on it and the reward,
discount, keys and info that followed, plus one final step holding the last observation
(see `schemas/episode_storage.md`).
"""

from __future__ import annotations

import abc
import base64
import enum
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import dm_env
import numpy as np
from dm_env import specs as dm_specs
from envlogger import step_data
from google.protobuf import json_format
from google.protobuf import message as pb_message

from protos.rlds_creator import study_pb2

# Keys of the per-step custom data (the names RLDS Creator used).
CUSTOM_IMAGE = "image"
CUSTOM_KEYS = "keys"
CUSTOM_INFO = "info"  # JSON text: envlogger's codec refuses heterogeneous lists and None inside lists


@dataclass
class Step:
    """One RLDS step: `observation` and the `action` taken on it, the `reward`/`discount` that followed.

    `keys` are the keys pressed for that action and `info` the environment's info returned by it (so the
    finished transition's `info["episode"]` is on the step whose action ended the episode). The last step
    (`is_last`) holds the final observation; its action is None, reward and discount 0, keys and info empty.
    `image` is the rendered frame of `observation` (JPEG or PNG bytes), None when none was stored.
    """

    index: int
    observation: Any
    action: Any
    reward: float
    discount: float
    is_first: bool
    is_last: bool
    is_terminal: bool
    image: bytes | None = None
    keys: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EpisodeMetadata:
    """Per-episode metadata written with the step data (so the files describe themselves)."""

    agent_id: str
    episode_id: str
    env_id: str
    study_id: str
    session_id: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


class EnvSpecs:
    """The four dm_env specs of an environment, in the shape envlogger's spec codec expects (methods)."""

    def __init__(
        self,
        observation_spec: Any,
        action_spec: Any,
        reward_spec: Any | None = None,
        discount_spec: Any | None = None,
    ) -> None:
        self._observation = observation_spec
        self._action = action_spec
        self._reward = reward_spec if reward_spec is not None else dm_specs.Array((), float, "reward")
        self._discount = (
            discount_spec
            if discount_spec is not None
            else dm_specs.BoundedArray((), float, 0.0, 1.0, "discount")
        )

    def observation_spec(self) -> Any:
        return self._observation

    def action_spec(self) -> Any:
        return self._action

    def reward_spec(self) -> Any:
        return self._reward

    def discount_spec(self) -> Any:
        return self._discount


def to_jsonable(value: Any) -> Any:
    """Environment info -> plain JSON values (numpy scalars/arrays, bytes as base64, protos as dicts, enums by name).

    The one converter for info dicts: environments apply it to every transition, the recorder and exporters
    to what they store.

    Anything else is kept as its `repr` rather than failing a recording over one odd info value.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        f = float(value)
        return f if math.isfinite(f) else repr(f)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, bytes | bytearray):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, pb_message.Message):
        return json_format.MessageToDict(value)
    if isinstance(value, enum.Enum):  # IntEnum members were taken as ints above (e.g. NLE's StepStatus)
        return value.name
    return repr(value)


def encode_info(info: Mapping[str, Any] | None) -> str:
    """Info as JSON text. Plain info (the usual case) is dumped directly; `to_jsonable` only on a miss."""
    try:
        return json.dumps(info or {}, sort_keys=True, allow_nan=False, default=to_jsonable)
    except (TypeError, ValueError):  # non-str keys, NaN/inf, numpy scalars that `default` turned into NaN
        return json.dumps(to_jsonable(dict(info or {})), sort_keys=True, allow_nan=False)


# Info texts decoded lately whose values are all scalars, by text: many environments repeat the same info for
# many steps (Procgen: per level). A hit costs a shallow copy (nothing nested to share) instead of a parse.
_info_memo: dict[str, dict[str, Any]] = {}
_INFO_MEMO_SIZE = 256
_SCALARS = frozenset((str, int, float, bool, type(None)))


def decode_info(text: Any) -> dict[str, Any]:
    if text is None or text == "":
        return {}
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if isinstance(text, dict):  # RLDS Creator's pickles stored the dict itself
        return {str(k): to_jsonable(v) for k, v in text.items()}
    hit = _info_memo.get(text)
    if hit is not None:
        return dict(hit)
    value = json.loads(text)
    if not isinstance(value, dict):
        return {"value": value}
    if all(type(v) in _SCALARS for v in value.values()):
        if len(_info_memo) >= _INFO_MEMO_SIZE:
            _info_memo.clear()
        _info_memo[text] = dict(value)
    return value


def custom_data(
    image: bytes | None, keys: list[str] | None, info: Mapping[str, Any] | None
) -> dict[str, Any]:
    data: dict[str, Any] = {CUSTOM_KEYS: [str(k) for k in keys or []], CUSTOM_INFO: encode_info(info)}
    if image is not None:
        data[CUSTOM_IMAGE] = bytes(image)
    return data


def make_timestep(
    observation: Any, reward: float | None, *, first: bool, terminated: bool, truncated: bool
) -> dm_env.TimeStep:
    """dm_env semantics: discount 0 on termination, 1 on truncation and mid-episode; None on the first."""
    if first:
        return dm_env.restart(observation)
    r = float(reward or 0.0)
    if terminated:
        return dm_env.termination(r, observation)
    if truncated:
        return dm_env.truncation(r, observation, discount=1.0)
    return dm_env.transition(r, observation, discount=1.0)


def conform_action(action: Any, spec: Any) -> Any:
    """An action in its spec's dtype (a Python int becomes e.g. np.int64), so files match their specs."""
    if action is None or not isinstance(spec, dm_specs.Array):
        return action
    try:
        array = np.asarray(action, dtype=spec.dtype)
    except (TypeError, ValueError):
        return action
    if array.shape != tuple(spec.shape):
        return action
    return array[()] if array.ndim == 0 else array


def _bool(value: Any) -> bool:
    return bool(value) if value is not None else False


class EpisodeReader(abc.ABC):
    """Random access to one episode's RLDS steps: `step(i)` decodes only what step i needs."""

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def step(self, i: int) -> Step: ...

    @property
    @abc.abstractmethod
    def metadata(self) -> dict[str, Any]: ...

    def close(self) -> None:  # noqa: B027 - readers without resources need nothing
        pass

    def __iter__(self) -> Iterator[Step]:
        for i in range(len(self)):
            yield self.step(i)

    def __enter__(self) -> EpisodeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_index(self, i: int) -> int:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"step {i} out of range for an episode of {n} steps")
        return i


class RecordEpisodeReader(EpisodeReader):
    """Readers over envlogger-shaped records (envlogger, pickle): pairs record i with record i+1."""

    def __init__(self) -> None:
        self._cache: dict[int, Any] = {}

    @abc.abstractmethod
    def _num_records(self) -> int: ...

    @abc.abstractmethod
    def _load_record(self, k: int) -> Any: ...

    def _record(self, k: int) -> Any:
        hit = self._cache.get(k)
        if hit is None:
            hit = self._load_record(k)
            if len(self._cache) >= 2:  # sequential reads need only the previous record again
                self._cache.pop(next(iter(self._cache)))
            self._cache[k] = hit
        return hit

    def __len__(self) -> int:
        return self._num_records()

    @property
    def specs(self) -> dict[str, Any]:
        """observation/action/reward/discount specs of the recorded environment (values may be None)."""
        return {}

    def raw_records(self) -> Iterator[step_data.StepData]:
        """The envlogger records themselves (for exporters that re-log episodes unchanged)."""
        for k in range(self._num_records()):
            yield self._record(k)

    def step(self, i: int) -> Step:
        i = self._check_index(i)
        return self._pair(i, self._record(i), self._record(i + 1) if i + 1 < len(self) else None)

    def __iter__(self) -> Iterator[Step]:
        """Every step in order, each record decoded once (no index checks or cache on the way)."""
        n = self._num_records()
        cur = self._load_record(0) if n else None
        for i in range(n):
            nxt = self._load_record(i + 1) if i + 1 < n else None
            yield self._pair(i, cur, nxt)
            cur = nxt

    @staticmethod
    def _pair(i: int, cur: Any, nxt: Any) -> Step:
        """Step i from record i and record i + 1 (None for the last step)."""
        custom = cur.custom_data if isinstance(cur.custom_data, dict) else {}
        image = custom.get(CUSTOM_IMAGE)
        is_first = i == 0
        if nxt is not None:
            ncustom = nxt.custom_data if isinstance(nxt.custom_data, dict) else {}
            ts = nxt.timestep
            return Step(
                index=i,
                observation=cur.timestep.observation,
                action=nxt.action,
                reward=float(ts.reward) if ts.reward is not None else 0.0,
                discount=float(ts.discount) if ts.discount is not None else 1.0,
                is_first=is_first,
                is_last=False,
                is_terminal=False,
                image=bytes(image) if image is not None else None,
                keys=[str(k) for k in (ncustom.get(CUSTOM_KEYS) or [])],
                info=decode_info(ncustom.get(CUSTOM_INFO)),
            )
        ts = cur.timestep
        is_terminal = ts.step_type == dm_env.StepType.LAST and ts.discount is not None and ts.discount == 0.0
        return Step(
            index=i,
            observation=ts.observation,
            action=None,
            reward=0.0,
            discount=0.0,
            is_first=is_first,
            is_last=True,
            is_terminal=_bool(is_terminal),
            image=bytes(image) if image is not None else None,
            keys=[],
            info={},
        )


class EpisodeWriter(abc.ABC):
    """Writes ONE episode into a folder; `close()` makes it complete and returns how it is stored.

    `folder` is where the files go now (the temporary folder); `relative` is the final folder relative to
    the data directory, which is what the returned `Episode.Storage` names.
    """

    def __init__(self, folder: Path, relative: PurePosixPath, specs: EnvSpecs) -> None:
        self.folder = Path(folder)
        self.relative = PurePosixPath(relative)
        self.specs = specs
        self.num_records = 0
        self.closed = False

    def write_first(
        self, observation: Any, *, image: bytes | None = None, info: Mapping | None = None
    ) -> None:
        if self.num_records:
            raise RuntimeError(f"{self.folder}: the first step was already written")
        ts = make_timestep(observation, None, first=True, terminated=False, truncated=False)
        self._write(step_data.StepData(ts, None, custom_data(image, [], info)))

    def write_step(
        self,
        action: Any,
        observation: Any,
        reward: float,
        *,
        terminated: bool = False,
        truncated: bool = False,
        image: bytes | None = None,
        keys: list[str] | None = None,
        info: Mapping | None = None,
    ) -> None:
        if not self.num_records:
            raise RuntimeError(f"{self.folder}: write_first() must come before write_step()")
        ts = make_timestep(observation, reward, first=False, terminated=terminated, truncated=truncated)
        action = conform_action(action, self.specs.action_spec())
        self._write(step_data.StepData(ts, action, custom_data(image, keys, info)))

    def _write(self, data: step_data.StepData) -> None:
        if self.closed:
            raise RuntimeError(f"{self.folder}: writer already closed")
        self._record(data)
        self.num_records += 1

    @abc.abstractmethod
    def _record(self, data: step_data.StepData) -> None: ...

    @abc.abstractmethod
    def close(self, metadata: EpisodeMetadata) -> study_pb2.Episode.Storage:
        """Writes the episode metadata, flushes and closes; the files are complete afterwards."""

    def begin_close(self, metadata: EpisodeMetadata) -> None:
        """Starts closing; `finish_close()` completes it. Writers that close in the background
        (`writer_process`) return at once, so the caller can go on while the files are finished."""
        self._close_metadata = metadata

    def close_done(self) -> bool:
        """True when `finish_close()` will not wait."""
        return True

    def finish_close(self) -> study_pb2.Episode.Storage:
        """Completes `begin_close`: the files are complete afterwards (or this raises)."""
        return self.close(self._close_metadata)

    def abort(self) -> None:  # noqa: B027 - optional
        """Releases resources without promising complete files (the folder is then deleted)."""

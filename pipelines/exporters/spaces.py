"""Observation and action spaces of a dataset, as JSON a trainer reads without glue (no hard-coded
`num_values` or Box bounds).

Two forms of the same specs, both JSON text in the dataset metadata (`schemas/dataset_spec.md`, "Spaces"):
- dm_env specs (`observation_spec`, `action_spec`): `{"type": "DiscreteArray"|"BoundedArray"|"Array", "shape",
  "dtype", "num_values" | "minimum"/"maximum"}`, dicts as `{"type": "dict", "items": {...}}`, tuples/lists as
  `{"type": "tuple", "items": [...]}`;
- gymnasium spaces (`observation_space`, `action_space`) in Minari's serialization format
  (the same JSON shape; the Minari export writes Box bounds in full, since Minari 0.5.3's reader refuses
  one-number bounds under gymnasium 1.x): Discrete, Box (bounds as one number when uniform),
  Dict, Tuple. An unbounded dm_env `Array` becomes a Box over its dtype's range (floats: +-inf, written as
  JSON `Infinity`, which Python's `json` reads).
Pure functions: specs in, plain values out.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from dm_env import specs as dm_specs


def _bound(value: Any) -> Any:
    """A bound as one number when it is uniform (Box broadcasts it), else the full nested list."""
    arr = np.asarray(value)
    if arr.size and np.all(arr == arr.flat[0]):
        return arr.flat[0].item()
    return arr.tolist()


def spec_to_json(spec: Any) -> Any:
    """A (nested) dm_env spec as plain JSON values."""
    if isinstance(spec, dict):
        return {"type": "dict", "items": {str(k): spec_to_json(v) for k, v in spec.items()}}
    if isinstance(spec, list | tuple):
        return {"type": "tuple", "items": [spec_to_json(v) for v in spec]}
    out: dict[str, Any] = {
        "type": type(spec).__name__,
        "shape": [int(d) for d in spec.shape],
        "dtype": np.dtype(spec.dtype).name,
        "name": spec.name or "",
    }
    if isinstance(spec, dm_specs.DiscreteArray):
        out["num_values"] = int(spec.num_values)
    elif isinstance(spec, dm_specs.BoundedArray):
        out["minimum"] = _bound(spec.minimum)
        out["maximum"] = _bound(spec.maximum)
    return out


def _range(dtype: np.dtype) -> tuple[Any, Any]:
    if dtype.kind == "b":
        return 0, 1
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return int(info.min), int(info.max)
    return float("-inf"), float("inf")


def spec_to_space(spec: Any) -> Any:
    """A (nested) dm_env spec as a gymnasium space in Minari's JSON form (None for text/bytes leaves)."""
    if isinstance(spec, dict):
        items = {str(k): spec_to_space(v) for k, v in spec.items()}
        subspaces = {k: v for k, v in items.items() if v is not None}
        if items and not subspaces:
            return None  # only text/bytes leaves (a UI step's `step_text`): no space, like a text leaf
        return {"type": "Dict", "subspaces": subspaces}
    if isinstance(spec, list | tuple):
        return {"type": "Tuple", "subspaces": [spec_to_space(v) for v in spec]}
    dtype = np.dtype(spec.dtype)
    if dtype.kind in "OUSV":
        return None  # no gymnasium Box for text or bytes
    if isinstance(spec, dm_specs.DiscreteArray):
        return {"type": "Discrete", "dtype": "int64", "start": 0, "n": int(spec.num_values)}
    if isinstance(spec, dm_specs.BoundedArray):
        low, high = _bound(spec.minimum), _bound(spec.maximum)
    else:
        low, high = _range(dtype)
    if dtype.kind == "b":
        dtype = np.dtype(np.int8)  # gymnasium Boxes are numeric; booleans as 0/1 (MultiBinary has no dtype)
    return {"type": "Box", "dtype": dtype.name, "shape": [int(d) for d in spec.shape], "low": low, "high": high}


def dumps(value: Any) -> str:
    """JSON text of spaces/specs (sorted keys; infinite Box bounds as `Infinity`)."""
    return json.dumps(value, sort_keys=True)


def spaces_metadata(specs: dict[str, Any] | None) -> dict[str, str]:
    """The dataset metadata entries for the dataset's specs: dm_env specs and gymnasium spaces as JSON text.

    Without an observation spec (UI datasets with the full object table, which varies per screen) only the
    action's entries."""
    if not specs or specs.get("action_spec") is None:
        return {}
    obs, action = specs.get("observation_spec"), specs["action_spec"]
    out = {"action_spec": dumps(spec_to_json(action)), "action_space": dumps(spec_to_space(action))}
    if obs is not None:
        out["observation_spec"] = dumps(spec_to_json(obs))
        out["observation_space"] = dumps(spec_to_space(obs))
    return dict(sorted(out.items()))


def space_from_json(value: Any) -> Any:
    """A gymnasium space from `spec_to_space`'s JSON (text or parsed) — the loader for consumers without
    Minari (Minari's own reader needs Box bounds in full; the Minari export writes them so)."""
    from gymnasium import spaces as gym_spaces

    if isinstance(value, str):
        value = json.loads(value)
    kind = value["type"]
    if kind == "Dict":
        return gym_spaces.Dict({k: space_from_json(v) for k, v in value["subspaces"].items()})
    if kind == "Tuple":
        return gym_spaces.Tuple([space_from_json(v) for v in value["subspaces"]])
    if kind == "Discrete":
        return gym_spaces.Discrete(int(value["n"]), start=int(value.get("start", 0)))
    if kind == "Box":
        dtype = np.dtype(value["dtype"])
        shape = tuple(value["shape"])
        low = np.broadcast_to(np.asarray(value["low"], dtype=dtype), shape)  # exact: int64 bounds too
        high = np.broadcast_to(np.asarray(value["high"], dtype=dtype), shape)
        return gym_spaces.Box(low, high, shape=shape, dtype=dtype)
    raise ValueError(f"unknown space type {kind!r}")

"""`EnvironmentSpec` -> running `Environment`, and the valid ids per family for the study editor.

Family modules are imported lazily: robosuite, NLE and ALE each take seconds to import, and a process
that only runs Procgen should not pay for the others.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING

from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2

if TYPE_CHECKING:
    from annotator.envs.base import Environment

# oneof field of EnvironmentSpec.type -> (family name, module, class)
FAMILIES: dict[str, tuple[str, str, str]] = {
    "procgen": ("procgen", "annotator.envs.procgen", "ProcgenEnvironment"),
    "atari": ("atari", "annotator.envs.atari", "AtariEnvironment"),
    "net_hack": ("nethack", "annotator.envs.nethack", "NetHackEnvironment"),
    "robosuite": ("robosuite", "annotator.envs.robosuite", "RobosuiteEnvironment"),
    "robodesk": ("robodesk", "annotator.envs.robodesk", "RoboDeskEnvironment"),
    "dmlab": ("dmlab", "annotator.envs.dmlab", ""),
}


def family(spec: study_pb2.EnvironmentSpec) -> str:
    """The family of a spec: procgen, atari, nethack, robosuite, robodesk or dmlab."""
    field = spec.WhichOneof("type")
    if field is None:
        raise StepmarkError(
            f"environment {spec.id or spec.name!r} has no type: set one of {', '.join(sorted(FAMILIES))}"
        )
    return FAMILIES[field][0]


def create(
    spec: study_pb2.EnvironmentSpec, *, seed: int | None = None, render_size: int | None = None
) -> Environment:
    """A running environment for the spec (not yet reset). Raises StepmarkError for unusable specs.

    `seed` makes the run reproducible where the family allows it; `render_size` is the camera image
    size for families rendered from 3-D cameras (Robosuite; others have fixed frames or, for RoboDesk,
    take it from the spec's image_size).
    """
    field = spec.WhichOneof("type")
    family(spec)  # clear error for a spec without a type
    _, module_name, class_name = FAMILIES[field]
    module = importlib.import_module(module_name)
    if not class_name:
        return module.create(spec, seed=seed)  # DMLab: raises with the reason
    if spec.max_episode_steps < 0:
        raise StepmarkError(f"environment {spec.id!r}: max_episode_steps must be >= 0 (0 = no limit)")
    if field != "robodesk" and not getattr(spec, field).id:
        raise StepmarkError(f"environment {spec.id or spec.name!r}: the {field} settings need an id")
    cls = getattr(module, class_name)
    if field == "robosuite":
        return cls(spec, seed=seed, render_size=render_size)
    return cls(spec, seed=seed)


@functools.cache
def valid_ids() -> dict[str, list[str]]:
    """Ids the study editor offers, read from the installed packages (computed once per process)."""
    out: dict[str, list[str]] = {}
    for _, (name, module_name, _) in FAMILIES.items():
        out[name] = list(importlib.import_module(module_name).valid_ids())
    return out


def check(spec: study_pb2.EnvironmentSpec) -> str | None:
    """Builds the environment a spec describes and closes it, so a bad spec fails when a study is created
    rather than when someone first records in it. Raises StepmarkError; returns a note (None if none) when
    nothing can be built here: a spec without a type (a home for imported UI episodes) or DMLab."""
    field = spec.WhichOneof("type")
    if field is None:
        return "no environment type: nothing to record, episodes can only be imported (e.g. UI traces)"
    if field == "dmlab":
        try:
            create(spec)
        except StepmarkError as exc:
            return f"kept but cannot be recorded here: {exc}"
    env = create(spec)
    env.close()
    return None

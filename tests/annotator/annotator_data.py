"""Real data for the annotator tests: a SQLite store in a tmp dir, a Procgen study with episodes recorded by the
recorder, and (when the convert/import modules are present) UI episodes converted from ../shared/fixtures."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipelines.store import open_store
from protos.rlds_creator import study_pb2

ALICE = "alice@example.com"
BOB = "bob@example.com"
ENV_ID = "coinrun"
UI_STUDY_NAME = "Fixture UI traces"


@dataclass
class AnnotatorData:
    data_dir: Path
    repo: object
    study: study_pb2.StudySpec
    episodes: list[study_pb2.Episode]


def procgen_study_spec(max_steps: int = 25) -> study_pb2.StudySpec:
    spec = study_pb2.StudySpec(name="Coinrun practice", description="Procgen coinrun by hand",
                               instructions="Reach the coin.")  # fmt: skip
    env = spec.environment_specs.add(id=ENV_ID, name="CoinRun", sync=True, max_episode_steps=max_steps)
    env.procgen.id = "coinrun"
    env.procgen.distribution_mode = study_pb2.EnvironmentSpec.Procgen.DISTRIBUTION_EASY
    env.procgen.rand_seed = 7
    return spec


def build_env_data(
    data_dir: Path,
    *,
    episodes: int = 2,
    max_steps: int = 25,
    creator: str = ALICE,
    store_url: str | None = None,
) -> AnnotatorData:
    """A store (SQLite in data_dir, or `store_url`) with one Procgen study and `episodes` episodes recorded
    (random policy) by the recorder."""
    from annotator.recorder import record_batch

    data_dir.mkdir(parents=True, exist_ok=True)
    repo = open_store(store_url, data_dir)
    study = repo.create_study(procgen_study_spec(max_steps), creator)
    recorded = record_batch(repo, data_dir, study.id, ENV_ID, episodes, "random", user=creator, seed=3,
                            progress=False)  # fmt: skip
    return AnnotatorData(data_dir=data_dir, repo=repo, study=study, episodes=recorded)


def ui_import_available() -> bool:
    try:
        import pipelines.convert  # noqa: F401
        import pipelines.ui_import  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True


def import_ui_fixtures(data_dir: Path, fixtures: Path, user: str = ALICE) -> study_pb2.StudySpec:
    """Convert ../shared/fixtures/droidbot (one multi-step episode) + rico with convert-ui, import as a study."""
    from pipelines import convert, ui_import

    out = data_dir / "converted"
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    code = convert.run([str(fixtures / "droidbot"), str(out), "--runner=FnApiRunner"])
    assert code in (0, None), f"convert-ui failed with {code}"
    repo = open_store(None, data_dir)
    return ui_import.import_ui(repo, str(out), UI_STUDY_NAME, user)

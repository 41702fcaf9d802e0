"""Store tests run on a real SQLite file and on a real PostgreSQL server (tests/pg_fixture.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.store import Repository, open_store
from protos.rlds_creator import study_pb2


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    """None (the default SQLite file under tmp_path) or the URL of a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return None
    return request.getfixturevalue("pg_url")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def repo(store_url: str | None, data_dir: Path) -> Iterator[Repository]:
    with open_store(store_url, data_dir) as repository:
        yield repository


def study_spec(name: str = "Maze study", env_ids: tuple[str, ...] = ("maze", "pong")) -> study_pb2.StudySpec:
    """A study with a Procgen and an Atari environment (ids as given)."""
    spec = study_pb2.StudySpec(name=name, description="for tests", instructions="reach the goal")
    for i, env_id in enumerate(env_ids):
        env = spec.environment_specs.add(id=env_id, name=env_id.title(), sync=True, max_episode_steps=50)
        if i % 2 == 0:
            env.procgen.id = "maze"
            env.procgen.distribution_mode = env.procgen.DISTRIBUTION_HARD
            env.procgen.num_levels = 10
        else:
            env.atari.id = "Pong"
            env.atari.sticky_actions = True
    return spec


def env_episode(
    study_id: str,
    session: study_pb2.Session | None,
    env_id: str = "maze",
    *,
    num_steps: int = 20,
    reward: float = 2.5,
) -> study_pb2.Episode:
    """A finished env episode as the recorder registers it."""
    episode = study_pb2.Episode(
        study_id=study_id,
        environment_id=env_id,
        state=study_pb2.Episode.STATE_COMPLETED,
        num_steps=num_steps,
        total_reward=reward,
        controller_id="gamepad-0",
    )
    if session is not None:
        episode.session_id = session.id
        episode.user.email = session.user.email
    episode.start_time.FromSeconds(1_700_000_000)
    episode.end_time.FromSeconds(1_700_000_060)
    episode.metadata.update({"kind": "env", "success": True, "agent_id": "random"})
    episode.storage.environment_logger.tag_directory = f"{study_id}/{env_id}/ep"
    episode.storage.environment_logger.index = 0
    return episode

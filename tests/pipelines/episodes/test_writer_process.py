"""envlogger files written by the child writer process are the files the in-process writer writes."""

from __future__ import annotations

import os
import signal
from pathlib import Path, PurePosixPath

import envlogger
import numpy as np
import pytest
from envlogger.converters import codec

from annotator.envs import registry
from annotator.envs.render import encode_jpeg
from pipelines.episodes import EnvSpecs, EpisodeMetadata, WriterProcess, create_writer, open_episode
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2
from tests.pipelines.episodes.helpers import family_spec

META = EpisodeMetadata(agent_id="a@x", episode_id="ep", env_id="e", study_id="s1", session_id="se1")


def play(family: str, writers: list) -> None:  # noqa: ANN001
    """One real episode, each step written identically through every writer."""
    env = registry.create(family_spec(family, max_steps=12), seed=0)
    rng = np.random.default_rng(0)
    first = env.reset()
    image = encode_jpeg(env.render())
    for w in writers:
        w.write_first(first.observation, image=image, info=first.info)
    while True:
        action = env.sample_action(rng)
        t = env.step(action)
        image = encode_jpeg(env.render())
        for w in writers:
            w.write_step(
                action, t.observation, t.reward, terminated=t.terminated, truncated=t.truncated,
                image=image, keys=["ArrowLeft"], info=dict(t.info, extra=[1.5, -2.0]),
            )  # fmt: skip
        if t.last:
            break
    env.close()


def raw(folder: Path) -> tuple[list[bytes], bytes, list]:
    """Every record, the dataset metadata (both re-encoded: they hold arrays) and the episode metadata."""
    with envlogger.Reader(str(folder)) as reader:
        records = [codec.encode(step).SerializeToString(deterministic=True) for step in reader.episodes[0]]
        dataset = codec.encode(reader.metadata()).SerializeToString(deterministic=True)
        return records, dataset, list(reader.episode_metadata())


@pytest.mark.parametrize("family", ["procgen", "atari", "nethack"])
def test_child_writes_the_same_files_as_the_in_process_writer(tmp_path, family):
    env = registry.create(family_spec(family, max_steps=12), seed=0)
    specs = EnvSpecs(env.observation_spec(), env.action_spec())
    env.close()
    process = WriterProcess()
    try:
        meta = {"study_id": "s1", "env_id": family}
        here = create_writer("envlogger", tmp_path / "here", PurePosixPath("a/here"), specs, meta)
        there = create_writer(
            "envlogger", tmp_path / "there", PurePosixPath("a/there"), specs, meta, process=process
        )
        play(family, [here, there])
        assert here.close(META).environment_logger.tag_directory == "a/here"
        assert there.close(META).environment_logger.tag_directory == "a/there"
    finally:
        process.stop()
    records, dataset_meta, episode_meta = raw(tmp_path / "here")
    assert raw(tmp_path / "there") == (records, dataset_meta, episode_meta)
    assert len(records) > 2 and episode_meta == [META.to_dict()]
    episode = study_pb2.Episode()
    episode.storage.environment_logger.tag_directory = str(tmp_path / "there")
    with open_episode(episode, tmp_path) as reader:
        assert reader.step(1).keys == ["ArrowLeft"] and reader.step(1).info["extra"] == [1.5, -2.0]


def test_one_process_writes_episode_after_episode(tmp_path):
    env = registry.create(family_spec("procgen", max_steps=12), seed=0)
    specs = EnvSpecs(env.observation_spec(), env.action_spec())
    env.close()
    process = WriterProcess()
    try:
        for name in ("one", "two", "three"):
            w = create_writer("envlogger", tmp_path / name, PurePosixPath(name), specs, process=process)
            play("procgen", [w])
            w.close(META)
    finally:
        process.stop()
    assert process.closed
    assert raw(tmp_path / "one")[0] == raw(tmp_path / "three")[0]  # same seed, same episode


def test_a_dead_writer_process_is_an_error_not_a_silent_loss(tmp_path):
    env = registry.create(family_spec("procgen", max_steps=12), seed=0)
    specs = EnvSpecs(env.observation_spec(), env.action_spec())
    env.close()
    process = WriterProcess()
    try:
        w = create_writer("envlogger", tmp_path / "ep", PurePosixPath("ep"), specs, process=process)
        os.kill(process.pid, signal.SIGKILL)
        with pytest.raises(StepmarkError, match=rf"writer process {process.pid} died .*exit code -9"):
            play("procgen", [w])  # steps fill the pipe, or the close finds no one listening
            w.close(META)
    finally:
        process.stop()


def test_a_refused_open_is_reported_on_close_with_the_folder(tmp_path):
    env = registry.create(family_spec("procgen", max_steps=12), seed=0)
    specs = EnvSpecs(env.observation_spec(), env.action_spec())
    env.close()
    process = WriterProcess()
    try:
        w = create_writer("envlogger", tmp_path / "ep", PurePosixPath("ep"), specs, process=process)
        (tmp_path / "ep").rmdir()
        (tmp_path / "ep").write_text("a file where the episode folder should be")
        play("procgen", [w])
        with pytest.raises(StepmarkError, match="cannot open an envlogger writer"):
            w.close(META)
        # The process is still usable for the next episode.
        w2 = create_writer("envlogger", tmp_path / "ep2", PurePosixPath("ep2"), specs, process=process)
        play("procgen", [w2])
        w2.close(META)
    finally:
        process.stop()
    assert len(raw(tmp_path / "ep2")[0]) > 2

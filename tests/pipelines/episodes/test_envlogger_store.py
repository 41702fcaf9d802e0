"""envlogger (Riegeli) episode files: written from a real Procgen game, read back with envlogger itself."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import dm_env
import envlogger
import numpy as np
import pytest

from annotator.envs import registry
from annotator.envs.render import encode_jpeg
from pipelines.episodes import EnvSpecs, EpisodeMetadata, create_writer, open_episode
from pipelines.episodes.base import decode_info
from pipelines.episodes.envlogger_store import EnvloggerEpisodeReader
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2
from tests.pipelines.episodes.helpers import assert_same_step, jpeg_size, procgen_spec

KEYS = [["ArrowRight"], [], ["ArrowUp", "ArrowRight"], ["d"]]
META = EpisodeMetadata(agent_id="a@x", episode_id="ep1", env_id="maze", study_id="s1", session_id="se1")


def record_episode(folder: Path, kind: str = "envlogger", n: int = 25, seed: int = 0) -> dict:
    """Plays n steps (or to the end) of a real game through a writer; returns what was written."""
    env = registry.create(procgen_spec(max_steps=n), seed=seed)
    rng = np.random.default_rng(seed)
    writer = create_writer(
        kind, folder, PurePosixPath("s1/se1/maze/ep1"), EnvSpecs(env.observation_spec(), env.action_spec())
    )
    first = env.reset()
    written = {"obs": [first.observation["image"]], "images": [encode_jpeg(env.render())], "actions": []}
    written.update(rewards=[], keys=[], infos=[], last=None)
    writer.write_first(first.observation, image=written["images"][0], info=first.info)
    while True:
        keys = KEYS[len(written["actions"]) % len(KEYS)]
        action = env.action_from_input(keys) if rng.random() < 0.5 else env.sample_action(rng)
        t = env.step(action)
        image = encode_jpeg(env.render())
        info = dict(t.info, extra={"np": np.int32(4), "list": [1, "two", None]})
        writer.write_step(
            action, t.observation, t.reward, terminated=t.terminated, truncated=t.truncated,
            image=image, keys=keys, info=info,
        )  # fmt: skip
        for name, value in (("obs", t.observation["image"]), ("images", image), ("actions", action)):
            written[name].append(value)
        written["rewards"].append(t.reward)
        written["keys"].append(keys)
        written["infos"].append(info)
        if t.last:
            written["last"] = t
            break
    written["storage"] = writer.close(META)
    env.close()
    return written


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("envlogger") / "ep1"
    return folder, record_episode(folder)


def test_storage_names_the_final_folder_relative_to_the_data_dir(recorded):
    _, written = recorded
    storage = written["storage"]
    assert storage.WhichOneof("type") == "environment_logger"
    assert storage.environment_logger.tag_directory == "s1/se1/maze/ep1"
    assert storage.environment_logger.index == 0


def test_files_read_back_with_envlogger_reader_directly(recorded):
    folder, written = recorded
    assert (folder / "metadata.riegeli").is_file()
    n = len(written["actions"])
    with envlogger.Reader(str(folder)) as reader:
        assert len(reader.episodes) == 1
        steps = list(reader.episodes[0])
        assert len(steps) == n + 1
        assert reader.episode_metadata()[0] == META.to_dict()
        assert reader.observation_spec()["image"].shape == (64, 64, 3)
        assert reader.action_spec().num_values == 15
        assert steps[0].timestep.step_type == dm_env.StepType.FIRST and steps[0].action is None
        assert steps[-1].timestep.step_type == dm_env.StepType.LAST
        expected_discount = 0.0 if written["last"].terminated else 1.0
        assert steps[-1].timestep.discount == expected_discount
        for k, step in enumerate(steps):
            np.testing.assert_array_equal(step.timestep.observation["image"], written["obs"][k])
            assert step.custom_data["image"] == written["images"][k]
            if k:
                assert int(step.action) == int(written["actions"][k - 1])
                assert isinstance(step.action, np.int64)  # conformed to the action spec's dtype
                assert step.timestep.reward == pytest.approx(written["rewards"][k - 1])
                assert list(step.custom_data["keys"] or []) == written["keys"][k - 1]


def test_reader_gives_rlds_aligned_steps(recorded):
    folder, written = recorded
    n = len(written["actions"])
    with EnvloggerEpisodeReader(folder) as reader:
        assert len(reader) == n + 1
        assert reader.metadata["agent_id"] == "a@x" and reader.metadata["study_id"] == "s1"
        steps = list(reader)
    for i, step in enumerate(steps[:-1]):
        # observation i, the action taken on it, the reward/keys/info that followed
        np.testing.assert_array_equal(step.observation["image"], written["obs"][i])
        assert int(step.action) == int(written["actions"][i])
        assert step.reward == pytest.approx(written["rewards"][i])
        assert step.keys == written["keys"][i]
        assert step.info["extra"] == {"np": 4, "list": [1, "two", None]}
        assert step.info["level_seed"] == written["infos"][i]["level_seed"]
        assert step.image == written["images"][i] and jpeg_size(step.image) == (64, 64)
        assert step.is_first == (i == 0) and not step.is_last and not step.is_terminal
        assert step.discount == (0.0 if i == n - 1 and written["last"].terminated else 1.0)
    final = steps[-1]
    assert final.is_last and final.action is None and final.reward == 0.0 and final.keys == []
    assert final.is_terminal == written["last"].terminated
    np.testing.assert_array_equal(final.observation["image"], written["obs"][-1])


def count_loads(monkeypatch) -> list[int]:  # noqa: ANN001
    """The record indexes the envlogger reader decodes from now on, in order."""
    loaded: list[int] = []
    original = EnvloggerEpisodeReader._load_record

    def counting(self, k):
        loaded.append(k)
        return original(self, k)

    monkeypatch.setattr(EnvloggerEpisodeReader, "_load_record", counting)
    return loaded


def test_step_is_random_access_and_decodes_only_what_it_needs(tmp_path, monkeypatch):
    folder = tmp_path / "long"
    written = record_episode(folder, n=400, seed=1)
    n = len(written["actions"])
    loaded = count_loads(monkeypatch)
    with EnvloggerEpisodeReader(folder) as reader:
        k = n // 2
        step = reader.step(k)
        assert loaded == [k, k + 1]
        assert step.image == written["images"][k]
        assert reader.step(-1).is_last and loaded[-1] == n
        with pytest.raises(IndexError):
            reader.step(n + 1)


def test_open_episode_resolves_relative_tag_directory(recorded):
    folder, written = recorded
    # The stored path is relative to the data dir; here the data dir is the folder 4 levels up.
    data_dir = folder.parent / "data"
    target = data_dir / "s1/se1/maze"
    target.mkdir(parents=True)
    (target / "ep1").symlink_to(folder, target_is_directory=True)
    episode = study_pb2.Episode(id="ep1", storage=written["storage"])
    with open_episode(episode, data_dir) as reader:
        assert len(reader) == len(written["actions"]) + 1


def test_missing_or_broken_directories_are_named(tmp_path):
    with pytest.raises(StepmarkError, match="tag directory not found"):
        EnvloggerEpisodeReader(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(StepmarkError, match=str(empty)):
        EnvloggerEpisodeReader(empty)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "metadata.riegeli").write_bytes(b"not riegeli at all")
    with pytest.raises(StepmarkError, match=str(broken)):
        EnvloggerEpisodeReader(broken)


def test_index_out_of_range_is_refused(recorded):
    folder, _ = recorded
    with pytest.raises(StepmarkError, match="index 3 out of range"):
        EnvloggerEpisodeReader(folder, 3)


def test_writer_refuses_steps_before_the_first(tmp_path):
    env = registry.create(procgen_spec(), seed=0)
    writer = create_writer(
        "envlogger", tmp_path / "x", PurePosixPath("x"), EnvSpecs(env.observation_spec(), env.action_spec())
    )
    t = env.reset()
    with pytest.raises(RuntimeError, match="write_first"):
        writer.write_step(0, t.observation, 0.0)
    writer.abort()
    env.close()


def _episode_file(folder: Path, name: str) -> Path:
    [found] = folder.glob(f"*/{name}")  # envlogger keeps step files in a timestamped sub-folder
    return found


@pytest.mark.parametrize("damage", ["truncate", "zero-tail"])
def test_damaged_step_records_are_named_not_a_type_error(tmp_path, damage):
    folder = tmp_path / "ep"
    written = record_episode(folder, n=12)
    steps = _episode_file(folder, "steps.riegeli")
    data = steps.read_bytes()
    steps.write_bytes(data[: len(data) // 2] if damage == "truncate" else data[:200] + bytes(len(data) - 200))
    episode = study_pb2.Episode(id="ep1", num_steps=len(written["actions"]), storage=written["storage"])
    episode.storage.environment_logger.tag_directory = str(folder)
    with pytest.raises(StepmarkError, match=rf"{folder}: record \d+ cannot be read"):
        with open_episode(episode, tmp_path) as reader:
            for i in range(len(reader)):
                reader.step(i)


def test_cut_step_index_is_refused_instead_of_reading_as_empty(tmp_path):
    """envlogger logs and ignores a damaged step index, which would read as an episode of no steps."""
    folder = tmp_path / "ep"
    record_episode(folder, n=12)
    offsets = _episode_file(folder, "step_offsets.riegeli")
    offsets.write_bytes(offsets.read_bytes()[:10])
    with pytest.raises(StepmarkError, match=rf"{folder}: episode 0 has no readable steps"):
        EnvloggerEpisodeReader(folder)


def test_iteration_gives_the_steps_random_access_gives_decoding_each_record_once(recorded, monkeypatch):
    folder, _ = recorded
    loaded = count_loads(monkeypatch)
    with EnvloggerEpisodeReader(folder) as reader:
        iterated = list(reader)
        assert loaded == list(range(len(reader)))
        indexed = [reader.step(i) for i in range(len(reader))]
    assert len(iterated) == len(indexed)
    for a, b in zip(iterated, indexed, strict=True):
        assert a.index == b.index
        assert_same_step(a, b)
    # Steps own their info: editing one (as an exporter's transform may) changes no other step.
    iterated[0].info["level_seed"] = -1
    assert all(s.info.get("level_seed") != -1 for s in iterated[1:])
    with EnvloggerEpisodeReader(folder) as again:
        assert again.step(0).info["level_seed"] == indexed[0].info["level_seed"] != -1


@pytest.mark.parametrize(
    "text", ['{"level_seed": 7, "done": false, "name": "x", "r": 1.5}', '{"extra": {"a": [1]}, "k": 2}']
)
def test_decode_info_hands_out_a_fresh_dict_each_time(text):
    first, second = decode_info(text), decode_info(text)
    assert first == second == json.loads(text) and first is not second
    for value in first.values():
        if isinstance(value, dict):
            value["a"].append(2)  # nested values are never shared: only scalar-only infos are memoized
    first["k"] = first["level_seed"] = "changed"
    assert decode_info(text) == json.loads(text) and second == json.loads(text)

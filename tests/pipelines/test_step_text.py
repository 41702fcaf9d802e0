"""The step-text contract: every name in STEP_TEXT_FIELDS is read from its proto home."""

from __future__ import annotations

from pipelines.step_text import STEP_TEXT_FIELDS, step_texts
from protos.stepmark import ui_episode_pb2


def test_every_name_is_read_from_its_field() -> None:
    episode = ui_episode_pb2.UiEpisode()
    episode.actions.add(instruction="Tap OK")
    info = episode.step_info.add()
    for name in STEP_TEXT_FIELDS[1:]:
        setattr(info.text, name, f"{name} text")
    texts = step_texts(episode, 0)
    assert list(texts) == list(STEP_TEXT_FIELDS)
    assert texts["instruction"] == "Tap OK"
    assert all(texts[name] == f"{name} text" for name in STEP_TEXT_FIELDS[1:])


def test_names_match_the_proto_and_missing_steps_are_empty() -> None:
    assert set(STEP_TEXT_FIELDS[1:]) == {f.name for f in ui_episode_pb2.StepText.DESCRIPTOR.fields}
    assert set(step_texts(ui_episode_pb2.UiEpisode(), 3).values()) == {""}

"""DMLab cannot run here: its spec is kept intact and creating it explains why."""

from __future__ import annotations

import pytest
from google.protobuf import json_format

from annotator.envs import registry
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2


def dmlab_spec() -> study_pb2.EnvironmentSpec:
    spec = study_pb2.EnvironmentSpec(id="lab", name="Seek avoid", sync=False, max_episode_steps=300)
    spec.dmlab.id = "contributed/dmlab30/explore_goal_locations_small"
    return spec


def test_spec_round_trips_through_binary_and_json():
    spec = dmlab_spec()
    assert study_pb2.EnvironmentSpec.FromString(spec.SerializeToString()) == spec
    study = study_pb2.StudySpec(name="labs", environment_specs=[spec])
    parsed = json_format.Parse(json_format.MessageToJson(study), study_pb2.StudySpec())
    assert parsed.environment_specs[0] == spec
    assert parsed.environment_specs[0].dmlab.id == "contributed/dmlab30/explore_goal_locations_small"
    assert registry.family(parsed.environment_specs[0]) == "dmlab"


def test_create_fails_with_a_clear_message():
    with pytest.raises(StepmarkError) as err:
        registry.create(dmlab_spec())
    message = str(err.value)
    assert message.startswith("DMLab environments are not available on this platform")
    assert "no installable deepmind-lab distribution for Python 3.11/Linux; the spec is kept" in message
    assert "explore_goal_locations_small" in message


def test_spec_without_type_is_refused():
    with pytest.raises(StepmarkError, match="has no type"):
        registry.create(study_pb2.EnvironmentSpec(id="empty"))

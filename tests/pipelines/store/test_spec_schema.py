"""The study spec schema: current with the proto, covers every field, and agrees with the loader."""

from __future__ import annotations

import json

import jsonschema
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from pipelines.store.spec_file import SCHEMA_FILE, load_study_spec
from pipelines.store.spec_schema import build_schema, render
from protos.rlds_creator import study_pb2
from tests.conftest import REPO_ROOT


def test_schema_file_is_current() -> None:
    assert SCHEMA_FILE == REPO_ROOT / "schemas" / "study_spec.schema.json"
    assert SCHEMA_FILE.read_text() == render(), (
        "run: python -m pipelines.store.spec_schema > schemas/study_spec.schema.json"
    )


def test_schema_is_valid_and_covers_every_field_and_enum_value() -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)

    def check(descriptor: Descriptor, node: dict) -> None:
        props = node["properties"]
        for field in descriptor.fields:
            for alias in {field.name, field.json_name}:
                assert alias in props, f"{descriptor.full_name}.{alias} missing"
            value = props[field.name]
            item = value["items"] if field.is_repeated else value
            if field.type == FieldDescriptor.TYPE_ENUM:
                assert item["enum"] == [v.name for v in field.enum_type.values]
            elif field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.name != "Timestamp":
                check(field.message_type, schema["$defs"][item["$ref"].split("/")[-1]])
        assert set(props) == {a for f in descriptor.fields for a in (f.name, f.json_name)}
        assert node["additionalProperties"] is False

    check(study_pb2.StudySpec.DESCRIPTOR, schema)
    assert schema["$defs"]["EnvironmentSpec.Robosuite"]["properties"]["controller"]["default"] == "OSC_POSE"


def test_proto_comments_become_descriptions() -> None:
    env = build_schema()["$defs"]["EnvironmentSpec"]
    assert env["properties"]["max_episode_steps"]["description"] == "Maximum number of steps in each episode."
    assert env["properties"]["maxEpisodeSteps"]["description"] == "Maximum number of steps in each episode."


def test_example_spec_loads() -> None:
    spec = load_study_spec(REPO_ROOT / "schemas" / "examples" / "procgen_study.yaml")
    maze, pong = spec.environment_specs
    assert (maze.id, maze.sync, maze.max_episode_steps, maze.WhichOneof("type")) == (
        "maze",
        True,
        50,
        "procgen",
    )
    assert maze.procgen.id == "maze"
    assert (pong.WhichOneof("type"), pong.atari.id) == ("atari", "Pong")

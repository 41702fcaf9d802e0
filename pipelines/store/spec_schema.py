"""The JSON Schema of a study spec file, built from the `StudySpec` proto itself.

`schemas/study_spec.schema.json` is this module's output (`python -m pipelines.store.spec_schema` rewrites it; a
test checks it is current), so the schema covers every field of the proto, with the proto's comments as
descriptions. It follows protobuf's JSON mapping: each field under its proto name or its lowerCamelCase JSON
name, enums by name, Timestamps as RFC 3339 strings, no unknown fields; at most one member of a oneof.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from protos.rlds_creator import study_pb2

SCHEMA_ID = "https://stepmark.dev/schemas/study_spec.schema.json"
PROTO_FILE = Path(study_pb2.__file__).with_name("study.proto")

_INT32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
_SCALARS: dict[int, dict[str, Any]] = {
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_INT32: _INT32,
    FieldDescriptor.TYPE_FLOAT: {"type": "number"},
    FieldDescriptor.TYPE_DOUBLE: {"type": "number"},
}
# Fields the store sets itself: accepted in a file (so an exported spec loads back) but ignored.
_READ_ONLY = {
    "StudySpec.creator": "Read-only: the store sets the creator (the --user); ignored in a spec file.",
    "StudySpec.creation_time": "Read-only: set by the store; ignored in a spec file.",
    "StudySpec.state": "Read-only: a new study is STATE_ENABLED; use `stepmark study enable|disable`.",
    "StudySpec.id": "Unique ID of the study; a new random id when empty.",
}
# Store rules (pipelines.store.repository.validate_spec) the schema states too.
_REQUIRED = {"StudySpec": ["name"], "EnvironmentSpec": ["id"]}
_FIELD = re.compile(r"^\s*(?:optional |repeated |required )?[\w.]+ (\w+) = \d+")
_BLOCK = re.compile(r"^\s*(message|enum|oneof) (\w+) \{")


def proto_comments(path: Path = PROTO_FILE) -> dict[str, str]:
    """`Message.Nested.field` -> the `//` comment lines right above the field in the .proto source."""
    comments: dict[str, str] = {}
    if not path.exists():
        return comments
    stack: list[tuple[str, str]] = []
    pending: list[str] = []
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("//"):
            pending.append(stripped[2:].strip())
            continue
        if block := _BLOCK.match(line):
            stack.append((block.group(1), block.group(2)))
            comments[".".join(n for k, n in stack if k == "message")] = " ".join(pending)
        elif stripped.startswith("}"):
            if stack:
                stack.pop()
        elif (field := _FIELD.match(line)) and stack and stack[-1][0] != "enum":
            comments[".".join([*(n for k, n in stack if k == "message"), field.group(1)])] = " ".join(pending)
        pending = []
    return comments


def _def_name(descriptor: Descriptor) -> str:
    return descriptor.full_name.removeprefix("rlds_creator.")


def _names(field: FieldDescriptor) -> list[str]:
    return [field.name] if field.json_name == field.name else [field.name, field.json_name]


def _message_schema(descriptor: Descriptor, defs: dict[str, Any], comments: dict[str, str]) -> dict[str, str]:
    """Add `descriptor` (and the messages it uses) to defs; returns a $ref to it."""
    name = _def_name(descriptor)
    ref = {"$ref": f"#/$defs/{name}"}
    if name in defs:
        return ref
    if descriptor.full_name == "google.protobuf.Timestamp":
        defs[name] = {
            "type": "string",
            "format": "date-time",
            "description": "RFC 3339, e.g. 2026-01-02T03:04:05Z",
        }
        return ref
    schema: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": {}}
    defs[name] = schema
    if comment := comments.get(name):
        schema["description"] = comment
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            value: dict[str, Any] = _message_schema(field.message_type, defs, comments)
        elif field.type == FieldDescriptor.TYPE_ENUM:
            value = {"type": "string", "enum": [v.name for v in field.enum_type.values]}
        else:
            value = dict(_SCALARS[field.type])
        if field.is_repeated:
            value = {"type": "array", "items": value}
        if comment := _READ_ONLY.get(f"{name}.{field.name}") or comments.get(f"{name}.{field.name}"):
            value = {**value, "description": comment}
        if field.has_default_value and field.type != FieldDescriptor.TYPE_MESSAGE:
            default = field.default_value
            if field.type == FieldDescriptor.TYPE_ENUM:
                default = field.enum_type.values_by_number[default].name
            value = {**value, "default": round(default, 6) if isinstance(default, float) else default}
        for alias in _names(field):
            schema["properties"][alias] = value
    # "$comment"s name the rule for error messages (pipelines/store/spec_file.py).
    constraints: list[dict[str, Any]] = [
        {"$comment": f"alias {field.name} {field.json_name}", "not": {"required": _names(field)}}
        for field in descriptor.fields
        if len(_names(field)) == 2
    ]
    for oneof in descriptor.oneofs:
        members = [alias for field in oneof.fields for alias in _names(field)]
        names = ",".join(field.name for field in oneof.fields)
        for field in oneof.fields:
            others = [alias for alias in members if alias not in _names(field)]
            then = {
                "$comment": f"oneof {oneof.name} {names}",
                "not": {"anyOf": [{"required": [o]} for o in others]},
            }
            constraints.append({"if": {"anyOf": [{"required": [a]} for a in _names(field)]}, "then": then})
    if constraints:
        schema["allOf"] = constraints
    if required := _REQUIRED.get(name):
        schema["required"] = required
    return ref


def build_schema() -> dict[str, Any]:
    comments = proto_comments()
    defs: dict[str, Any] = {}
    _message_schema(study_pb2.StudySpec.DESCRIPTOR, defs, comments)
    study = defs.pop("StudySpec")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "StudySpec",
        "description": (
            "A study (rlds_creator.StudySpec) in protobuf's JSON mapping, as read by `stepmark study create`. "
            "Generated from protos/rlds_creator/study.proto by pipelines/store/spec_schema.py. "
            + study.pop("description", "")
        ).strip(),
        **study,
        "$defs": dict(sorted(defs.items())),
    }


def render() -> str:
    return json.dumps(build_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())

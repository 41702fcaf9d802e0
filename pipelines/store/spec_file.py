"""Reading a study spec file (JSON or YAML, protobuf's JSON mapping of `StudySpec`) with clear errors.

Three checks, each error naming the file and the field: the JSON Schema `schemas/study_spec.schema.json`
(unknown fields, wrong types, enum names), protobuf's own `json_format.ParseDict`, then the store's rules
(`repository.validate_spec`: a name, unique environment ids).
"""

from __future__ import annotations

import datetime as dt
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from google.protobuf import json_format

from pipelines.store.errors import InvalidSpec
from pipelines.store.repository import validate_spec
from pipelines.store.spec_schema import build_schema
from pipelines.traces.files import FileRefused, read_limited
from protos.rlds_creator import study_pb2

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "schemas" / "study_spec.schema.json"
SUFFIXES = (".json", ".yaml", ".yml")


@lru_cache(maxsize=1)
def study_spec_schema() -> dict[str, Any]:
    """The schema file in a source checkout; built from the proto (same content, tested) when installed."""
    if SCHEMA_FILE.is_file():
        return json.loads(SCHEMA_FILE.read_text())
    return build_schema()


def _jsonable(value: Any) -> Any:
    """YAML turns unquoted timestamps into datetimes; the JSON mapping wants RFC 3339 strings."""
    if isinstance(value, dt.datetime):
        value = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


MAX_VALUES = 100_000  # a real spec holds a few hundred; YAML aliases can make a tiny file expand to billions
MAX_DEPTH = 64  # the deepest StudySpec path is about 6 levels
MAX_BYTES = 1 << 20


def _check_size(data: Any, source: str) -> None:
    """Refuse documents too large or deep to be a study spec before anything walks them recursively."""
    stack = [(data, 0)]
    count = 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise InvalidSpec(
                f"{source}: more than {MAX_VALUES} values (YAML aliases expanding?): not a study spec"
            )
        if depth > MAX_DEPTH:
            raise InvalidSpec(f"{source}: nested more than {MAX_DEPTH} levels deep: not a study spec")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def _location(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _describe(error: jsonschema.ValidationError) -> str:
    where = _location(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = error.schema.get("properties", {})
        unknown = sorted(str(k) for k in error.instance if k not in known)
        names = ", ".join(repr(k) for k in unknown)
        prefix = f"{where}: " if error.absolute_path else ""
        return f"{prefix}unknown field {names} (known: {', '.join(sorted(known))})"
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [name for name in error.validator_value if name not in error.instance]
        prefix = f"{where}." if error.absolute_path else ""
        return "; ".join(f"field {prefix}{name} is required" for name in missing)
    rule = str(error.schema.get("$comment", "")).split() if isinstance(error.schema, dict) else []
    if error.validator == "not" and len(rule) == 3 and rule[0] == "alias":
        field = f"{where}.{rule[1]}" if error.absolute_path else rule[1]
        return f"field {field} is given twice (as {rule[1]!r} and {rule[2]!r}); keep one"
    if error.validator == "not" and len(rule) == 3 and rule[0] == "oneof":
        return f"{where}: set only one of {', '.join(rule[2].split(','))} (oneof {rule[1]!r})"
    return f"field {where}: {error.message}"


def parse_study_spec(data: Any, source: str) -> study_pb2.StudySpec:
    """A `StudySpec` from decoded JSON/YAML; InvalidSpec naming `source` and the field on any problem."""
    if data is None:
        raise InvalidSpec(f"{source}: the file is empty")
    if not isinstance(data, dict):
        raise InvalidSpec(
            f"{source}: a study spec must be a mapping at the top level, not {type(data).__name__}"
        )
    _check_size(data, source)
    data = _jsonable(data)
    validator = jsonschema.Draft202012Validator(study_spec_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        raise InvalidSpec(f"{source}: {_describe(error)}")
    spec = study_pb2.StudySpec()
    try:
        json_format.ParseDict(data, spec)
    except json_format.ParseError as exc:
        raise InvalidSpec(f"{source}: {exc}") from exc
    validate_spec(spec, source)
    return spec


def load_study_spec(path: str | Path) -> study_pb2.StudySpec:
    """Read and validate a study spec file (.json, .yaml or .yml)."""
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise InvalidSpec(f"{path}: a study spec file must end in .json, .yaml or .yml")
    try:  # bounded: a FIFO, a device or a huge file is refused before (or while) reading
        text = read_limited(str(path), MAX_BYTES).decode("utf-8")
    except FileRefused as exc:
        if exc.reason == "too_large":
            raise InvalidSpec(f"{path}: larger than {MAX_BYTES >> 20} MiB: not a study spec") from exc
        raise InvalidSpec(f"{exc.message}: not a study spec") from exc
    except FileNotFoundError as exc:
        raise InvalidSpec(f"{path}: no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidSpec(f"{path}: cannot read: {exc}") from exc
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidSpec(
                f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
            ) from exc
        except RecursionError as exc:
            raise InvalidSpec(f"{path}: nested too deeply: not a study spec") from exc
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise InvalidSpec(f"{path}: invalid YAML{where}: {problem}") from exc
        except RecursionError as exc:
            raise InvalidSpec(f"{path}: nested too deeply: not a study spec") from exc
    return parse_study_spec(data, str(path))

"""A study's own typed fields (issue 26): their definitions, read from a file and checked, and the check of one
value against its field. Pure: no store access.

Definitions follow `schemas/study_fields.schema.json`; the rules the schema cannot say (unique names, one key
per option, min <= max) are checked here. Errors are one line naming the file and the field. YAML is read with
YAML 1.2 booleans (only true/false), so `options: [yes, no, unsure]` are the words the annotator sees.
"""

from __future__ import annotations

import json
import math
import re
import string
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from pipelines.store.errors import InvalidSpec
from pipelines.traces.files import FileRefused, read_limited

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "schemas" / "study_fields.schema.json"
SCOPES = ("step", "episode", "segment")
KINDS = ("choice", "multi_choice", "text", "number", "boolean")
MAX_BYTES = 256 * 1024
MAX_TEXT = 5000
BOOLEAN_KEYS = ("y", "n")
#: What a field's `prompt` (the question a model backend is asked, schemas/model_backend.md) may fill in.
PROMPT_PLACEHOLDERS = ("field", "kind", "options", "guideline", "goal", "step_text", "action", "target", "app",
                       "step", "steps")  # fmt: skip


class FieldValueError(InvalidSpec):
    """A value that does not fit its field (not an option, out of range, wrong type)."""


@dataclass(frozen=True)
class FieldDef:
    """One field of a study. `active` is false for a field removed from the study (its values are kept)."""

    name: str
    scope: str
    kind: str
    options: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    integer: bool = False
    max_length: int = MAX_TEXT
    guideline: str = ""
    keys: tuple[str, ...] = ()
    prompt: str = ""
    active: bool = True
    position: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def option_keys(self) -> tuple[str, ...]:
        """The key of each option (choice, multi_choice) or of true/false (boolean), defaults filled in."""
        if self.kind == "boolean":
            return self.keys or BOOLEAN_KEYS
        if self.kind in ("choice", "multi_choice"):
            return self.keys or tuple(str(i + 1) for i in range(min(len(self.options), 9)))
        return ()

    def to_json(self) -> dict[str, Any]:
        """The definition as the file states it (what the store keeps and the player and exports read)."""
        out: dict[str, Any] = {"name": self.name, "scope": self.scope, "kind": self.kind}
        if self.options:
            out["options"] = list(self.options)
        if self.kind == "number":
            if self.min is not None:
                out["min"] = self.min
            if self.max is not None:
                out["max"] = self.max
            if self.integer:
                out["integer"] = True
        if self.kind == "text" and self.max_length != MAX_TEXT:
            out["max_length"] = self.max_length
        if self.guideline:
            out["guideline"] = self.guideline
        if self.keys:
            out["keys"] = list(self.keys)
        if self.prompt:
            out["prompt"] = self.prompt
        return out

    @staticmethod
    def from_json(data: dict[str, Any], *, active: bool = True, position: int = 0) -> FieldDef:
        return FieldDef(
            name=data["name"], scope=data["scope"], kind=data["kind"],
            options=tuple(_option(o) for o in data.get("options") or ()),
            min=data.get("min"), max=data.get("max"), integer=bool(data.get("integer", False)),
            max_length=int(data.get("max_length") or MAX_TEXT), guideline=data.get("guideline") or "",
            keys=tuple(data.get("keys") or ()), prompt=data.get("prompt") or "", active=active, position=position,
        )  # fmt: skip


def _option(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text())


def _where(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def parse_fields(data: Any, source: str) -> list[FieldDef]:
    """The fields of a decoded file; InvalidSpec naming `source` and the field on any problem."""
    if not isinstance(data, dict):
        raise InvalidSpec(f"{source}: a fields file is a mapping with a 'fields' list at the top level")
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema()).iter_errors(data))
    if error is not None:
        raise InvalidSpec(f"{source}: {_where(error.absolute_path)}: {error.message}")
    out: list[FieldDef] = []
    seen: set[str] = set()
    for i, item in enumerate(data["fields"]):
        where = f"{source}: fields[{i}] ({item['name']})"
        if item["name"] in seen:
            raise InvalidSpec(f"{where}: the name is used twice")
        seen.add(item["name"])
        kind = item["kind"]
        choices = kind in ("choice", "multi_choice")
        if choices and not item.get("options"):
            raise InvalidSpec(f"{where}: a {kind} field needs options")
        if not choices and "options" in item:
            raise InvalidSpec(f"{where}: only choice and multi_choice fields have options")
        if kind != "number" and any(k in item for k in ("min", "max", "integer")):
            raise InvalidSpec(f"{where}: min, max and integer are for number fields")
        if kind != "text" and "max_length" in item:
            raise InvalidSpec(f"{where}: max_length is for text fields")
        if item.get("min") is not None and item.get("max") is not None and item["min"] > item["max"]:
            raise InvalidSpec(f"{where}: min {item['min']} is larger than max {item['max']}")
        definition = FieldDef.from_json(item, position=i)
        if len(set(definition.options)) != len(definition.options):
            raise InvalidSpec(f"{where}: two options read the same: {list(definition.options)}")
        keys = item.get("keys")
        if keys is not None:
            wanted = 2 if kind == "boolean" else len(definition.options) if choices else 0
            if not wanted:
                raise InvalidSpec(f"{where}: keys are for choice, multi_choice and boolean fields")
            if len(keys) != wanted:
                raise InvalidSpec(f"{where}: {len(keys)} keys for {wanted} {'values' if kind == 'boolean' else 'options'}")
        elif choices and len(definition.options) > 9:
            raise InvalidSpec(f"{where}: more than 9 options need keys of their own (digits 1-9 are the default)")
        _check_prompt(where, definition.prompt)
        out.append(definition)
    return out


def _check_prompt(where: str, prompt: str) -> None:
    """A prompt's placeholders are the known ones ({options}, {guideline}, ...), plain: a stray brace, a format
    spec or a conversion (`{goal:d}`, `{goal!x}`) is refused here, not met when the prompt is filled in."""
    try:
        parsed = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(prompt) if name is not None]
    except ValueError as exc:
        raise InvalidSpec(f"{where}: prompt: {exc} (write a literal brace as {{{{ or }}}})") from None
    styled = sorted({name for name, spec, conv in parsed if spec or conv})
    if styled:
        raise InvalidSpec(f"{where}: prompt: placeholder(s) {styled} with a format spec or conversion; write them plain")
    names = [name for name, _, _ in parsed]
    unknown = sorted({n for n in names if n not in PROMPT_PLACEHOLDERS})
    if unknown:
        raise InvalidSpec(f"{where}: prompt: unknown placeholder(s) {unknown}; known: {', '.join(PROMPT_PLACEHOLDERS)}")


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: `yes`, `no`, `on`, `off` stay words."""


_Yaml12Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.copy().items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_fields(path: str | Path) -> list[FieldDef]:
    """Read and check a fields file (.json, .yaml, .yml), bounded in size."""
    path = Path(path)
    if path.suffix.lower() not in (".json", ".yaml", ".yml"):
        raise InvalidSpec(f"{path}: a fields file must end in .json, .yaml or .yml")
    try:
        text = read_limited(str(path), MAX_BYTES).decode("utf-8")
    except FileRefused as exc:
        raise InvalidSpec(f"{path}: {exc.message}: not a fields file") from exc
    except FileNotFoundError as exc:
        raise InvalidSpec(f"{path}: no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidSpec(f"{path}: cannot read: {exc}") from exc
    return parse_text(text, str(path), yaml_syntax=path.suffix.lower() != ".json")


def parse_text(text: str, source: str, *, yaml_syntax: bool = True) -> list[FieldDef]:
    """Fields from the text of a file (the Studies page's editor hands its text here)."""
    if len(text.encode("utf-8")) > MAX_BYTES:
        raise InvalidSpec(f"{source}: larger than {MAX_BYTES // 1024} KiB: not a fields file")
    try:
        data = yaml.load(text, Loader=_Yaml12Loader) if yaml_syntax else json.loads(text)  # noqa: S506
    except json.JSONDecodeError as exc:
        raise InvalidSpec(f"{source}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise InvalidSpec(f"{source}: invalid YAML{where}: {getattr(exc, 'problem', None) or exc}") from exc
    except RecursionError as exc:
        raise InvalidSpec(f"{source}: nested too deeply: not a fields file") from exc
    return parse_fields(data, source)


def check_value(definition: FieldDef, value: Any) -> Any:
    """`value` as stored for this field (text stripped, options in the field's order), else FieldValueError."""
    name, kind = definition.name, definition.kind
    if kind == "choice":
        option = value if isinstance(value, str) else None
        if option not in definition.options:
            raise FieldValueError(f"field {name}: {value!r} is not one of its options {list(definition.options)}")
        return option
    if kind == "multi_choice":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise FieldValueError(f"field {name}: a multi_choice value is a list of options, got {value!r}")
        unknown = [v for v in value if v not in definition.options]
        if unknown:
            raise FieldValueError(f"field {name}: {unknown} not among its options {list(definition.options)}")
        return [o for o in definition.options if o in value]
    if kind == "boolean":
        if not isinstance(value, bool):
            raise FieldValueError(f"field {name}: a boolean value is true or false, got {value!r}")
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise FieldValueError(f"field {name}: a number value is a finite number, got {value!r}")
        if definition.integer and not float(value).is_integer():
            raise FieldValueError(f"field {name}: {value} is not a whole number")
        if definition.min is not None and value < definition.min:
            raise FieldValueError(f"field {name}: {value} is below its minimum {definition.min}")
        if definition.max is not None and value > definition.max:
            raise FieldValueError(f"field {name}: {value} is above its maximum {definition.max}")
        return int(value) if definition.integer else float(value)
    if not isinstance(value, str):
        raise FieldValueError(f"field {name}: a text value is a string, got {value!r}")
    text = value.strip()
    if not text:
        raise FieldValueError(f"field {name}: the text is empty (clear the value instead)")
    if len(text) > definition.max_length:
        raise FieldValueError(f"field {name}: the text is {len(text)} characters; the limit is {definition.max_length}")
    return text

"""The dataset spec and the data agree in both directions, for both formats, env and UI episodes.

Data -> spec: every exported field validates against `schemas/dataset_spec.schema.json`, whose objects are
closed (an undocumented field fails). Spec -> data: every property the schema defines for a format turns up
in some exported dataset of that format (a documented field that is never written is a stale spec), and
every field name of the schema is in the prose document `schemas/dataset_spec.md`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from jsonschema import Draft202012Validator, validators

from pipelines import export
from tests.conftest import REPO_ROOT
from tests.pipelines.export import readback
from tests.pipelines.export.export_data import ExportData

SPEC_MD = REPO_ROOT / "schemas" / "dataset_spec.md"


def properties_maps(spec: dict[str, Any], start: str) -> dict[int, tuple[str, dict[str, Any]]]:
    """Every `properties` map reachable from `#/$defs/<start>` through `$ref`s (not those inside `if`
    conditions, which only test values), keyed by identity, with its JSON pointer for messages."""
    found: dict[int, tuple[str, dict[str, Any]]] = {}
    visited: set[int] = set()

    def resolve(ref: str) -> Any:
        node: Any = spec
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]
        return node

    def walk(node: Any, where: str) -> None:
        if isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{where}/{i}")
            return
        if not isinstance(node, dict) or id(node) in visited:
            return
        visited.add(id(node))
        if isinstance(node.get("$ref"), str):
            walk(resolve(node["$ref"]), node["$ref"])
        for key, value in node.items():
            if key == "if":
                continue
            if key == "properties" and isinstance(value, dict):
                found[id(value)] = (f"{where}/properties", value)
                for name, sub in value.items():
                    walk(sub, f"{where}/properties/{name}")
            elif isinstance(value, dict | list):
                walk(value, f"{where}/{key}")

    walk(resolve(f"#/$defs/{start}"), f"#/$defs/{start}")
    return found


class CoverageValidator:
    """Validates instances against one format's part of the schema, recording the properties they use."""

    def __init__(self, spec: dict[str, Any], start: str) -> None:
        self.seen: set[tuple[int, str]] = set()
        base = Draft202012Validator.VALIDATORS["properties"]

        def properties(validator, props, instance, schema) -> Iterator[Any]:  # type: ignore[no-untyped-def]
            if validator.is_type(instance, "object"):
                self.seen.update((id(props), key) for key in props if key in instance)
            yield from base(validator, props, instance, schema)

        recording = validators.extend(Draft202012Validator, {"properties": properties})
        # Same $defs objects as `spec`, so identities match `properties_maps`.
        self.validator = recording({"$ref": f"#/$defs/{start}", "$defs": spec["$defs"]})

    def validate(self, instance: dict[str, Any]) -> None:
        self.validator.validate(instance)

    def never_seen(self, maps: dict[int, tuple[str, dict[str, Any]]]) -> list[str]:
        return [
            f"{where}/{key}"
            for ident, (where, props) in maps.items()
            for key in props
            if (ident, key) not in self.seen
        ]


def _exports(data: ExportData, tmp_path: Path, fmt: str) -> Iterator[Path]:
    """Env and UI episodes, full and stripped, one cut: the shapes of data a format can hold."""
    if not data.ui:
        pytest.fail("UI fixtures were not converted: the UI half of the spec cannot be checked")
    env_refs = [data.ref(e) for e in data.procgen]
    for name, kw in {
        "env": {"refs": env_refs, "end_of_episode_tags": ["goal"], "splits": "train=0.5,test=0.5"},
        "env-strip": {"refs": env_refs, "strip_internal_metadata": True},
        "ui": {"study_id": data.ui_study_id, "end_of_episode_tags": ["done"]},
        "ui-strip": {"study_id": data.ui_study_id, "strip_internal_metadata": True},
        "ui-padded": {"study_id": data.ui_study_id, "ui_objects": "padded:8"},
    }.items():
        out = tmp_path / f"{fmt}-{name}"
        export.export_episodes(
            export.ExportRequest(data_dir=str(data.data_dir), out=str(out), format=fmt, **kw)
        )
        yield out


def _check_both_directions(instances: list[dict[str, Any]], start: str) -> None:
    spec = readback.schema()
    Draft202012Validator.check_schema(spec)
    checker = CoverageValidator(spec, start)
    for instance in instances:
        jsonschema.validate(instance, spec)  # the whole schema, as consumers would use it
        checker.validate(instance)
    missing = checker.never_seen(properties_maps(spec, start))
    assert not missing, f"documented in the schema but never exported ({start}): {missing}"


def test_envlogger_data_and_spec_agree_both_ways(export_data: ExportData, tmp_path: Path) -> None:
    instances = [readback.envlogger_instance(out) for out in _exports(export_data, tmp_path, "envlogger")]
    kinds = {e["metadata"]["kind"] for i in instances for e in i["episodes"]}
    assert kinds == {"env", "ui"}
    _check_both_directions(instances, "envlogger_dataset")


@pytest.mark.tfds
def test_tfds_data_and_spec_agree_both_ways(export_data: ExportData, tmp_path: Path) -> None:
    instances = [readback.tfds_instance(out) for out in _exports(export_data, tmp_path, "tfds")]
    kinds = {e["metadata"]["kind"] for i in instances for e in i["episodes"]}
    assert kinds == {"env", "ui"}
    _check_both_directions(instances, "tfds_dataset")


def test_a_stale_schema_field_is_caught(export_data: ExportData, tmp_path: Path) -> None:
    """The spec -> data direction can fail: a property no export writes is reported."""
    spec = readback.schema()
    spec["$defs"]["envlogger_record"]["properties"]["custom_data"]["properties"]["never_written"] = {
        "type": "string"
    }
    out = tmp_path / "one"
    export.export_episodes(
        export.ExportRequest(
            data_dir=str(export_data.data_dir), out=str(out), refs=[export_data.ref(export_data.procgen[0])]
        )
    )
    checker = CoverageValidator(spec, "envlogger_dataset")
    checker.validate(readback.envlogger_instance(out))
    missing = checker.never_seen(properties_maps(spec, "envlogger_dataset"))
    assert any(m.endswith("custom_data/properties/never_written") for m in missing)


def test_every_schema_field_is_in_the_prose_spec() -> None:
    spec = readback.schema()
    names: set[str] = set()
    for _, (_, props) in properties_maps(spec, "envlogger_dataset").items():
        names.update(props)
    for _, (_, props) in properties_maps(spec, "tfds_dataset").items():
        names.update(props)
    names -= {
        "format",
        "episodes",
        "metadata",
        "records",
        "steps",
        "dataset_metadata",
        "custom_data",
    }  # the view
    text = SPEC_MD.read_text(encoding="utf-8")
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    assert sorted(n for n in names if n not in words) == []


# The per-step metadata every format carries under its own name (schemas/dataset_spec.md, each format's table).
STEP_METADATA = ("image", "keys", "json")


def _envlogger_fields(out: Path) -> dict[str, set[str]]:
    """{"metadata": step metadata names, "observation": top-level observation names} of an envlogger export."""
    records = [r for e in readback.read_envlogger(out) for r in e["records"]]
    meta = {n for r in records for n in r["custom_data"] if n in STEP_METADATA}
    meta |= {n for r in records for n in r["custom_data"]["info"] if n in STEP_METADATA}
    return {"metadata": meta, "observation": {n for r in records for n in r["observation"]}}


def _parquet_fields(out: Path) -> dict[str, set[str]]:
    import pyarrow.parquet as pq

    names = pq.read_schema(next((out / "data").glob("*.parquet"))).names
    meta = {n.removeprefix("info_") for n in names if n.removeprefix("info_") in STEP_METADATA}
    obs = {n.split("/")[1] for n in names if n.startswith("observation/")}
    return {"metadata": meta, "observation": obs}


def _minari_fields(out: Path) -> dict[str, set[str]]:
    import minari

    ds = minari.MinariDataset(str(out / "data"))
    meta: set[str] = set()
    obs: set[str] = set()
    for ep in ds.iterate_episodes():
        meta |= {n for n in ep.infos if n in STEP_METADATA}
        obs |= set(ep.observations) | set(ep.infos.get("observation", {}))
    return {"metadata": meta, "observation": obs}


def _fields_by_kind(data: ExportData, tmp_path: Path, fmt: str, read: Any) -> dict[str, dict[str, set[str]]]:
    """The step fields of an environment and of a UI export (padded objects: the form every format holds)."""
    out: dict[str, dict[str, set[str]]] = {}
    for kind, kw in {
        "env": {"refs": [data.ref(data.procgen[0])]},
        "ui": {"study_id": data.ui_study_id, "ui_objects": "padded:8"},
    }.items():
        dest = tmp_path / f"{fmt}-{kind}" / f"{kind}-v0"
        dest.parent.mkdir(parents=True)
        export.export_episodes(export.ExportRequest(data_dir=str(data.data_dir), out=str(dest), format=fmt, **kw))
        out[kind] = read(dest)
    return out


def test_step_fields_agree_across_envlogger_parquet_and_minari(export_data: ExportData, tmp_path: Path) -> None:
    """Drift between formats (a field the spec lists for every format but one format leaves out, e.g. a UI
    `image` written by some formats only) fails: the step metadata and the UI observation's fields are the
    same in every format. UI steps have no `image` (schemas/dataset_spec.md: the screenshot is the observation's)."""
    el = _fields_by_kind(export_data, tmp_path, "envlogger", _envlogger_fields)
    assert el["env"]["metadata"] == {"image", "keys", "json"} and el["ui"]["metadata"] == {"keys", "json"}
    assert "has_screenshot" in el["ui"]["observation"]
    for fmt, read in {"parquet": _parquet_fields, "minari": _minari_fields}.items():
        got = _fields_by_kind(export_data, tmp_path, fmt, read)
        for kind in ("env", "ui"):
            assert got[kind]["metadata"] == el[kind]["metadata"], (fmt, kind)
        assert got["ui"]["observation"] == el["ui"]["observation"], fmt


@pytest.mark.tfds
def test_tfds_step_fields_agree_with_envlogger(export_data: ExportData, tmp_path: Path) -> None:
    def tfds_fields(out: Path) -> dict[str, set[str]]:
        steps = [s for e in readback.read_tfds(out) for s in e["steps"]]
        meta = {n for s in steps for n in s if n in STEP_METADATA} | {n for s in steps for n in s["info"] if n in STEP_METADATA}
        return {"metadata": meta, "observation": {n for s in steps for n in s["observation"]}}

    assert _fields_by_kind(export_data, tmp_path, "tfds", tfds_fields) == _fields_by_kind(
        export_data, tmp_path, "envlogger", _envlogger_fields
    )

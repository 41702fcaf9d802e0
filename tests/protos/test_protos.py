"""The protos match the binding reference documents, and the generated modules match the .proto sources."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

from protos import generate
from protos.llm4mobile import episode_pb2
from protos.rlds_creator import client_pb2, study_pb2
from tests.conftest import FIXTURES

SPECS = FIXTURES.parent / "specs"


@dataclass
class Block:
    """One message or enum block of a reference document: its `name = number` lines."""

    entries: list[tuple[str, str, int]] = field(default_factory=list)  # (label/type text, name, number)
    empty: bool = False


_ENTRY = re.compile(r"^\s*• (?:(optional|repeated) )?(?:(map<[^>]+>|[\w.]+) )?(\w+) = (\d+)$")


def parse_reference_blocks(text: str) -> list[Block]:
    """Split a reference document into blocks: a block ends where unindented prose follows its entries."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("View/edit")) + 1
    blocks: list[Block] = [Block()]
    seen_used_in = False
    for line in lines[start:]:
        if not line.strip():
            continue
        cur = blocks[-1]
        has_content = bool(cur.entries) or cur.empty
        is_bullet = line.lstrip().startswith("•")
        if not is_bullet and not line.startswith(" "):
            if has_content or (line.startswith("Used in:") and seen_used_in):
                blocks.append(Block())
                seen_used_in = False
                cur = blocks[-1]
            if line.startswith("Used in:"):
                seen_used_in = True
            if line.strip() == "(message has no fields)":
                cur.empty = True
            continue
        m = _ENTRY.match(line)
        if m:
            label, typ, name, number = m.groups()
            cur.entries.append((f"{label or ''} {typ or ''}".strip(), name, int(number)))
    return [b for b in blocks if b.entries or b.empty]


def reference_names(section_title: str) -> list[str]:
    readme = (SPECS / "README.md").read_text()
    body = readme.split(section_title, 1)[1].split("\n", 2)[1]
    names = []
    for item in body.split(" · "):
        item = re.sub(r"\s*\(.*?\)\s*$", "", item.strip())
        names.append(item.removeprefix("enum ").strip())
    return names


def resolve(module, dotted: str) -> Descriptor | EnumDescriptor:
    desc = module.DESCRIPTOR
    parts = dotted.split(".")
    cur = desc.message_types_by_name.get(parts[0]) or desc.enum_types_by_name.get(parts[0])
    for part in parts[1:]:
        cur = cur.nested_types_by_name.get(part) or cur.enum_types_by_name[part]
    return cur


def check_block(desc: Descriptor | EnumDescriptor, block: Block) -> None:
    if isinstance(desc, EnumDescriptor):
        got = {v.name: v.number for v in desc.values}
        want = {name: number for _, name, number in block.entries}
        assert got == want, desc.full_name
        return
    fields = {f.name: f for f in desc.fields}
    want = {name: number for _, name, number in block.entries}
    assert {n: f.number for n, f in fields.items()} == want, desc.full_name
    for typ, name, _ in block.entries:
        f = fields[name]
        if typ.startswith("repeated") or typ.startswith("map<"):
            assert f.label == FieldDescriptor.LABEL_REPEATED, f.full_name
        if typ.startswith("map<"):
            assert f.message_type.GetOptions().map_entry, f.full_name
        if typ.startswith("optional"):
            assert f.label == FieldDescriptor.LABEL_OPTIONAL, f.full_name


@pytest.mark.parametrize(
    "doc, section, module",
    [
        ("rlds_creator_study_proto.reference.txt", "## rlds_creator (study.proto), blocks in order", study_pb2),
        ("rlds_creator_client_proto.reference.txt", "## rlds_creator.client (client.proto), blocks in order", client_pb2),
    ],
)
def test_rlds_creator_matches_reference(doc: str, section: str, module) -> None:
    blocks = parse_reference_blocks((SPECS / doc).read_text())
    names = reference_names(section)
    assert len(blocks) == len(names), (len(blocks), len(names))
    for name, block in zip(names, blocks, strict=True):
        check_block(resolve(module, name), block)


def test_reference_counts_are_complete() -> None:
    """Every message and enum in the compiled files is one the reference documents list (nothing invented)."""
    for module, section in (
        (study_pb2, "## rlds_creator (study.proto), blocks in order"),
        (client_pb2, "## rlds_creator.client (client.proto), blocks in order"),
    ):
        names = set(reference_names(section))

        def walk(desc, prefix=""):
            for m in desc.message_types_by_name.values() if prefix == "" else desc.nested_types:
                if m.GetOptions().map_entry:
                    continue
                yield prefix + m.name
                yield from walk(m, prefix + m.name + ".")
            for e in desc.enum_types_by_name.values() if prefix == "" else desc.enum_types:
                yield prefix + e.name

        assert set(walk(module.DESCRIPTOR)) == names


def test_proto2_defaults_from_readme() -> None:
    assert study_pb2.EnvironmentSpec.Procgen().distribution_mode == study_pb2.EnvironmentSpec.Procgen.DISTRIBUTION_EASY
    assert study_pb2.EnvironmentSpec.Procgen().level_repeats == 1
    r = study_pb2.EnvironmentSpec.Robosuite()
    assert (r.arm, r.controller, r.pos_sensitivity, r.rot_sensitivity) == ("right", "OSC_POSE", 1.5, 1.5)
    d = study_pb2.EnvironmentSpec.RoboDesk()
    assert (d.reward, d.action_repeat, d.image_size) == (study_pb2.EnvironmentSpec.RoboDesk.REWARD_DENSE, 1, 64)
    assert client_pb2.SetFpsRequest().fps == pytest.approx(15.0)
    assert [f.name for f in client_pb2.OperationRequest.DESCRIPTOR.oneofs_by_name["type"].fields][:2] == [
        "action",
        "add_episode_tag",
    ]


def test_llm4mobile_matches_reference_exactly() -> None:
    """The .proto is the reference text; the compiled descriptors carry every name = number of it."""
    ref = (SPECS / "llm4mobile_episode.proto.reference.txt").read_text().split("\n", 2)[2]
    ours = (generate.PROTO_DIR / "llm4mobile" / "episode.proto").read_text()
    assert ours.strip() == ref.strip()
    pairs = re.findall(r"^\s*(?:repeated )?\w+ (\w+) = (\d+);", ref, flags=re.M)
    names = {}
    for msg in episode_pb2.DESCRIPTOR.message_types_by_name.values():
        for f in msg.fields:
            names.setdefault(f.name, set()).add(f.number)
    for enum in episode_pb2.DESCRIPTOR.enum_types_by_name.values():
        for v in enum.values:
            names.setdefault(v.name, set()).add(v.number)
    for name, number in pairs:
        assert int(number) in names[name], (name, number)
    enum_pairs = re.findall(r"^\s*([A-Z_]+) = (\d+);", ref, flags=re.M)
    assert len(enum_pairs) == 29 + 10
    for name, number in enum_pairs:
        assert int(number) in names[name]


def test_generated_modules_are_current(tmp_path: Path) -> None:
    """Regenerate with the pinned grpcio-tools and compare byte for byte: a stale module fails here."""
    generated = generate.generate(tmp_path)
    assert generated
    for path in generated:
        rel = path.relative_to(tmp_path)
        committed = generate.REPO_ROOT / rel
        assert committed.exists(), f"{rel} is not committed; run python -m protos.generate"
        assert committed.read_bytes() == path.read_bytes(), f"{rel} is stale; run python -m protos.generate"

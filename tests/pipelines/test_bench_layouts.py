"""The layout table of bench/bench_parse.py: its sample traces, built from the real fixtures, convert without a
dead letter, and a DroidRun portal state holding a real dump's tree gives the dump's objects."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from pipelines.hierarchy import parse
from tests.conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location("bench_parse", REPO_ROOT / "bench" / "bench_parse.py")
bench_parse = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bench_parse", bench_parse)  # dataclasses look their module up there
_spec.loader.exec_module(bench_parse)


def _key(o) -> tuple:
    return (o.android_class, o.text, o.content_desc, o.resource_id, o.bbox.SerializeToString(), o.type,
            o.grid_location, o.clickable, o.parent_index)  # fmt: skip


def test_portal_state_of_a_real_dump_has_the_dumps_objects(fixtures_dir: Path) -> None:
    for dump, width, height in bench_parse._screens(fixtures_dir):
        ours = parse(dump)
        portal = parse(json.dumps(bench_parse.portal_state(dump, width, height)).encode())
        assert portal.format == "droidrun" and (portal.width, portal.height) == (width, height)
        assert [_key(o) for o in portal.objects] == [_key(o) for o in ours.objects]


def test_every_layout_row_converts_its_sample(fixtures_dir: Path, tmp_path: Path) -> None:
    assert {"llamatouch", "droidrun", "aitz", "gui_odyssey", "android_control_json"} <= {b.name for b in bench_parse.LAYOUTS}
    for bench in bench_parse.LAYOUTS:
        folder = tmp_path / bench.name
        bench.build(fixtures_dir, folder, 1)
        steps = bench_parse._convert_all(folder)  # asserts no dead letter
        assert steps == len(bench_parse._screens(fixtures_dir))
        assert bench.files(folder) and all(p.is_file() for p in bench.files(folder))

"""Malformed trace folders against the conversion: layout readers, episode assembly and the Beam pipeline.

The contract under test: nothing raises out of `read_episode` + `convert_episode` (so a Beam worker never dies
on input), nothing ends as `internal_error` (that reason means a bug), and nothing disappears: every step of
every discovered episode is either in the output or named by a dead letter, and every damaged file is named
by a dead letter with the reason expected for its damage. Mutations are seeded and built from the real
fixtures.
"""

from __future__ import annotations

import codecs
import json
import random
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from pipelines import ui_records
from pipelines.convert import check_misspelled, run
from pipelines.errors import StepmarkError
from pipelines.traces import DeadLetter, EpisodeSource, discover, files, plan, read_episode
from pipelines.ui_episode import EpisodeResult, convert_episode
from tests.conftest import FIXTURES
from tests.pipelines.images import png_header

RICO = FIXTURES / "rico"
YELP = FIXTURES / "droidbot" / "yelp"
XML = sorted((FIXTURES / "uiautomator").glob("*.xml"))
JPEG = (RICO / "33600.jpg").read_bytes()
SCREEN_JSON = (RICO / "33600.json").read_bytes()

#: Reasons a layout reader or the converter may give (hierarchy reasons come from HierarchyError.reason).
KNOWN_REASONS = {
    "failed_dump", "empty", "malformed", "too_deep", "forbidden_entity", "unknown_format", "bad_screenshot",
    "orphan_screenshot", "bad_action", "bad_gestures", "bad_manifest", "bad_event", "missing_state", "no_steps",
    "unreadable",
}  # fmt: skip


# Damaged hierarchies that can never parse, with the reason each must give.
BAD_HIERARCHIES: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "empty"),
    "bom_only": (codecs.BOM_UTF16_LE, "empty"),
    "idle": (b"ERROR: could not get idle state.\n", "failed_dump"),
    "null_root": (b"ERROR: null root node returned by UiTestAutomationBridge.\r\r\n", "failed_dump"),
    "empty_hierarchy": (b"<hierarchy/>", "failed_dump"),
    "json_array": (b"[1, 2]", "unknown_format"),
    "deep_arrays": (b"[" * 50_000 + b"]" * 50_000, "too_deep"),
    "entity": (b'<!DOCTYPE h [<!ENTITY x SYSTEM "file:///etc/passwd">]><hierarchy>&x;</hierarchy>', "forbidden_entity"),
    "half_xml": (XML[0].read_bytes()[: len(XML[0].read_bytes()) // 2], "malformed"),
    "half_json": (SCREEN_JSON[: len(SCREEN_JSON) // 2], "malformed"),
    "dup_attr": (b'<hierarchy><node class="a" class="b" bounds="[0,0][1,1]"/></hierarchy>', "malformed"),
}  # fmt: skip
# Damaged screenshots (next to a good hierarchy): the step is a bad_screenshot dead letter.
BAD_SCREENSHOTS: dict[str, bytes] = {
    "zero_bytes": b"",
    "one_byte": b"\xff",
    "png_magic_only": b"\x89PNG\r\n\x1a\n",
    "lying_png": png_header(1080, 1920),
    "png_bomb": png_header(2**31 - 1, 2**31 - 1),
    "truncated_jpeg": JPEG[: len(JPEG) // 3],
    "text": b"not an image at all",
}
# actions.jsonl lines that must each become a bad_action dead letter (the step is kept).
BAD_ACTION_LINES: list[str] = [
    '{"step": 0, "action": "tap", "x": NaN, "y": 10}',
    '{"step": 0, "action": "tap", "x": Infinity, "y": 10}',
    '{"step": 0, "action": "tap", "x": 1e400, "y": 10}',
    '{"step": 0, "action": "tap", "x": 1e300, "y": 10}',
    '{"step": 0, "action": "swipe", "x": 1, "y": 1, "end_x": 3000000000, "end_y": 1}',
    '{"step": 0, "action": "wait", "duration_ms": 99999999999}',
    '{"step": -1, "action": "back"}',
    '{"step": 99, "action": "back"}',
    '{"step": "nope", "action": "back"}',
    '{"step": 0, "action": "fly"}',
    '{"step": 0, "action": "tap", "x": "10", "y": "20"}',
    '{"step": 0, "action": "tap"}',
    '{"step": 0, "action": "tap", "x": 2, "y": 2, "space": "normalized"}',
    '{"step": true, "action": "back"}',
    '[{"step": 0, "action": "back"}]',
    "[" * 5000,
    '{"step": 0, "action": "back"',
    "not json",
]


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _step_folder(folder: Path, n: int, *, hierarchy: Callable[[int], bytes] | None = None,
                 shot: Callable[[int], bytes] | None = None, actions: bytes | None = None) -> Path:  # fmt: skip
    for i in range(n):
        _write(folder / f"{i}.json", hierarchy(i) if hierarchy else SCREEN_JSON)
        _write(folder / f"{i}.jpg", shot(i) if shot else JPEG)
    if actions is not None:
        _write(folder / "actions.jsonl", actions)
    return folder


def convert_all(root: Path) -> list[tuple[EpisodeSource, EpisodeResult]]:
    """Every discovered episode read and converted as ConvertShard does, failing on any escaping exception."""
    out = []
    for item in discover(str(root)):
        if not isinstance(item, EpisodeSource):
            continue
        try:
            raw = read_episode(item, files.read_bytes)
            result = convert_episode(raw, files.read_bytes)
        except BaseException as exc:  # what this module hunts
            pytest.fail(f"{item.episode_id}: {type(exc).__name__}: {exc}")
        check_accounted(item, raw.num_source_steps, result)
        out.append((item, result))
    return out


def check_accounted(source: EpisodeSource, num_steps: int, result: EpisodeResult) -> None:
    """No internal errors, every dead letter has a known reason, and every source step is either converted or
    named by a dead letter."""
    for dead in result.dead_letters:
        assert dead.reason in KNOWN_REASONS, dead
        assert dead.episode_id == source.episode_id
        json.loads(dead.to_json())
    kept = set()
    if result.episode is None:
        assert any(d.reason == "no_steps" for d in result.dead_letters), result.dead_letters
    else:
        result.episode.SerializeToString()
        kept = {info.index for info in result.episode.step_info}
    dead_steps = {d.step for d in result.dead_letters}
    lost = [i for i in range(num_steps) if i not in kept and i not in dead_steps]
    assert not lost, f"{source.episode_id}: steps {lost} neither converted nor dead-lettered"


def reasons_for(results: list[tuple[EpisodeSource, EpisodeResult]]) -> dict[str, set[str]]:
    """{file name relative to nothing: reasons of the dead letters naming it}."""
    found: dict[str, set[str]] = {}
    for _, result in results:
        for dead in result.dead_letters:
            found.setdefault(dead.source_path, set()).add(dead.reason)
    return found


# --- named cases ---------------------------------------------------------------------------------------------


def test_every_damaged_hierarchy_is_a_dead_letter_with_its_reason(tmp_path: Path):
    expected = {}
    for name, (data, reason) in BAD_HIERARCHIES.items():
        folder = _step_folder(tmp_path / name, 2, hierarchy=lambda i, d=data: d if i == 1 else SCREEN_JSON)
        expected[str(folder / "1.json")] = reason
    found = reasons_for(convert_all(tmp_path))
    for path, reason in expected.items():
        assert found.get(path) == {reason}, path


def test_every_damaged_screenshot_is_a_dead_letter(tmp_path: Path):
    for name, data in BAD_SCREENSHOTS.items():
        _step_folder(tmp_path / name, 2, shot=lambda i, d=data: d if i == 0 else JPEG)
    results = convert_all(tmp_path)
    found = reasons_for(results)
    for name in BAD_SCREENSHOTS:
        assert found.get(str(tmp_path / name / "0.jpg")) == {"bad_screenshot"}, name
    assert all(r.episode is not None and len(r.episode.step_info) == 1 for _, r in results)


@pytest.mark.parametrize("line", BAD_ACTION_LINES)
def test_every_bad_action_line_is_a_dead_letter_and_the_step_is_kept(tmp_path: Path, line: str):
    actions = (line + "\n" + '{"step": 1, "action": "back"}\n').encode()
    _step_folder(tmp_path / "ep", 2, actions=actions)
    ((_, result),) = convert_all(tmp_path)
    assert [(d.reason, d.source_path) for d in result.dead_letters] == [
        ("bad_action", str(tmp_path / "ep" / "actions.jsonl"))
    ]
    assert "line 1" in result.dead_letters[0].exception
    assert len(result.episode.episode.time_steps) == 2
    assert result.episode.actions[0].type == 0  # no action for the step of the bad line
    assert result.episode.actions[1].type == result.episode.actions[1].BACK


def test_dead_letters_stay_short_for_huge_bad_values(tmp_path: Path):
    line = json.dumps({"step": list(range(50_000)), "action": "back", **{f"k{i}": i for i in range(50)}})
    _step_folder(tmp_path / "ep", 1, actions=line.encode())
    ((_, result),) = convert_all(tmp_path)
    (dead,) = result.dead_letters
    assert dead.reason == "bad_action" and len(dead.exception) < 5000
    assert "chars)" in dead.exception


def test_duplicate_steps_and_odd_encodings_in_actions_jsonl(tmp_path: Path):
    lines = [
        '{"step": 0, "action": "tap", "x": 5, "y": 5, "text": "a\\u2028b"}',
        '{"step": "0", "action": "back"}',
        '{"step": 1, "action": "type", "text": "lone \\ud800 half"}',
    ]
    for name, encoding in (("utf16", "utf-16"), ("utf8bom", "utf-8-sig"), ("utf32", "utf-32")):
        _step_folder(tmp_path / name, 2, actions="\r\n".join(lines).encode(encoding))
    for _, result in convert_all(tmp_path):
        assert [(d.reason, d.step) for d in result.dead_letters] == [("bad_action", 0)]
        a0, a1 = result.episode.actions
        assert (a0.type, a0.x, a0.y) == (a0.TAP, 5, 5)
        assert (a1.type, a1.text) == (a1.TYPE_TEXT, "lone \ufffd half")


def test_rico_trace_gestures_and_missing_screenshots(tmp_path: Path):
    trace = tmp_path / "trace"
    for sid in ("33600", "33603", "33605"):
        _write(trace / "view_hierarchies" / f"{sid}.json", (RICO / f"{sid}.json").read_bytes())
    _write(trace / "screenshots" / "33600.jpg", JPEG)  # the two others have none
    _write(trace / "screenshots" / "9.jpg", JPEG)  # no hierarchy
    gestures = '{"33600": [["a", "b"]], "33603": [[0.5, 0.5, 0.5]], "33605": [[0.2, 0.3]], "7": [[0.1, 0.1]]}'
    _write(trace / "gestures.json", gestures.encode())
    nan_trace = tmp_path / "nan_trace"
    _write(nan_trace / "view_hierarchies" / "1.json", SCREEN_JSON)
    _write(nan_trace / "gestures.json", b'{"1": [[NaN, 0.5]]}')
    results = dict((s.episode_id, r) for s, r in convert_all(tmp_path))
    trace_result = results["trace"]
    assert len(trace_result.episode.episode.time_steps) == 3
    assert Counter((d.reason, d.step) for d in trace_result.dead_letters) == Counter(
        [("bad_action", None), ("bad_action", 0), ("bad_action", 1), ("orphan_screenshot", None)]
    )
    warnings = [list(i.warnings) for i in trace_result.episode.step_info]
    assert all(any("no screenshot" in w for w in ws) for ws in warnings[1:])
    assert trace_result.episode.actions[2].type == trace_result.episode.actions[2].TAP
    nan_result = results["nan_trace"]
    assert [d.reason for d in nan_result.dead_letters] == ["bad_gestures"]
    assert len(nan_result.episode.episode.time_steps) == 1


def test_droidbot_events_with_missing_or_broken_fields(tmp_path: Path):
    run_dir = tmp_path / "run"
    shutil.copytree(YELP / "states", run_dir / "states")
    shutil.copytree(YELP / "events", run_dir / "events")
    events = sorted((run_dir / "events").glob("event_*.json"))
    damage = {
        0: lambda e: e.pop("start_state"),
        1: lambda e: e.update(start_state=None),
        2: lambda e: e.update(start_state="never-saved"),
        3: lambda e: e.update(event="not an object"),
        4: lambda e: e["event"].update(event_type="touch", x=1e300, y=5),
        5: lambda e: e["event"].update(duration=-3),
        6: lambda e: e["event"].update(view={"bounds": [[0, 0], ["a", 5]]}),
    }
    expected = {}
    for index, change in damage.items():
        record = json.loads(events[index].read_text())
        change(record)
        events[index].write_text(json.dumps(record))
        expected[str(events[index])] = "missing_state" if index == 2 else "bad_event"
    events[7].write_bytes(b'{"tag": "x", "start_state": "s", "event": {"event_type": "touch", "x": NaN}}')
    events[8].write_bytes(b"\xff\xfe\x00garbage")
    expected[str(events[7])] = expected[str(events[8])] = "bad_event"
    state = sorted((run_dir / "states").glob("state_*.json"))[-1]
    state.write_bytes(b'{"state_str": ' + b"[" * 50_000)
    _write(run_dir / "states" / "screen_1999-01-01_000000.png", JPEG)  # a screenshot without a state
    ((_, result),) = convert_all(tmp_path)
    found = reasons_for([(None, result)])
    for path, reason in expected.items():
        assert reason in found.get(path, set()), (path, found.get(path))
    assert found[str(state)] == {"malformed"}
    assert found[str(run_dir / "states" / "screen_1999-01-01_000000.png")] == {"orphan_screenshot"}
    assert 0 < len(result.episode.episode.time_steps) < len(events)


def test_truncated_layout_files(tmp_path: Path):
    """Every DroidBot event and state file, gestures.json and episode.json cut at a seeded point: each becomes
    its dead letter and the rest of the episode converts."""
    rng = random.Random(11)
    run_dir = tmp_path / "run"
    shutil.copytree(YELP / "states", run_dir / "states")
    shutil.copytree(YELP / "events", run_dir / "events")
    events = sorted((run_dir / "events").glob("event_*.json"))
    cut_events = events[::3]
    for path in cut_events:
        data = path.read_bytes()
        path.write_bytes(data[: rng.randrange(1, len(data) - 1)])
    trace = tmp_path / "trace"
    _write(trace / "view_hierarchies" / "1.json", SCREEN_JSON)
    gestures = b'{"1": [[0.25, 0.5]]}'
    _write(trace / "gestures.json", gestures[: rng.randrange(1, len(gestures) - 1)])
    manifest = b'{"app_package": "com.example", "goal": "find pizza"}'
    _write(trace / "episode.json", manifest[: rng.randrange(1, len(manifest) - 1)])
    results = dict((s.episode_id, r) for s, r in convert_all(tmp_path))
    found = reasons_for(list(results.items()))
    for path in cut_events:
        assert found[str(path)] == {"bad_event"}, path
    assert found[str(trace / "gestures.json")] == {"bad_gestures"}
    assert found[str(trace / "episode.json")] == {"bad_manifest"}
    assert len(results["trace"].episode.episode.time_steps) == 1
    assert results["run"].episode is not None


def test_file_names_that_are_not_utf8(tmp_path: Path):
    name = b"caf\xe9-\xff".decode("utf-8", "surrogateescape")
    _write(tmp_path / f"{name}.xml", XML[0].read_bytes())
    _write(tmp_path / f"{name}2.xml", b"")
    _step_folder(tmp_path / "steps", 2, actions=b"")  # actions.jsonl makes it a step folder
    _write(tmp_path / "steps" / "1.png", JPEG)  # a second screenshot: the warning quotes its name
    _write(tmp_path / "steps" / f"{name}.xml", XML[0].read_bytes())
    _write(tmp_path / "steps" / f"{name}.png", JPEG)
    _write(tmp_path / "steps" / f"{name}.jpg", JPEG)
    results = convert_all(tmp_path)
    ids = sorted(s.episode_id for s, _ in results)
    assert ids == ["caf\\xe9-\\xff", "caf\\xe9-\\xff2", "steps"]
    steps = next(r for s, r in results if s.episode_id == "steps").episode
    assert len(steps.step_info) == 3 and any("caf\\xe9-\\xff.jpg" in w for w in steps.step_info[2].warnings)
    for _, result in results:
        for dead in result.dead_letters:
            line = dead.to_json()
            line.encode("utf-8")  # valid UTF-8, and the original path comes back
            assert DeadLetter.from_json(line).source_path == dead.source_path


def test_discovery_accounts_for_every_file_of_random_trees():
    """`plan` on random file lists: no exception, every path in exactly one episode, dead letter or ignored
    report, and unique episode ids."""
    parts = [
        "a",
        "b",
        "view_hierarchies",
        "screenshots",
        "states",
        "events",
        "0",
        "10",
        "x y",
        "日本",
        ".hidden",
    ]
    names = [
        "0.xml", "1.xml", "0.json", "1.JSON", "0.png", "0.jpg", "1.PNG", "2.webp", "gestures.json", "episode.json",
        "actions.jsonl", "state_1.json", "screen_1.png", "screen_1.jpg", "event_1.json", "state_.json", ".xml",
        "x.xml", "x.jpeg", "README", "a.b.xml", "007.xml", "7.xml", "state_1.jpg",
    ]  # fmt: skip
    rng = random.Random(7)
    for _ in range(400):
        paths = sorted(
            {
                "/".join(["/r", *(rng.choice(parts) for _ in range(rng.randint(0, 3))), rng.choice(names)])
                for _ in range(rng.randint(1, 25))
            }
        )
        seen: Counter[str] = Counter()
        ids: Counter[str] = Counter()
        for item in plan("/r", paths):
            if isinstance(item, EpisodeSource):
                seen.update(item.files)
                ids[item.episode_id] += 1
            elif isinstance(item, DeadLetter):
                seen[item.source_path] += 1
            else:
                seen[item.path] += 1
        assert all(seen[p] == 1 for p in paths) and len(seen) == len(paths), paths
        assert all(n == 1 for n in ids.values()), paths


# --- seeded random damage ------------------------------------------------------------------------------------


def _flip(data: bytes, rng: random.Random, limit: int | None = None) -> bytes:
    mutated = bytearray(data)
    for _ in range(rng.randint(1, 10)):
        mutated[rng.randrange(min(len(mutated), limit or len(mutated)))] = rng.randrange(256)
    return bytes(mutated)


def _random_hierarchy(rng: random.Random) -> bytes:
    source = rng.choice([SCREEN_JSON, *(p.read_bytes() for p in XML[:3]), (YELP / "states").glob("state_*.json")
                         .__next__().read_bytes()])  # fmt: skip
    choice = rng.randrange(5)
    if choice == 0:
        return source[: rng.randrange(len(source))]
    if choice == 1:
        return _flip(source, rng)
    if choice == 2:
        return rng.choice(list(BAD_HIERARCHIES.values()))[0]
    return source


def _random_shot(rng: random.Random) -> bytes:
    choice = rng.randrange(4)
    if choice == 0:
        return JPEG[: rng.randrange(len(JPEG))]
    if choice == 1:
        return _flip(JPEG, rng, limit=600)
    if choice == 2:
        return rng.choice(list(BAD_SCREENSHOTS.values()))
    return JPEG


def test_seeded_random_damage_never_escapes(tmp_path: Path):
    rng = random.Random(20261202)
    for k in range(30):
        n = rng.randint(1, 4)
        lines = [rng.choice(BAD_ACTION_LINES) for _ in range(rng.randint(0, 3))]
        lines += [f'{{"step": {rng.randrange(-1, n + 1)}, "action": "tap", "x": {rng.uniform(-10, 2000):.1f}, '
                  f'"y": {rng.uniform(-10, 2000):.1f}}}' for _ in range(rng.randint(0, 3))]  # fmt: skip
        _step_folder(
            tmp_path / f"ep{k:02d}",
            n,
            hierarchy=lambda i: _random_hierarchy(rng),
            shot=lambda i: _random_shot(rng),
            actions="\n".join(lines).encode() if lines else None,
        )
    results = convert_all(tmp_path)
    assert len(results) == 30
    reasons = Counter(d.reason for _, r in results for d in r.dead_letters)
    assert {"bad_screenshot", "bad_action", "malformed"} <= set(reasons)
    assert any(r.episode is not None for _, r in results)


# --- the whole pipeline --------------------------------------------------------------------------------------


def test_pipeline_survives_a_folder_of_bad_inputs(tmp_path: Path, capsys):
    """One FnApiRunner run over every kind of damage side by side: the run finishes, and every discovered
    episode and every source step is either in the shards or named in dead_letters.jsonl."""
    root = tmp_path / "in"
    for name, (data, _) in BAD_HIERARCHIES.items():
        _write(root / "single" / f"{name}.json", data)
    for name, data in BAD_SCREENSHOTS.items():
        _step_folder(root / "shots" / name, 2, shot=lambda i, d=data: d if i == 0 else JPEG)
    _step_folder(root / "actions", 2, actions="\n".join(BAD_ACTION_LINES).encode())
    _write(root / "orphan.png", JPEG)
    name = b"\xff".decode("utf-8", "surrogateescape")
    _write(root / f"bad{name}.xml", b"")
    _write(root / f"good{name}.xml", XML[0].read_bytes())
    assert run([str(root), str(tmp_path / "out"), "--shards", "2", "--quiet"]) == 0

    out = tmp_path / "out"
    dead = list(ui_records.read_dead_letters(str(out)))
    summary = ui_records.read_summary(str(out))
    assert summary["dead_letters"] == len(dead)
    assert "internal_error" not in summary["dead_letters_by_reason"]
    episodes = {e.episode_id: e for e in ui_records.iter_episodes(str(out))}
    discovered = [s for s in discover(str(root)) if isinstance(s, EpisodeSource)]
    assert summary["discovered_episodes"] == len(discovered)
    by_episode: dict[str, set] = {}
    for d in dead:
        by_episode.setdefault(d.episode_id, set()).add(d.step)
    for source in discovered:
        e = episodes.get(source.episode_id)
        if e is None:
            assert None in by_episode.get(source.episode_id, set()), source.episode_id  # the no_steps letter
            continue
        dropped = [int(i) for i in e.metadata.get("dropped_steps", "").split(",") if i]
        assert all(i in by_episode.get(source.episode_id, set()) for i in dropped), source.episode_id
    paths = {d.source_path for d in dead}
    for name in BAD_HIERARCHIES:
        assert str(root / "single" / f"{name}.json") in paths
    for name in BAD_SCREENSHOTS:
        assert str(root / "shots" / name / "0.jpg") in paths
    assert sum(d.reason == "bad_action" for d in dead) == len(BAD_ACTION_LINES)
    assert str(root / "orphan.png") in paths
    assert "good\\xff" in episodes


@pytest.mark.parametrize("flag", ["--drop_invisible", "--Shards=3", "--over_write"])
def test_our_flags_misspelled_are_refused_not_passed_to_beam(tmp_path: Path, flag: str):
    _write(tmp_path / "in" / "a.xml", XML[0].read_bytes())
    with pytest.raises(StepmarkError, match="stepmark's flag is"):
        run([str(tmp_path / "in"), str(tmp_path / "out"), "--quiet", flag])
    assert not (tmp_path / "out").exists()


def test_beam_flags_still_pass_through():
    check_misspelled(
        ["--runner=FnApiRunner", "--direct_num_workers=2", "--dask_client_address=x:1", "--job_name=q"]
    )


def test_input_and_output_folders_that_are_not_utf8(tmp_path: Path, capsys):
    """Beam's str coder refused such an INPUT, and printing the report or inspect summary could fail."""
    from stepmark.cli import main

    bad = b"caf\xe9".decode("utf-8", "surrogateescape")
    _write(tmp_path / bad / "screen.xml", XML[0].read_bytes())
    out = tmp_path / f"out-{bad}"
    assert run([str(tmp_path / bad), str(out), "--quiet"]) == 0
    assert f"from {tmp_path}/caf\\xe9" in capsys.readouterr().out
    ((episode),) = list(ui_records.iter_episodes(str(out)))
    assert episode.source_path == f"{tmp_path}/caf\\xe9/screen.xml"
    assert main(["inspect", str(out)]) == 0
    assert f"{tmp_path}/out-caf\\xe9: 1 episodes" in capsys.readouterr().out

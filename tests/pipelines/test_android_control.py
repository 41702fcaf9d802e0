"""AndroidControl / AndroidEnv accessibility forests: the forest parser against the uiautomator parser on the
same real screens, and convert-ui end to end on GZIP TFRecords written by an independent writer from the real
fixtures (every action kind, multi-window forests, missing screenshots, corrupt and truncated records,
non-UTF-8 text)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines import ui_records
from pipelines.convert import run
from pipelines.hierarchy import HierarchyError, parse
from protos.llm4mobile import episode_pb2
from protos.stepmark import ui_episode_pb2
from tests.pipelines.record_writers import (
    WindowInfo,
    example,
    feature_bytes,
    feature_ints,
    forest_from_dump,
    frame,
    png_from,
    write_tfrecord,
)

Action = ui_episode_pb2.Action
DUMPS = "uiautomator"
FRACTAL = "fractal-forge_ui_controls.xml"  # 1080x2400, one window
VISION = "visiontest_hierarchy.xml"  # 1080x2400, two windows (status bar + app)
COMPUTED = ("id", "type", "grid_location", "is_leaf", "is_actionable", "multi_types", "dom_position", "bbox",
            "parent_index", "parent_id", "android_class", "clickable", "visible", "enabled")  # fmt: skip


@pytest.mark.parametrize(
    "name",
    sorted(
        p.name for p in (Path(__file__).resolve().parents[3] / "shared/fixtures/uiautomator").glob("*.xml")
    ),
)
def test_forest_objects_match_the_uiautomator_parse_of_the_same_screen(fixtures_dir: Path, name: str) -> None:
    """Same nodes, same computed fields: a forest written from a real dump converts like the dump itself."""
    xml = (fixtures_dir / DUMPS / name).read_bytes()
    forest = forest_from_dump(xml)
    dump = parse(xml)
    screen = parse(forest.SerializeToString(), fmt="a11y_forest", screen_size=(dump.width, dump.height))
    assert screen.format == "a11y_forest"
    assert len(screen.objects) == len(dump.objects) == sum(len(w.tree.nodes) for w in forest.windows)
    for ours, theirs in zip(screen.objects, dump.objects, strict=True):
        for field in COMPUTED:
            assert getattr(ours, field) == getattr(theirs, field), (name, theirs.index, field)
    # texts are what the writer put into the forest
    texts = [n.content_description for w in forest.windows for n in w.tree.nodes]
    assert [o.content_desc for o in screen.objects] == texts
    assert [(w.first_object, w.num_objects) for w in screen.windows] == [
        (sum(len(v.tree.nodes) for v in forest.windows[:i]), len(w.tree.nodes))
        for i, w in enumerate(forest.windows)
    ]


def test_multi_window_forest_keeps_window_facts_and_text_format(fixtures_dir: Path) -> None:
    xml = (fixtures_dir / DUMPS / VISION).read_bytes()
    forest = forest_from_dump(xml, window_types=[WindowInfo.TYPE_SYSTEM, WindowInfo.TYPE_APPLICATION])
    screen = parse(forest.SerializeToString(), fmt="a11y_forest")
    assert (screen.width, screen.height) == (1080, 2400)  # from the window bounds
    assert [(w.type, w.layer, w.focused, w.title) for w in screen.windows] == [
        ("SYSTEM", 2, False, "window 0"), ("APPLICATION", 1, True, "window 1")
    ]  # fmt: skip
    roots = [o for o in screen.objects if o.dom_position.depth == 0]
    assert [r.index for r in roots] == [w.first_object for w in screen.windows]
    # the same forest in protobuf text format gives the same objects
    from google.protobuf import text_format

    as_text = text_format.MessageToString(forest).encode()
    assert parse(as_text, fmt="a11y_forest_text").objects == screen.objects


def test_forest_input_actions_make_a_node_actionable(fixtures_dir: Path) -> None:
    """A node that is not flagged clickable but offers ACTION_CLICK / set-progress is actionable."""
    forest = forest_from_dump((fixtures_dir / DUMPS / FRACTAL).read_bytes())
    nodes = forest.windows[0].tree.nodes
    burning = next(n for n in nodes if n.content_description == "Burning Ship")
    before = parse(forest.SerializeToString(), fmt="a11y_forest")
    assert not next(o for o in before.objects if o.content_desc == "Burning Ship").is_actionable
    burning.actions.add(id=16, label="click")
    after = parse(forest.SerializeToString(), fmt="a11y_forest")
    target = next(o for o in after.objects if o.content_desc == "Burning Ship")
    assert target.is_actionable and not target.clickable  # the flag is reported as the source has it


def test_bad_forests_are_hierarchy_errors(fixtures_dir: Path) -> None:
    data = forest_from_dump((fixtures_dir / DUMPS / FRACTAL).read_bytes()).SerializeToString()
    with pytest.raises(HierarchyError) as err:
        parse(data[: len(data) // 2], fmt="a11y_forest")
    assert err.value.reason == "malformed"
    with pytest.raises(HierarchyError) as err:
        parse(b"", fmt="a11y_forest")
    assert err.value.reason == "empty"
    with pytest.raises(HierarchyError) as err:
        parse(data.replace(b"Burning Ship", b"Burning \xff\xfeip"), fmt="a11y_forest")
    assert err.value.reason == "malformed" and "UTF-8" in str(err.value)


# ---- end to end ------------------------------------------------------------------------------------------
W, H = 540, 1200  # screenshots at half the device size: boxes are rescaled by 0.5


def _episode(fixtures_dir: Path, episode_id: int, forests: list[bytes], actions: list[str],
             instructions: list[bytes], goal: bytes, shots: list[bytes]) -> bytes:  # fmt: skip
    return example(
        {
            "episode_id": feature_ints(episode_id),
            "goal": feature_bytes(goal),
            "screenshots": feature_bytes(*shots),
            "accessibility_trees": feature_bytes(*forests),
            "screenshot_widths": feature_ints(*[W] * len(shots)),
            "screenshot_heights": feature_ints(*[H] * len(shots)),
            "actions": feature_bytes(*(a.encode() for a in actions)),
            "step_instructions": feature_bytes(*instructions),
        }
    )


ACTIONS = [
    {"action_type": "click", "x": 135, "y": 872},  # "Ocean" on the fractal screen
    {"action_type": "long_press", "x": 141, "y": 1019},  # "Reset View" (on the fractal screen again)
    {"action_type": "scroll", "direction": "down"},
    {"action_type": "input_text", "text": "Zürich ✓"},
    {"action_type": "open_app", "app_name": "Fractal Forge"},
    {"action_type": "navigate_back"},
    {"action_type": "navigate_home"},
    {"action_type": "wait"},
    {"action_type": "double_tap", "x": 1, "y": 2},
]
SCREENS = [FRACTAL, FRACTAL, VISION, FRACTAL, VISION, FRACTAL, VISION, FRACTAL, VISION, FRACTAL]


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> Path:
    tmp = tmp_path_factory.mktemp("android_control")
    inp, out = tmp / "in", tmp / "out"
    inp.mkdir()
    shot = png_from(fixtures_dir / "rico" / "33600.jpg", W, H)
    forests = {
        n: forest_from_dump((fixtures_dir / DUMPS / n).read_bytes()).SerializeToString()
        for n in (FRACTAL, VISION)
    }
    full = _episode(
        fixtures_dir, 101, [forests[n] for n in SCREENS], [json.dumps(a) for a in ACTIONS],
        [f"step {i}".encode() for i in range(len(ACTIONS))], b"Pick the ocean palette \xff", [shot] * len(SCREENS),
    )  # fmt: skip
    broken_forest = forests[FRACTAL].replace(b"Burning Ship", b"Burning \xff\xfeip")
    damaged = _episode(
        fixtures_dir, 102, [forests[FRACTAL], forests[VISION], broken_forest, forests[FRACTAL], forests[FRACTAL]],
        [json.dumps(ACTIONS[0]), json.dumps(ACTIONS[5]), json.dumps(ACTIONS[5]), "{not json"],
        [b"tap ocean", b"back", b"back", b"?"], b"Damaged episode", [shot, b"", shot, shot, shot],
    )  # fmt: skip
    unknown = example({"image/class": feature_ints(3)})
    records = [full, b"CORRUPT", damaged, unknown]
    body = [frame(r) for r in records]
    body[1] = body[1][:-4] + b"\0\0\0\0"  # data CRC no longer matches
    import gzip

    (inp / "train.tfrecord.gz").write_bytes(gzip.compress(b"".join(body), mtime=0))
    small = _episode(fixtures_dir, 103, [forests[VISION]], [], [], b"One screen", [shot])
    truncated = frame(small) + frame(full)[:5000]
    write_tfrecord(inp / "android_control-00001-of-00002", [])
    (inp / "android_control-00001-of-00002").write_bytes(gzip.compress(truncated, mtime=0))
    assert run([str(inp), str(out), "--quiet", "--shards=2"]) == 0
    return out


def _episodes(out: Path) -> dict[str, ui_episode_pb2.UiEpisode]:
    return {e.episode_id: e for e in ui_records.iter_episodes(str(out))}


def test_every_action_kind_and_click_target(converted: Path) -> None:
    ep = _episodes(converted)["101"]
    assert ep.source == "android_control"
    assert ep.goal == "Pick the ocean palette \ufffd"
    assert len(ep.episode.time_steps) == len(SCREENS) and len(ep.actions) == len(SCREENS)
    kinds = [a.type for a in ep.actions]
    assert kinds == [Action.TAP, Action.LONG_PRESS, Action.SWIPE, Action.TYPE_TEXT, Action.OPEN_APP, Action.BACK,
                     Action.HOME, Action.WAIT, Action.OTHER, Action.ACTION_UNSPECIFIED]  # fmt: skip
    objects = [s.observation.objects for s in ep.episode.time_steps]
    tap, press, scroll, typed, app = ep.actions[:5]
    assert (
        objects[0][tap.target_index].content_desc == "Ocean"
        and objects[0][tap.target_index].id == tap.target_id
    )
    assert (tap.x, tap.y) == (135, 872)
    assert objects[1][press.target_index].content_desc == "Reset View"
    assert scroll.direction == "down" and scroll.y > scroll.end_y  # content down: the finger moves up
    assert typed.text == "Zürich ✓" and app.text == "Fractal Forge"
    assert [a.instruction for a in ep.actions[:9]] == [f"step {i}" for i in range(9)]
    assert json.loads(ep.actions[8].raw_json) == ACTIONS[8]
    assert any("double_tap" in w for w in ep.step_info[8].warnings)


def test_forest_steps_have_every_computed_field_and_their_windows(
    converted: Path, fixtures_dir: Path
) -> None:
    ep = _episodes(converted)["101"]
    step, info = ep.episode.time_steps[2], ep.step_info[2]  # the two-window screen
    assert info.hierarchy_format == "a11y_forest" and (info.hierarchy_width, info.hierarchy_height) == (
        1080,
        2400,
    )
    assert (step.observation.screen_width, step.observation.screen_height) == (W, H)
    assert [w.num_objects for w in info.windows] == [len(w.tree.nodes) for w in forest_from_dump(
        (fixtures_dir / DUMPS / VISION).read_bytes()).windows]  # fmt: skip
    reference = parse((fixtures_dir / DUMPS / VISION).read_bytes())
    assert [o.grid_location for o in step.observation.objects] == [o.grid_location for o in reference.objects]
    assert [o.is_actionable for o in step.observation.objects] == [o.is_actionable for o in reference.objects]
    assert json.loads(step.observation.json)["windows"][0]["tree"]["nodes"][0]["uniqueId"]
    assert step.observation.screenshot.startswith(b"\x89PNG")
    assert any(
        o.type == episode_pb2.ObjectType.SEEKBAR and o.is_actionable
        for o in ep.episode.time_steps[0].observation.objects
    )


def test_damaged_records_and_steps_are_dead_letters(converted: Path) -> None:
    episodes = _episodes(converted)
    dead = list(ui_records.read_dead_letters(str(converted)))
    reasons = sorted((d.reason, d.episode_id if d.reason != "bad_record" else "", d.step) for d in dead)
    assert reasons == [
        ("bad_action", "102", 3),
        ("bad_record", "", None),  # data CRC mismatch
        ("bad_record", "", None),  # an Example that is neither dataset
        ("bad_record", "", None),  # the truncated file
        ("malformed", "102", 2),  # a forest with bytes that are not UTF-8
        ("missing_screenshot", "102", 1),
    ]
    messages = " | ".join(d.exception for d in dead if d.reason == "bad_record")
    assert "data CRC" in messages and "truncated" in messages and "neither an AndroidControl" in messages
    assert "android_control-00001-of-00002" in messages and "train.tfrecord.gz@" in messages
    damaged = episodes["102"]
    assert [i.index for i in damaged.step_info] == [0, 3, 4]
    assert damaged.metadata["dropped_steps"] == "1,2"
    assert [a.type for a in damaged.actions] == [
        Action.TAP,
        Action.ACTION_UNSPECIFIED,
        Action.ACTION_UNSPECIFIED,
    ]
    assert "103" in episodes  # the record before the truncation is converted
    summary = ui_records.read_summary(str(converted))
    assert summary["episodes_by_layout"] == {"android_control": 3}
    assert summary["discovered_episodes"] == 3  # episodes in the records, not files

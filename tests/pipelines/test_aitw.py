"""Android in the Wild: per-step GZIP TFRecords written by an independent writer from real Rico screens
(screenshot pixels + the visible leaves as OCR/icon annotations), grouped into episodes by the pipeline across
files, with every action kind, the 0.04 tap rule, missing/duplicate steps and damaged steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines import ui_records
from pipelines.convert import run
from pipelines.hierarchy import parse
from pipelines.traces.aitw import TAP_DISTANCE, action_of
from pipelines.traces.examples import parse_example
from protos.llm4mobile import episode_pb2
from protos.stepmark import ui_episode_pb2
from tests.pipelines.record_writers import (
    example,
    feature_bytes,
    feature_floats,
    feature_ints,
    raw_pixels,
    write_tfrecord,
)

Action = ui_episode_pb2.Action
T = episode_pb2.ObjectType
W, H = 270, 480  # the screenshots' raw pixel size (Rico screens are 1440x2560 in their hierarchy)
SCREENS = ["336", "3360", "33603", "33605", "33608", "33610", "33613", "33615", "33618", "33620"]


def annotations(fixtures_dir: Path, screen: str) -> list[tuple[float, float, float, float, bytes, bytes]]:
    """(y, x, h, w, text, ui type) of the visible leaves of a Rico screen: texts as TEXT, images as icons."""
    doc = json.loads((fixtures_dir / "rico" / f"{screen}.json").read_text())
    out, stack = [], [doc["activity"]["root"]]
    while stack:
        node = stack.pop()
        children = [c for c in node.get("children") or [] if c]
        stack.extend(reversed(children))
        if children or not node.get("visible-to-user"):
            continue
        left, top, right, bottom = node["bounds"]
        if right <= left or bottom <= top or left < 0 or top < 0 or right > 1440 or bottom > 2560:
            continue
        box = (top / 2560, left / 1440, (bottom - top) / 2560, (right - left) / 1440)
        if node.get("text"):
            out.append((*box, node["text"].encode(), b"TEXT"))
        elif "Image" in node.get("class", ""):
            out.append((*box, b"", b"ICON_STAR"))
    return out


def step(fixtures_dir: Path, episode: str, step_id: int, length: int, screen: str, action_type: int,
         touch=(-1.0, -1.0), lift=(-1.0, -1.0), typed: bytes = b"", image: bytes | None = None,
         extra: list | None = None) -> bytes:  # fmt: skip
    notes = annotations(fixtures_dir, screen) + (extra or [])
    return example(
        {
            "episode_id": feature_bytes(episode.encode()),
            "step_id": feature_ints(step_id),
            "episode_length": feature_ints(length),
            "goal_info": feature_bytes(f"goal of {episode}".encode()),
            "image/encoded": feature_bytes(raw_pixels(fixtures_dir / "rico" / f"{screen}.jpg", W, H) if image is None else image),
            "image/height": feature_ints(H),
            "image/width": feature_ints(W),
            "image/channels": feature_ints(3),
            "image/ui_annotations_positions": feature_floats(*[v for a in notes for v in a[:4]]),
            "image/ui_annotations_text": feature_bytes(*[a[4] for a in notes]),
            "image/ui_annotations_ui_types": feature_bytes(*[a[5] for a in notes]),
            "results/action_type": feature_ints(action_type),
            "results/yx_touch": feature_floats(*touch),
            "results/yx_lift": feature_floats(*lift),
            "results/type_action": feature_bytes(typed),
            "current_activity": feature_bytes(b"com.faasos/.MainActivity"),
            "device_type": feature_bytes(b"pixel"),
            "android_api_level": feature_ints(30),
        }
    )  # fmt: skip


def _centre(fixtures_dir: Path, screen: str, text: bytes) -> tuple[float, float]:
    y, x, h, w, *_ = next(a for a in annotations(fixtures_dir, screen) if a[4] == text)
    return y + h / 2, x + w / 2


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> Path:
    tmp = tmp_path_factory.mktemp("aitw")
    inp, out = tmp / "in", tmp / "out"
    inp.mkdir()
    target = _centre(fixtures_dir, "336", annotations(fixtures_dir, "336")[0][4])
    near = (target[0] + 0.02, target[1] + 0.02)  # 0.028 apart: still a tap
    s = lambda *a, **k: step(fixtures_dir, *a, **k)  # noqa: E731
    ep1 = [
        s("ep1", 0, 9, "336", 4, touch=target, lift=near),
        s("ep1", 1, 9, "3360", 4, touch=(0.8, 0.5), lift=(0.2, 0.5)),  # a swipe up
        s("ep1", 2, 9, "33603", 3, typed=b"pizza \xff"),
        s("ep1", 3, 9, "33605", 5),
        s("ep1", 4, 9, "33608", 6),
        s("ep1", 5, 9, "33610", 7),
        s("ep1", 6, 9, "33613", 10),
        s("ep1", 7, 9, "33615", 11),
        s("ep1", 8, 9, "33618", 4, touch=(0.5, 0.5), lift=(0.5, 0.5 + TAP_DISTANCE * 1.01)),  # just a swipe
    ]
    ep2 = [  # step 1 missing, step 0 twice (different screens)
        s("ep2", 0, 3, "336", 5),
        s("ep2", 0, 3, "3360", 6),
        s("ep2", 2, 3, "33603", 10),
    ]
    ep3 = [  # a raw image of the wrong size; non-UTF-8 annotation text
        s("ep3", 0, 2, "336", 5, image=b"\x00" * 100),
        s("ep3", 1, 2, "3360", 10, extra=[(0.1, 0.1, 0.1, 0.1, b"caf\xe9", b"TEXT")]),
    ]
    # steps spread over two files in no order; the grouping puts them together
    write_tfrecord(inp / "general-00000-of-00002", [ep1[5], ep2[2], ep1[0], ep3[1], ep1[8], ep1[3]])
    write_tfrecord(
        inp / "general-00001-of-00002", [ep1[2], ep2[0], ep1[7], ep1[1], ep3[0], ep1[6], ep2[1], ep1[4]]
    )
    assert run([str(inp), str(out), "--quiet", "--shards=3"]) == 0
    return out


def _episodes(out: Path) -> dict[str, ui_episode_pb2.UiEpisode]:
    return {e.episode_id: e for e in ui_records.iter_episodes(str(out))}


def test_steps_grouped_in_order_with_every_action(converted: Path, fixtures_dir: Path) -> None:
    ep = _episodes(converted)["ep1"]
    assert ep.source == "aitw" and ep.goal == "goal of ep1"
    assert [i.index for i in ep.step_info] == list(range(9))
    assert [a.type for a in ep.actions] == [
        Action.TAP, Action.SWIPE, Action.TYPE_TEXT, Action.BACK, Action.HOME, Action.ENTER, Action.TASK_COMPLETE,
        Action.TASK_IMPOSSIBLE, Action.SWIPE,
    ]  # fmt: skip
    tap, swipe, typed = ep.actions[:3]
    first = annotations(fixtures_dir, "336")[0]
    objects = ep.episode.time_steps[0].observation.objects
    assert (
        objects[tap.target_index].text == first[4].decode() and tap.target_id == objects[tap.target_index].id
    )
    assert (swipe.x, swipe.y, swipe.end_x, swipe.end_y) == (135, 384, 135, 96)
    assert typed.text == "pizza \ufffd" and any("not UTF-8" in w for w in ep.step_info[2].warnings)
    assert json.loads(tap.raw_json)["action_type"] == 4
    assert ep.metadata["device_type"] == "pixel" and ep.metadata["android_api_level"] == "30"


def test_annotations_become_flat_objects(converted: Path, fixtures_dir: Path) -> None:
    ep = _episodes(converted)["ep1"]
    obs = ep.episode.time_steps[1].observation
    notes = annotations(fixtures_dir, "3360")
    assert (obs.screen_width, obs.screen_height) == (W, H) and obs.screenshot.startswith(b"\x89PNG")
    assert len(obs.objects) == len(notes)
    for o, (y, x, h, w, text, kind) in zip(obs.objects, notes, strict=True):
        assert o.dom_position.depth == 0 and o.is_leaf and not o.is_actionable
        assert (o.bbox.left, o.bbox.top, o.bbox.right, o.bbox.bottom) == (
            round(x * W), round(y * H), round((x + w) * W), round((y + h) * H))  # fmt: skip
        if kind == b"TEXT":
            assert (
                o.type == T.TEXTVIEW and o.text == text.decode() and o.name == " ".join(text.decode().split())
            )
        else:
            assert o.type == T.IMAGEVIEW and o.name == kind.decode()
        cx, cy = x + w / 2, y + h / 2
        assert o.grid_location == 1 + int(3 * cy) * 3 + int(3 * cx)
    assert ep.step_info[1].hierarchy_format == "aitw_annotations"
    assert json.loads(obs.json)["annotations"][0]["ui_type"] == notes[0][5].decode()


def test_missing_duplicate_and_damaged_steps_are_dead_letters(converted: Path) -> None:
    episodes = _episodes(converted)
    dead = sorted((d.reason, d.episode_id, d.step) for d in ui_records.read_dead_letters(str(converted)))
    # step 0 of ep2 has two differing records: neither is kept (which one is right cannot be told)
    assert dead == [("bad_screenshot", "ep3", 0), ("duplicate_step", "ep2", 0), ("duplicate_step", "ep2", 0),
                    ("missing_step", "ep2", None)]  # fmt: skip
    messages = {d.reason: d.exception for d in ui_records.read_dead_letters(str(converted))}
    assert "episode ep2" in messages["missing_step"] and "step(s) 1 of 3" in messages["missing_step"]
    assert messages["duplicate_step"].count("general-00001-of-00002@") == 2  # both records named
    assert "none is kept" in messages["duplicate_step"]
    assert [i.index for i in episodes["ep2"].step_info] == [2]
    ep3 = episodes["ep3"]
    assert [i.index for i in ep3.step_info] == [1]
    assert "caf\ufffd" in [o.text for o in ep3.episode.time_steps[0].observation.objects]
    summary = ui_records.read_summary(str(converted))
    assert summary["episodes_by_layout"] == {"aitw": 3} and summary["discovered_episodes"] == 3


def test_tap_rule_is_aitw_distance(fixtures_dir: Path) -> None:
    """touch/lift within 0.04 (Euclidean, normalised) is a tap; further apart a swipe."""
    for dx, kind in ((0.0, "tap"), (0.039, "tap"), (0.041, "swipe"), (0.3, "swipe")):
        data = step(fixtures_dir, "e", 0, 1, "336", 4, touch=(0.5, 0.5), lift=(0.5, 0.5 + dx))
        assert action_of(parse_example(data), []).kind == kind


def test_aitw_parser_bounds_and_errors() -> None:
    doc = {"width": 100, "height": 200, "annotations": [{"y": 0.5, "x": 0.0, "h": 0.1, "w": 0.5, "text": "a",
                                                         "ui_type": "TEXT"}, {"x": "bad"}]}  # fmt: skip
    screen = parse(json.dumps(doc).encode(), fmt="aitw_annotations")
    assert screen.objects[0].grid_location == episode_pb2.GridLocation.LEFT
    assert not screen.objects[1].HasField("bbox") and any("four finite" in w for w in screen.warnings)

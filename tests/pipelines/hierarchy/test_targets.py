"""Target resolution (`pipelines/hierarchy/targets.py`) on the real Rico screens and DroidBot run, through the
converter: every pointed action lands on an object whose box holds the point, and pressable objects win over
the containers behind them."""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.hierarchy import object_at, parse, targets
from pipelines.traces import EpisodeSource, discover, read_episode
from pipelines.traces.files import read_bytes
from pipelines.ui_episode import convert_episode
from protos.stepmark import ui_episode_pb2
from tests.conftest import REPO_ROOT
from tests.pipelines.test_traces import FAASOS, build_droidbot, build_rico_trace

A = ui_episode_pb2.Action
POINTED = (A.TAP, A.LONG_PRESS, A.SWIPE, A.TYPE_TEXT)
# The sample Rico trace's gestures (samples/README.md): one tap per screen on a clickable object's centre.
GESTURES = REPO_ROOT / "samples" / "ui" / "rico_trace" / "com.done.faasos" / "gestures.json"


def converted(root: Path) -> list[ui_episode_pb2.UiEpisode]:
    out = []
    for item in discover(str(root)):
        if isinstance(item, EpisodeSource):
            result = convert_episode(read_episode(item, read_bytes), read_bytes)
            assert result.episode is not None
            out.append(result.episode)
    return out


def pointed(episodes):
    for e in episodes:
        for i, a in enumerate(e.actions):
            if a.type in POINTED:
                yield e, i, a, e.episode.time_steps[i].observation.objects


def test_every_tap_of_the_sample_traces_lands_on_an_object_holding_the_point(tmp_path, fixtures_dir):
    rico = build_rico_trace(tmp_path / "rico", fixtures_dir, FAASOS, json.loads(GESTURES.read_text()))
    droid = build_droidbot(tmp_path / "droid", fixtures_dir)
    seen = 0
    for e, i, a, objects in pointed(converted(rico) + converted(droid)):
        seen += 1
        assert a.HasField("target_index"), (e.episode_id, i)
        target = objects[a.target_index]
        assert a.target_id == target.id
        if a.target_rule != targets.RECORDED_VIEW:
            assert targets.contains(target, a.x, a.y), (e.episode_id, i, a.target_index)
            assert a.target_rule == targets.POINT_ACTIONABLE
        for runner in a.target_candidates:
            assert runner != a.target_index and targets.contains(objects[runner], a.x, a.y)
        assert len(a.target_candidates) <= targets.MAX_RUNNERS_UP
    assert seen == 6 + 32  # 6 Rico gestures (5 taps, 1 swipe), 32 DroidBot touches/scrolls of saved states


def test_rico_next_button_not_the_pager_behind_it(tmp_path, fixtures_dir):
    """Issue 11: on screen 33600 the tap at (492, 67) is on "NEXT" (object 53); the deepest object there is the
    pager page (object 31), covering 60% of the screen."""
    rico = build_rico_trace(tmp_path / "rico", fixtures_dir, FAASOS, json.loads(GESTURES.read_text()))
    (episode,) = converted(rico)
    a = episode.actions[0]
    objects = episode.episode.time_steps[0].observation.objects
    assert (a.x, a.y) == (492, 67)
    assert object_at(objects, a.x, a.y) == 31  # the old rule
    assert a.target_index == 53 and objects[53].text == "NEXT" and objects[53].clickable
    assert a.target_rule == targets.POINT_ACTIONABLE
    assert a.target_candidates[0] == 31  # the runner-up is the container


def test_every_clickable_centre_of_every_rico_screen_resolves_to_a_pressable_object(fixtures_dir):
    n = 0
    for path in sorted((fixtures_dir / "rico").glob("*.json")):
        screen = parse(path.read_bytes())
        for o in screen.objects:
            b = o.bbox
            if o.visible and o.clickable and b.right > b.left and b.bottom > b.top:
                x, y = (b.left + b.right) // 2, (b.top + b.bottom) // 2
                found = targets.resolve(screen.objects, (x, y))
                assert found.index is not None and targets.pressable(screen.objects[found.index]), (path, o.index)
                assert targets.contains(screen.objects[found.index], x, y)
                n += 1
    assert n > 200


def test_order_visible_then_pressable_then_smallest_then_deepest(fixtures_dir):
    screen = parse((fixtures_dir / "rico" / "33600.json").read_bytes())
    objects = list(screen.objects)
    nxt = next(o for o in objects if o.text == "NEXT")
    x, y = (nxt.bbox.left + nxt.bbox.right) // 2, (nxt.bbox.top + nxt.bbox.bottom) // 2
    ranked = targets.candidates(objects, x, y)
    assert ranked[0] == nxt.index
    rest = [objects[i] for i in ranked[1:]]
    areas = [(o.bbox.right - o.bbox.left) * (o.bbox.bottom - o.bbox.top) for o in rest if o.visible]
    assert areas == sorted(areas)  # none of the others is pressable here: smallest first
    # an invisible NEXT loses to every visible container; the rule name says so when only hidden ones remain
    hidden = [type(o)() for o in objects]
    for copy, o in zip(hidden, objects, strict=True):
        copy.CopyFrom(o)
    hidden[nxt.index].visible = False
    assert targets.resolve(hidden, (x, y)).index != nxt.index
    for o in hidden:
        o.visible = False
    assert targets.resolve(hidden, (x, y)).rule == targets.POINT_HIDDEN
    assert targets.resolve(objects, (-5, -5)) == targets.Resolution(None)


def test_typing_without_a_point_targets_the_focused_object(fixtures_dir):
    screen = parse((fixtures_dir / "rico" / "33600.json").read_bytes())
    objects = [type(o)() for o in screen.objects]
    for copy, o in zip(objects, screen.objects, strict=True):
        copy.CopyFrom(o)
    objects[53].focused = True
    assert targets.resolve(objects, None, typing=True) == targets.Resolution(53, targets.FOCUSED)
    assert targets.resolve(objects, None) == targets.Resolution(None)

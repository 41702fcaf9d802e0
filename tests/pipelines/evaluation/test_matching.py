"""The matching rule of `stepmark evaluate` (pipelines/evaluation/matching.py), case by case."""

from __future__ import annotations

import math

import pytest

from pipelines.evaluation import matching
from pipelines.evaluation.matching import Recorded, match, parse_action
from protos.stepmark import ui_episode_pb2

A = ui_episode_pb2.Action


def tap(x: int = 100, y: int = 200, box: tuple[int, int, int, int] | None = (50, 150, 150, 250)) -> Recorded:
    return Recorded("click", x=x, y=y, box=box, width=300, height=400)  # diagonal 500: limit 70 px


def test_tap_inside_the_box_or_within_14_percent_of_the_diagonal() -> None:
    assert match(tap(), parse_action({"action_type": "click", "x": 52, "y": 152})).matched  # in the box
    assert match(tap(), parse_action({"action_type": "click", "x": 100, "y": 270})).matched  # 70 px away
    far = match(tap(), parse_action({"action_type": "click", "x": 100, "y": 271}))
    assert (far.matched, far.reason) == (False, "point") and "71 px" in far.detail and "limit 70 px" in far.detail
    # a big target box counts even far from the recorded point
    big = tap(box=(0, 0, 300, 400))
    assert match(big, parse_action({"action_type": "click", "x": 299, "y": 399})).matched
    assert math.isclose(matching.TAP_DISTANCE * math.hypot(300, 400), 70)


def test_type_must_match_first() -> None:
    out = match(tap(), parse_action({"action_type": "long_press", "x": 100, "y": 200}))
    assert (out.matched, out.reason) == (False, "type")
    assert match(tap(), None).reason == "missing"


def test_scroll_direction_names_where_the_content_goes() -> None:
    # a finger moving up (y falls) scrolls down, as the converter writes AndroidControl's "down"
    assert matching.swipe_direction(270, 739, 270, 263) == "down"
    assert matching.swipe_direction(270, 263, 270, 739) == "up"
    assert matching.swipe_direction(400, 10, 100, 20) == "right"
    assert matching.swipe_direction(5, 5, 5, 5) is None
    rec = matching.recorded(A(type=A.SWIPE, x=270, y=739, end_x=270, end_y=263), None, 540, 960)
    assert rec.direction == "down"
    assert match(rec, parse_action({"action_type": "scroll", "direction": "DOWN"})).matched
    assert match(rec, parse_action({"action_type": "scroll", "direction": "up"})).reason == "direction"
    # a recorded direction wins over the points
    assert matching.recorded(A(type=A.SWIPE, direction="left", y=9, end_y=1), None, 1, 1).direction == "left"


def test_text_app_and_status() -> None:
    typed = matching.recorded(A(type=A.TYPE_TEXT, text="Pizza  near me"), None, 1, 1)
    assert match(typed, parse_action({"action_type": "input_text", "text": " pizza near ME."})).matched
    assert match(typed, parse_action({"action_type": "input_text", "text": "pizza"})).reason == "text"
    app = matching.recorded(A(type=A.OPEN_APP, text="Clock"), None, 1, 1)
    assert match(app, parse_action({"action_type": "open_app", "app_name": "clock"})).matched
    assert match(app, parse_action({"action_type": "open_app", "app_name": "Calendar"})).reason == "app"
    done = matching.recorded(A(type=A.TASK_COMPLETE), None, 1, 1)
    assert match(done, parse_action({"action_type": "status", "goal_status": "complete"})).matched
    assert match(done, parse_action({"action_type": "status", "goal_status": "infeasible"})).reason == "status"
    assert matching.recorded(A(type=A.ACTION_UNSPECIFIED), None, 1, 1) is None
    assert matching.recorded(A(type=A.OTHER), None, 1, 1) is None


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("click", "'action' must be a JSON object"),
        ({"action_type": "tap", "x": 1, "y": 1}, "unknown action_type 'tap'"),
        ({"action_type": "click", "x": 1}, "click needs 'y'"),
        ({"action_type": "click", "x": "1", "y": 1}, "'x' must be a number"),
        ({"action_type": "click", "x": -1, "y": 1}, "'x' must not be negative"),
        ({"action_type": "click", "x": 1, "y": 1, "text": "a"}, "unknown key(s) ['text']"),
        ({"action_type": "scroll", "direction": "sideways"}, "scroll direction 'sideways' is not one of"),
        ({"action_type": "status", "goal_status": "done"}, "goal_status 'done' is not one of"),
        ({"action_type": "navigate_back", "x": 3}, "navigate_back takes no arguments"),
    ],
)
def test_invalid_actions_say_why(action: object, message: str) -> None:
    with pytest.raises(matching.InvalidAction) as caught:
        parse_action(action)
    assert message in str(caught.value)

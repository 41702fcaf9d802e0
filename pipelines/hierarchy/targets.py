"""Which on-screen object an action at a point acted on: the object a person would say they touched.

One rule (documented in schemas/objects.md, "Action targets"), used by the converter (`pipelines/ui_episode.py`)
and by `stepmark inspect`'s resolution counts. The deepest object under a point is often a full-screen container
drawn behind the button that was pressed (Rico's pager pages sit beside the toolbar's buttons in the DOM, not
above them), so depth alone picks the container; the rule prefers what can be pressed, then what is small.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from protos.llm4mobile import episode_pb2

from .classes import EDITABLE_TYPES

#: How many runner-up candidates an Action records besides its target (best first).
MAX_RUNNERS_UP = 4

# Rule names, recorded in `Action.target_rule`.
RECORDED_VIEW = "recorded_view"  # the source named the view (DroidBot), matched by box/class/resource id
POINT_ACTIONABLE = "point_actionable"  # a visible actionable object under the point
POINT_VISIBLE = "point_visible"  # no actionable object under the point: a visible one
POINT_HIDDEN = "point_hidden"  # only invisible objects under the point
FOCUSED = "focused"  # typing without a point: the focused object
RULES = (RECORDED_VIEW, POINT_ACTIONABLE, POINT_VISIBLE, POINT_HIDDEN, FOCUSED)


@dataclass(frozen=True)
class Resolution:
    """The chosen object's index (None: no object), the rule that chose it, and the runner-ups (best first)."""

    index: int | None
    rule: str = ""
    runners_up: tuple[int, ...] = ()


def editable(o: episode_pb2.Object) -> bool:
    """An object text is typed into: an EditText (or subtype) by type; the Object has no editable flag."""
    return o.type in EDITABLE_TYPES or any(t in EDITABLE_TYPES for t in o.multi_types)


def pressable(o: episode_pb2.Object, *, swipe: bool = False) -> bool:
    """Clickable, long-clickable, checkable or editable; for a swipe also scrollable."""
    return bool(o.clickable or o.long_clickable or o.checkable or editable(o) or (swipe and o.scrollable))


def contains(o: episode_pb2.Object, x: int, y: int) -> bool:
    """A valid box (non-empty) holding the point; left/top inclusive, right/bottom exclusive."""
    b = o.bbox
    return b.right > b.left and b.bottom > b.top and b.left <= x < b.right and b.top <= y < b.bottom


def candidates(objects: Sequence[episode_pb2.Object], x: int, y: int, *, swipe: bool = False) -> list[int]:
    """Indices of the objects whose box contains (x, y), best first: visible, then pressable, then the
    smallest area, then the deepest, then the later in pre-order (drawn on top)."""
    ranked = []
    for o in objects:
        if contains(o, x, y):
            b = o.bbox
            area = (b.right - b.left) * (b.bottom - b.top)
            key = (not o.visible, not pressable(o, swipe=swipe), area, -o.dom_position.depth, -o.index)
            ranked.append((key, o.index))
    ranked.sort()
    return [index for _, index in ranked]


def point_rule(o: episode_pb2.Object, *, swipe: bool = False) -> str:
    if not o.visible:
        return POINT_HIDDEN
    return POINT_ACTIONABLE if pressable(o, swipe=swipe) else POINT_VISIBLE


def resolve_point(objects: Sequence[episode_pb2.Object], x: int, y: int, *, swipe: bool = False) -> Resolution:
    """The target of an action at (x, y) by the rule above; Resolution(None) when no box contains the point."""
    ranked = candidates(objects, x, y, swipe=swipe)
    if not ranked:
        return Resolution(None)
    best = ranked[0]
    return Resolution(best, point_rule(objects[best], swipe=swipe), tuple(ranked[1 : 1 + MAX_RUNNERS_UP]))


def with_runners_up(index: int, rule: str, ranked: Sequence[int]) -> Resolution:
    """A target chosen otherwise (recorded view, focus), with the point's other candidates as runner-ups."""
    return Resolution(index, rule, tuple(i for i in ranked if i != index)[:MAX_RUNNERS_UP])


def resolve(
    objects: Sequence[episode_pb2.Object],
    point: tuple[int, int] | None,
    *,
    recorded: int | None = None,
    swipe: bool = False,
    typing: bool = False,
) -> Resolution:
    """The converter's one entry: a recorded view wins; else the point's best candidate; else, for typing
    without a point, the last focused object."""
    ranked = candidates(objects, *point, swipe=swipe) if point is not None else []
    if recorded is not None:
        return with_runners_up(recorded, RECORDED_VIEW, ranked)
    if ranked:
        return with_runners_up(ranked[0], point_rule(objects[ranked[0]], swipe=swipe), ranked)
    if typing and point is None:
        focused = [o.index for o in objects if o.focused]
        if focused:
            return Resolution(focused[-1], FOCUSED)
    return Resolution(None)


OUTCOMES = ("actionable", "non_actionable", "unresolved")


def outcome(objects: Sequence[episode_pb2.Object], index: int | None) -> str:
    """`actionable`, `non_actionable` or `unresolved`: how `inspect` counts a pointed action's target."""
    if index is None or not 0 <= index < len(objects):
        return "unresolved"
    return "actionable" if pressable(objects[index]) or objects[index].is_actionable else "non_actionable"

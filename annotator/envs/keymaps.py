"""Keyboard and gamepad input shared by the environment families (documented in `schemas/keymaps.md`).

Keys are the browser's `KeyboardEvent.key` names ("ArrowUp", " ", "w", "Enter"). Gamepads follow the
W3C "standard" mapping: buttons by index (0 A/bottom, 1 B/right, 2 X/left, 3 Y/top, 4 LB, 5 RB, 6 LT,
7 RT, 8 Back, 9 Start, 10/11 stick presses, 12-15 d-pad up/down/left/right, 16 Home) and axes
(0/1 left stick x/y, 2/3 right stick x/y; y is positive downwards).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from protos.rlds_creator import client_pb2

# W3C standard gamepad button indices.
BUTTON_A, BUTTON_B, BUTTON_X, BUTTON_Y = 0, 1, 2, 3
BUTTON_LB, BUTTON_RB, BUTTON_LT, BUTTON_RT = 4, 5, 6, 7
BUTTON_BACK, BUTTON_START = 8, 9
BUTTON_LSTICK, BUTTON_RSTICK = 10, 11
DPAD_UP, DPAD_DOWN, DPAD_LEFT, DPAD_RIGHT = 12, 13, 14, 15
AXIS_LX, AXIS_LY, AXIS_RX, AXIS_RY = 0, 1, 2, 3

#: A stick counts as a direction press beyond this deflection; analog uses below it are ignored as drift.
DEAD_ZONE = 0.25
DIGITAL_THRESHOLD = 0.5

ARROWS = {"ArrowUp": "UP", "ArrowDown": "DOWN", "ArrowLeft": "LEFT", "ArrowRight": "RIGHT"}
_DPAD = {DPAD_UP: "UP", DPAD_DOWN: "DOWN", DPAD_LEFT: "LEFT", DPAD_RIGHT: "RIGHT"}


def normalize_keys(keys: Iterable[str], *, fold_case: bool = True) -> set[str]:
    """The set of held keys; single letters lower-cased unless the family cares about case (NetHack)."""
    out: set[str] = set()
    for key in keys:
        if not key:
            continue
        if key == "Spacebar":  # old browsers' name for " "
            key = " "
        out.add(key.lower() if fold_case and len(key) == 1 else key)
    return out


def pressed_buttons(gamepad: client_pb2.GamepadInput | None) -> set[int]:
    """Indices of the gamepad buttons held (pressed, or analog value past half-way)."""
    if gamepad is None:
        return set()
    return {int(i) for i, b in gamepad.buttons.items() if b.pressed or b.value >= DIGITAL_THRESHOLD}


def axis(gamepad: client_pb2.GamepadInput | None, index: int) -> float:
    """One axis in [-1, 1], zero inside the dead zone (the client only sends non-zero axes)."""
    if gamepad is None:
        return 0.0
    value = float(gamepad.axes.get(index, 0.0))
    value = max(-1.0, min(1.0, value))
    return 0.0 if abs(value) < DEAD_ZONE else value


def directions(keys: set[str], gamepad: client_pb2.GamepadInput | None, *, arrows: bool = True) -> set[str]:
    """UP/DOWN/LEFT/RIGHT held, from the arrow keys, the d-pad and the left stick."""
    held = {name for key, name in ARROWS.items() if key in keys} if arrows else set()
    buttons = pressed_buttons(gamepad)
    held |= {name for index, name in _DPAD.items() if index in buttons}
    x, y = axis(gamepad, AXIS_LX), axis(gamepad, AXIS_LY)
    if x <= -DIGITAL_THRESHOLD:
        held.add("LEFT")
    elif x >= DIGITAL_THRESHOLD:
        held.add("RIGHT")
    if y <= -DIGITAL_THRESHOLD:
        held.add("UP")
    elif y >= DIGITAL_THRESHOLD:
        held.add("DOWN")
    # Opposite directions cancel, as on a physical d-pad.
    for a, b in (("UP", "DOWN"), ("LEFT", "RIGHT")):
        if a in held and b in held:
            held -= {a, b}
    return held


def best_combo(held: set[str], combos: Sequence[frozenset[str]], default: int) -> int:
    """Index of the largest combo whose every part is held (first one on ties), else `default`.

    This is how Procgen's own interactive mode picks among its 15 combo actions; Atari uses it over the
    meanings of the game's minimal action set.
    """
    best, best_len = default, -1
    for i, combo in enumerate(combos):
        if combo <= held and len(combo) > best_len:
            best, best_len = i, len(combo)
    return best

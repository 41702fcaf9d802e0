"""NetHack through NLE (gymnasium API), shown as the 24x80 terminal it really is.

The id is an NLE task id ("NetHackScore-v0", "NetHackChallenge-v0", ...); each task keeps its own action
set (NetHackScore's 23 actions; NetHackChallenge and NetHack-v0 the whole keyboard). Keys pass through
as the ASCII codes NetHack reads; a key outside the task's action set does nothing (the no-op).
NetHack has no true no-op: `noop_action()` is MORE (Enter), which passes no game time; play NetHack
in sync mode.

The observation is NLE's dict without `screen_descriptions` (80 bytes per map cell, 130 KB a step, and
derivable from glyphs); `render()` draws `tty_chars`/`tty_colors` with a monospace font on a fixed grid.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
from dm_env import specs
from PIL import Image, ImageDraw, ImageFont

from annotator.envs import keymaps
from annotator.envs.base import Environment
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2, study_pb2

OBSERVATION_KEYS = (
    "glyphs",
    "chars",
    "colors",
    "specials",
    "blstats",
    "message",
    "inv_glyphs",
    "inv_strs",
    "inv_letters",
    "inv_oclasses",
    "tty_chars",
    "tty_colors",
    "tty_cursor",
)
ENTER, ESCAPE = 13, 27
FONT_SIZE = 12
# Curses' 16 colours as NetHack's tty uses them (bit 8 = bright); black is drawn dark grey, as with
# NetHack's use_darkgray option, so black monsters stay visible on the black background.
PALETTE = np.array(
    [
        (85, 85, 85), (170, 0, 0), (0, 170, 0), (170, 85, 0),
        (0, 0, 170), (170, 0, 170), (0, 170, 170), (170, 170, 170),
        (85, 85, 85), (255, 85, 85), (85, 255, 85), (255, 255, 85),
        (85, 85, 255), (255, 85, 255), (85, 255, 255), (255, 255, 255),
    ],
    dtype=np.float32,
)  # fmt: skip

# vi-keys: NetHack's movement letters for arrow keys and their diagonal combinations.
_DIRECTION_KEYS = {
    frozenset({"UP"}): "k",
    frozenset({"DOWN"}): "j",
    frozenset({"LEFT"}): "h",
    frozenset({"RIGHT"}): "l",
    frozenset({"UP", "LEFT"}): "y",
    frozenset({"UP", "RIGHT"}): "u",
    frozenset({"DOWN", "LEFT"}): "b",
    frozenset({"DOWN", "RIGHT"}): "n",
}
_NAMED_KEYS = {"Enter": ENTER, "Escape": ESCAPE, "Backspace": 8, "Tab": 9}
_BUTTONS = {
    keymaps.BUTTON_A: ENTER,
    keymaps.BUTTON_B: ESCAPE,
    keymaps.BUTTON_X: ord("s"),
    keymaps.BUTTON_Y: ord("e"),
    keymaps.BUTTON_LB: ord("<"),
    keymaps.BUTTON_RB: ord(">"),
    keymaps.BUTTON_START: ord("."),
}
RUN_BUTTON = keymaps.BUTTON_RT  # held with a direction: run (Shift + direction letter)


def valid_ids() -> list[str]:
    """NLE's registered task ids."""
    import gymnasium
    import nle  # noqa: F401  (registers the NetHack* ids)

    return sorted(k for k in gymnasium.registry if k.startswith("NetHack"))


@functools.cache
def _glyph_atlas() -> tuple[np.ndarray, int, int]:
    """Every (byte, colour) cell pre-drawn: uint8 tiles (256, 16, h, w, 3), made once per process.

    A frame is then one gather and a reshape (about 1 ms) instead of drawing 1,920 glyphs.
    """
    try:
        font: Any = ImageFont.truetype("DejaVuSansMono.ttf", FONT_SIZE)
    except OSError:  # no system font: Pillow's bundled one, still placed on the fixed grid
        font = ImageFont.load_default(FONT_SIZE)
    ascent, descent = font.getmetrics()
    width, height = int(np.ceil(font.getlength("M"))), ascent + descent
    masks = np.zeros((256, height, width), np.float32)
    for code in range(33, 256):
        tile = Image.new("L", (width, height))
        ImageDraw.Draw(tile).text((0, 0), chr(code), fill=255, font=font)
        masks[code] = np.asarray(tile, np.float32) / 255.0
    tiles = masks[:, None, :, :, None] * PALETTE[None, :, None, None, :]
    return np.rint(tiles).astype(np.uint8), height, width


def render_tty(chars: np.ndarray, colors: np.ndarray, cursor: Sequence[int] | None = None) -> np.ndarray:
    """An RGB image of the terminal: each cell a font glyph in its colour; the cursor cell inverted."""
    tiles, h, w = _glyph_atlas()
    rows, cols = chars.shape
    cells = tiles[chars.astype(np.uint8), colors.astype(np.int16) & 15]  # rows, cols, h, w, 3
    if cursor is not None:
        r, c = int(cursor[0]), int(cursor[1])
        if 0 <= r < rows and 0 <= c < cols:
            cells[r, c] = 255 - cells[r, c]
    return np.ascontiguousarray(cells.transpose(0, 2, 1, 3, 4).reshape(rows * h, cols * w, 3))


class NetHackEnvironment(Environment):
    family = "nethack"

    def __init__(self, spec: study_pb2.EnvironmentSpec, *, seed: int | None = None) -> None:
        super().__init__(spec, cameras=("tty",))
        import gymnasium

        task = spec.net_hack.id
        if task not in valid_ids():
            raise StepmarkError(f"unknown NetHack task {task!r}; valid ids: {', '.join(valid_ids())}")
        kwargs: dict[str, Any] = {"observation_keys": OBSERVATION_KEYS}
        if self.max_episode_steps is not None:  # NLE's own limit (5000 by default) must not cut in first
            kwargs["max_episode_steps"] = self.max_episode_steps
        self._env = gymnasium.make(task, **kwargs)
        self._seed = seed
        self.codes: list[int] = [int(a) for a in self._env.unwrapped.actions]
        self._index = {code: i for i, code in enumerate(self.codes)}
        self._noop = self._index.get(ENTER, 0)
        self._observation: dict[str, np.ndarray] = {}
        space = self._env.observation_space
        self._obs_spec = {
            key: specs.Array(shape=space[key].shape, dtype=space[key].dtype, name=key)
            for key in OBSERVATION_KEYS
        }
        self.key_map = self._key_map()
        done = getattr(self._env.unwrapped.StepStatus, "TASK_SUCCESSFUL", None)
        self._task_successful: int | None = int(done) if done is not None else None

    def _key_map(self) -> dict[str, str]:
        """The keys this task understands, named by NLE's action names."""
        import nle.nethack

        names = {int(a): f"{type(a).__name__}.{a.name}" for a in nle.nethack.ACTIONS}
        out: dict[str, str] = {}
        for arrow, direction in keymaps.ARROWS.items():
            code = ord(_DIRECTION_KEYS[frozenset({direction})])
            if code in self._index:
                out[arrow] = names.get(code, chr(code))
        for name, code in _NAMED_KEYS.items():
            if code in self._index:
                out[name] = names.get(code, name)
        for code in self.codes:
            if 32 <= code < 127:
                out[chr(code)] = names.get(code, chr(code))
            elif 1 <= code <= 26 and code not in _NAMED_KEYS.values():
                out[f"Control+{chr(code + 96)}"] = names.get(code, f"^{chr(code + 64)}")
        return out

    def _reset(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        note: dict[str, Any] = {}
        if self._seed is not None:  # NetHack's own RNGs (core, disp); reseed=False keeps runs reproducible
            try:
                self._env.unwrapped.seed(core=self._seed, disp=self._seed, reseed=False)
            except RuntimeError as err:  # NetHackChallenge forbids seeding by design: say so in the info
                note["seed_ignored"] = str(err)
            self._seed = None
        observation, info = self._env.reset()
        self._observation = {k: np.asarray(observation[k]) for k in OBSERVATION_KEYS}
        return dict(self._observation), dict(info, **note)

    def _step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        index = int(np.asarray(action).reshape(()))
        if not 0 <= index < len(self.codes):
            raise StepmarkError(
                f"NetHack action {index} out of range [0, {len(self.codes)}) for {self.spec.net_hack.id}"
            )
        observation, reward, terminated, truncated, info = self._env.step(index)
        self._observation = {k: np.asarray(observation[k]) for k in OBSERVATION_KEYS}
        info = dict(info, key_code=self.codes[index])
        return dict(self._observation), float(reward), bool(terminated), bool(truncated), info

    # ----- input ------------------------------------------------------------------------------------
    def code_from_input(
        self, keys: Sequence[str], gamepad: client_pb2.GamepadInput | None = None
    ) -> int | None:
        """The ASCII code NetHack would read for this input, before checking the task's action set."""
        held = [k for k in keys if k]
        buttons = keymaps.pressed_buttons(gamepad)
        direction = frozenset(keymaps.directions(set(held), gamepad))
        if direction:
            letter = _DIRECTION_KEYS[direction]
            run = "Shift" in held or RUN_BUTTON in buttons
            return ord(letter.upper() if run else letter)
        control = "Control" in held
        for key in held:  # first key in the order the client pressed them
            if key in _NAMED_KEYS:
                return _NAMED_KEYS[key]
            if len(key) == 1 and ord(key) < 128:
                code = ord(key)
                return code & 0x1F if control and key.isalpha() else code
        for button, code in _BUTTONS.items():
            if button in buttons:
                return code
        return None

    def action_from_input(self, keys: Sequence[str], gamepad: client_pb2.GamepadInput | None = None) -> int:
        code = self.code_from_input(keys, gamepad)
        return self._index.get(code, self._noop) if code is not None else self._noop

    def noop_action(self) -> int:
        return self._noop

    def sample_action(self, rng: np.random.Generator) -> int:
        return int(rng.integers(len(self.codes)))

    # ----- output -----------------------------------------------------------------------------------
    def render(self) -> np.ndarray:
        if not self._observation:
            raise StepmarkError("NetHack: nothing to render before reset()")
        o = self._observation
        return render_tty(o["tty_chars"], o["tty_colors"], o["tty_cursor"])

    def observation_spec(self) -> dict[str, specs.Array]:
        return dict(self._obs_spec)

    def action_spec(self) -> specs.DiscreteArray:
        return specs.DiscreteArray(num_values=len(self.codes), dtype=np.int64, name="action")

    def success(self, info: dict[str, Any]) -> bool | None:
        """True on ascension, or when the task reports TASK_SUCCESSFUL (tasks with a goal, e.g. stairs)."""
        status = info.get("end_status")
        return bool(info.get("is_ascended")) or (
            self._task_successful is not None and status is not None and int(status) == self._task_successful
        )

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

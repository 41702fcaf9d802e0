"""The step player: a Streamlit custom component (v2, no iframe) whose JavaScript owns the step index.

The browser handles keys, prefetches frames from the annotator's own routes (`annotator/web/replay_routes.py`),
plays at the chosen fps, and sends every tag with the index of the step on screen. Python only mounts it and hears
back, debounced, which step is on screen (`step`) and that the store changed (`changed`), so the page around it
(header, state box, notes) can follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

_HERE = Path(__file__).resolve().parent
NAME = "stepmark_player"


@st.cache_resource(show_spinner=False)
def _component():
    return st.components.v2.component(
        NAME,
        html=(_HERE / "player.html").read_text(encoding="utf-8"),
        css=(_HERE / "player.css").read_text(encoding="utf-8"),
        # `typing()` and `el()` are shared with the live recorder (annotator/web/browser_common.js).
        js=(_HERE.parent / "web" / "browser_common.js").read_text(encoding="utf-8")
        + (_HERE / "grounding.js").read_text(encoding="utf-8")
        + (_HERE / "fields.js").read_text(encoding="utf-8")
        + (_HERE / "player.js").read_text(encoding="utf-8"),
    )


@dataclass(frozen=True)
class PlayerState:
    step: int | None  # the step on screen, once it has been still for a moment
    changed: str | None  # set for the one rerun after the player changed the store (undo, redo, state)


def _ignore() -> None:
    """State callbacks must exist for the values to reach Python; the page reads them after the rerun."""


def show(
    ref_key: str, token: str, start: int, palette: list[str], key: str, *, explicit: bool, mode: str = "tags",
    run: str | None = None,
) -> PlayerState:
    """Mount the player. `explicit`: `start` came from the URL the page was opened with (a link or a reload);
    otherwise the browser's own memory of the step it showed last wins (back from another page).
    `mode`: "tags" (the shared step and episode tags, Replay) or "labels" (the annotator's own per-step labels,
    kept apart for agreement: the Label page). `run`: a `stepmark evaluate` run of the study whose predicted
    action the player draws beside the recorded one on every step (UI episodes)."""
    result = _component()(
        key=key,
        data={"ref": ref_key, "token": token, "start": int(start), "start_is_explicit": bool(explicit),
              "palette": list(palette), "mode": mode, "run": run or ""},  # fmt: skip
        default={"step": int(start)},
        on_step_change=_ignore,
        on_changed_change=_ignore,
    )
    step = result.get("step") if hasattr(result, "get") else getattr(result, "step", None)
    changed = result.get("changed") if hasattr(result, "get") else getattr(result, "changed", None)
    return PlayerState(step=int(step) if step is not None else None, changed=changed)

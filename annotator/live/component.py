"""The live recorder as a Streamlit custom component (v2, no iframe): its JavaScript talks to `/api/record/ws`.

Python only mounts it with the recording's settings and a token for this annotator; keys, gamepad, frames,
pause and the save decision all stay in the browser and the WebSocket. Python hears back only that the player
pressed Stop (`stopped`), so the page can offer the study/environment choice again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import streamlit as st

_HERE = Path(__file__).resolve().parent
NAME = "stepmark_live_recorder"
HTML = (_HERE / "recorder.html").read_text(encoding="utf-8")
CSS = (_HERE / "recorder.css").read_text(encoding="utf-8")
# `typing()` and `el()` are shared with the step player (annotator/web/browser_common.js).
JS = (_HERE.parent / "web" / "browser_common.js").read_text(encoding="utf-8") + (_HERE / "recorder.js").read_text(
    encoding="utf-8"
)


@dataclass(frozen=True)
class LiveConfig:
    """One recording as the page started it (`session` is new for each Start: a rerun keeps the connection)."""

    session: str
    token: str
    study: str
    env: str
    quality: str = "auto"
    fps: float | None = None
    camera: int = 0


@st.cache_resource(show_spinner=False)
def _component():
    return st.components.v2.component(NAME, html=HTML, css=CSS, js=JS)


def _ignore() -> None:
    """Trigger callbacks must exist for the values to reach Python; the page reads them after the rerun."""


def show(config: LiveConfig, key: str) -> str | None:
    """Mounts the recorder; returns the id of the episode kept when Stop was pressed ("-" for none), else None."""
    result = _component()(key=key, data=asdict(config), on_stopped_change=_ignore)
    stopped = result.get("stopped") if hasattr(result, "get") else getattr(result, "stopped", None)
    return str(stopped) if stopped else None

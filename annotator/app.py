"""The stepmark annotator (Streamlit entry point): `stepmark annotate` runs `streamlit run` on this file.

Pages are thin views over `annotator.operations`; this file only sets up the page, who is annotating, and the
navigation between the pages.
"""

from __future__ import annotations

import time
from pathlib import Path

import streamlit as st

from annotator.views import session

# The page scripts live in views/, not pages/: a pages/ folder beside the entry script puts Streamlit's test
# harness (AppTest) into the legacy multipage mode, where the pages run without this entry script.
VIEWS = Path(__file__).resolve().parent / "views"

started = time.perf_counter()
# No page or navigation icons: Streamlit fetches a `:material/...:` favicon from an outside server, which the
# annotator's Content-Security-Policy refuses (the browser fetches nothing from outside the annotator).
st.set_page_config(page_title="stepmark annotator", layout="wide")

config = session.settings()
user = session.sidebar_identity(config)
navigation = st.navigation(
    [
        st.Page(VIEWS / "episodes.py", title="Episodes", default=True),
        st.Page(VIEWS / "replay.py", title="Replay"),
        st.Page(VIEWS / "record.py", title="Record"),
        st.Page(VIEWS / "studies.py", title="Studies"),
        st.Page(VIEWS / "export.py", title="Export"),
        st.Page(VIEWS / "label.py", title="Label"),
        st.Page(VIEWS / "quality.py", title="Quality"),
    ]
)
if not user:
    st.title("stepmark annotator")
    st.info("Tell us who you are (sidebar) to start annotating: every change is recorded under your name.")
    st.stop()
session.start(config, user)
session.show_confirmations()
navigation.run()
# Server-side time of this run (read by bench/bench_replay.py; not shown, not annotation state).
st.session_state["_render_seconds"] = time.perf_counter() - started

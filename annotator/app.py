"""The stepmark annotator (Streamlit entry point): `stepmark annotate` runs `streamlit run` on this file.

Pages are thin views over `annotator.operations`; this file only sets up the page, who is annotating, and the
navigation between the pages.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from annotator.pages import session

PAGES = Path(__file__).resolve().parent / "pages"

st.set_page_config(page_title="stepmark annotator", page_icon="🏷️", layout="wide")

config = session.settings()
user = session.sidebar_identity(config)
navigation = st.navigation(
    [
        st.Page(PAGES / "episodes.py", title="Episodes", icon="📋", default=True),
        st.Page(PAGES / "replay.py", title="Replay", icon="▶️"),
        st.Page(PAGES / "record.py", title="Record", icon="🎮"),
        st.Page(PAGES / "studies.py", title="Studies", icon="📚"),
        st.Page(PAGES / "export.py", title="Export", icon="📦"),
    ]
)
if not user:
    st.title("stepmark annotator")
    st.info("Tell us who you are (sidebar) to start annotating: every change is recorded under your name.")
    st.stop()
session.start(config, user)
session.show_confirmations()
navigation.run()

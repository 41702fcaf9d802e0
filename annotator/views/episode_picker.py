"""The episode pickers of the Replay and Export pages: a search box and at most `PICKER_SIZE` options from SQL
(`Operations.find_episodes`: the newest episodes, or those whose id starts with the text, then those whose notes
contain it), so a study of a million episodes costs a picker what a study of fifty does."""

from __future__ import annotations

import streamlit as st

from annotator.operations import PICKER_SIZE, ref_key, ref_of
from annotator.plain import md_escape
from protos.rlds_creator import client_pb2


def label(meta: client_pb2.EpisodeMetadata) -> str:
    e = meta.episode
    return f"{meta.study.name} · {e.environment_id} · {e.num_steps} steps · {meta.status} · {e.user.email} · {e.id}"


def search(ops, key: str) -> dict[str, str]:
    """The search box under `key` and what it finds: episode key -> label (at most PICKER_SIZE, newest first
    without text). What was typed is shown escaped, never as Markdown."""
    text = st.text_input("Find episodes", key=key, placeholder="the start of an episode id, or words in its notes")
    found = ops.find_episodes(text)
    labels = {ref_key(ref_of(m.episode)): label(m) for m in found.episodes}
    what = f"matching {text.strip()!r}" if text.strip() else "newest"
    more = "; type to find others" if len(labels) == PICKER_SIZE else ""
    st.caption(md_escape(f"{len(labels)} {what} episode(s) offered (at most {PICKER_SIZE}){more}"))
    return labels

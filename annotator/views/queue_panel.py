"""The work-queue block of the Episodes page: the queue's progress, "Next episode" (key N: opens it on the
Label page), continue/skip for the episode this user holds, per-episode progress, and the queue's settings for
the study's creator."""

from __future__ import annotations

import streamlit as st

from annotator import queue_ops
from annotator.operations import STATE_LABELS
from annotator.views import session
from pipelines.errors import StepmarkError
from pipelines.store.queue import MAX_OVERLAP, QueueConfig
from protos.rlds_creator import study_pb2

ALL = "(all)"
PROGRESS_PAGE = 50


def _settings(ops, study: study_pb2.StudySpec, config: QueueConfig) -> None:
    with st.expander("Queue settings", icon=":material/tune:"):
        c1, c2, c3, c4 = st.columns(4)
        overlap = c1.number_input("Annotators per episode", 1, MAX_OVERLAP, config.overlap, key="q_overlap")
        envs = [ALL, *(e.id for e in study.environment_specs)]
        env = c2.selectbox("Environment", envs, index=envs.index(config.environment_id or ALL), key="q_env")
        names = {study_pb2.Episode.State.Name(s): label for s, label in STATE_LABELS.items() if s}
        states = c3.multiselect("States", list(names), default=list(config.states or ()),
                                format_func=names.get, key="q_states")  # fmt: skip
        tag = c4.text_input("Tag", config.tag or "", key="q_tag")
        if st.button("Save queue settings", key="q_save"):
            new = QueueConfig(study.id, int(overlap), None if env == ALL else env, tuple(states) or None,
                              tag.strip() or None)  # fmt: skip
            try:
                queue_ops.set_queue(ops, new)
            except StepmarkError as exc:
                st.error(str(exc))
            else:
                session.confirm("Queue settings saved")
                st.rerun()


def render(ops, study_id: str | None) -> None:
    st.subheader("Work queue")
    if study_id is None:
        st.caption("Choose a study above to see its work queue and take the next episode.")
        return
    try:
        study = ops.repo.get_study(study_id)
        state = queue_ops.progress(ops, study_id)
    except StepmarkError as exc:
        st.error(str(exc))
        return
    if study_id not in queue_ops.queued_studies(ops, [study_id]):
        st.caption(
            "This study has no work queue, so no episode is handed out. Its creator sets one up below, or with "
            "`stepmark queue set --study ID --overlap K`."
        )
        if study.creator.email == ops.user:
            _settings(ops, study, state.config)
        return
    session.follow_study(ops, study_id)  # the numbers follow the team: redrawn when someone takes or finishes
    config = state.config
    total = state.slots_total
    st.progress(
        state.slots_done / total if total else 0.0,
        text=f"{state.slots_done} of {total} labellings done · {state.episodes_complete} of "
        f"{state.episodes} episodes complete · {config.overlap} annotator(s) per episode",
    )
    mine = queue_ops.my_open(ops, study_id)
    c1, c2, _ = st.columns(3)
    label = "Continue labelling" if mine is not None else "Next episode"
    if c1.button(label, icon=":material/skip_next:", shortcut="N", key="q_next", type="primary",
                 help="Label your next queued episode on the Label page (key N)"):  # fmt: skip
        if queue_ops.take_next(ops, study_id) is None:
            st.info("Nothing left for you in this queue.")
        else:
            st.session_state["label_study"] = study_id
            st.session_state["label_step"] = 0
            st.switch_page("views/label.py")
    if mine is not None:
        st.caption(f"You are labelling episode `{mine.episode_id}` (Label page: Done, next).")
        if c2.button("Skip", icon=":material/undo:", key="q_skip", help="Give the episode back to the queue"):
            queue_ops.release(ops, mine.episode_id)
            session.confirm(f"Episode {mine.episode_id[:8]} given back")
            st.rerun()
    # A toggle, not an expander: an expander's body runs collapsed too, and this one reads the queue.
    if st.toggle("Progress per episode", key="q_show_rows") and state.episodes:
        pages = -(-state.episodes // PROGRESS_PAGE)
        page = st.number_input(f"Page (of {pages})", 1, pages, 1, key="q_page")
        table = queue_ops.progress_rows(ops, study_id, int(page) - 1, PROGRESS_PAGE)
        st.dataframe(table, hide_index=True, width="stretch", key="q_table")
    if study.creator.email == ops.user:
        _settings(ops, study, config)

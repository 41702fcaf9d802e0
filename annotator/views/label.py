"""Label: work through a study's queue with labels of your own, apart from the shared step tags.

Each annotator sees only their own labels here (never the other annotators' or the shared tags), so that
episodes labelled by two or three people give independent answers for agreement. "Done, next" (key D) freezes
the answers ("no label" included) and opens the next queued episode. The step view is the Replay page's.
The consensus that exports use is set by adjudication (Quality page) or on the Replay page.
"""

from __future__ import annotations

import streamlit as st

from annotator import queue_ops
from annotator.operations import episode_kind, ref_key, ref_of
from annotator.views import replay, session
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2

STEP = "label_step"
QUICK = 12  # quick-add buttons at most


def _move(delta: int, last: int) -> None:
    st.session_state[STEP] = min(max(0, st.session_state.get(STEP, 0) + delta), last)


def _finish(ops, study_id: str, episode_id: str, done: bool) -> None:
    """Done (or skip), then the next episode from step 0; runs as a button callback, before the page."""
    try:
        if done:
            key = queue_ops.done_and_next(ops, study_id, episode_id)
            session.confirm(f"Episode {episode_id[:8]} done" + ("" if key else "; nothing left in the queue"))
        else:
            queue_ops.release(ops, episode_id)
            session.confirm(f"Episode {episode_id[:8]} given back to the queue")
    except StepmarkError as exc:
        st.session_state["_label_error"] = str(exc)
    st.session_state[STEP] = 0


def _take(ops, study_id: str) -> None:
    if queue_ops.take_next(ops, study_id) is None:
        st.session_state["_label_error"] = "Nothing left for you in this queue."
    st.session_state[STEP] = 0


def labels_panel(ops, study_id: str, episode_id: str, index: int, labels: dict[int, list[str]]) -> None:
    here = labels.get(index, [])
    st.subheader(f"Your labels on step {index}")
    if not here:
        st.caption("No label: that is your answer for this step unless you add one.")
    for label in here:
        if st.button(label, icon=":material/close:", key=f"label_rm_{index}_{label}", help="Remove"):
            queue_ops.set_label(ops, episode_id, index, label, False)
            st.rerun()
    with st.form("label_form", clear_on_submit=True, border=False):
        c1, c2 = st.columns([3, 1])
        text = c1.text_input("New label", key="label_text", label_visibility="collapsed", placeholder="label")
        if c2.form_submit_button("Add") and text.strip():
            try:
                queue_ops.set_label(ops, episode_id, index, text.strip(), True)
            except StepmarkError as exc:
                st.error(str(exc))
            else:
                st.rerun()
    known = sorted({label for ls in labels.values() for label in ls} | set(ops.recent_tags(study_id)))
    quick = [label for label in known if label not in here][:QUICK]
    if quick:
        st.caption("Add quickly:")
        for column, label in zip(st.columns(3) * (len(quick) // 3 + 1), quick, strict=False):
            if column.button(label, key=f"label_add_{index}_{label}"):
                queue_ops.set_label(ops, episode_id, index, label, True)
                st.rerun()


def render() -> None:
    ops = session.operations()
    st.title("Label")
    if error := st.session_state.pop("_label_error", None):
        st.info(error)
    studies = {s.id: s.name for s in ops.all_studies()}
    if not studies:
        st.info("No study yet.")
        return
    study_id = st.selectbox("Study", list(studies), format_func=studies.get, key="label_study")
    mine = queue_ops.my_open(ops, study_id)
    if mine is None:
        st.caption("You hold no episode of this study's queue.")
        st.button("Next episode", icon=":material/skip_next:", shortcut="N", key="label_take", type="primary",
                  on_click=_take, args=(ops, study_id))  # fmt: skip
        return
    try:
        ref = ref_of(ops.repo.get_episode(client_pb2.EpisodeRef(episode_id=mine.episode_id)))
        opened = ops.replay_episode(client_pb2.ReplayEpisodeRequest(ref=ref))
    except StepmarkError as exc:
        st.error(f"Cannot open episode {mine.episode_id}: {exc}")
        return
    num_steps = len(opened.step_rewards)
    labels = queue_ops.my_labels(ops, mine.episode_id)
    st.caption(
        f"`{ref_key(ref)}` · {opened.episode.study.name} · "
        f"{num_steps} steps · you labelled {len(labels)} of them. Other annotators' labels are not shown."
    )
    if num_steps == 0:
        st.warning("This episode has no steps.")
        return
    last = num_steps - 1
    st.session_state[STEP] = min(st.session_state.get(STEP, 0), last)
    c1, c2, c3 = st.columns([1, 8, 1])
    c1.button("◀", on_click=_move, args=(-1, last), shortcut="Left", key="label_prev")
    index = c2.slider("Step", 0, max(last, 1), key=STEP, label_visibility="collapsed") if last else 0
    c3.button("▶", on_click=_move, args=(1, last), shortcut="Right", key="label_fwd")

    view, panel = st.columns([5, 2])
    with view:
        try:
            response, step = ops.replay_step_with_data(index)
        except StepmarkError as exc:
            st.error(str(exc))
            return
        if episode_kind(opened.episode.episode) == "ui":
            replay.ui_step(ops, response, step)
        else:
            replay.env_step(response, opened.step_rewards, labels)
    with panel:
        labels_panel(ops, study_id, mine.episode_id, index, labels)
        st.divider()
        d1, d2 = st.columns(2)
        d1.button("Done, next", icon=":material/task_alt:", shortcut="D", key="label_done", type="primary",
                  on_click=_finish, args=(ops, study_id, mine.episode_id, True))  # fmt: skip
        d2.button("Skip", icon=":material/undo:", key="label_skip", help="Give the episode back to the queue",
                  on_click=_finish, args=(ops, study_id, mine.episode_id, False))  # fmt: skip


if __name__ == "__main__":  # run as a Streamlit page (importing it, e.g. in tests, renders nothing)
    render()

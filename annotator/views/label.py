"""Label: work through a study's queue with labels of your own, apart from the shared step tags.

Each annotator sees only their own labels here (never the other annotators' or the shared tags), so that
episodes labelled by two or three people give independent answers for agreement. "Done, next" (key D) freezes
the answers ("no label" included) and opens the next queued episode. The step view is the Replay page's step
player in its "labels" mode: keys, frames and labels are handled in the browser, and every label is sent with
the step whose frame is on screen.
The consensus that exports use is set by adjudication (Quality page) or on the Replay page.
"""

from __future__ import annotations

import streamlit as st

from annotator import player, queue_ops
from annotator.operations import ref_key, ref_of
from annotator.plain import md_escape
from annotator.views import replay, session
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2


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


def _take(ops, study_id: str) -> None:
    if queue_ops.take_next(ops, study_id) is None:
        st.session_state["_label_error"] = "Nothing left for you in this queue."


def render() -> None:
    ops = session.operations()
    st.title("Label")
    if error := st.session_state.pop("_label_error", None):
        st.info(error)
    study_id = session.choose_study(ops, "label_study", holding=True)
    if study_id is None:
        return
    mine = queue_ops.my_open(ops, study_id)
    if mine is None:
        if study_id not in queue_ops.queued_studies(ops, [study_id]):
            st.info("This study has no work queue: nothing is handed out here until its creator sets one "
                    "(Episodes page, Work queue settings, or `stepmark queue set`).")  # fmt: skip
            return
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
        f"{md_escape(ref_key(ref))} · {md_escape(opened.episode.study.name)} · "
        f"{replay.length_text(opened.episode.episode, num_steps)} · you had labelled {len(labels)} step(s) when "
        "the page was drawn. Other annotators' labels are not shown."
    )
    if num_steps == 0:
        st.warning("This episode has no steps.")
    else:
        player.show(ref_key(ref), replay.token(ops.user), 0, ops.repo.get_palette(study_id),
                    key=f"label_player_{ref_key(ref)}", explicit=False, mode="labels")  # fmt: skip
    d1, d2, _ = st.columns([1, 1, 3])
    d1.button("Done, next", icon=":material/task_alt:", shortcut="D", key="label_done", type="primary",
              on_click=_finish, args=(ops, study_id, mine.episode_id, True), width="stretch")  # fmt: skip
    d2.button("Skip", icon=":material/undo:", key="label_skip", help="Give the episode back to the queue",
              on_click=_finish, args=(ops, study_id, mine.episode_id, False), width="stretch")  # fmt: skip


if __name__ == "__main__":  # run as a Streamlit page (importing it, e.g. in tests, renders nothing)
    render()

"""Record: pick a study and environment, play it with on-screen buttons or the keyboard, then save or reject.

Synchronous environments take one transition per press. Asynchronous ones are stepped by a fragment that reruns
at the environment's rate; a press is a tap (applied to the next tick, then released), since a browser button
has no key-up. Each frame is a Streamlit round trip, so this is usable at a few frames per second but not smooth
at 15+; holding a key down is not supported.
"""

from __future__ import annotations

import streamlit as st

from annotator import drawing
from annotator.views import session
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2, study_pb2

QUALITIES = {
    "low": client_pb2.SetQualityRequest.QUALITY_LOW,
    "medium": client_pb2.SetQualityRequest.QUALITY_MEDIUM,
    "high": client_pb2.SetQualityRequest.QUALITY_HIGH,
}
# Browser KeyboardEvent.key -> Streamlit button shortcut ("C" and "R" are reserved by Streamlit).
SHORTCUTS = {"ArrowLeft": "Left", "ArrowRight": "Right", "ArrowUp": "Up", "ArrowDown": "Down", " ": "Space",
             "Enter": "Enter", "Escape": "Esc", "Backspace": "Backspace", "Tab": "Tab"}  # fmt: skip
KEY_LABELS = {"ArrowLeft": "←", "ArrowRight": "→", "ArrowUp": "↑", "ArrowDown": "↓", " ": "Space"}


def shortcut_for(key: str) -> str | None:
    if key in SHORTCUTS:
        return SHORTCUTS[key]
    if len(key) == 1 and key.isalnum() and key.lower() not in ("c", "r"):
        return key.upper()
    return None


def playable(env: study_pb2.EnvironmentSpec) -> bool:
    """Imported UI traces sit in studies whose environment has no type: there is nothing to play."""
    return env.WhichOneof("type") is not None


def _act(ops, keys: list[str]) -> None:
    try:
        result = ops.action(client_pb2.ActionRequest(keys=keys))
    except StepmarkError as exc:
        st.session_state["record_error"] = str(exc)
        return
    if isinstance(result, client_pb2.ConfirmSaveResponse):
        st.session_state["record_ended"] = True


def start_panel(ops) -> None:
    studies = [
        s for s in ops.all_studies()
        if s.state == study_pb2.StudySpec.STATE_ENABLED and any(playable(e) for e in s.environment_specs)
    ]  # fmt: skip
    if not studies:
        st.info("No enabled study with an environment to play: create one on the Studies page.")
        return
    by_id = {s.id: s for s in studies}
    c1, c2, c3 = st.columns([2, 2, 1])
    study_id = c1.selectbox("Study", list(by_id), format_func=lambda k: by_id[k].name, key="rec_study")
    envs = {e.id: e for e in by_id[study_id].environment_specs if playable(e)}
    env_id = c2.selectbox("Environment", list(envs), key="rec_env",
                          format_func=lambda k: f"{envs[k].name or k} ({k})")  # fmt: skip
    quality = c3.selectbox("Quality", list(QUALITIES), index=1, key="rec_quality")
    study = by_id[study_id]
    if study.instructions:
        st.markdown(f"**Instructions:** {study.instructions}")
    if envs[env_id].additional_instructions:
        st.markdown(envs[env_id].additional_instructions)
    if st.button("Start recording", icon=":material/play_arrow:", type="primary", key="rec_start"):
        try:
            ops.set_quality(client_pb2.SetQualityRequest(quality=QUALITIES[quality]))
            ops.select_study(client_pb2.SelectStudyRequest(study_id=study_id))
            with st.spinner("Starting the environment…"):
                ops.select_environment(client_pb2.SelectEnvironmentRequest(env_id=env_id))
        except StepmarkError as exc:
            st.error(str(exc))
            return
        st.session_state.pop("record_ended", None)
        st.rerun()


def save_dialog(ops) -> None:
    st.warning("The episode has ended. Keep it?")
    completed = st.checkbox(
        "Mark as completed (else it is saved as cancelled)",
        value=bool(ops.pending_save.mark_as_completed) if ops.pending_save else True,
        key="rec_completed",
    )
    c1, c2 = st.columns(2)
    accept = c1.button("Save episode", icon=":material/save:", type="primary", key="rec_accept")
    reject = c2.button("Reject episode", icon=":material/delete:", key="rec_reject")
    if accept or reject:
        try:
            saved = ops.save_episode(
                client_pb2.SaveEpisodeRequest(accept=accept, mark_as_completed=completed)
            )
        except StepmarkError as exc:
            st.error(str(exc))
            return
        episode = saved.episode.episode
        session.confirm(f"Episode {episode.id} saved as {saved.episode.status or 'rejected'}"
                        f" ({episode.num_steps} steps, return {episode.total_reward:g})")  # fmt: skip
        st.session_state.pop("record_ended", None)
        st.rerun()


def controls(ops) -> None:
    key_map = ops.key_map()
    st.caption("Press the buttons or their keyboard keys (shown on each button).")
    cols = st.columns(min(6, max(1, len(key_map) + 1)))
    for i, (key, meaning) in enumerate(key_map.items()):
        label = f"{KEY_LABELS.get(key, key)} · {meaning.split(' (')[0]}"
        cols[i % len(cols)].button(label, key=f"rec_key_{key!r}", on_click=_act, args=(ops, [key]),
                                   shortcut=shortcut_for(key), help=meaning)  # fmt: skip
    cols[len(key_map) % len(cols)].button("· no-op", key="rec_noop", on_click=_act, args=(ops, []))


def frame_panel(ops) -> None:
    step = ops.last_step
    if step is None:
        return
    c1, c2 = st.columns([3, 2])
    if step.image:
        c1.image(
            drawing.enlarge(step.image),
            width=384,
            caption=f"episode {step.episode_index} · step {step.episode_steps}",
        )
    if ops.pending_save is None:
        c2.metric("Reward (last step)", f"{step.reward:g}")
        c2.metric("Steps so far", step.episode_steps)
    else:  # the ending step's reward is not reported before the save: show no stale figure
        c2.metric("Steps", step.episode_steps)
        c2.caption("The return and success are shown once the episode is saved.")
    cameras = ops.cameras()
    if len(cameras) > 1:
        index = c2.selectbox(
            "Camera", range(len(cameras)), format_func=lambda i: cameras[i], key="rec_camera"
        )
        if index != ops.camera:
            ops.set_camera(client_pb2.SetCameraRequest(index=index))


def render() -> None:
    ops = session.operations()
    st.title("Record")
    if ops.recorder is None:
        start_panel(ops)
        return
    st.caption(f"Recording `{ops.env.id}` of study **{ops.study.name}** as {ops.user}")
    if error := st.session_state.pop("record_error", None):
        st.error(error)
    if (abandoned := ops.last_abandoned) is not None:
        ops.last_abandoned = None
        kept = f"episode {abandoned.id} ({abandoned.num_steps} steps) saved as abandoned" if abandoned.id else (
            "the empty episode was dropped"
        )
        st.warning(f"No input for a while: {kept}; a new episode has started.", icon=":material/timer_off:")
    if ops.pending_save is not None or st.session_state.get("record_ended"):
        frame_panel(ops)
        save_dialog(ops)
        return
    if ops.is_sync():
        frame_panel(ops)
        controls(ops)
    else:
        fps = st.slider("Frames per second", 1, 30, int(ops.fps or 5), key="rec_fps")
        if fps != ops.fps:
            ops.set_fps(client_pb2.SetFpsRequest(fps=fps))
        controls(ops)

        @st.fragment(run_every=1.0 / fps)
        def ticking() -> None:
            result = ops.tick()
            if isinstance(result, client_pb2.ConfirmSaveResponse):
                st.session_state["record_ended"] = True
                st.rerun()
            frame_panel(ops)

        ticking()
    if st.button(
        "Stop recording",
        icon=":material/stop:",
        key="rec_cancel",
        help="An episode with steps is kept as cancelled",
    ):
        try:
            kept = ops.close_recorder()
        except StepmarkError as exc:
            st.error(str(exc))
            return
        session.confirm(f"Stopped; episode {kept.id} kept as cancelled" if kept else "Stopped; nothing recorded",
                        ":material/stop:")  # fmt: skip
        st.rerun()


if __name__ == "__main__":  # run as a Streamlit page (importing it, e.g. in tests, renders nothing)
    render()

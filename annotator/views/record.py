"""Record: pick a study and environment and its settings here; the recording itself runs in the browser.

The live recorder (`annotator/live/`) is a custom component that opens a WebSocket to this server: keys held
down, gamepad buttons and axes go to the server as they happen, the environment steps there (sync: one
transition per press, none dropped; async: at the chosen fps with whatever is held), and frames come back as
JPEGs. Esc pauses, Enter starts the next episode, the save/reject decision is made in the recorder. Closing the
tab keeps the steps recorded so far as an ABANDONED episode.
"""

from __future__ import annotations

import uuid

import streamlit as st

from annotator.live import component
from annotator.plain import md_escape
from annotator.views import session
from annotator.web import context
from protos.rlds_creator import study_pb2

QUALITIES = {
    "auto": "auto (high up to 128 px, else medium)",
    "high": "high",
    "medium": "medium",
    "low": "low",
}
DEFAULT_FPS = 15
LIVE_KEY = "live_recording"


def playable(env: study_pb2.EnvironmentSpec) -> bool:
    """Imported UI traces sit in studies whose environment has no type: there is nothing to play."""
    return env.WhichOneof("type") is not None


def cameras(env: study_pb2.EnvironmentSpec) -> list[str]:
    """Cameras a spec names (Robosuite); other families have one view."""
    if env.WhichOneof("type") == "robosuite":
        return list(env.robosuite.cameras)
    return []


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
    quality = c3.selectbox("JPEG quality", list(QUALITIES), format_func=QUALITIES.get, key="rec_quality")
    env = envs[env_id]
    fps = None
    if not env.sync:
        fps = st.slider("Frames per second", 1, 30, DEFAULT_FPS, key="rec_fps",
                        help="The environment steps this often with the keys held down")  # fmt: skip
    camera = 0
    if len(names := cameras(env)) > 1:
        camera = st.selectbox("Camera", range(len(names)), format_func=lambda i: names[i], key="rec_camera")
    study = by_id[study_id]
    if study.instructions:
        st.text(f"Instructions: {study.instructions}")
    if env.additional_instructions:
        st.text(env.additional_instructions)
    if st.button("Start recording", icon=":material/play_arrow:", type="primary", key="rec_start"):
        st.session_state[LIVE_KEY] = component.LiveConfig(
            session=uuid.uuid4().hex,
            token=context.mint(ops.user),
            study=study_id,
            env=env_id,
            quality=quality,
            fps=float(fps) if fps else None,
            camera=int(camera),
        )
        st.rerun()


def live_panel(ops, config: component.LiveConfig) -> None:
    study = next((s for s in ops.all_studies() if s.id == config.study), None)
    env = next((e for e in study.environment_specs if e.id == config.env), None) if study else None
    if study is None or env is None:
        st.session_state.pop(LIVE_KEY, None)
        st.error("The study or environment of this recording no longer exists.")
        return
    st.caption(md_escape(f"Recording {env.name or env.id} ({env.id}) of study {study.name} as {ops.user}"))
    c1, c2, c3 = st.columns([2, 2, 1])
    quality = c1.selectbox("JPEG quality", list(QUALITIES), format_func=QUALITIES.get,
                           index=list(QUALITIES).index(config.quality), key="live_quality")  # fmt: skip
    fps = config.fps
    if not env.sync:
        fps = float(c2.slider("Frames per second", 1, 30, int(config.fps or DEFAULT_FPS), key="live_fps"))
    camera = config.camera
    if len(names := cameras(env)) > 1:
        camera = c3.selectbox("Camera", range(len(names)), format_func=lambda i: names[i],
                              index=config.camera, key="live_camera")  # fmt: skip
    if (quality, fps, camera) != (config.quality, config.fps, config.camera):
        config = component.LiveConfig(**{**config.__dict__, "quality": quality, "fps": fps, "camera": camera})
        st.session_state[LIVE_KEY] = config
    stopped = component.show(config, key=f"live_{config.session}")
    if stopped:
        st.session_state.pop(LIVE_KEY, None)
        kept = f"episode {stopped} kept as cancelled" if stopped != "-" else "nothing recorded"
        session.confirm(f"Stopped; {kept}", ":material/stop:")
        st.rerun()


def render() -> None:
    ops = session.operations()
    st.title("Record")
    config = st.session_state.get(LIVE_KEY)
    if config is None:
        start_panel(ops)
    else:
        live_panel(ops, config)


if __name__ == "__main__":  # run as a Streamlit page (importing it, e.g. in tests, renders nothing)
    render()

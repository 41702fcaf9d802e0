"""Replay: one episode in the browser step player, with notes and state beside it.

The step player (`annotator.player`) runs in the browser: it owns the step index, prefetches frames, handles
keys and autoplay, and sends every tag with the index of the step whose frame is on screen, straight to the
annotator's own routes. This page mounts it, shows the header, the notes and the state, and follows what the
player reports (the step on screen, once still; that the store changed) so the page and the URL agree with it.

The episode and step live in the URL (`?episode=STUDY/SESSION/EPISODE&step=N`) and in the session, so a reload or
a visit to another page comes back to the same step.
"""

from __future__ import annotations

import streamlit as st

from annotator import player
from annotator.operations import (
    STATE_BY_LABEL,
    STATE_LABELS,
    NotesConflict,
    episode_kind,
    episode_title,
    parse_ref_key,
    ref_key,
)
from annotator.plain import md_escape
from annotator.views import episode_picker, session
from annotator.web import context
from pipelines.errors import StepmarkError
from pipelines.evaluation import runs as evaluation_runs
from protos.rlds_creator import client_pb2

LAST = "_replay_last"  # (episode key, step) shown last in this session: survives visits to other pages


def choose_episode(ops) -> str | None:
    key = st.query_params.get("episode")
    if key:
        # Opened by a link or a reload naming the step: that step wins over the browser's memory of this episode.
        if "step" in st.query_params and st.session_state.get("_explicit_step", (None,))[0] != key:
            st.session_state["_explicit_step"] = (key, st.query_params.get("step"))
        return key
    last = st.session_state.get(LAST)
    if last:
        st.session_state.pop("_explicit_step", None)
        st.query_params["episode"] = last[0]
        st.query_params["step"] = str(last[1])
        return last[0]
    labels = episode_picker.search(ops, "replay_find")
    if not labels and not st.session_state.get("replay_find"):
        st.info("No episode to replay yet.")
        return None
    pick = st.selectbox("Episode", list(labels), index=None, format_func=labels.get,
                        placeholder="Choose an episode", key="replay_pick")  # fmt: skip
    if pick:
        st.query_params["episode"] = pick
        st.query_params["step"] = "0"
        st.rerun()
    return None


def open_episode(ops, key: str) -> client_pb2.ReplayEpisodeResponse:
    """Open (or reuse) the episode in this session; the reader itself is shared and cached per process."""
    cached = st.session_state.get("_replay")
    if cached is not None and cached[0] == key and ops.replay is not None and ref_key(ops.replay.ref) == key:
        ops._refresh()
        return cached[1]
    response = ops.replay_episode(client_pb2.ReplayEpisodeRequest(ref=parse_ref_key(key)))
    st.session_state["_replay"] = (key, response)
    return response


def _start_step(key: str, num_steps: int) -> int:
    try:
        start = int(st.query_params.get("step", 0) or 0)
    except ValueError:  # a hand-edited URL
        start = 0
    return max(0, min(start, max(0, num_steps - 1)))


def token(user: str) -> str:
    """One token per session and user: the same data for the player on every rerun (so it is not rebuilt)."""
    cached = st.session_state.get("_player_token")
    if cached is None or cached[0] != user:
        cached = (user, context.mint(user))
        st.session_state["_player_token"] = cached
    return cached[1]


def state_box(ops) -> None:
    """The episode's state: the choice and its button one under the other, each as wide as the column (side by
    side in a narrow column they were cut: "Completec", "Set st…")."""
    episode = ops.replay.episode
    st.subheader("State")
    labels = [STATE_LABELS[s] for s in sorted(STATE_LABELS)]
    current = STATE_LABELS.get(episode.state, "Unspecified")
    # When the stored state changes (set here, undone, or set by another annotator) the box starts afresh from
    # the store under a key never used before: writing the value into the old box's state, or going back to an
    # earlier key, leaves the browser showing the choice it last made in that box.
    base = f"state_{ref_key(ops.replay.ref)}"
    seen, generation = st.session_state.get(f"_{base}", (episode.state, 0))
    if seen != episode.state:
        generation += 1
    st.session_state[f"_{base}"] = (episode.state, generation)
    chosen = st.selectbox("State", labels, index=labels.index(current), key=f"{base}_{generation}")
    if st.button("Set state", disabled=chosen == current, key="set_state", width="stretch"):
        try:
            ops.set_episode_state(STATE_BY_LABEL[chosen])
        except StepmarkError as exc:
            st.error(str(exc))
        else:
            session.confirm(f"State set to {chosen}")
            st.rerun()


def notes_editor(ops, episode) -> None:
    """Notes: the box follows the stored notes until this annotator edits it; a save is refused (and the
    other text shown) when someone else changed the notes after this annotator last saw them."""
    key = f"notes_{ref_key(ops.replay.ref)}"
    seen_key, conflict_key = f"{key}_seen", f"{key}_conflict"
    seen = st.session_state.get(seen_key)
    if key not in st.session_state:  # first shown, or its state was dropped when the annotator left the page
        st.session_state[key] = episode.notes
        st.session_state[seen_key] = episode.notes
        st.session_state.pop(conflict_key, None)
    elif seen != episode.notes:
        if st.session_state[key] == (seen or ""):  # not edited here: follow the store
            st.session_state[key] = episode.notes
            st.session_state[seen_key] = episode.notes
        else:
            st.session_state[conflict_key] = True
    if st.session_state.get(conflict_key):
        st.warning(f"{md_escape(_last_notes_author(ops))} changed the notes while you were editing. Theirs:")
        st.text(episode.notes or "(empty)")
        st.caption("Saving now replaces them with yours.")
    notes = st.text_area("Notes", key=key, height=100)
    # Never disabled: a text area commits its text only when it loses focus, so a button disabled until then
    # swallows the first click (the click itself is what blurs the box).
    if st.button("Save notes", key="save_notes"):
        try:
            response = ops.update_replay_episode(
                client_pb2.UpdateReplayEpisodeRequest(notes=notes),
                expected=st.session_state.get(seen_key, ""),
            )
        except NotesConflict:
            st.session_state[seen_key] = ops.replay.episode.notes  # now shown: the next save is deliberate
            st.session_state[conflict_key] = True
            st.rerun()
        except StepmarkError as exc:
            st.error(str(exc))
            return
        st.session_state[seen_key] = notes
        st.session_state.pop(conflict_key, None)
        session.confirm("Notes saved" if response.success else "Notes unchanged")
        st.rerun()


def _last_notes_author(ops) -> str:
    for entry in ops.audit_log(ops.replay.ref, limit=50):
        if entry.action == "episode.notes":
            return entry.user
    return "Someone"


def length_text(episode, shown: int) -> str:
    """An episode's length as every page says it: its transitions (num_steps, as in the Episodes table, the CLI
    and the dataset spec), and the final observation named as such when the player shows one more step."""
    if shown - episode.num_steps == 1:
        return f"{episode.num_steps} steps + final observation"
    return f"{shown} steps"


def header(ops, key: str, opened: client_pb2.ReplayEpisodeResponse, num_steps: int) -> None:
    meta = opened.episode
    episode = ops.replay.episode  # as stored now (state may have changed since the episode was opened)
    kind = episode_kind(meta.episode)
    length = length_text(meta.episode, num_steps)
    status = STATE_LABELS.get(episode.state, "Unspecified")
    st.subheader(md_escape(episode_title(meta.episode)), anchor=False)
    st.caption(
        f"{md_escape(key)} · {md_escape(meta.study.name)} · {md_escape(meta.episode.environment_id or kind)} · "
        f"**{md_escape(status)}** · {length} · "
        + ("" if kind == "ui" else f"return {meta.episode.total_reward:g} · ")  # no reward in a UI trace
        + f"by {md_escape(meta.episode.user.email)}"
    )


NO_RUN = "(none)"


def choose_run(ops, opened: client_pb2.ReplayEpisodeResponse) -> str | None:
    """A `stepmark evaluate` run of the episode's study whose predictions the player shows (UI episodes)."""
    if episode_kind(opened.episode.episode) != "ui":
        return None
    names = [r["run"] for r in evaluation_runs.runs(ops.repo, ops.replay.ref.study_id)]
    if not names:
        return None
    run = st.selectbox("Evaluation run", [NO_RUN, *names], key="replay_run",
                       help="draw this run's predicted action beside the recorded one (stepmark evaluate)")  # fmt: skip
    return None if run == NO_RUN else run


def render() -> None:
    ops = session.operations()
    st.title("Replay")
    key = choose_episode(ops)
    if key is None:
        return
    try:
        opened = open_episode(ops, key)
    except StepmarkError as exc:
        st.error(f"Cannot open episode {md_escape(key)}: {md_escape(exc)}")
        st.session_state.pop(LAST, None)
        if st.button("Choose another episode"):
            del st.query_params["episode"]
            st.rerun()
        return
    num_steps = len(opened.step_rewards)
    top = st.container()
    if num_steps == 0:
        with top:
            header(ops, key, opened, num_steps)
        st.warning("This episode has no steps.")
        return
    start = _start_step(key, num_steps)
    # The player takes the page's width (it lays out its screenshot, object table and side panel itself); the
    # state and the notes follow under it.
    palette = ops.repo.get_palette(ops.replay.ref.study_id)
    explicit = st.session_state.get("_explicit_step", (None,))[0] == key
    run = choose_run(ops, opened)
    shown = player.show(key, token(ops.user), start, palette, key=f"player_{key}", explicit=explicit, run=run)
    if shown.changed:  # an undo/redo in the player may have changed the state: read it again
        ops._refresh()
    step = shown.step if shown.step is not None else start
    step = max(0, min(step, num_steps - 1))
    st.session_state[LAST] = (key, step)
    if st.query_params.get("step") != str(step):
        st.query_params["step"] = str(step)
    state_column, notes_column = st.columns([1, 2], gap="large")
    with state_column:
        state_box(ops)
    with notes_column:
        st.subheader("Notes")
        notes_editor(ops, ops.replay.episode)
    with top:  # drawn last, so a state set in this run already shows
        header(ops, key, opened, num_steps)


if __name__ == "__main__":  # run as a Streamlit page (importing it, e.g. in tests, renders nothing)
    render()

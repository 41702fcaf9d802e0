"""Replay: a step scrubber over one episode, the step's data (UI screenshot with boxes, or an environment frame),
and the tagging panel (step/episode tags, notes, state, undo). Every change goes to the store at once.

The episode and step live in the URL (`?episode=STUDY/SESSION/EPISODE&step=N`) so a reload shows the same
step; the tags shown are always read back from the store.
"""

from __future__ import annotations

import json
import time

import pandas as pd
import streamlit as st

from annotator import drawing
from annotator.operations import (
    STATE_BY_LABEL,
    STATE_LABELS,
    NotesConflict,
    episode_kind,
    parse_ref_key,
    ref_key,
    ref_of,
    tagged_steps,
    ui_step_view,
)
from annotator.views import session
from pipelines.errors import StepmarkError
from protos.llm4mobile import episode_pb2
from protos.rlds_creator import client_pb2

STEP = "replay_step"


def choose_episode(ops) -> str | None:
    key = st.query_params.get("episode")
    if key:
        return key
    found = ops.episodes()
    if not found.episodes:
        st.info("No episode to replay yet.")
        return None
    labels = {
        ref_key(
            ref_of(m.episode)
        ): f"{m.study.name} · {m.episode.environment_id} · {m.episode.num_steps} steps · "
        f"{m.status} · {m.episode.user.email} · {m.episode.id[:8]}"
        for m in found.episodes
    }
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
        if (
            STEP not in st.session_state
        ):  # the slider's state is dropped when the page is left: the URL has it
            _step_from_url(len(cached[1].step_rewards))
        return cached[1]
    response = ops.replay_episode(client_pb2.ReplayEpisodeRequest(ref=parse_ref_key(key)))
    st.session_state["_replay"] = (key, response)
    _step_from_url(len(response.step_rewards))
    return response


def _step_from_url(num_steps: int) -> None:
    try:
        start = int(st.query_params.get("step", 0) or 0)
    except ValueError:  # a hand-edited URL
        start = 0
    st.session_state[STEP] = max(0, min(start, max(0, num_steps - 1)))


def _move(delta: int, last: int) -> None:
    st.session_state[STEP] = max(0, min(last, st.session_state.get(STEP, 0) + delta))


def _jump() -> None:
    """Go to the chosen tagged step, then clear the choice: the box is a menu of jumps, not a second scrubber
    (left set, it would show a stale step and choosing the same step again would do nothing)."""
    target = st.session_state.get("replay_jump")
    if target is not None:
        st.session_state[STEP] = int(target)
    st.session_state["replay_jump"] = None


def scrubber(num_steps: int, tagged: dict[int, list[str]]) -> int:
    last = max(0, num_steps - 1)
    if st.session_state.pop("_autoplay_next", False):
        _move(1, last)
    st.session_state[STEP] = max(0, min(last, st.session_state.get(STEP, 0)))
    c1, c2, c3, c4 = st.columns([1, 6, 1, 3])
    c1.button("◀ Prev", on_click=_move, args=(-1, last), shortcut="Left", key="replay_prev",
              disabled=st.session_state[STEP] <= 0)  # fmt: skip
    if last > 0:
        c2.slider("Step", 0, last, key=STEP, label_visibility="collapsed")
    else:
        c2.caption("one step")
    c3.button("Next ▶", on_click=_move, args=(1, last), shortcut="Right", key="replay_next",
              disabled=st.session_state[STEP] >= last)  # fmt: skip
    c4.selectbox(
        "Jump to a tagged step",
        list(tagged),
        index=None,
        format_func=lambda i: f"step {i}: {', '.join(tagged[i])}",
        placeholder="Jump to a tagged step" if tagged else "No tagged step yet",
        key="replay_jump",
        on_change=_jump,
        label_visibility="collapsed",
    )
    return st.session_state[STEP]


def show_data(label: str, data: client_pb2.Data, empty: str = "none") -> None:
    st.markdown(f"**{label}**")
    if not data.images and not data.HasField("json_encoded"):
        st.caption(empty)
        return
    for image in data.images:
        st.image(drawing.enlarge(image.image, 128), caption=image.name or None)
    if data.HasField("json_encoded"):
        value = json.loads(data.json_encoded)
        if isinstance(value, (dict, list)):
            st.json(value, expanded=False)
        else:
            st.code(data.json_encoded, language="json")


def ui_step(ops, response: client_pb2.ReplayStepResponse, step) -> None:
    view = ui_step_view(step)
    left, right = st.columns([2, 3])
    with right:
        c1, c2, c3 = st.columns(3)
        boxes = c1.radio("Boxes", drawing.BOX_MODES, horizontal=True, key="ui_boxes")
        grid = c2.toggle("3x3 grid", key="ui_grid")
        touch = c3.toggle("Touch point", True, key="ui_touch")
        st.markdown(f"**Action:** {view.action_text}")
        table = pd.DataFrame(
            [
                {
                    "#": i,
                    "type": episode_pb2.ObjectType.Name(o.type),
                    "text": o.text,
                    "content desc": o.content_desc,
                    "resource id": o.resource_id,
                    "actionable": o.is_actionable,
                    "leaf": o.is_leaf,
                    "visible": o.visible,
                    "grid": episode_pb2.GridLocation.Name(o.grid_location),
                    "bbox": f"[{o.bbox.left},{o.bbox.top}][{o.bbox.right},{o.bbox.bottom}]",
                    "class": o.android_class,
                }
                for i, o in enumerate(view.objects)
            ]
        )
        st.caption(f"{len(view.objects)} objects — select a row to highlight its box")
        event = st.dataframe(
            table,
            key=f"ui_objects_{response.index}",
            on_select="rerun",
            selection_mode="single-row",
            hide_index=True,
            height=360,
            width="stretch",
        )
        rows = list(event.selection.rows) if event is not None else []
        highlight = int(table.iloc[rows[0]]["#"]) if rows else view.target_index
    with left:
        if view.image:
            picture = drawing.render_step(
                view.image,
                view.objects,
                boxes=boxes,
                grid=grid,
                touch=view.touch if touch else None,
                highlight=highlight,
            )
            st.image(picture, caption=f"step {response.index}")
        else:
            st.warning("This step has no screenshot.")
        for warning in view.warnings:
            st.caption(f":material/warning: {warning}")


def reward_chart(rewards, tagged: dict[int, list[str]], index: int) -> dict:
    """Vega-Lite spec: reward per step, a rule on every tagged step and a dashed rule on this step.

    Written as a plain spec (not Altair) because Altair validates its schema on every rerun (~30 ms).
    """
    return {
        "layer": [
            {
                "data": {"values": [{"step": i, "reward": r} for i, r in enumerate(rewards)]},
                "mark": {"type": "line"},
                "encoding": {"x": {"field": "step", "type": "quantitative"},
                             "y": {"field": "reward", "type": "quantitative"}},
            },
            {
                "data": {"values": [{"step": i, "tags": ", ".join(t)} for i, t in tagged.items()]},
                "mark": {"type": "rule", "color": "orange"},
                "encoding": {"x": {"field": "step", "type": "quantitative"},
                             "tooltip": [{"field": "step", "type": "quantitative"},
                                         {"field": "tags", "type": "nominal"}]},
            },
            {
                "data": {"values": [{"step": index}]},
                "mark": {"type": "rule", "color": "red", "strokeDash": [4, 4]},
                "encoding": {"x": {"field": "step", "type": "quantitative"}},
            },
        ]
    }  # fmt: skip


def env_step(response: client_pb2.ReplayStepResponse, rewards, tagged: dict[int, list[str]]) -> None:
    left, right = st.columns([2, 3])
    with left:
        if response.image:
            st.image(drawing.enlarge(response.image), caption=f"step {response.index}", width="stretch")
        c1, c2 = st.columns(2)
        c1.metric("Reward", f"{response.reward:g}")
        c2.metric("Keys", ", ".join(response.keys) or "—")
    with right:
        st.vega_lite_chart(reward_chart(rewards, tagged, response.index), width="stretch", height=220)
        st.caption("Reward per step; orange lines are tagged steps, the dashed line is this step.")
        a, b = st.columns(2)
        with a:
            show_data("Observation", response.observation)
        with b:
            show_data("Action", response.action, "none: the final observation has no action")


def _do(change, ok_message: str, fail_message: str) -> None:
    try:
        ok = change()
    except StepmarkError as exc:
        st.error(str(exc))
        return
    session.confirm(
        ok_message if ok else fail_message, ":material/check_circle:" if ok else ":material/info:"
    )
    st.rerun()


def tagging(ops, index: int) -> None:
    episode = ops.replay.episode
    recent = ops.recent_tags(episode.study_id)
    step_now = [t.label for t in episode.step_metadata[index].tags] if index in episode.step_metadata else []
    st.subheader(f"Step {index} tags")
    def add_step_tag(label: str) -> None:  # the form and the recent-tag chips alike
        _do(
            lambda: ops.add_step_tag(client_pb2.AddStepTagRequest(index=index, tag=label)).success,
            f"Tagged step {index} {label!r}",
            f"Step {index} already had {label!r}",
        )

    def add_episode_tag(label: str) -> None:
        _do(
            lambda: ops.add_episode_tag(client_pb2.AddEpisodeTagRequest(tag=label)).success,
            f"Tagged the episode {label!r}",
            f"The episode already had {label!r}",
        )

    _chips(
        step_now,
        "rm_step",
        lambda label: _do(
            lambda: ops.remove_step_tag(client_pb2.RemoveStepTagRequest(index=index, tag=label)).success,
            f"Removed tag {label!r} from step {index}",
            f"Step {index} had no tag {label!r}",
        ),
    )
    with st.form("step_tag_form", clear_on_submit=True, border=False):
        c1, c2 = st.columns([3, 2])
        label = c1.text_input("New step tag", key="step_tag_text", label_visibility="collapsed",
                              placeholder="tag this step")  # fmt: skip
        if c2.form_submit_button("Tag step") and label.strip():
            add_step_tag(label.strip())
    _quick(recent, step_now, "quick_step", add_step_tag)

    st.subheader("Episode tags")
    episode_now = [t.label for t in episode.tags]
    _chips(
        episode_now,
        "rm_ep",
        lambda label: _do(
            lambda: ops.remove_episode_tag(client_pb2.RemoveEpisodeTagRequest(tag=label)).success,
            f"Removed episode tag {label!r}",
            f"The episode had no tag {label!r}",
        ),
    )
    with st.form("episode_tag_form", clear_on_submit=True, border=False):
        c1, c2 = st.columns([3, 2])
        label = c1.text_input("New episode tag", key="episode_tag_text", label_visibility="collapsed",
                              placeholder="tag the episode")  # fmt: skip
        if c2.form_submit_button("Tag episode") and label.strip():
            add_episode_tag(label.strip())
    _quick(recent, episode_now, "quick_ep", add_episode_tag)

    st.subheader("Notes and state")
    notes_editor(ops, episode)
    labels = [STATE_LABELS[s] for s in sorted(STATE_LABELS)]
    current = STATE_LABELS.get(episode.state, "Unspecified")
    c1, c2 = st.columns([3, 2])
    # When the stored state changes (set here, undone, or set by another annotator) the box starts afresh from
    # the store under a key never used before: writing the value into the old box's state, or going back to an
    # earlier key, leaves the browser showing the choice it last made in that box.
    base = f"state_{ref_key(ops.replay.ref)}"
    seen, generation = st.session_state.get(f"_{base}", (episode.state, 0))
    if seen != episode.state:
        generation += 1
    st.session_state[f"_{base}"] = (episode.state, generation)
    chosen = c1.selectbox("State", labels, index=labels.index(current), key=f"{base}_{generation}")
    if c2.button("Set state", disabled=chosen == current, key="set_state"):
        _do(lambda: ops.set_episode_state(STATE_BY_LABEL[chosen]) is not None, f"State set to {chosen}", "")

    st.divider()
    if st.button("Undo my last change", icon=":material/undo:", key="undo"):
        try:
            entry = ops.undo()
        except StepmarkError as exc:
            st.error(str(exc))
        else:
            if entry is None:
                session.confirm("Nothing of yours to undo", ":material/info:")
            else:
                step = f" on step {entry.step_index}" if entry.step_index is not None else ""
                session.confirm(f"Undid your last change{step}", ":material/undo:")
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
        st.warning(f"{_last_notes_author(ops)} changed the notes while you were editing. Theirs:\n\n"
                   f"> {episode.notes or '(empty)'}\n\nSaving now replaces them with yours.")  # fmt: skip
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


def _chips(labels: list[str], key: str, on_remove) -> None:
    if not labels:
        st.caption("none yet")
        return
    cols = st.columns(min(4, len(labels)))
    for i, label in enumerate(labels):
        if cols[i % len(cols)].button(f"{label} ✕", key=f"{key}_{label}", help=f"Remove {label!r}"):
            on_remove(label)


def _quick(recent: list[str], present: list[str], key: str, on_add) -> None:
    choices = [t for t in recent if t not in present]
    if not choices:
        return
    st.caption("Recent tags in this study:")
    cols = st.columns(min(4, len(choices)))
    for i, label in enumerate(choices):
        if cols[i % len(cols)].button(f"+ {label}", key=f"{key}_{label}"):
            on_add(label)


def render() -> None:
    ops = session.operations()
    st.title("Replay")
    key = choose_episode(ops)
    if key is None:
        return
    try:
        opened = open_episode(ops, key)
    except StepmarkError as exc:
        st.error(f"Cannot open episode {key}: {exc}")
        if st.button("Choose another episode"):
            del st.query_params["episode"]
            st.rerun()
        return
    meta = opened.episode
    num_steps = len(opened.step_rewards)
    kind = episode_kind(meta.episode)
    # The Episodes table counts transitions (num_steps); an environment episode also has the final observation
    # as a last RLDS step. Say so rather than show "11 steps" here for the "10 steps" of the table.
    extra = num_steps - meta.episode.num_steps
    length = f"{meta.episode.num_steps} steps + final observation" if extra == 1 else f"{num_steps} steps"
    st.caption(
        f"`{key}` · {meta.study.name} · {meta.episode.environment_id or kind} · {meta.status} · "
        f"{length} · return {meta.episode.total_reward:g} · by {meta.episode.user.email}"
    )
    if num_steps == 0:
        st.warning("This episode has no steps.")
        return
    tagged = tagged_steps(ops.replay.episode)
    index = scrubber(num_steps, tagged)
    st.query_params["step"] = str(index)

    view, tags = st.columns([5, 2])
    with view:
        try:
            response, step = ops.replay_step_with_data(index)
        except StepmarkError as exc:
            st.error(str(exc))
            return
        st.markdown("Tags on this step: " + (" ".join(f"`{t}`" for t in response.tags) or "_none_"))
        if kind == "ui":
            ui_step(ops, response, step)
        else:
            env_step(response, opened.step_rewards, tagged_steps(ops.replay.episode))
    with tags:
        tagging(ops, index)

    autoplay(index, num_steps)


def autoplay(index: int, num_steps: int) -> None:
    """Play forward at the chosen rate: each frame waits only for what is left of 1/fps after drawing the last
    one (a plain sleep would add the drawing time to every frame), and Play turns itself off at the end."""
    if st.session_state.pop("_autoplay_stop", False):
        st.session_state["autoplay"] = False
    with st.sidebar:
        st.markdown("**Autoplay**")
        fps = st.slider("Frames per second", 1, 30, 5, key="autoplay_fps")
        playing = st.toggle("Play", key="autoplay")
    if not playing:
        st.session_state.pop("_autoplay_at", None)
        return
    if index >= num_steps - 1:
        st.session_state.pop("_autoplay_at", None)
        st.session_state["_autoplay_stop"] = True
        st.rerun()
    now = time.perf_counter()
    previous = st.session_state.get("_autoplay_at")
    wait = 1.0 / fps - (now - previous) if previous is not None else 1.0 / fps
    if wait > 0:
        time.sleep(wait)
    st.session_state["_autoplay_at"] = time.perf_counter()
    st.session_state["_autoplay_next"] = True
    st.rerun()


if __name__ == "__main__":  # run as a Streamlit page (importing it, e.g. in tests, renders nothing)
    render()

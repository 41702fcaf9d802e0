"""Studies: list, create, edit (only the creator), enable/disable; environment specs with a form per family."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import streamlit as st

from annotator.plain import md_escape
from annotator.views import session
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2, study_pb2

ENV = study_pb2.EnvironmentSpec
# EnvironmentSpec.type oneof field -> label shown in the form
FAMILY_FIELDS = {
    "procgen": "Procgen",
    "atari": "Atari",
    "net_hack": "NetHack",
    "robosuite": "Robosuite",
    "robodesk": "RoboDesk",
    "dmlab": "DMLab",
}
# oneof field -> key of registry.valid_ids()
VALID_ID_KEYS = {"net_hack": "nethack"}
NEW = "+ New study"
PICK_KEPT = "_study_pick_kept"  # the chosen study, kept while other pages run (widget state is dropped)


@st.cache_resource(show_spinner="Reading the installed environments…")
def valid_ids() -> dict[str, list[str]]:
    """registry.valid_ids(); if one family's package is broken, the others still offer their ids."""
    import importlib

    from annotator.envs import registry

    try:
        return registry.valid_ids()
    except Exception:  # noqa: BLE001 - fall back family by family
        out: dict[str, list[str]] = {}
        for name, module_name, _ in registry.FAMILIES.values():
            try:
                out[name] = list(importlib.import_module(module_name).valid_ids())
            except Exception:  # noqa: BLE001 - that family is typed in by hand
                out[name] = []
        return out


def _draft_key(study_id: str) -> str:
    return f"study_envs:{study_id or 'new'}"


def _state_label(state: int) -> str:
    return "enabled" if state == study_pb2.StudySpec.STATE_ENABLED else "disabled"


def env_summary(env: study_pb2.EnvironmentSpec) -> str:
    field = env.WhichOneof("type")
    if field is None:  # e.g. the environment of imported UI traces
        return f"{env.id} · {env.name or 'no environment'} (replay only)"
    settings = getattr(env, field)
    ident = getattr(settings, "id", "") or getattr(settings, "task", "")
    sync = "sync" if env.sync else "async"
    return (
        f"{env.id} · {FAMILY_FIELDS.get(field, field)} {ident} · {sync} · max {env.max_episode_steps or '∞'}"
    )


def env_form(prefix: str) -> study_pb2.EnvironmentSpec | None:
    """The family-specific form; returns the spec when 'Add environment' is pressed."""
    family = st.selectbox(
        "Environment family", list(FAMILY_FIELDS), format_func=FAMILY_FIELDS.get, key=f"{prefix}family"
    )
    ids = valid_ids().get(VALID_ID_KEYS.get(family, family), [])
    c1, c2, c3 = st.columns(3)
    env_id = c1.text_input("Environment id (unique in the study)", key=f"{prefix}id")
    name = c2.text_input("Name", key=f"{prefix}name")
    max_steps = c3.number_input("Max episode steps (0: none)", 0, 1_000_000, 1000, key=f"{prefix}max")
    sync = st.checkbox("Synchronous (one transition per action)", True, key=f"{prefix}sync")
    instructions = st.text_area("Additional instructions", key=f"{prefix}instr", height=68)
    spec = ENV(
        id=env_id.strip(), name=name.strip() or env_id.strip(), sync=sync, max_episode_steps=int(max_steps)
    )
    if instructions.strip():
        spec.additional_instructions = instructions.strip()

    def pick_id(label: str = "Id") -> str:
        if ids:
            return st.selectbox(label, ids, key=f"{prefix}{family}_id")
        return st.text_input(label, key=f"{prefix}{family}_id")

    if family == "procgen":
        p = spec.procgen
        p.id = pick_id("Game")
        modes = [m for m in ENV.Procgen.DistributionMode.keys() if m != "DISTRIBUTION_UNSPECIFIED"]
        p.distribution_mode = ENV.Procgen.DistributionMode.Value(
            st.selectbox("Distribution mode", modes, key=f"{prefix}pg_mode")
        )
        a, b, c = st.columns(3)
        p.num_levels = int(a.number_input("Levels (0: unlimited)", 0, 10**6, 0, key=f"{prefix}pg_levels"))
        p.start_level = int(b.number_input("Start level", 0, 10**6, 0, key=f"{prefix}pg_start"))
        p.level_repeats = int(c.number_input("Level repeats", 1, 10**6, 1, key=f"{prefix}pg_repeats"))
        p.use_sequential_levels = st.checkbox("Sequential levels", key=f"{prefix}pg_seq")
        p.rand_seed = int(st.number_input("Random seed", 0, 2**31 - 1, 0, key=f"{prefix}pg_seed"))
    elif family == "atari":
        spec.atari.id = pick_id("Game")
        spec.atari.sticky_actions = st.checkbox("Sticky actions", True, key=f"{prefix}at_sticky")
    elif family == "net_hack":
        spec.net_hack.id = pick_id("Task")
    elif family == "dmlab":
        spec.dmlab.id = st.text_input("Level", key=f"{prefix}dm_id")
        st.caption(
            "DMLab cannot be installed on this platform: the spec is kept, recording it fails clearly."
        )
    elif family == "robosuite":
        r = spec.robosuite
        r.id = pick_id("Task")
        r.robots.extend(
            x.strip()
            for x in st.text_input("Robots (comma separated)", "Panda", key=f"{prefix}rs_robots").split(",")
            if x.strip()
        )
        a, b = st.columns(2)
        r.config = a.text_input("Config", key=f"{prefix}rs_config")
        r.arm = b.selectbox("Arm", ["right", "left"], key=f"{prefix}rs_arm")
        r.cameras.extend(
            x.strip()
            for x in st.text_input(
                "Cameras (comma separated; empty: agentview)", key=f"{prefix}rs_cam"
            ).split(",")
            if x.strip()
        )
        r.controller = st.selectbox("Controller", ["OSC_POSE", "IK_POSE"], key=f"{prefix}rs_ctrl")
        a, b = st.columns(2)
        r.pos_sensitivity = a.number_input("Position sensitivity", 0.0, 10.0, 1.5, key=f"{prefix}rs_pos")
        r.rot_sensitivity = b.number_input("Rotation sensitivity", 0.0, 10.0, 1.5, key=f"{prefix}rs_rot")
        r.use_camera_obs = st.checkbox("Camera observations", key=f"{prefix}rs_camobs")
    elif family == "robodesk":
        d = spec.robodesk
        d.task = pick_id("Task")
        rewards = [m for m in ENV.RoboDesk.Reward.keys() if m != "REWARD_UNSPECIFIED"]
        d.reward = ENV.RoboDesk.Reward.Value(st.selectbox("Reward", rewards, key=f"{prefix}rd_reward"))
        a, b = st.columns(2)
        d.action_repeat = int(a.number_input("Action repeat", 1, 100, 1, key=f"{prefix}rd_repeat"))
        d.image_size = int(b.number_input("Image size", 16, 1024, 64, key=f"{prefix}rd_size"))
    if st.button("Add environment", key=f"{prefix}add"):
        if not spec.id:
            st.error("The environment needs an id.")
            return None
        return spec
    return None


def clear_env_form(prefix: str) -> None:
    """Empty the form once its environment is added (the family stays), so the next one starts afresh instead
    of repeating the last id."""
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(prefix)]:
        if key != f"{prefix}family":
            del st.session_state[key]


def add_environment(ops, draft_key: str, form_prefix: str, spec: study_pb2.EnvironmentSpec) -> None:
    """Build the environment once before adding it to the draft: a bad game, robot or setting is refused here,
    not when someone first records in the study."""
    try:
        with st.spinner(f"Checking {spec.id} (starting the environment once)…"):
            note = ops.check_environment(spec)
    except StepmarkError as exc:
        st.error(md_escape(f"Environment {spec.id!r} cannot be used: {exc}"))
        return
    if note:
        session.confirm(md_escape(f"{spec.id}: {note}"), ":material/info:")
    st.session_state[draft_key].append(spec.SerializeToString())
    clear_env_form(form_prefix)
    session.confirm(md_escape(f"Environment {spec.id} added: save the study to keep it"), ":material/add:")
    st.rerun()


def study_editor(ops, study: study_pb2.StudySpec | None) -> None:
    study_id = study.id if study else ""
    draft_key = _draft_key(study_id)
    if draft_key not in st.session_state:  # the environment list being edited (saved with the study)
        st.session_state[draft_key] = [
            e.SerializeToString() for e in (study.environment_specs if study else [])
        ]
    prefix = f"s_{study_id or 'new'}_"
    name = st.text_input("Name", study.name if study else "", key=f"{prefix}name")
    description = st.text_area("Description", study.description if study else "", key=f"{prefix}desc")
    instructions = st.text_area("Instructions", study.instructions if study else "", key=f"{prefix}instr")

    st.markdown("**Environments**")
    envs = [ENV.FromString(b) for b in st.session_state[draft_key]]
    if not envs:
        st.caption("No environment yet: add one below.")
    for i, env in enumerate(envs):
        c1, c2 = st.columns([6, 1])
        c1.text(env_summary(env))
        if c2.button("Remove", key=f"{prefix}rm_{i}"):
            st.session_state[draft_key].pop(i)
            st.rerun()
    with st.expander("Add an environment", expanded=not envs):
        added = env_form(f"{prefix}env_")
        if added is not None:
            if any(e.id == added.id for e in envs):
                st.error(md_escape(f"Environment id {added.id!r} is already used in this study."))
            else:
                add_environment(ops, draft_key, f"{prefix}env_", added)

    if st.button("Save study", type="primary", key=f"{prefix}save"):
        spec = study_pb2.StudySpec(name=name, description=description, instructions=instructions)
        if study_id:
            spec.id = study_id
        spec.environment_specs.extend(ENV.FromString(b) for b in st.session_state[draft_key])
        try:
            ops.save_study(client_pb2.SaveStudyRequest(study=spec))
        except StepmarkError as exc:
            st.error(md_escape(str(exc)))
            return
        saved = ops.last_saved_study
        st.session_state.pop(draft_key, None)
        st.session_state["_study_pick_next"] = saved.id  # applied before the selectbox exists
        session.confirm(f"Study “{md_escape(saved.name)}” saved")
        st.rerun()


def render() -> None:
    ops = session.operations()
    st.title("Studies")
    studies = ops.all_studies()
    if studies:
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "name": s.name,
                        "id": s.id,
                        "creator": s.creator.email,
                        "state": _state_label(s.state),
                        "environments": ", ".join(e.id for e in s.environment_specs),
                        "created": s.creation_time.ToDatetime() if s.HasField("creation_time") else None,
                        "description": s.description,
                    }
                    for s in studies
                ]
            ),
            hide_index=True,
            width="stretch",
        )
    else:
        st.info("No study yet: create the first one below.")

    by_id = {s.id: s for s in studies}
    options = [NEW, *by_id]
    if "_study_pick_next" in st.session_state:
        st.session_state["study_pick"] = st.session_state.pop("_study_pick_next")
    elif "study_pick" not in st.session_state and st.session_state.get(PICK_KEPT) in options:
        st.session_state["study_pick"] = st.session_state[PICK_KEPT]  # back from another page
    if st.session_state.get("study_pick") not in options:
        st.session_state["study_pick"] = options[1] if len(options) > 1 else NEW
    pick = st.selectbox(
        "Study",
        options,
        key="study_pick",
        format_func=lambda k: k if k == NEW else f"{by_id[k].name} ({k})",  # options are plain text
    )
    st.session_state[PICK_KEPT] = pick
    if pick == NEW:
        st.subheader("New study")
        study_editor(ops, None)
        return
    study = by_id[pick]
    st.subheader(md_escape(study.name))
    is_creator = study.creator.email == ops.user
    enabled = study.state == study_pb2.StudySpec.STATE_ENABLED
    st.caption(md_escape(f"Created by {study.creator.email} · {_state_label(study.state)} · id {study.id}"))
    if is_creator:
        label = "Disable study" if enabled else "Enable study"
        if st.button(label, key=f"toggle_{study.id}"):
            try:
                response = ops.enable_study(
                    client_pb2.EnableStudyRequest(study_id=study.id, enable=not enabled)
                )
            except StepmarkError as exc:
                st.error(md_escape(str(exc)))
            else:
                session.confirm(f"Study {'enabled' if response.enabled else 'disabled'}")
                st.rerun()
        study_editor(ops, study)
    else:
        st.info(md_escape(f"Only the creator ({study.creator.email}) can edit or enable/disable this study."))
        st.text(study.description or "(no description)")
        if study.instructions:
            st.caption("Instructions")
            st.text(study.instructions)
        for env in study.environment_specs:
            st.text(env_summary(env))
    roles_and_palette(ops, study, is_creator)
    study_fields(ops, study, is_creator)


def study_fields(ops, study: study_pb2.StudySpec, is_creator: bool) -> None:
    """The study's own fields (issue 26): the YAML of `stepmark study fields`, editable by the creator or a
    reviewer; the store checks it (schemas/study_fields.schema.json) and its refusal is shown as plain text."""
    from annotator import field_ops

    st.markdown("**Fields** (the form beside the step in the player: key F)")
    text = field_ops.fields_text(ops, study.id)
    removed = field_ops.removed_fields(ops, study.id)
    if removed:
        st.caption(md_escape(f"Removed (their values are kept and exported): {', '.join(removed)}"))
    if not (is_creator or ops.user in ops.reviewers(study.id)):
        st.code(text, language="yaml")
        return
    edited = st.text_area("Fields (YAML or JSON, as for `stepmark study fields`)", text, height=220,
                          key=f"fields_{study.id}")  # fmt: skip
    if st.button("Save fields", key=f"fields_save_{study.id}"):
        try:
            saved = field_ops.save_fields(ops, study.id, edited)
        except StepmarkError as exc:
            st.error(md_escape(str(exc)))
        else:
            session.confirm(f"Fields saved ({len(saved)})")
            st.rerun()


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def roles_and_palette(ops, study: study_pb2.StudySpec, is_creator: bool) -> None:
    """The tag palette (digit keys 1-9 on the Replay page) and the study's reviewers."""
    reviewers = ops.reviewers(study.id)
    palette = ops.palette(study.id)
    may_edit_palette = is_creator or ops.user in reviewers
    st.markdown("**Tag palette** (keys 1–9 on the Replay page)")
    if palette:
        st.dataframe(
            pd.DataFrame({"key": [str(i) for i in range(1, len(palette) + 1)], "label": palette}),
            hide_index=True,
            key=f"palette_table_{study.id}",
        )
    else:
        st.caption("No palette yet" + (": add up to 9 labels below." if may_edit_palette else "."))
    if may_edit_palette:
        _edit_lines(
            "Palette labels, one per line, in key order (at most 9)", palette, "palette", study.id,
            "Save palette", lambda lines: ops.set_palette(study.id, lines),
            lambda n: f"Palette saved ({n} label{'s' if n != 1 else ''})",
        )  # fmt: skip

    st.markdown("**Reviewers** (may change the state of anyone's episode and remove anyone's tags)")
    if reviewers:
        st.dataframe(
            pd.DataFrame({"reviewer": reviewers}), hide_index=True, key=f"reviewers_table_{study.id}"
        )
    else:
        st.caption("No reviewer: only each episode's user and the study's creator change others' work.")
    if is_creator:
        _edit_lines(
            "Reviewers, one user name or e-mail per line", reviewers, "reviewers", study.id,
            "Save reviewers", lambda lines: ops.set_reviewers(study.id, lines), lambda n: f"Reviewers saved ({n})",
        )  # fmt: skip


def _edit_lines(
    label: str, current: list[str], key: str, study_id: str, button: str, save: Callable[[list[str]], list[str]],
    saved_message: Callable[[int], str],
) -> None:
    """A one-item-per-line list with a Save button: the store checks it (its refusal is shown as plain text)."""
    text = st.text_area(label, "\n".join(current), key=f"{key}_{study_id}")
    if st.button(button, key=f"{key}_save_{study_id}"):
        try:
            saved = save(_lines(text))
        except StepmarkError as exc:
            st.error(md_escape(str(exc)))
        else:
            session.confirm(saved_message(len(saved)))
            st.rerun()

if __name__ == "__main__":  # run as a Streamlit page (importing it, e.g. in tests, renders nothing)
    render()

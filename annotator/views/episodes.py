"""Episodes: one table across studies and sessions, filters, notes search, many-select for export or delete,
and the audit log of one episode."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from annotator.operations import (
    STATE_BY_LABEL,
    STATE_LABELS,
    EpisodeFilter,
    episode_kind,
    episode_success,
    parse_ref_key,
    ref_key,
    ref_of,
)
from annotator.plain import md_escape
from annotator.views import queue_panel, session
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2

ANY = "(any)"
TABLE_KEY = "episodes_table"


def rows(episodes: client_pb2.EpisodesResponse) -> pd.DataFrame:
    data = []
    for meta in episodes.episodes:
        e = meta.episode
        success = episode_success(e)
        data.append(
            {
                "episode": ref_key(ref_of(e)),
                "study": meta.study.name,
                "user": e.user.email,
                "environment": e.environment_id or "",
                "kind": episode_kind(e),
                "status": meta.status,
                "duration": meta.duration,
                "steps": e.num_steps,
                "total reward": round(e.total_reward, 4),
                "success": "" if success is None else ("yes" if success else "no"),
                "tags": ", ".join(t.label for t in e.tags),
                "notes": e.notes,
                "can delete": meta.can_delete,
            }
        )
    columns = ["study", "user", "environment", "kind", "status", "duration", "steps", "total reward",
               "success", "tags", "notes", "episode", "can delete"]  # fmt: skip
    return pd.DataFrame(data, columns=columns)


def filters(ops) -> EpisodeFilter:
    studies = ops.all_studies()
    names = {s.id: s.name for s in studies}
    env_ids = sorted({e.id for s in studies for e in s.environment_specs})
    c1, c2, c3, c4 = st.columns(4)
    study_id = c1.selectbox("Study", [ANY, *names], format_func=lambda k: names.get(k, k), key="f_study")
    env_id = c2.selectbox("Environment", [ANY, *env_ids], key="f_env")
    statuses = c3.multiselect("Status", [STATE_LABELS[s] for s in sorted(STATE_LABELS) if s], key="f_status")
    tags = sorted({t for s in studies for t in ops.recent_tags(s.id, limit=50)})
    tag = c4.selectbox("Tag", [ANY, *tags], key="f_tag")
    c5, c6 = st.columns([3, 1])
    notes = c5.text_input("Search in notes", key="f_notes", placeholder="words in the notes")
    mine = c6.checkbox("Only mine", key="f_mine")
    return EpisodeFilter(
        study_id=None if study_id == ANY else study_id,
        env_id=None if env_id == ANY else env_id,
        states=[STATE_BY_LABEL[s] for s in statuses] or None,
        tag=None if tag == ANY else tag,
        user=ops.user if mine else None,
        notes_query=notes.strip() or None,
    )


def audit_table(entries) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "when": e.time,
                "who": e.user,
                "action": e.action,
                "step": e.step_index,
                "before": json.dumps(e.before) if e.before is not None else "",
                "after": json.dumps(e.after) if e.after is not None else "",
            }
            for e in entries
        ],
        columns=["when", "who", "action", "step", "before", "after"],
    )


def delete_plan(ops, keys: list[str]) -> None:
    """Say before deleting what goes from disk and what stays (UI records stay in their convert-ui shards)."""
    remove, keep = [], []
    for key in keys:
        try:
            plan = ops.files_of(parse_ref_key(key))
        except StepmarkError as exc:
            keep.append(f"{key}: {exc}")
            continue
        remove.extend(str(p) for p in plan.remove)
        keep.extend(plan.keep)
    if remove:
        st.caption(f"Also removes {len(remove)} folder(s) of episode files:")
        st.text("\n".join(remove))
    if keep:
        st.caption("Kept on disk:")
        st.text("\n".join(keep))


def render() -> None:
    ops = session.operations()
    st.title("Episodes")
    chosen = filters(ops)
    try:
        found = ops.episodes(chosen)
    except StepmarkError as exc:
        st.error(md_escape(str(exc)))
        return
    queue_panel.render(ops, chosen.study_id)  # the study's work queue: progress, Next episode (N), done
    table = rows(found)
    st.caption(f"{len(table)} episode(s)")
    if table.empty:
        st.info(
            "No episode matches. Import UI traces (`stepmark import-ui`) or record one on the Record page."
        )
        return
    event = st.dataframe(
        table,
        key=TABLE_KEY,
        on_select="rerun",
        selection_mode="multi-row",
        hide_index=True,
        width="stretch",
        column_config={"can delete": None},
    )
    selected = [table.iloc[i]["episode"] for i in event.selection.rows if i < len(table)]
    st.caption(
        md_escape(
            f"Selected: {len(selected)}"
            + (f" — {', '.join(selected[:3])}…" if len(selected) > 3 else "".join(f" {s}" for s in selected))
        )
    )
    c1, c2, c3 = st.columns(3)
    if c1.button("Replay", icon=":material/play_arrow:", disabled=len(selected) != 1, key="ep_replay"):
        st.switch_page("views/replay.py", query_params={"episode": selected[0], "step": "0"})
    if c2.button("Export selected", icon=":material/download:", disabled=not selected, key="ep_export"):
        st.session_state["export_refs"] = selected
        st.switch_page("views/export.py")
    with c3.popover("Delete selected", icon=":material/delete:", disabled=not selected):
        deletable = [k for k in selected if bool(table.loc[table["episode"] == k, "can delete"].iloc[0])]
        refused = [k for k in selected if k not in deletable]
        if refused:
            st.warning(
                f"You may not delete {len(refused)} of them (only your own episodes, or as study creator)."
            )
        if deletable:
            delete_plan(ops, deletable)
        if st.button(
            f"Delete {len(deletable)} episode(s)", disabled=not deletable, key="ep_delete", type="primary"
        ):
            deleted, removed = 0, 0
            for key in deletable:
                try:
                    result = ops.delete_with_files(parse_ref_key(key))
                except StepmarkError as exc:
                    st.error(md_escape(f"{key}: {exc}"))
                    continue
                deleted += int(result.success)
                removed += len(result.removed)
                for line in [*result.kept, *result.problems]:
                    session.confirm(md_escape(line), ":material/info:")
            session.confirm(
                f"Deleted {deleted} episode(s) and {removed} folder(s) of files", ":material/delete:"
            )
            st.session_state.pop(TABLE_KEY, None)
            st.rerun()

    st.subheader("Audit log")
    labels = {
        row["episode"]: f"{row['study']} · {row['environment'] or row['kind']} · {row['steps']} steps · "
        f"{row['user']} · {row['episode'].rsplit('/', 1)[-1]}"
        for _, row in table.iterrows()
    }
    audit_key = st.selectbox(
        "Episode",
        list(table["episode"]),
        index=table["episode"].tolist().index(selected[0]) if selected else 0,
        format_func=lambda key: labels.get(key, key),
        key="audit_episode",
    )
    entries = ops.audit_log(parse_ref_key(audit_key))
    if entries:
        st.dataframe(audit_table(entries), hide_index=True, width="stretch", key="audit_table")
    else:
        st.caption("No change recorded for this episode yet.")


if __name__ == "__main__":  # run as a Streamlit page (importing it, e.g. in tests, renders nothing)
    render()

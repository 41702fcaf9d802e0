"""Episodes: one table across studies and sessions, filters, notes search, many-select for export or delete,
and the audit log of one episode.

The table is a page of the store's list (`Repository.page_episodes`: filtered, sorted and keyset-paged in SQL);
the count is an aggregate; nothing here holds more than a page of episodes, so a rerun costs the same at a
thousand episodes and at a million. "All N matching" selects across pages: their ids are read in batches
when an action needs them, up to `MAX_BULK`."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import streamlit as st

from annotator.operations import (
    STATE_BY_LABEL,
    STATE_LABELS,
    EpisodeFilter,
    episode_kind,
    episode_success,
    episode_title,
    parse_ref_key,
    ref_key,
    ref_of,
)
from annotator.plain import md_escape
from annotator.views import queue_panel, session
from pipelines.errors import StepmarkError
from pipelines.evaluation import runs as evaluation_runs
from pipelines.store.listing import Sort, TagCounts
from protos.rlds_creator import client_pb2

ANY = "(any)"
TABLE_KEY = "episodes_table"
PAGE_SIZE = 50
MAX_BULK = 10_000  # episodes one export or delete from this page takes; more: `stepmark export --study/--tag`
SORT_LABELS = {
    "registered": "registration",
    "user": "user",
    "environment": "environment",
    "status": "status",
    "steps": "steps",
    "total reward": "total reward",
}
FILTER_KEYS = ("f_study", "f_env", "f_status", "f_tag", "f_notes", "f_mine", "f_sort", "f_desc", "f_run")


OUTCOME_COLUMNS = ("total reward", "success")  # an environment's reward and success: nothing a UI trace has


def tags_cell(labels: list[str], counts: TagCounts | None) -> str:
    """The episode's tag labels, then how many tags its steps carry (counted in SQL: `listing.tag_counts`)."""
    text = ", ".join(labels)
    if counts is not None and counts.steps:
        on_steps = f"{counts.steps} step tag{'s' * (counts.steps != 1)} on {counts.tagged_steps} " \
                   f"step{'s' * (counts.tagged_steps != 1)}"  # fmt: skip
        text = f"{text}; {on_steps}" if text else on_steps
    return text


def rows(episodes: client_pb2.EpisodesResponse, counts: dict[str, TagCounts] | None = None) -> pd.DataFrame:
    """The page's table (`counts`: each episode's tags, `Repository.tag_counts`). A UI episode has no reward
    or success (its steps are a person's actions on an app, not an environment's transitions): its cells stay
    empty, and a page of UI episodes only has no such columns at all (docs/annotator.md)."""
    data = []
    for meta in episodes.episodes:
        e = meta.episode
        outcome = episode_kind(e) != "ui"
        success = episode_success(e) if outcome else None
        data.append(
            {
                "episode": ref_key(ref_of(e)),
                "title": episode_title(e),
                "study": meta.study.name,
                "user": e.user.email,
                "environment": e.environment_id or "",
                "kind": episode_kind(e),
                "status": meta.status,
                "duration": meta.duration,
                "steps": e.num_steps,
                "total reward": round(e.total_reward, 4) if outcome else None,
                "success": "" if success is None else ("yes" if success else "no"),
                "tags": tags_cell([t.label for t in e.tags], (counts or {}).get(e.id)),
                "notes": e.notes,
                "can delete": meta.can_delete,
            }
        )
    columns = ["title", "study", "user", "environment", "kind", "status", "duration", "steps", "total reward",
               "success", "tags", "notes", "episode", "can delete"]  # fmt: skip
    if data and all(row["kind"] == "ui" for row in data):
        columns = [c for c in columns if c not in OUTCOME_COLUMNS]
    return pd.DataFrame(data, columns=columns)


TAGS_TTL_S = 30.0


def tag_options(ops, study_ids: list[str]) -> list[str]:
    """The Tag filter's options (each study's 50 most recent labels), read at most every TAGS_TTL_S seconds
    per store and set of studies, for every session of this server: they read every tag of each study (0.3-0.6 s
    on PostgreSQL beside a 1M-episode study), and each reload of the page is a new session. A label added since
    shows up within the TTL."""
    return _recent_labels(ops.repo.url, tuple(study_ids), ops)


@st.cache_data(ttl=TAGS_TTL_S, max_entries=64, show_spinner=False)
def _recent_labels(store: str, study_ids: tuple[str, ...], _ops) -> list[str]:  # noqa: ANN001
    return sorted({t for sid in study_ids for t in _ops.recent_tags(sid, limit=50)})


def filters(ops) -> EpisodeFilter:
    studies = ops.all_studies()
    names = {s.id: s.name for s in studies}
    env_ids = sorted({e.id for s in studies for e in s.environment_specs})
    c1, c2, c3, c4 = st.columns(4)
    study_id = c1.selectbox("Study", [ANY, *names], format_func=lambda k: names.get(k, k), key="f_study",
                            on_change=_first_page)  # fmt: skip
    env_id = c2.selectbox("Environment", [ANY, *env_ids], key="f_env", on_change=_first_page)
    statuses = c3.multiselect("Status", [STATE_LABELS[s] for s in sorted(STATE_LABELS) if s], key="f_status",
                              on_change=_first_page)  # fmt: skip
    tags = tag_options(ops, [s.id for s in studies])
    tag = c4.selectbox("Tag", [ANY, *tags], key="f_tag", on_change=_first_page)
    c5, c9, c6, c7, c8 = st.columns([3, 2, 1, 1, 1])
    notes = c5.text_input("Search in notes", key="f_notes", placeholder="words in the notes", on_change=_first_page)
    # a study's `stepmark evaluate` runs: the episodes with a step the run failed
    run_names = [r["run"] for r in evaluation_runs.runs(ops.repo, study_id)] if study_id != ANY else []
    run = c9.selectbox("Failed in run", [ANY, *run_names], key="f_run", on_change=_first_page,
                       disabled=not run_names, help="the study's evaluation runs (stepmark evaluate)")  # fmt: skip
    mine = c6.checkbox("Only mine", key="f_mine", on_change=_first_page)
    c7.selectbox("Sort by", list(SORT_LABELS), format_func=SORT_LABELS.get, key="f_sort", on_change=_first_page)
    c8.toggle("Descending", key="f_desc", on_change=_first_page)
    return EpisodeFilter(
        study_id=None if study_id == ANY else study_id,
        env_id=None if env_id == ANY else env_id,
        states=[STATE_BY_LABEL[s] for s in statuses] or None,
        tag=None if tag == ANY else tag,
        user=ops.user if mine else None,
        notes_query=notes.strip() or None,
        failed_in_run=run if run in run_names else None,
    )


def _first_page() -> None:
    """A filter or the sort changed: back to page 1, no row selected, no cursor of the old list kept."""
    st.session_state["ep_page"] = 1
    st.session_state.pop(TABLE_KEY, None)
    st.session_state.pop("ep_cursors", None)
    st.session_state["ep_all"] = False


def _page_changed() -> None:
    st.session_state.pop(TABLE_KEY, None)


def _step_page(delta: int) -> None:
    st.session_state["ep_page"] = max(1, int(st.session_state.get("ep_page", 1)) + delta)
    _page_changed()


def page_of(ops, chosen: EpisodeFilter, sort: Sort, page: int) -> client_pb2.EpisodesResponse:
    """Page `page` (1-based): from the cursor the previous page ended at when it was shown (keyset), else from
    one jump (OFFSET over the index). Cursors are remembered per list, filters and sort included."""
    cursors = st.session_state.setdefault("ep_cursors", {})
    signature = repr((chosen, sort))
    known = cursors.get(signature, {})
    if page == 1:
        after = None
    elif page in known:
        after = known[page]
    else:
        after = ops.repo.episode_cursor(chosen.query(), sort, (page - 1) * PAGE_SIZE)
    found, last = ops.episodes_page(chosen, sort, after, PAGE_SIZE)
    if last is not None:
        if signature not in cursors:  # another list now: the old one's cursors are of no use
            cursors.clear()
        cursors.setdefault(signature, {})[page + 1] = last
    return found


def selected_keys(ops, chosen: EpisodeFilter, table: pd.DataFrame, rows: list[int], everything: bool):
    """The keys the actions apply to: the rows picked on this page, or every matching episode (in batches of
    ids, at most MAX_BULK)."""
    if not everything:
        return [table.iloc[i]["episode"] for i in rows if i < len(table)]
    keys: list[str] = []
    for batch in ops.repo.iter_episode_ids(chosen.query()):
        keys += [ref_key(ref) for ref in ops.repo.refs_of(batch).values()]
        if len(keys) >= MAX_BULK:
            return keys[:MAX_BULK]
    return keys


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


def deletable_keys(ops, chosen: EpisodeFilter, table: pd.DataFrame, keys: list[str], everything: bool):
    """The keys this user may delete (own episodes, or the study's creator): from the page's rows, or for
    "select all" from the same query restricted to their own episodes (one batched read, no query per key)."""
    if not everything:
        return [k for k in keys if bool(table.loc[table["episode"] == k, "can delete"].iloc[0])]
    creator_of = {s.id for s in ops.all_studies() if s.creator.email == ops.user}
    mine: set[str] = set()
    for batch in ops.repo.iter_episode_ids(replace(chosen, user=ops.user).query()):
        mine.update(batch)
        if len(mine) >= MAX_BULK:
            break
    return [k for k in keys if parse_ref_key(k).study_id in creator_of or parse_ref_key(k).episode_id in mine]


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
    sort = Sort(st.session_state.get("f_sort", "registered"), bool(st.session_state.get("f_desc", False)))
    try:
        total = ops.repo.count_episodes(chosen.query())
    except StepmarkError as exc:
        st.error(md_escape(str(exc)))
        return
    # The study's work queue (progress, Next episode (N), done) in one container, so the elements after it keep
    # their places in the page whether a study is chosen or not: the browser updates the table in place instead
    # of building it anew.
    with st.container(key="queue_panel"):
        queue_panel.render(ops, chosen.study_id)
    pages = max(1, -(-total // PAGE_SIZE))
    if int(st.session_state.get("ep_page", 1)) > pages:
        st.session_state["ep_page"] = pages
    c1, c2, c3, c4 = st.columns([2, 1, 1, 3])
    page = int(c1.number_input(f"Page (of {pages:,})", 1, pages, key="ep_page", on_change=_page_changed))
    c2.button("Previous", icon=":material/chevron_left:", key="ep_prev", disabled=page <= 1,
              on_click=_step_page, args=(-1,))  # fmt: skip
    c3.button("Next", icon=":material/chevron_right:", key="ep_next", disabled=page >= pages,
              on_click=_step_page, args=(1,))  # fmt: skip
    everything = c4.checkbox(f"Select all {total:,} matching", key="ep_all", disabled=not total,
                             help=f"across pages, for export or delete (at most {MAX_BULK:,})")  # fmt: skip
    st.caption(f"{total:,} episode(s)")
    if not total:
        st.info(
            "No episode matches. Import UI traces (`stepmark import-ui`) or record one on the Record page."
        )
        return
    found = page_of(ops, chosen, sort, page)
    table = rows(found, ops.repo.tag_counts([m.episode.id for m in found.episodes]))
    event = st.dataframe(
        table,
        key=TABLE_KEY,
        on_select="rerun",
        selection_mode="multi-row",
        hide_index=True,
        width="stretch",
        column_config={"can delete": None},
    )
    first = (page - 1) * PAGE_SIZE + 1
    order = f"by {SORT_LABELS[sort.key]}" + (" (descending)" if sort.descending else "")
    st.caption(f"Showing {first:,}–{first + len(table) - 1:,} of {total:,}, {order}")
    selected = selected_keys(ops, chosen, table, list(event.selection.rows), everything)
    if everything and total > MAX_BULK:
        st.warning(
            f"{total:,} episodes match; export or delete takes the first {MAX_BULK:,} from here. For all of "
            "them use `stepmark export --study ID [--tag T] [--state S]`."
        )
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
        deletable = deletable_keys(ops, chosen, table, selected, everything)
        refused = len(selected) - len(deletable)
        if refused:
            st.warning(f"You may not delete {refused} of them (only your own episodes, or as study creator).")
        if deletable and not everything:
            delete_plan(ops, deletable)
        elif deletable:  # a plan per episode would read each of thousands of episodes on every rerun
            st.caption(
                "Each episode's files under the data directory go with it (unless another episode uses them); "
                "UI records stay in their convert-ui shards."
            )
        if st.button(
            f"Delete {len(deletable)} episode(s)", disabled=not deletable, key="ep_delete", type="primary"
        ):
            deleted, removed, notes = 0, 0, []
            for key in deletable:
                try:
                    result = ops.delete_with_files(parse_ref_key(key))
                except StepmarkError as exc:
                    notes.append(f"{key}: {exc}")
                    continue
                deleted += int(result.success)
                removed += len(result.removed)
                notes += [*result.kept, *result.problems]
            for line in notes[:10]:
                session.confirm(md_escape(line), ":material/info:")
            if len(notes) > 10:
                session.confirm(f"… and {len(notes) - 10} more note(s) like these", ":material/info:")
            session.confirm(
                f"Deleted {deleted} episode(s) and {removed} folder(s) of files", ":material/delete:"
            )
            st.session_state.pop(TABLE_KEY, None)
            st.rerun()

    st.subheader("Audit log")
    selected = [k for k in selected if k in set(table["episode"])]  # of this page's episodes
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

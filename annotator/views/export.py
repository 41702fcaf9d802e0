"""Export: choose episodes and the DownloadEpisodesRequest options, run the export pipeline with a progress
bar, then offer the result as a download."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

import streamlit as st

from annotator.operations import ExportOptions, parse_ref_key
from annotator.plain import md_escape
from annotator.views import episode_picker, session
from pipelines.errors import StepmarkError
from protos.rlds_creator import client_pb2


def result_path(url: str) -> Path:
    return Path(unquote(urlparse(url).path))


def download(path: Path) -> None:
    """A ZIP is offered as it is; a folder is zipped once for the browser (and stays on disk as well)."""
    if path.is_dir():
        zipped = Path(tempfile.gettempdir()) / f"{path.name}.zip"
        if not zipped.exists():
            shutil.make_archive(str(zipped.with_suffix("")), "zip", root_dir=path)
        st.caption(md_escape(f"Folder written to {path}"))
        path = zipped
    st.download_button(
        "Download " + path.name,
        icon=":material/download:",
        data=path.read_bytes(),
        file_name=path.name,
        mime="application/zip",
        key="export_download",
        type="primary",
    )


# Every format `stepmark export` writes (tests check this matches pipelines.export.FORMATS), as the page names
# them. Kept here so the page does not import Beam just to draw a radio button.
FORMAT_LABELS = {
    "envlogger": "envlogger / RLDS (Riegeli)",
    "tfds": "TFDS dataset",
    "parquet": "Parquet (pandas, Hugging Face datasets)",
    "minari": "Minari (Farama; UI episodes need UI objects per screen)",
}
ANNOTATION_LABELS = {
    "consensus": "consensus of annotators",
    "all": "every annotator's",
    "mine": "only mine",
    "none": "none (as converted)",
}


def preselected(ops, keys: list[str]) -> list[str]:
    """The keys the Episodes page handed over (at most its MAX_BULK) that still name an episode: looked up by id,
    500 per query, never by listing a study."""
    refs = ops.repo.refs_of(parse_ref_key(k).episode_id for k in keys)
    return [k for k in keys if parse_ref_key(k).episode_id in refs]


def choose(ops) -> list[str] | None:
    """The selection: what the Episodes page handed over plus what is picked here from a search (at most
    PICKER_SIZE options besides the chosen ones); None when there is nothing to export."""
    if "export_pick" not in st.session_state:
        st.session_state["export_pick"] = preselected(ops, st.session_state.get("export_refs", []))
    chosen = list(st.session_state["export_pick"])
    labels = st.session_state.setdefault("_export_labels", {})
    found = episode_picker.search(ops, "export_find")
    if not found and not chosen and not st.session_state.get("export_find"):
        st.info("No episode to export yet.")
        return None
    labels.update(found)
    for key in list(labels):  # labels of what is neither chosen nor offered are not kept
        if key not in found and key not in chosen:
            del labels[key]
    options = [*chosen, *(k for k in found if k not in chosen)]
    picked = st.multiselect("Episodes", options, format_func=lambda k: labels.get(k, k), key="export_pick")
    studies = {parse_ref_key(k).study_id for k in picked}
    st.caption(f"{len(picked):,} episode(s) selected, from {len(studies)} study(ies)")
    return picked


def render() -> None:
    ops = session.operations()
    st.title("Export")
    chosen = choose(ops)
    if chosen is None:
        return
    c1, c2 = st.columns(2)
    fmt = c1.radio("Format", list(FORMAT_LABELS), horizontal=True, key="export_format",
                   format_func=FORMAT_LABELS.get)  # fmt: skip
    archive = (
        c2.radio("As", ["ZIP archive", "folder"], horizontal=True, key="export_archive") == "ZIP archive"
    )
    strip = st.checkbox(
        "Strip internal metadata (images, pressed keys, info, tags, notes)", key="export_strip"
    )
    include_incomplete = st.checkbox("Include episodes that are not completed", key="export_incomplete")
    split = st.checkbox(
        "One dataset per environment (else a selection mixing environments is refused)",
        value=True,
        key="export_split",
        help="UI episodes and each environment have their own observation/action specs",
    )
    c3, c4 = st.columns(2)
    splits = c3.text_input(
        "Splits by episode",
        placeholder="train=0.8,val=0.1,test=0.1",
        key="export_splits",
        help="Each episode goes to one split by a hash of its id, so adding episodes never moves old ones. "
        "Empty: one split, train.",
    ).strip()
    seed = int(c4.number_input("Split seed", min_value=0, step=1, value=0, key="export_split_seed"))
    c5, c6 = st.columns(2)
    padded = int(c5.number_input(
        "UI objects per screen (0: the full object table)", min_value=0, max_value=4096, step=16, value=0,
        key="export_ui_padded", help="UI episodes: N fixed-shape object rows with a mask, for models",
    ))  # fmt: skip
    annotations = c6.selectbox("UI grounding annotations applied", list(ANNOTATION_LABELS),
                               format_func=ANNOTATION_LABELS.get, key="export_annotations")  # fmt: skip
    studies = {parse_ref_key(k).study_id for k in chosen}
    recent = sorted({t for s in studies for t in ops.recent_tags(s, limit=50)})
    end_tags = st.multiselect("End-of-episode step tags (cut each episode at the first such step)", recent,
                              accept_new_options=True, key="export_end_tags")  # fmt: skip
    # What the result on screen was made from: a result for another selection or other options is not offered.
    options = ExportOptions(
        format=fmt,
        include_incomplete=include_incomplete,
        split_by_spec=split,
        splits=splits,
        split_seed=seed,
        ui_objects=f"padded:{padded}" if padded else "",
        annotations=annotations,
    )
    wanted = (tuple(chosen), archive, strip, tuple(end_tags), options)
    if st.button("Export", icon=":material/archive:", type="primary", disabled=not chosen, key="export_run"):
        st.session_state.pop("export_result", None)
        request = client_pb2.DownloadEpisodesRequest(
            refs=[parse_ref_key(k) for k in chosen],
            archive=archive,
            strip_internal_metadata=strip,
            end_of_episode_tags=end_tags,
        )
        bar = st.progress(0.0, text="Exporting…")
        try:
            response = ops.download_episodes(
                request,
                options,
                progress=lambda f: bar.progress(f, text=f"Exporting… {f:.0%}"),
            )
        except StepmarkError as exc:
            bar.empty()
            st.error(md_escape(str(exc)))
            return
        bar.progress(1.0, text="Done")
        summary = ops.last_export
        st.session_state["export_result"] = (wanted, response.url, summary_lines(summary))
        left_out = len(summary.skipped) + len(summary.dead_letters)
        st.toast(f"Exported {summary.episodes} episode(s)" + (f", {left_out} left out" if left_out else ""),
                 icon=":material/archive:")  # fmt: skip
    result = st.session_state.get("export_result")
    if result is None:
        return
    made_from, url, lines = result
    if made_from != wanted:
        st.caption("The selection or options changed since the last export: export again to download.")
        return
    path = result_path(url)
    if not path.exists():
        st.warning(md_escape(f"The export at {path} is gone."))
        return
    st.success(md_escape(f"Export ready: {path}"))
    for line, is_problem in lines:  # episode ids, paths and reasons: plain text
        (st.warning if is_problem else st.caption)(md_escape(line))
    download(path)


def summary_lines(summary) -> list[tuple[str, bool]]:
    """What the export wrote, and every selected episode it left out or could not write, with the reason
    (an episode is never dropped without saying so). (text, is_problem) pairs."""
    lines = [(f"{summary.episodes} episode(s), {summary.steps} step(s), {summary.bytes:,} bytes "
              f"as {summary.format}", False)]  # fmt: skip
    if len(summary.datasets) > 1:
        for d in summary.datasets:
            lines.append((f"{d.path}: {d.episodes} episode(s) of {d.environment_id or d.kind}", False))
    for skipped in summary.skipped:
        lines.append((f"Left out {skipped['episode']}: {skipped['reason']}", True))
    for dead in summary.dead_letters:
        lines.append((f"Could not export {dead.episode}: {dead.reason}: {dead.error}", True))
    return lines


if __name__ == "__main__":  # run as a Streamlit page (importing it, e.g. in tests, renders nothing)
    render()

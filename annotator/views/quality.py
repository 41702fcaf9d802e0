"""Quality: the plots of `stepmark report` for a study (and the convert-ui output its UI episodes came from),
the queue's agreement tables, and adjudication of the steps annotators disagree on."""

from __future__ import annotations

import json
from collections.abc import Sequence

import streamlit as st

from annotator import field_ops, queue_ops
from annotator.plain import md_escape
from annotator.views import session
from pipelines.errors import StepmarkError
from pipelines.report.html import numbers
from pipelines.report.plots import PlotImage, images, ui_plots
from pipelines.report.ui_stats import UiStats, ui_stats
from pipelines.store.field_agreement import MAX_DISPUTED

NONE = "(none)"
# What each agreement figure means, shown under it (the figures are those of `stepmark agreement`).
ALPHA_MEANS = (
    "Alpha is 1 when every annotator gave every step the same labels, 0 when they agree no more than chance "
    "would make them, below 0 when they disagree more than chance."
)
LABELS_MEAN = "Per label: alpha over \"has this label or not\" on each step; marks: how often it was given."
MAJORITY_MEANS = (
    "With majority: steps where more than half of the step's annotators gave the same label set; no majority: "
    "the others, which are not counted (with two annotators, every disputed step). Agree: of the steps with a "
    "majority, those where this annotator's set is the majority's; rate = agree / with majority. With two "
    "annotators a majority exists only where both agree, so the rate reads 1.000: read alpha, kappa and the "
    "disputed steps instead."
)
KAPPA_MEANS = (
    "Cohen's kappa per label and pair of annotators, over the steps both labelled: 1 is full agreement, 0 what "
    "chance gives."
)


@st.cache_data(ttl=300, max_entries=8, show_spinner="Counting the converted records…")
def _ui_stats(folder: str) -> tuple[UiStats, tuple[PlotImage, ...]]:
    """The counts of a convert-ui output and their plots, drawn once (a rerun only sends the images)."""
    ui = ui_stats(folder)
    return ui, images(ui_plots(ui))


def show_plots(plots: Sequence[PlotImage]) -> None:
    for start in range(0, len(plots), 3):
        for column, plot in zip(st.columns(3), plots[start : start + 3], strict=False):
            with column:
                st.markdown(f"**{md_escape(plot.title)}**")
                st.image(plot.png, width="stretch")
                if plot.caption:
                    st.caption(md_escape(plot.caption))


def figures_table(figures: dict) -> None:
    """The report's key figures beside the few that say most at a glance."""
    left, right = st.columns([3, 2])
    left.dataframe(
        [{"figure": name, "value": value} for name, value in figures.values()],
        hide_index=True,
        height=250,
        key="quality_figures",
    )
    for key, label in (("agreement-alpha", "Krippendorff's alpha"), ("queue-done", "labellings done"),
                       ("agreement-disagreements", "disputed steps")):  # fmt: skip
        if key in figures and figures[key][1] is not None:
            value = figures[key][1]
            right.metric(label, f"{value:.3f}" if isinstance(value, float) else value)


def adjudication(ops, report, keys: dict[str, str]) -> None:
    disputed = {f"{d.episode_id}/{d.step_index}": d for d in report.disagreements}
    pick = st.selectbox(
        "Adjudicate a step",
        list(disputed),
        index=None,
        placeholder="Choose a disputed step",
        format_func=lambda k: f"{k} · "
        + "; ".join(f"{u}: {', '.join(v) or '-'}" for u, v in disputed[k].labels.items()),
        key="adj_pick",
    )
    if pick is None:
        return
    d = disputed[pick]
    options = sorted({label for labels in d.labels.values() for label in labels} | set(d.consensus or ()))
    default = d.consensus if d.consensus is not None else (d.majority or [])
    chosen = st.multiselect("Consensus labels (none: the step has no tag)", options, default=default,
                            key=f"adj_labels_{pick}")  # fmt: skip
    c1, c2 = st.columns(2)
    if c1.button("Save consensus", key="adj_save", type="primary"):
        try:
            saved = queue_ops.adjudicate(ops, d.episode_id, d.step_index, chosen)
        except StepmarkError as exc:
            st.error(str(exc))
        else:
            session.confirm(f"Consensus of step {d.step_index}: {', '.join(saved) or 'no tag'}")
            st.rerun()
    if c2.button("Open in Replay", key="adj_replay", disabled=d.episode_id not in keys):
        where = {"episode": keys[d.episode_id], "step": str(d.step_index)}
        st.switch_page("views/replay.py", query_params=where)


FIELDS_MEAN = (
    "Per study field, over the places (steps, segments, episodes) two or more annotators gave a value: "
    "Krippendorff's alpha with the field's metric (nominal for choices and yes/no, interval for numbers, Jaccard "
    "distance for multi-choice, normalised edit distance for text); for text also the mean similarity "
    "(1 - normalised edit distance) of the annotators' texts, places under 0.8 listed as disputed. At most "
    f"{MAX_DISPUTED} disputed places are listed per field, those without a consensus first."
)


REVIEW_MEANS = (
    "Per field and suggestion source (a model: model:NAME@VERSION): a person's answer is their value at the "
    "suggestion's place written after it was stored (not imported). Accepted: equal to the suggestion; edited: "
    "kept in part (a text at least half alike, options sharing one); replaced: any other value; unseen: "
    "suggestions nobody answered yet. Alpha with the source: the field's alpha with the source counted as one "
    "more annotator, beside alpha among people only."
)


def review_section(reviews: list) -> None:
    """What people did with each source's suggestions, and its agreement with them (issue 33)."""
    if not reviews:
        return
    st.subheader("Review of suggestions")
    st.dataframe(field_ops.review_table(reviews), hide_index=True, key="field_review")
    st.caption(REVIEW_MEANS)


def study_fields_section(ops, fields: list) -> None:
    """Agreement per study field and adjudication of a disputed place (issue 26)."""
    if not fields:
        return
    st.header("Study fields")
    tables = field_ops.agreement_tables(fields)
    st.dataframe(tables["fields"], hide_index=True, key="field_agreement")
    for f in fields:  # the figures as text too (plain: names come from the study's file)
        alpha = "n/a" if f.alpha is None else f"{f.alpha:.3f}"
        similarity = "" if f.similarity is None else f", similarity {f.similarity:.3f}"
        st.text(f"{f.field} ({f.metric}): alpha {alpha}{similarity} over {f.units} place(s) of "
                f"{', '.join(f.annotators) or 'nobody'}; {f.disputed_count} disputed"
                + (f" ({len(f.disputed)} listed, those without a consensus first: {f.disputed_open} without one)"
                   if len(f.disputed) < f.disputed_count else ""))  # fmt: skip
    st.caption(FIELDS_MEAN)
    disputes = [(f, d) for f in fields for d in f.disputed]
    if not disputes:
        return
    st.dataframe(tables["disputes"], hide_index=True, width="stretch", key="field_disputes")
    labels = {f"{f.field} · {d.episode_id} · {'episode' if d.step < 0 else d.step}": (f, d) for f, d in disputes}
    pick = st.selectbox("Adjudicate a field value", list(labels), index=None, placeholder="Choose a disputed value",
                        key="field_adj_pick")  # fmt: skip
    if pick is None:
        return
    f, d = labels[pick]
    given = sorted({json.dumps(v, ensure_ascii=False) for v in d.values.values()})
    value = st.text_input("Consensus value (JSON: \"text\", 3, true, [\"a\"])", given[0], key=f"field_adj_{pick}")
    if st.button("Save field consensus", key="field_adj_save"):
        try:
            saved = field_ops.adjudicate(ops, d.episode_id, f.field, d.step, d.end, json.loads(value))
        except (StepmarkError, ValueError) as exc:
            st.error(md_escape(str(exc)))
        else:
            session.confirm(md_escape(f"Consensus of {f.field}: {json.dumps(saved, ensure_ascii=False)}"))
            st.rerun()


def render() -> None:
    ops = session.operations()
    st.title("Quality")
    study_id = session.choose_study(ops, "quality_study")
    if study_id is None:
        return
    session.follow_study(ops, study_id)
    try:
        summary = queue_ops.quality(ops, study_id)
    except StepmarkError as exc:
        st.error(str(exc))
        return
    folders = queue_ops.ui_folders(ops, study_id)
    stats, ui, ui_images = summary.stats, None, ()
    if folders:
        folder = st.selectbox("convert-ui output of the UI episodes", [*folders, NONE], key="quality_folder")
        if folder != NONE:
            try:
                ui, ui_images = _ui_stats(folder)
            except StepmarkError as exc:
                st.error(str(exc))
    figures_table(numbers(ui, stats))
    if ui is not None:
        st.header("UI data")
        show_plots(ui_images)
    st.header("Study")
    show_plots(summary.plots)

    study_fields_section(ops, summary.stats.field_agreement)  # remembered with the summary
    review_section(summary.stats.field_review)
    st.header("Agreement")
    report = stats.agreement
    if report is None or not report.units:
        if study_id not in queue_ops.queued_studies(ops, [study_id]):
            st.caption("This study has no work queue, so nobody labels its episodes apart (Episodes page: Work "
                       "queue settings, or `stepmark queue set --overlap 2`).")  # fmt: skip
        else:
            st.caption("No episode is done by two or more annotators yet (Label page: Next episode). This page "
                       "updates by itself when one is.")  # fmt: skip
        return
    alpha = "n/a" if report.alpha is None else f"{report.alpha:.3f}"
    st.caption(
        f"{report.units} steps of {report.episodes} episode(s), annotators {', '.join(report.annotators)}; "
        f"Krippendorff's alpha (label sets): {alpha}. " + ALPHA_MEANS
    )
    keys = queue_ops.episode_keys(ops, {d.episode_id for d in report.disagreements})
    tables = queue_ops.agreement_tables(report, keys)
    c1, c2 = st.columns(2)
    with c1:
        st.dataframe(tables["labels"], hide_index=True, key="agree_labels")
        st.caption(LABELS_MEAN)
    with c2:
        st.dataframe(tables["annotators"], hide_index=True, key="agree_annotators")
        st.caption(MAJORITY_MEANS)
    st.dataframe(tables["pairs"], hide_index=True, key="agree_pairs")
    st.caption(KAPPA_MEANS)
    st.subheader(f"Disagreements ({report.disagreements_title})")
    if len(report.disagreements) < report.disputed:
        st.caption(f"{len(report.disagreements):,} disputed steps are listed, those without a consensus first, "
                   "in registration order (as `stepmark agreement` lists them): adjudicating them brings the next "
                   "ones here. All are counted in the figures above.")  # fmt: skip
    st.dataframe(tables["disagreements"], hide_index=True, width="stretch", key="agree_disagreements",
                 column_config={"open": st.column_config.LinkColumn("open", display_text="open step",
                                                                    help="the step in Replay (a new tab)")})  # fmt: skip
    adjudication(ops, report, keys)


if __name__ == "__main__":  # run as a Streamlit page (importing it, e.g. in tests, renders nothing)
    render()

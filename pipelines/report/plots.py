"""The quality report's plots, drawn with matplotlib (object API: no pyplot state, safe in a server).

Each function takes the counted statistics and returns `Plot`s; the HTML report embeds them as PNG and the
annotator's Quality page shows the same figures as PNG too (`PlotImage`), drawn once per change of the data
rather than by `st.pyplot` on every rerun (12 figures cost 2-3 s a rerun).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from PIL import Image

from pipelines.report.store_stats import StoreStats
from pipelines.report.ui_stats import UiStats

GRID_ROWS = ("top", "middle", "bottom")
GRID_COLUMNS = ("left", "centre", "right")
TOP = 15  # bars shown at most in a category chart (the rest summed as "other")


@dataclass
class Plot:
    key: str
    title: str
    figure: Figure
    caption: str = ""

    def png(self, dpi: int = 96) -> bytes:
        for text in self.figure.findobj(Text):  # labels, names and ids come from the data: "$" is no maths
            text.set_parse_math(False)
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
        return buffer.getvalue()


@dataclass(frozen=True)
class PlotImage:
    """A plot drawn: what a page shows of it."""

    key: str
    title: str
    png: bytes
    caption: str = ""


PAGE_DPI = 144  # the Quality page's images: sharp on a high-density screen, small enough to send on each rerun


def images(plots: Sequence[Plot], dpi: int = PAGE_DPI) -> tuple[PlotImage, ...]:
    return tuple(PlotImage(p.key, p.title, p.png(dpi), p.caption) for p in plots)


def _figure(width: float = 6.0, height: float = 3.2) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def _top(counts: Mapping[str, float], n: int = TOP) -> list[tuple[str, float]]:
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if len(items) > n:
        items = [*items[: n - 1], ("other", sum(v for _, v in items[n - 1 :]))]
    return items


def _label(v: float, percent: bool) -> str:
    if percent:
        return f"{v:.0%}"
    return str(int(v)) if float(v).is_integer() else f"{v:.3f}"


def bars(counts: Mapping[str, float], xlabel: str, *, percent: bool = False) -> Figure:
    """Horizontal bars, largest first, each labelled with its value."""
    items = _top(counts)
    fig = _figure(6.0, max(1.6, 0.32 * len(items) + 0.8))
    ax = fig.add_subplot()
    if not items:
        ax.text(0.5, 0.5, "nothing to show", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    names = [k for k, _ in items][::-1]
    values = [v for _, v in items][::-1]
    drawn = ax.barh(names, values, color="#3b7dd8")
    ax.bar_label(drawn, labels=[_label(v, percent) for v in values], padding=3, fontsize=8)
    ax.set_xlabel(xlabel)
    if percent:
        ax.set_xlim(0, 1.15)
    else:
        ax.set_xlim(min(0, min(values)) * 1.18, max(values) * 1.18 or 1)
    ax.tick_params(axis="y", labelsize=8)
    return fig


def histogram(values: list[float], xlabel: str, bins: int = 20) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    ax.hist(values, bins=bins, color="#3b7dd8", edgecolor="white")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    return fig


MAX_POINTS = 2000  # points drawn over a box; the box itself is computed from every value


def per_group(groups: Mapping[str, Sequence[float]], ylabel: str) -> Figure:
    """One box (with the points over it, at most MAX_POINTS of them, evenly spread) per group, e.g. returns
    per environment."""
    fig = _figure(6.0, 3.4)
    ax = fig.add_subplot()
    names = sorted(groups)
    if not names:
        ax.text(0.5, 0.5, "no environment episodes", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    ax.boxplot([np.asarray(groups[n], dtype=float) for n in names], showfliers=False)
    rng = np.random.default_rng(0)
    for i, name in enumerate(names, start=1):
        ys = np.asarray(groups[name], dtype=float)
        if len(ys) > MAX_POINTS:
            ys = ys[np.linspace(0, len(ys) - 1, MAX_POINTS).astype(int)]
        ax.scatter(i + rng.uniform(-0.12, 0.12, len(ys)), ys, s=10, alpha=0.6, color="#d8603b")
    ax.set_xticks(range(1, len(names) + 1), [f"{n}\n({len(groups[n])})" for n in names], fontsize=8)
    ax.set_ylabel(ylabel)
    return fig


def grid_heatmap(grid: list[list[int]]) -> Figure:
    fig = _figure(4.2, 3.6)
    ax = fig.add_subplot()
    data = np.array(grid, dtype=float)
    image = ax.imshow(data, cmap="Oranges")
    for r in range(3):
        for c in range(3):
            ax.text(c, r, f"{int(data[r, c])}", ha="center", va="center", fontsize=10)
    ax.set_xticks(range(3), GRID_COLUMNS)
    ax.set_yticks(range(3), GRID_ROWS)
    fig.colorbar(image, ax=ax, label="actionable objects")
    return fig


def samples_figure(stats: UiStats) -> Figure:
    n = len(stats.samples)
    fig = _figure(3.0 * max(n, 1), 4.6)
    if not n:
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "no screenshots", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    for i, s in enumerate(stats.samples, start=1):
        ax = fig.add_subplot(1, n, i)
        ax.imshow(np.asarray(Image.open(io.BytesIO(s.png))))
        for left, top, right, bottom in s.boxes:
            ax.add_patch(Rectangle((left, top), right - left, bottom - top, fill=False, lw=1, ec="#ff8c00"))
        ax.set_title(f"{s.episode_id[:24]}\nstep {s.step}: {len(s.boxes)} actionable", fontsize=7)
        ax.set_axis_off()
    return fig


def ui_plots(stats: UiStats) -> list[Plot]:
    resolved = stats.targetable_with_target
    plots = [
        Plot("objects_per_step", "Objects per step",
             histogram(stats.objects_per_step, "objects on the screen"),
             f"{stats.objects} objects on {stats.steps} steps"),
        Plot("object_types", "Object types", bars(stats.object_types, "objects"), "by Object.type"),
        Plot("actionable_grid", "Where actionable objects are", grid_heatmap(stats.actionable_grid),
             f"{stats.actionable} actionable objects by 3x3 grid location (unknown locations left out)"),
        Plot("actions", "Action kinds", bars(stats.actions, "steps"),
             f"{stats.actions_with_target} actions resolved to an object"),
        Plot("target_resolution", "Target resolution",
             bars({"resolved": resolved, "not resolved": stats.targetable_actions - resolved}, "actions"),
             "taps, long presses, swipes and typing resolved to an on-screen object"),
        Plot("apps", "Apps", bars(stats.apps, "episodes"), "episodes per app package"),
        Plot("screen_sizes", "Screen sizes", bars(stats.screen_sizes, "steps"), "steps per screen size (px)"),
    ]  # fmt: skip
    if stats.dead_letters is not None:
        plots.append(
            Plot("dead_letters", "Dead-letter reasons", bars(stats.dead_letters, "records"),
                 f"{sum(stats.dead_letters.values())} records the conversion set aside")
        )  # fmt: skip
    plots.append(Plot("samples", "Sample screenshots", samples_figure(stats), "actionable objects boxed"))
    return plots


def store_plots(stats: StoreStats) -> list[Plot]:
    plots = [
        Plot("returns", "Returns per environment", per_group(stats.returns, "total reward"),
             "one point per episode; the number of episodes under each name"),
        Plot("lengths", "Lengths per environment", per_group(stats.lengths, "steps"),
             "num_steps per episode"),
        Plot("success", "Success rate per environment",
             bars(stats.success_rate, "success rate", percent=True),
             "episodes with metadata.success true, of those with a verdict"),
        Plot("states", "Episodes per state", bars(stats.by_state, "episodes")),
        Plot("episodes_by_annotator", "Episodes per annotator", bars(stats.by_annotator, "episodes")),
        Plot("tags_by_label", "Tags per label", bars(stats.tags_by_label, "tags"), "episode and step tags"),
        Plot("tags_by_annotator", "Tags per annotator", bars(stats.tags_by_annotator, "tags")),
    ]  # fmt: skip
    agreement = stats.agreement
    if agreement is not None and agreement.units:
        alphas = {a.label: a.alpha for a in agreement.labels if a.alpha is not None}
        if agreement.alpha is not None:
            alphas = {"(label set)": agreement.alpha, **alphas}
        rates = {a.user: a.rate for a in agreement.per_annotator if a.rate is not None}
        plots += [
            Plot("agreement_labels", "Agreement per label (Krippendorff's alpha)", bars(alphas, "alpha"),
                 f"{agreement.units} steps of {agreement.episodes} episodes labelled by 2+ annotators"),
            Plot("agreement_annotators", "Agreement with the majority per annotator",
                 bars(rates, "share of steps", percent=True),
                 f"{agreement.disputed} disputed steps"),
        ]  # fmt: skip
    return plots

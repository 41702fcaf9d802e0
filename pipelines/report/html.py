"""The quality report as one self-contained HTML file: key figures in tables, plots as embedded PNG.

Every text that comes from data (app names, labels, users, paths) is escaped; nothing is loaded from
elsewhere.
`numbers()` is the one list of the key figures: the HTML shows them (each cell has an id `n-<key>`) and the
Quality page and tests read them from there.
"""

from __future__ import annotations

import base64
import html
from datetime import UTC, datetime

from pipelines.report.plots import Plot, store_plots, ui_plots
from pipelines.report.store_stats import StoreStats
from pipelines.report.ui_stats import UiStats

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 1400px; padding: 0 1rem; }
h1 { margin-bottom: .2rem; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; } td, th { padding: .2rem .8rem; text-align: left; }
tr:nth-child(even) { background: #f5f7fa; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
.plots { display: flex; flex-wrap: wrap; gap: 1.2rem; align-items: flex-start; }
figure { margin: 0; flex: 0 1 430px; } figure h3 { margin: .3rem 0; font-size: 1rem; }
figure img { max-width: 100%; } figcaption { font-size: .85rem; color: #555; max-width: 36rem; }
.meta { color: #666; font-size: .9rem; }
"""


def numbers(ui: UiStats | None, store: StoreStats | None) -> dict[str, tuple[str, float | int | None]]:
    """Key figure id -> (what it is, value)."""
    out: dict[str, tuple[str, float | int | None]] = {}
    if ui is not None:
        out |= {
            "ui-episodes": ("UI episodes", ui.episodes),
            "ui-steps": ("steps", ui.steps),
            "ui-objects": ("objects", ui.objects),
            "ui-steps-with-screenshot": ("steps with a screenshot", ui.steps_with_screenshot),
            "ui-actionable": ("actionable objects", ui.actionable),
            "ui-actions-with-target": ("actions resolved to an object", ui.actions_with_target),
            "ui-target-resolution-rate": (
                "target-resolution rate (on-screen actions)",
                ui.target_resolution_rate,
            ),
            "ui-apps": ("apps", len(ui.apps)),
        }
        if ui.dead_letters is not None:
            out["ui-dead-letters"] = ("dead letters", sum(ui.dead_letters.values()))
    if store is not None:
        out |= {
            "study-episodes": ("episodes in the study", store.episodes),
            "study-ui-episodes": ("of which UI episodes", store.ui_episodes),
            "study-annotators": ("annotators (episode owners)", len(store.by_annotator)),
            "study-tags": ("tags (episode and step)", sum(store.tags_by_label.values())),
        }
        for env, rate in sorted(store.success_rate.items()):
            out[f"success-{env}"] = (f"success rate, {env}", rate)
        if store.queue is not None:
            out |= {
                "queue-overlap": ("queue overlap", store.queue.config.overlap),
                "queue-episodes": ("queued episodes", store.queue.episodes),
                "queue-complete": ("episodes done by all their annotators", store.queue.episodes_complete),
                "queue-done": ("labellings done", store.queue.slots_done),
                "queue-total": ("labellings planned", store.queue.slots_total),
            }
        if store.agreement is not None:
            out |= {
                "agreement-units": ("steps labelled by 2+ annotators", store.agreement.units),
                "agreement-alpha": ("Krippendorff's alpha (label sets)", store.agreement.alpha),
                "agreement-disagreements": ("disputed steps", store.agreement.disputed),
            }
    return out


def _value(key: str, v: float | int | None) -> str:
    if v is None:
        return "n/a"
    if "rate" in key or key.startswith("success-"):
        return f"{v:.1%}"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.3f}"
    return str(int(v))


def _table(figures: dict[str, tuple[str, float | int | None]], prefix: tuple[str, ...]) -> str:
    rows = [
        f'<tr><td>{html.escape(name)}</td><td class="n" id="n-{html.escape(key)}">{_value(key, v)}</td></tr>'
        for key, (name, v) in figures.items()
        if key.startswith(prefix)
    ]
    return f"<table>{''.join(rows)}</table>" if rows else ""


def _fields_table(store: StoreStats) -> str:
    """Per study field (issue 26): fill rate, values, annotators, time spent, agreement (report/field_stats.py)."""
    if not store.fields:
        return ""
    head = ("field", "kind", "scope", "fill rate", "values", "annotators", "seconds per value", "seconds in all",
            "alpha", "similarity", "disputed")  # fmt: skip
    rows = []
    for f in store.fields:
        cells = (
            f.field + ("" if f.active else " (removed)"), f.kind, f.scope,
            "n/a" if f.fill_rate is None else f"{f.fill_rate:.1%} ({f.filled} of {f.places})", str(f.values),
            str(f.annotators), "n/a" if f.seconds_mean is None else f"{f.seconds_mean:.1f}", f"{f.seconds_total:.0f}",
            "n/a" if f.alpha is None else f"{f.alpha:.3f}", "n/a" if f.similarity is None else f"{f.similarity:.3f}",
            str(f.disputed),
        )  # fmt: skip
        rows.append(f'<tr id="field-{html.escape(f.field)}">' + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{h}</th>" for h in head)
    return f"<h2>Study fields</h2><table><tr>{header}</tr>{''.join(rows)}</table>"


def _review_table(store: StoreStats) -> str:
    """Per study field and suggestion source (a model): what people did with its suggestions and alpha with it
    as one more annotator (store/field_review.py)."""
    if not store.field_review:
        return ""
    head = ("field", "source", "suggestions", "unseen", "accepted", "edited", "replaced", "alpha with the source",
            "units", "alpha among people", "units")  # fmt: skip
    rows = []
    for r in store.field_review:
        cells = (r.field, r.source, str(r.suggestions), str(r.unseen), str(r.accepted), str(r.edited),
                 str(r.replaced), "n/a" if r.alpha is None else f"{r.alpha:.3f}", str(r.units),
                 "n/a" if r.alpha_people is None else f"{r.alpha_people:.3f}", str(r.people_units))  # fmt: skip
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{h}</th>" for h in head)
    return (f'<h2>Review of suggestions</h2><table id="field-review"><tr>{header}</tr>{"".join(rows)}</table>'
            "<p>A person's answer is their value at the suggestion's place written after it was stored (not "
            "imported); unseen: no answer yet (schemas/store.md, \"Review of suggestions\").</p>")  # fmt: skip


def _plots(plots: list[Plot]) -> str:
    parts = []
    for p in plots:
        data = base64.b64encode(p.png()).decode("ascii")
        parts.append(
            f'<figure id="plot-{html.escape(p.key)}"><h3>{html.escape(p.title)}</h3>'
            f'<img alt="{html.escape(p.title)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(p.caption)}</figcaption></figure>"
        )
    return f'<div class="plots">{"".join(parts)}</div>'


def render(ui: UiStats | None, store: StoreStats | None) -> str:
    """The whole report page."""
    figures = numbers(ui, store)
    title = "stepmark quality report"
    sources = []
    body = []
    if ui is not None:
        sources.append(f"convert-ui output {ui.path}")
        body += ["<h2>UI data</h2>", _table(figures, ("ui-",)), _plots(ui_plots(ui))]
    if store is not None:
        sources.append(f"study {store.study_name} ({store.study_id})")
        body += [
            "<h2>Study</h2>",
            _table(figures, ("study-", "success-")),
            "<h2>Queue and agreement</h2>",
            _table(figures, ("queue-", "agreement-")),
            _fields_table(store),
            _review_table(store),
            _plots(store_plots(store)),
        ]
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{_STYLE}</style></head><body>"
        f'<h1>{title}</h1><p class="meta">{html.escape("; ".join(sources))} &middot; made {made}</p>'
        + "".join(body)
        + "</body></html>\n"
    )

"""The HTML report's plots, drawn with Plotly (`plotly.graph_objects`).

Each function turns a report (or a comparison) into one `Plot`: a figure as Plotly's own
JSON, which the page hands to plotly.js (inlined once in the page, so the file opens with
no network). A point that stands for a run carries that run's anchor (`case-<id>-e<epoch>`)
as its `customdata`, so the page's script can jump from the point to the run's transcript;
a histogram's bars are many runs, so there the anchors are per sample and a click goes to
the bin's first run.

Colours are the Okabe-Ito palette, told apart by readers with any common colour-vision
deficiency; pass and fail also differ by marker shape, never by colour alone.

Plotly is imported inside each function, when a plot is drawn: `import tiller.evals` never
imports it (it is the optional `report` extra).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._report import CaseResult, EvalReport

if TYPE_CHECKING:  # the figures' type, for the checker only: plotly is imported lazily
    from plotly.graph_objects import Figure

    from ._compare import EvalComparison

__all__ = [
    "OKABE_ITO",
    "Plot",
    "case_anchor",
    "comparison_plots",
    "report_plots",
]

#: Okabe & Ito (2008): blue, vermillion, bluish green, orange, sky blue, reddish purple,
#: yellow, black.
OKABE_ITO = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#E69F00",
    "#56B4E9",
    "#CC79A7",
    "#F0E442",
    "#000000",
)
PASS_COLOUR, FAIL_COLOUR, OTHER_COLOUR = "#0072B2", "#D55E00", "#8C8C8C"
BEFORE_COLOUR = "#9DB9D3"
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
#: The most cases the before/after plot draws (the most changed first); the table lists all.
MAX_COMPARED_CASES = 40


def case_anchor(case_id: str, epoch: int, *, prefix: str = "") -> str:
    """The page's anchor of one run: `case-<id>-e<epoch>` (a case id is letters, digits,
    `_`, `.` and `-`, so it is a valid HTML id as it is)."""
    return f"{prefix}case-{case_id}-e{epoch}"


@dataclass(frozen=True, slots=True)
class Plot:
    """One plot of the page: its element id, heading, a line on how to read it, and its
    figure as Plotly JSON, safe to put inside a `<script>` (`<`, `>` and `&` escaped)."""

    id: str
    title: str
    caption: str
    figure_json: str

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "figure": json.loads(self.figure_json)}


def _layout(**extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "template": "plotly_white",
        "font": {"family": FONT, "size": 13, "color": "#1f2328"},
        "colorway": list(OKABE_ITO),
        "margin": {"l": 60, "r": 20, "t": 36, "b": 50},
        "height": 340,
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
        "hoverlabel": {"font": {"family": FONT}},
    }
    layout.update(extra)
    return layout


#: Characters that could end or open markup inside a `<script>`, as JSON escapes (valid
#: only inside JSON strings, the one place JSON can hold them).
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def _plot(plot_id: str, title: str, caption: str, figure: Figure) -> Plot:
    # Recent Plotly escapes these itself; escaping here keeps it so with any version.
    return Plot(plot_id, title, caption, figure.to_json().translate(_SCRIPT_SAFE))


def _label(result: CaseResult) -> str:
    return f"{result.case.id} · epoch {result.epoch}"


def _standing(result: CaseResult) -> str:
    if result.status != "scored":
        return "not scored"
    return "passed" if result.passed else "failed"


def score_distribution(report: EvalReport) -> Plot:
    """Per scorer, how many scored runs got each score (bins of 0.1 over [0, 1])."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for index, name in enumerate(report.scorers):
        runs = [r for r in report.results if r.status == "scored" and name in r.scores]
        figure.add_trace(
            go.Histogram(
                name=name,
                x=[run.scores[name].value for run in runs],
                customdata=[case_anchor(run.case.id, run.epoch) for run in runs],
                xbins={"start": -0.05, "end": 1.05, "size": 0.1},
                marker={"color": OKABE_ITO[index % len(OKABE_ITO)]},
                hovertemplate=f"{name}<br>score %{{x}}<br>%{{y}} runs<extra></extra>",
            )
        )
    figure.update_layout(
        _layout(
            barmode="group",
            bargap=0.15,
            xaxis={"title": "score", "range": [-0.05, 1.05], "dtick": 0.1},
            yaxis={"title": "runs", "rangemode": "tozero"},
            showlegend=True,
        )
    )
    return _plot(
        "plot-scores",
        "Score distribution",
        "How many scored runs got each score, per scorer. Click a bar to open its first run.",
        figure,
    )


def cost_and_latency(report: EvalReport) -> Plot:
    """One point per run: its duration (x) and cost (y), by whether it passed."""
    import plotly.graph_objects as go

    figure = go.Figure()
    # Smaller, see-through points once there are many, so a crowd still shows its shape.
    size, opacity = (11, 1.0) if len(report.results) <= 100 else (7, 0.75)
    styles = {
        "passed": (PASS_COLOUR, "circle"),
        "failed": (FAIL_COLOUR, "x"),
        "not scored": (OTHER_COLOUR, "diamond-open"),
    }
    for standing, (colour, symbol) in styles.items():
        runs = [r for r in report.results if _standing(r) == standing]
        if not runs:
            continue
        figure.add_trace(
            go.Scatter(
                name=standing,
                mode="markers",
                x=[run.outcome.duration_s for run in runs],
                y=[run.outcome.cost_usd for run in runs],
                text=[_label(run) for run in runs],
                customdata=[case_anchor(run.case.id, run.epoch) for run in runs],
                marker={
                    "color": colour,
                    "symbol": symbol,
                    "size": size,
                    "opacity": opacity,
                    "line": {"width": 1},
                },
                hovertemplate=(
                    "<b>%{text}</b><br>%{x:.2f} s<br>$%{y:.4f}<extra>" + standing + "</extra>"
                ),
            )
        )
    figure.update_layout(
        _layout(
            xaxis={"title": "duration (s)", "rangemode": "tozero"},
            yaxis={"title": "cost (USD)", "rangemode": "tozero", "tickformat": "$.4f"},
        )
    )
    return _plot(
        "plot-cost",
        "Cost and latency per run",
        "Each point is one run of a case; hover for its case, click to open its transcript.",
        figure,
    )


def pass_at_k_curves(report: EvalReport) -> Plot:
    """Per scorer, pass@k (solid, rises with k) and pass^k (dashed, falls with k)."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for index, (name, summary) in enumerate(report.scorers.items()):
        colour = OKABE_ITO[index % len(OKABE_ITO)]
        for label, rates, dash, symbol in (
            ("pass@k", summary.pass_at_k, "solid", "circle"),
            ("pass^k", summary.pass_hat_k, "dash", "square"),
        ):
            ks = sorted(rates)
            figure.add_trace(
                go.Scatter(
                    name=f"{name} {label}",
                    x=ks,
                    y=[rates[k] for k in ks],
                    mode="lines+markers",
                    line={"color": colour, "dash": dash, "width": 2.5},
                    marker={"symbol": symbol, "size": 9},
                    hovertemplate=f"{name}<br>{label.replace('k', '%{x}')}"
                    " = %{y:.1%}<extra></extra>",
                )
            )
    figure.update_layout(
        _layout(
            xaxis={"title": "k (runs of a case)", "dtick": 1, "range": [0.8, report.epochs + 0.2]},
            yaxis={"title": "share of cases", "range": [-0.03, 1.03], "tickformat": ".0%"},
        )
    )
    caption = (
        "pass@k: at least one of k runs passes; pass^k: all k pass."
        if report.epochs > 1
        else "One epoch: run the eval with epochs > 1 to see how pass@k and pass^k move with k."
    )
    return _plot("plot-pass-at-k", "pass@k and pass^k by k", caption, figure)


def report_plots(report: EvalReport) -> list[Plot]:
    """The plots of one eval, in page order."""
    return [score_distribution(report), cost_and_latency(report), pass_at_k_curves(report)]


def scorer_means(comparison: EvalComparison) -> Plot:
    """Per scorer, its mean score before and after, side by side."""
    import plotly.graph_objects as go

    names = sorted(comparison.before.scorers.keys() | comparison.after.scorers.keys())
    figure = go.Figure()
    for side, report, colour in (
        ("before", comparison.before, BEFORE_COLOUR),
        ("after", comparison.after, PASS_COLOUR),
    ):
        means = [report.scorers[n].mean if n in report.scorers else None for n in names]
        figure.add_trace(
            go.Bar(
                name=f"{side}: {report.eval_id}",
                x=names,
                y=means,
                marker={"color": colour},
                hovertemplate=f"{side}<br>%{{x}}: mean %{{y:.3f}}<extra></extra>",
            )
        )
    figure.update_layout(
        _layout(
            barmode="group",
            yaxis={"title": "mean score", "range": [0, 1.02]},
            xaxis={"title": "scorer"},
        )
    )
    return _plot(
        "plot-compare-scorers",
        "Mean score per scorer, before and after",
        f"Before: {comparison.before.eval_id}; after: {comparison.after.eval_id}.",
        figure,
    )


def _compared(comparison: EvalComparison) -> Sequence[tuple[str, float, float, str, str]]:
    rows = []
    for case in comparison.cases:
        if case.before_rate is None or case.after_rate is None:
            continue
        anchor = case_anchor(case.case_id, case.after[0].epoch)
        rows.append((case.case_id, case.before_rate, case.after_rate, case.change, anchor))
    # The most changed first, regressions before improvements at equal size.
    rows.sort(key=lambda row: (-abs(row[2] - row[1]), row[2] - row[1], row[0]))
    return rows[:MAX_COMPARED_CASES]


def case_rates(comparison: EvalComparison) -> Plot:
    """Per case scored on both sides, its pass rate before (open) and after (filled), a
    line between them; the most changed cases on top."""
    import plotly.graph_objects as go

    rows = list(reversed(_compared(comparison)))  # plotly draws the first row at the bottom
    ids = [row[0] for row in rows]
    line_x: list[float | None] = []
    line_y: list[str | None] = []
    for case_id, before, after, _change, _anchor in rows:
        line_x += [before, after, None]
        line_y += [case_id, case_id, None]
    colours = {"regressed": FAIL_COLOUR, "improved": PASS_COLOUR}
    symbols = {"regressed": "triangle-left", "improved": "triangle-right"}
    figure = go.Figure(
        [
            go.Scatter(
                x=line_x,
                y=line_y,
                mode="lines",
                line={"color": "#B0B0B0", "width": 3},
                hoverinfo="skip",
                showlegend=False,
            ),
            go.Scatter(
                name="before",
                x=[row[1] for row in rows],
                y=ids,
                mode="markers",
                marker={"color": "white", "size": 11, "line": {"color": "#555", "width": 2}},
                customdata=[row[4] for row in rows],
                hovertemplate="<b>%{y}</b><br>before: %{x:.0%}<extra></extra>",
            ),
            go.Scatter(
                name="after",
                x=[row[2] for row in rows],
                y=ids,
                mode="markers",
                marker={
                    "color": [colours.get(row[3], OTHER_COLOUR) for row in rows],
                    "symbol": [symbols.get(row[3], "circle") for row in rows],
                    "size": 13,
                },
                text=[row[3] for row in rows],
                customdata=[row[4] for row in rows],
                hovertemplate="<b>%{y}</b><br>after: %{x:.0%} (%{text})<extra></extra>",
            ),
        ]
    )
    figure.update_layout(
        _layout(
            height=max(220, 60 + 28 * len(rows)),
            margin={"l": 140, "r": 20, "t": 36, "b": 50},
            xaxis={"title": "pass rate", "range": [-0.05, 1.05], "tickformat": ".0%"},
            yaxis={"type": "category", "automargin": True},
        )
    )
    shown = len(rows)
    caption = (
        "Each case's pass rate before (open circle) and after (arrow: ◀ regressed, "
        "▶ improved, ● unchanged). Click a case to open its runs."
    )
    if shown == MAX_COMPARED_CASES:
        caption += f" The {MAX_COMPARED_CASES} most changed cases; the table lists every one."
    return _plot("plot-compare-cases", "Pass rate per case, before → after", caption, figure)


def comparison_plots(comparison: EvalComparison) -> list[Plot]:
    """The plots of the comparison view, in page order."""
    return [case_rates(comparison), scorer_means(comparison)]

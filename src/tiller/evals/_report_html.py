"""An eval's report as one self-contained HTML file: `tiller eval ... --html report.html`.

The page has the eval's totals, a scorecard per scorer (pass rate, mean, errors, pass@k and
pass^k for every k), plots (the score distribution, cost and latency per run, pass@k and
pass^k by k), a table of every run whose case links to the run's own section
(`#case-<id>-e<epoch>`: its transcript, its scores with their explanations, any error),
and, given a baseline (`compare=`), a comparison view: what regressed, improved, was added,
removed or could not be scored, with a before/after plot.

**Plotly** draws the plots (plotly.py, MIT, kept up by Plotly Inc. and released often).
It was chosen because the page must open with no network and still be interactive:
plotly.py ships plotly.js, which goes into the page once, inline, so the file needs nothing
else; its points show their case on hover, and its `plotly_click` event lets a point open
the run it stands for. matplotlib would give static SVGs: no hover, no click through to a
case. Altair draws with Vega-Lite, whose three JavaScript libraries (vega, vega-lite,
vega-embed) Altair loads from a CDN by default; inlining them needs the separate
`vl-convert-python` package, for a page that is no more interactive than Plotly's. The
cost is size: plotly.js is about 4.8 MB, once, however many plots and runs.

Plotly is the optional `report` extra (`pip install 'tiller[report]'`), imported only
when a report is drawn: `import tiller.evals` never imports it, and without it
`write_html_report` raises `UsageError` saying what to install.

Everything a run produced is escaped before it reaches the page (`_report_format.esc`),
and the plots' data goes in as JSON that cannot close its `<script>`, so a model that
writes `<script>` in its answer shows that text and runs nothing.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path
from string import Template

from ..errors import UsageError
from ._compare import EvalComparison, compare_reports
from ._report import EvalReport, ScorerSummary
from ._report_cases import run_sections, run_table
from ._report_compare_html import comparison_section_body
from ._report_format import NOTHING, esc, money, percent, seconds, tokens
from ._report_plots import Plot, comparison_plots, report_plots

__all__ = ["check_html_report", "render_html_report", "write_html_report"]

INSTALL_HINT = "pip install 'tiller[report]'"


def check_html_report() -> None:
    """`UsageError` saying what to install when an HTML report cannot be drawn here (a
    command asks before it runs an eval, not after)."""
    _plotly_js()


def _plotly_js() -> str:
    """plotly.js, to inline in the page; `UsageError` saying what to install without it."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as exc:
        raise UsageError(
            "the HTML report draws its plots with Plotly, which is not installed: "
            f"{INSTALL_HINT} (or pip install plotly)"
        ) from exc
    # plotly.js never closes a script itself; this keeps it so whatever version is here.
    return str(get_plotlyjs()).replace("</script", "<\\/script")


def _asset(name: str) -> str:
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


def _stat(label: str, value: str, note: str = "", kind: str = "") -> str:
    note_html = f'<div class="stat-note">{esc(note)}</div>' if note else ""
    return (
        f'<div class="stat {kind}"><div class="stat-value">{esc(value)}</div>'
        f'<div class="stat-label">{esc(label)}</div>{note_html}</div>'
    )


def _totals(report: EvalReport) -> str:
    usage = report.usage
    unfinished = []
    for count, words in (
        (report.cancelled_runs, "cancelled"),
        (report.not_run, "not run (budget)"),
        (report.not_started, "not started"),
    ):
        if count:
            unfinished.append(f"{count} {words}")
    durations = [result.outcome.duration_s for result in report.results]
    scorer_errors = sum(summary.errors for summary in report.scorers.values())
    stats = [
        _stat("runs scored", f"{report.scored} / {report.total}", ", ".join(unfinished)),
        _stat("passed", str(report.passed), "every scorer passed", "stat-pass"),
        _stat("pass rate", percent(report.pass_rate), "of the scored runs", "stat-rate"),
        _stat(
            "errors",
            str(report.errors),
            "runs that ended in an error",
            "stat-error" if report.errors else "",
        ),
        *(
            [_stat("scorer errors", str(scorer_errors), "a scorer raised", "stat-error")]
            if scorer_errors
            else []
        ),
        _stat(
            "cost",
            money(report.cost_usd, digits=4),
            f"{money(report.cost_usd / len(report.results))} a run" if report.results else "",
        ),
        _stat(
            "tokens",
            tokens(usage.input_tokens + usage.output_tokens),
            f"{tokens(usage.input_tokens)} in · {tokens(usage.output_tokens)} out",
        ),
        _stat(
            "time in runs",
            seconds(sum(durations)),
            f"longest run {seconds(max(durations))}" if durations else "",
        ),
    ]
    return f'<div class="stats">{"".join(stats)}</div>'


def _scorecard(report: EvalReport) -> str:
    if not report.scorers:
        return '<p class="muted">No run was scored yet.</p>'
    ks = list(range(1, report.epochs + 1))
    k_heads = "".join(f'<th class="num">k={k}</th>' for k in ks)
    rows = []
    for summary in report.scorers.values():
        rows.append(
            f"<tr><td><code>{esc(summary.name)}</code></td>"
            f'<td class="num">{summary.scored}</td><td class="num">{summary.passed}</td>'
            f'<td class="num">{_rate_bar(summary.pass_rate)}</td>'
            f'<td class="num">{summary.mean:.3f}</td>'
            f'<td class="num{" has-errors" if summary.errors else ""}">{summary.errors}</td>'
            + "".join(_k_cell(summary, k) for k in ks)
            + "</tr>"
        )
    return (
        '<table class="scorecard"><thead>'
        f'<tr><th rowspan="2">scorer</th><th class="num" rowspan="2">scored</th>'
        '<th class="num" rowspan="2">passed</th><th class="num" rowspan="2">pass rate</th>'
        '<th class="num" rowspan="2">mean</th><th class="num" rowspan="2">errors</th>'
        f'<th colspan="{len(ks)}" class="group">pass@k / pass^k</th></tr>'
        f"<tr>{k_heads}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _rate_bar(rate: float) -> str:
    width = round(rate * 100)
    return (
        f'<span class="rate"><span class="rate-bar"><span style="width:{width}%"></span>'
        f"</span>{percent(rate)}</span>"
    )


def _k_cell(summary: ScorerSummary, k: int) -> str:
    if k not in summary.pass_at_k:
        return f'<td class="num muted" title="no case has this many scored runs">{NOTHING}</td>'
    at_k, hat_k = summary.pass_at_k[k], summary.pass_hat_k[k]
    return (
        f'<td class="num" title="pass@{k} {at_k:.1%}, pass^{k} {hat_k:.1%}">'
        f"{percent(at_k)} <span class='muted'>/ {percent(hat_k)}</span></td>"
    )


def _plots_html(plots: list[Plot]) -> str:
    return "".join(
        f'<figure class="plot-card"><h3>{esc(plot.title)}</h3>'
        f'<div class="plot" id="{esc(plot.id)}" role="img" aria-label="{esc(plot.title)}">'
        "</div>"
        f"<figcaption>{esc(plot.caption)}</figcaption></figure>"
        for plot in plots
    )


def _figures_json(plots: list[Plot]) -> str:
    # Plotly's JSON escapes `<`, `>` and `/`, and a plot id is ours, so nothing here can
    # end the <script> that carries it.
    return (
        "[" + ",".join(f'{{"id":"{plot.id}","figure":{plot.figure_json}}}' for plot in plots) + "]"
    )


def _nav(comparison: EvalComparison | None) -> str:
    links = [("summary", "Summary"), ("scorers", "Scorers"), ("plots", "Plots")]
    if comparison is not None:
        links.append(("comparison", "Comparison"))
    links += [("runs", "Runs"), ("transcripts", "Transcripts")]
    return "".join(f'<a href="#{anchor}">{label}</a>' for anchor, label in links)


def _subtitle(report: EvalReport) -> str:
    cases = len({result.case.id for result in report.results})
    parts = [f"{cases} cases", f"{report.epochs} epochs", f"{report.total} runs"]
    if report.cancelled:
        parts.append("cancelled before it finished")
    return " · ".join(parts)


def render_html_report(report: EvalReport, *, compare: EvalReport | None = None) -> str:
    """`report` as one self-contained HTML page (see the module docstring). `compare`
    is a baseline: the page then also compares `report` (after) with it (before), as
    `compare_reports(compare, report)` does."""
    if not isinstance(report, EvalReport):
        raise UsageError(f"an HTML report is drawn from an EvalReport, not {report!r}")
    if compare is not None and not isinstance(compare, EvalReport):
        raise UsageError(f"compare= takes the baseline's EvalReport, not {compare!r}")
    plotly_js = _plotly_js()
    own = report_plots(report)
    plots = list(own)
    comparison = compare_reports(compare, report) if compare is not None else None
    comparison_html = ""
    if comparison is not None:
        compared = comparison_plots(comparison)
        plots += compared
        comparison_html = (
            '<section id="comparison"><h2>Comparison</h2>'
            f"{comparison_section_body(comparison, _plots_html(compared))}</section>"
        )
    from .. import __version__

    page = Template(_asset("_report_page.html"))
    return page.substitute(
        title=esc(f"Eval {report.eval_id}"),
        eval_id=esc(report.eval_id),
        subtitle=esc(_subtitle(report)),
        version=esc(__version__),
        nav=_nav(comparison),
        css=_asset("_report.css"),
        totals=_totals(report),
        scorecard=_scorecard(report),
        plots=_plots_html(own),
        comparison=comparison_html,
        run_table=run_table(report.results, report.scorers),
        run_sections=run_sections(report.results),
        figures=_figures_json(plots),
        plotly_js=plotly_js,
        script=_asset("_report.js"),
    )


def write_html_report(
    report: EvalReport, path: str | os.PathLike[str], *, compare: EvalReport | None = None
) -> Path:
    """Write `render_html_report(report, compare=compare)` to `path` (its folder is made
    if missing) and return the path written."""
    html = render_html_report(report, compare=compare)
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{target} is a folder: give the HTML report a file name (report.html)")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(html, encoding="utf-8")
    return target

"""The HTML report's comparison view: this eval beside a baseline, case by case.

The counts of each kind of change (`EvalComparison.counts`), a table of the cases that
changed (pass rate before → after, each scorer's mean before → after), and the baseline's
own runs of those cases, so a regression's before and after transcripts are both one
click away: this eval's runs keep their anchors (`case-<id>-e<epoch>`), the baseline's get
`before-case-<id>-e<epoch>`.
"""

from __future__ import annotations

from ._compare import CaseChange, CaseComparison, EvalComparison
from ._report_cases import run_sections
from ._report_format import NOTHING, badge, esc, percent
from ._report_plots import case_anchor

__all__ = ["BASELINE_PREFIX", "comparison_counts", "comparison_section_body"]

#: The anchors of the baseline's runs start with this, apart from this eval's own.
BASELINE_PREFIX = "before-"
#: The changes whose baseline runs the page shows (an added case has none).
BASELINE_SHOWN: tuple[CaseChange, ...] = ("regressed", "improved", "removed", "unscored")
#: The changes the table lists (an unchanged case is counted, not listed).
CHANGED: tuple[CaseChange, ...] = ("regressed", "improved", "added", "removed", "unscored")


def comparison_counts(comparison: EvalComparison) -> str:
    """One card per kind of change, its count large."""
    cards = "".join(
        f'<div class="stat change-{kind}"><div class="stat-value">{count}</div>'
        f'<div class="stat-label">{badge(kind)}</div></div>'
        for kind, count in comparison.counts().items()
    )
    return f'<div class="stats changes">{cards}</div>'


def _means(before: float | None, after: float | None) -> str:
    shown_before = NOTHING if before is None else f"{before:.2f}"
    shown_after = NOTHING if after is None else f"{after:.2f}"
    moved = ""
    if before is not None and after is not None and after != before:
        moved = " down" if after < before else " up"
    return f'<td class="num{moved}">{shown_before} → {shown_after}</td>'


def _baseline_anchor(case: CaseComparison, epoch: int) -> str:
    return case_anchor(case.case_id, epoch, prefix=BASELINE_PREFIX)


def _case_link(case: CaseComparison) -> str:
    """The case's id, linking to its first run here (or, removed, in the baseline)."""
    if case.after:
        anchor = case_anchor(case.case_id, case.after[0].epoch)
    else:
        anchor = _baseline_anchor(case, case.before[0].epoch)
    return f'<a class="case-link" href="#{anchor}">{esc(case.case_id)}</a>'


def _links(case: CaseComparison) -> str:
    links = [
        f'<a class="case-link" href="#{case_anchor(case.case_id, run.epoch)}">e{run.epoch}</a>'
        for run in case.after
    ]
    links += [
        f'<a class="case-link before" href="#{_baseline_anchor(case, run.epoch)}"'
        f' title="the baseline\'s run">before e{run.epoch}</a>'
        for run in case.before
    ]
    return " ".join(links)


def _changed_table(comparison: EvalComparison) -> str:
    changed = [case for kind in CHANGED for case in comparison.having(kind)]
    if not changed:
        return '<p class="muted">No case changed: every case passed as often as before.</p>'
    names = sorted(comparison.before.scorers.keys() | comparison.after.scorers.keys())
    head = "".join(f'<th class="num">{esc(name)} mean</th>' for name in names)
    rows = []
    for case in changed:
        means = "".join(_means(*case.scorers.get(name, (None, None))) for name in names)
        rows.append(
            f'<tr data-change="{case.change}"><td>{_case_link(case)}</td>'
            f"<td>{badge(case.change)}</td>"
            f'<td class="num">{percent(case.before_rate)} → {percent(case.after_rate)}</td>'
            f"{means}<td>{_links(case)}</td></tr>"
        )
    return (
        '<table class="changes"><thead><tr><th>case</th><th>change</th>'
        f'<th class="num">pass rate</th>{head}<th>runs</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def comparison_section_body(comparison: EvalComparison, plots_html: str) -> str:
    """The comparison section's content (its heading is the page's)."""
    before, after = comparison.before, comparison.after
    changed_before = [
        run for kind in BASELINE_SHOWN for case in comparison.having(kind) for run in case.before
    ]
    sections = run_sections(changed_before, prefix=BASELINE_PREFIX, label="before")
    baseline = (
        f'<h3>The baseline\'s runs of the changed cases</h3><div class="run-list">{sections}</div>'
        if changed_before
        else ""
    )
    return (
        f'<p class="lede">This eval, <code>{esc(after.eval_id)}</code> (after), against the '
        f"baseline <code>{esc(before.eval_id)}</code> (before): pass rate "
        f"{percent(before.pass_rate)} → {percent(after.pass_rate)}. A case regressed when "
        "its pass rate over its epochs fell.</p>"
        f"{comparison_counts(comparison)}"
        f"<h3>Changed cases</h3>{_changed_table(comparison)}"
        f'<div class="plots">{plots_html}</div>'
        f"{baseline}"
    )

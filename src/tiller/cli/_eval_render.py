"""What `tiller eval` prints: the scorecard, the per-case table, one case in full, the
store's evals and a comparison.

Plain columns (`print_table`), never wrapped: with no terminal (CI logs, a pipe) a table
that rich fitted to 80 columns would cut ids and paths in half, and they are what a
person copies into the next command.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from ._held import print_table, short_json, timestamp
from ._safe import echo

if TYPE_CHECKING:
    from ..evals import CaseComparison, CaseResult, EvalComparison, EvalRecord, EvalReport

__all__ = [
    "print_case",
    "print_cases",
    "print_comparison",
    "print_evals",
    "print_next_steps",
    "print_scorecard",
]

#: Characters of an error shown in the per-case table (`--case` shows it whole).
_ERROR_CHARS = 60


def _percent(rate: float) -> str:
    return f"{rate * 100:.1f}%"


def _money(usd: float) -> str:
    return f"${usd:.4f}"


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds < 600 else f"{seconds / 60:.1f}m"


def print_scorecard(report: EvalReport, *, wall_s: float | None = None) -> None:
    """Per scorer: scored, passed, pass rate, mean, errors (and pass@k, pass^k for k =
    epochs when there are several); then the eval's totals."""
    echo(f"eval {report.eval_id}: {report.total} run(s), {report.epochs} epoch(s)")
    k = report.epochs
    header = ["SCORER", "SCORED", "PASSED", "PASS RATE", "MEAN", "ERRORS"]
    if k > 1:
        header += [f"PASS@{k}", f"PASS^{k}"]
    rows = []
    for name, summary in sorted(report.scorers.items()):
        row = [
            name,
            str(summary.scored),
            str(summary.passed),
            _percent(summary.pass_rate),
            f"{summary.mean:.3f}",
            str(summary.errors),
        ]
        if k > 1:
            row += [
                _percent(summary.pass_at_k[k]) if k in summary.pass_at_k else "-",
                _percent(summary.pass_hat_k[k]) if k in summary.pass_hat_k else "-",
            ]
        rows.append(row)
    if rows:
        print_table(header, rows)
    else:
        echo("no run has been scored yet")
    totals = [
        f"runs {report.total}",
        f"scored {report.scored}",
        f"passed {report.passed} ({_percent(report.pass_rate)})",
        f"errors {report.errors}",
        f"not run {report.not_run}",
        f"cancelled {report.cancelled_runs}",
        f"not started {report.not_started}",
        f"cost {_money(report.cost_usd)}",
    ]
    if wall_s is not None:
        totals.append(f"wall time {_seconds(wall_s)}")
    echo("  ".join(totals))


def print_next_steps(eval_id: str, store: str) -> None:
    """The commands that look at the eval again: `show` and `rescore`."""
    where = f" --store {shlex.quote(store)}"
    echo(f"show it:    tiller eval show {eval_id}{where}")
    echo(f"rescore it: tiller eval rescore {eval_id} --scorer NAME{where}")


def _scores_cell(result: CaseResult) -> str:
    if not result.scores:
        return "-"
    return " ".join(
        f"{name}={score.value:.2g}{'' if score.passed else '✗'}"
        for name, score in sorted(result.scores.items())
    )


def print_cases(report: EvalReport) -> None:
    """One row per case run: case, epoch, status, scores, cost, duration, error."""
    from ..evals import error_line

    if not report.results:
        echo("no case has run yet")
        return
    rows = []
    for result in report.results:
        outcome = result.outcome
        if result.status == "scored":
            status = "passed" if result.passed else ("error" if outcome.error else "failed")
        else:
            status = result.status.replace("_", " ")
        rows.append(
            (
                result.case.id,
                str(result.epoch),
                status,
                _scores_cell(result),
                _money(result.cost_usd),  # the agent's and its scoring's
                _seconds(outcome.duration_s),
                error_line(outcome.error, _ERROR_CHARS) if outcome.error else "",
            )
        )
    print_table(("CASE", "EPOCH", "STATUS", "SCORES", "COST", "DURATION", "ERROR"), rows)


def print_case(report: EvalReport, case_id: str) -> None:
    """Every run of one case: its status, scores with their explanations, what it spent,
    its error, and its transcript."""
    for result in report.for_case(case_id):
        outcome = result.outcome
        echo(f"── {case_id} epoch {result.epoch}  run {result.run_id}  {result.status}")
        echo(f"input:    {short_json(outcome.case.input, 200)}")
        if outcome.case.expected is not None:
            echo(f"expected: {short_json(outcome.case.expected, 200)}")
        echo(
            f"stop {outcome.stop_cause.value}, {result.steps} step(s), "
            f"{result.usage.total_tokens} tokens, {_money(result.cost_usd)}"
            + (f" (scoring {_money(result.scoring_cost_usd)})" if result.scoring_cost_usd else "")
            + ", "
            f"{_seconds(outcome.duration_s)}"
        )
        for name, score in sorted(result.scores.items()):
            verdict = "pass" if score.passed else "FAIL"
            echo(f"  {name}: {score.value:.3g} {verdict}: {score.explanation}")
            if score.error and score.error != score.explanation:
                echo("    " + score.error.rstrip().replace("\n", "\n    "))
        if outcome.error:
            echo("error: " + outcome.error.rstrip())
        if result.workspace_note:
            echo(f"workspace: {result.workspace_note}")
        echo("transcript:")
        if not outcome.messages:
            echo("  (none recorded)")
        for message in outcome.messages:
            _print_message(message)
        if outcome.output is not None:
            echo(f"output: {short_json(outcome.output, 2000)}")
        echo(f"final text: {outcome.text}")


def _print_message(message: object) -> None:
    from ..conversation import AssistantMessage, UserMessage

    if isinstance(message, UserMessage):
        if message.text:
            echo(f"  user: {message.text}")
        for result in message.tool_results:
            mark = " (error)" if result.is_error else ""
            echo(f"  result {result.name}{mark}: {result.content}")
    elif isinstance(message, AssistantMessage):
        if message.text:
            echo(f"  assistant: {message.text}")
        for call in message.tool_calls:
            echo(f"  call {call.name} {call.arguments}")


def print_evals(records: list[EvalRecord], store: str) -> None:
    """The store's evals, newest first."""
    if not records:
        echo(f"no evals in {store} (run one: tiller eval run SPEC --store ...)")
        return
    rows = [
        (
            record.eval_id,
            timestamp(record.last_run_at),
            str(record.cases),
            str(record.epochs),
            ",".join(record.scorers) or "-",
            record.agent,
        )
        for record in records
    ]
    print_table(("EVAL", "LAST RUN", "CASES", "EPOCHS", "SCORERS", "AGENT"), rows)


def _rate(rate: float | None) -> str:
    return "-" if rate is None else _percent(rate)


def print_comparison(comparison: EvalComparison) -> None:
    """The cases that changed (regressions first), then one line of counts."""
    before, after = comparison.before.eval_id, comparison.after.eval_id
    echo(f"{before} -> {after}")
    changed: list[CaseComparison] = [
        case
        for kind in ("regressed", "improved", "added", "removed", "unscored")
        for case in comparison.having(kind)
    ]
    if changed:
        rows = []
        for case in changed:
            moved = [
                f"{name} {_mean(old)}->{_mean(new)}"
                for name, (old, new) in case.scorers.items()
                if old != new
            ]
            rows.append(
                (
                    case.change.upper(),
                    case.case_id,
                    _rate(case.before_rate),
                    _rate(case.after_rate),
                    " ".join(moved),
                )
            )
        print_table(("CHANGE", "CASE", "BEFORE", "AFTER", "SCORERS"), rows)
    else:
        echo("every case passes as often as before")
    counts = comparison.counts()
    echo(
        ", ".join(f"{count} {kind}" for kind, count in counts.items())
        + f"; pass rate {_percent(comparison.before.pass_rate)} -> "
        f"{_percent(comparison.after.pass_rate)}"
    )


def _mean(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"

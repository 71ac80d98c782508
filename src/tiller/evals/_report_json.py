"""An eval's report as one JSON document: what `tiller eval run|show --json PATH` writes,
and what a script or a dashboard reads instead of the store.

`report_to_json(report)` is plain JSON data (dicts, lists, strings, numbers, booleans and
null); `write_json_report(report, path)` writes it, indented. The document:

```
{
  "format": "tiller-eval-report",  "version": 2,
  "eval_id": "coder-3f2a", "epochs": 3, "cancelled": false,
  "totals": {"runs": 30, "results": 30, "scored": 29, "passed": 25, "failed": 4,
             "errors": 1, "not_run": 1, "cancelled": 0, "not_started": 0,
             "pass_rate": 0.862,
             "cost_usd": 0.41, "agent_cost_usd": 0.38, "scoring_cost_usd": 0.03,
             "usage": {"input_tokens": ..., "output_tokens": ..., ...},
             "agent_usage": {...}, "scoring_usage": {...}},
  "scorers": {"includes": {"scored": 29, "passed": 26, "errors": 0, "pass_rate": 0.897,
                           "mean": 0.93, "pass_at_k": {"1": 0.9, "2": 1.0, "3": 1.0},
                           "pass_hat_k": {"1": 0.9, "2": 0.8, "3": 0.7}}},
  "results": [{"case_id": "fix-bug", "epoch": 0, "run_id": "coder-3f2a:fix-bug:e0",
               "status": "scored", "passed": true, "attempt": 0,
               "scores": {"includes": {"value": 1.0, "passed": true,
                                       "explanation": "...", "error": null}},
               "text": "...", "output": null, "stop_cause": "completed", "steps": 2,
               "usage": {...}, "agent_usage": {...}, "scoring_usage": {...},
               "cost_usd": 0.012, "agent_cost_usd": 0.01, "scoring_cost_usd": 0.002,
               "duration_s": 1.2, "error": null,
               "capture": "...", "workspace": "...", "diff_ref": "...",
               "workspace_note": null,
               "case": {"input": "...", "expected": "...", "tags": [], "metadata": {}}}]
}
```

`totals` counts as `EvalReport` does: `runs` is cases x epochs, `results` the runs with a
record, `not_started` the rest; `passed` the runs that passed (`CaseResult.passed`:
scored, no error, every scorer passed), `failed` the other scored runs (`passed + failed
== scored`), `errors` the scored runs that ended in an error (counted in `failed`: a run
that errored never passes, whatever its scorers said). A result's `passed` is the same
rule. `pass_at_k` is keyed by k as a string (JSON keys are strings).

Money and tokens say whose they are, per result and in the totals alike: `cost_usd` and
`usage` are everything the run (the eval) spent, its agent's calls and its scoring's (an
LLM judge's), what the eval's budget was charged; `agent_cost_usd` and `agent_usage` are
the agent's part, `scoring_cost_usd` and `scoring_usage` the scoring's, so agent +
scoring == total (up to float rounding), and the results' `cost_usd` add up to the
totals'. Version 2: a result's `cost_usd` and `usage` include its scoring (version 1 left
the judge's spend out) and the `agent_*` and `scoring_*` fields are new.

`results` are by case, then epoch (0-based, as in the run id). A typed case value or
structured output is its JSON (what JSON cannot carry is its `repr`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from ..conversation import Usage
from ._report import CaseResult, EvalReport, ScorerSummary
from ._results import as_json_data

__all__ = ["REPORT_JSON_FORMAT", "report_to_json", "write_json_report"]

#: The `format` of the document `report_to_json` builds (its `version` says which one).
REPORT_JSON_FORMAT = "tiller-eval-report"
_VERSION = 2


def report_to_json(report: EvalReport) -> dict[str, Any]:
    """`report` as the JSON document the module docstring describes."""
    return {
        "format": REPORT_JSON_FORMAT,
        "version": _VERSION,
        "eval_id": report.eval_id,
        "epochs": report.epochs,
        "cancelled": report.cancelled,
        "totals": _totals(report),
        "scorers": {name: _scorer(summary) for name, summary in report.scorers.items()},
        "results": [_result(result) for result in report.results],
    }


def write_json_report(report: EvalReport, path: str | os.PathLike[str]) -> Path:
    """Write `report_to_json(report)` to `path` (its directory is made); the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(orjson.dumps(report_to_json(report), option=orjson.OPT_INDENT_2) + b"\n")
    return target


def _usage(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cached_input_tokens": usage.cached_input_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "requests": usage.requests,
    }


def _totals(report: EvalReport) -> dict[str, Any]:
    return {
        "runs": report.total,
        "results": len(report.results),
        "scored": report.scored,
        "passed": report.passed,
        "failed": report.scored - report.passed,
        "errors": report.errors,
        "not_run": report.not_run,
        "cancelled": report.cancelled_runs,
        "not_started": report.not_started,
        "pass_rate": report.pass_rate,
        "cost_usd": report.cost_usd,
        "agent_cost_usd": report.agent_cost_usd,
        "scoring_cost_usd": report.scoring_cost_usd,
        "usage": _usage(report.usage),
        "agent_usage": _usage(report.agent_usage),
        "scoring_usage": _usage(report.scoring_usage),
    }


def _scorer(summary: ScorerSummary) -> dict[str, Any]:
    return {
        "scored": summary.scored,
        "passed": summary.passed,
        "errors": summary.errors,
        "pass_rate": summary.pass_rate,
        "mean": summary.mean,
        "pass_at_k": {str(k): rate for k, rate in sorted(summary.pass_at_k.items())},
        "pass_hat_k": {str(k): rate for k, rate in sorted(summary.pass_hat_k.items())},
    }


def _result(result: CaseResult) -> dict[str, Any]:
    outcome, case = result.outcome, result.case
    return {
        "case_id": case.id,
        "epoch": result.epoch,
        "run_id": result.run_id,
        "status": result.status,
        "passed": result.passed,
        "attempt": result.attempt,
        "scores": {
            name: {
                "value": score.value,
                "passed": bool(score.passed),
                "explanation": score.explanation,
                "error": score.error,
            }
            for name, score in result.scores.items()
        },
        "text": outcome.text,
        "output": as_json_data(outcome.output),
        "stop_cause": outcome.stop_cause.value,
        "steps": result.steps,
        "usage": _usage(result.usage),
        "agent_usage": _usage(outcome.usage),
        "scoring_usage": _usage(result.scoring_usage),
        "cost_usd": result.cost_usd,
        "agent_cost_usd": outcome.cost_usd,
        "scoring_cost_usd": result.scoring_cost_usd,
        "duration_s": outcome.duration_s,
        "error": outcome.error,
        "capture": result.capture,
        "workspace": result.workspace,
        "diff_ref": result.diff_ref,
        "workspace_note": result.workspace_note,
        "case": {
            "input": as_json_data(case.input),
            "expected": as_json_data(case.expected),
            "tags": list(case.tags),
            "metadata": as_json_data(dict(case.metadata)),
        },
    }

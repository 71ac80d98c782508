"""An eval's report as files: the JSON document (`report_to_json`) and JUnit XML
(`report_to_junit`), over every kind of case run: passed, failed, ended in error, a
scorer that could not judge, not run (budget) and cancelled. Both are parsed back."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from pydantic import BaseModel

from tiller.conversation import Usage
from tiller.evals import (
    REPORT_JSON_FORMAT,
    Case,
    CaseOutcome,
    CaseResult,
    CaseStatus,
    EvalReport,
    Score,
    report_to_json,
    report_to_junit,
    write_json_report,
    write_junit_report,
)
from tiller.state import StopCause


class Invoice(BaseModel):
    total: float


def result(
    case_id: str,
    status: CaseStatus,
    scores: dict[str, Score],
    *,
    epoch: int = 0,
    text: str = "",
    error: str | None = None,
    output: object = None,
) -> CaseResult:
    case = Case(case_id, f"prompt {case_id}", expected=Invoice(total=1.5), tags=("smoke",))
    outcome = CaseOutcome(
        case=case,
        epoch=epoch,
        text=text,
        stop_cause=StopCause.CANCELLED if status == "cancelled" else StopCause.COMPLETED,
        output=output,
        usage=Usage(input_tokens=10, output_tokens=3, requests=1),
        cost_usd=0.25,
        duration_s=1.5,
        error=error,
    )
    run_id = f"ev:{case_id}:e{epoch}"
    return CaseResult(
        case=case, epoch=epoch, run_id=run_id, status=status, outcome=outcome, scores=scores
    )


def report() -> EvalReport:
    passed = Score.of(True, "right")
    return EvalReport.build(
        "ev",
        2,
        14,
        [
            result("good", "scored", {"exact": passed}, text="ok", output=Invoice(total=1.5)),
            result("good", "scored", {"exact": passed}, epoch=1, text="ok"),
            result("wrong", "scored", {"exact": Score.of(False, "expected 'ok'")}, text="ko"),
            result("crashed", "scored", {"exact": Score.of(False, "no text")}, error="Boom\nboom"),
            result(
                "unjudged",
                "scored",
                {"exact": passed, "judge": Score.failed_with("Traceback...\nValueError: x")},
                text="ok",
            ),
            result("poor", "not_run", {}),
            result("stopped", "cancelled", {}, text="half \x1b[31mred\x1b[0m \x00 done"),
        ],
    )


def test_the_json_document_has_totals_scorers_and_every_run(tmp_path: Path) -> None:
    path = write_json_report(report(), tmp_path / "deep" / "report.json")
    document = json.loads(path.read_text())
    assert document == report_to_json(report())
    assert (document["format"], document["version"]) == (REPORT_JSON_FORMAT, 2)
    assert (document["eval_id"], document["epochs"], document["cancelled"]) == ("ev", 2, False)
    agent_usage = {
        "input_tokens": 70,
        "output_tokens": 21,
        "cached_input_tokens": 0,
        "reasoning_tokens": 0,
        "requests": 7,
    }
    assert document["totals"] == {
        "runs": 14,
        "results": 7,
        "scored": 5,
        "passed": 2,
        "failed": 3,
        "errors": 1,
        "not_run": 1,
        "cancelled": 1,
        "not_started": 7,
        "pass_rate": 0.4,
        "cost_usd": 1.75,
        "agent_cost_usd": 1.75,
        "scoring_cost_usd": 0.0,
        "usage": agent_usage,
        "agent_usage": agent_usage,
        "scoring_usage": {name: 0 for name in agent_usage},
    }
    exact = document["scorers"]["exact"]
    assert (exact["scored"], exact["passed"], exact["errors"]) == (5, 3, 0)
    assert exact["pass_at_k"] == {
        "1": 0.5,
        "2": 1.0,
    }  # by case: 1, 0, 0, 1 and exact["pass_hat_k"]["2"] == 1.0
    assert document["scorers"]["judge"]["errors"] == 1
    runs = {(run["case_id"], run["epoch"]): run for run in document["results"]}
    good = runs["good", 0]
    assert good["output"] == {"total": 1.5} and good["case"]["expected"] == {"total": 1.5}
    assert good["case"] == {
        "input": "prompt good",
        "expected": {"total": 1.5},
        "tags": ["smoke"],
        "metadata": {},
    }
    assert good["scores"]["exact"] == {
        "value": 1.0,
        "passed": True,
        "explanation": "right",
        "error": None,
    }
    assert (good["run_id"], good["status"], good["passed"]) == ("ev:good:e0", "scored", True)
    assert (good["usage"]["requests"], good["cost_usd"], good["duration_s"]) == (1, 0.25, 1.5)
    assert runs["crashed", 0]["error"] == "Boom\nboom"
    assert runs["poor", 0]["status"] == "not_run" and runs["poor", 0]["scores"] == {}
    assert runs["stopped", 0]["stop_cause"] == "cancelled"


def test_junit_has_one_testcase_per_run_and_counts_that_match(tmp_path: Path) -> None:
    path = write_junit_report(report(), tmp_path / "junit.xml")
    root = ET.parse(path).getroot()  # parses: the escape codes and NUL were replaced
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    outcomes = {
        case.get("name"): [child.tag for child in case if child.tag != "system-out"]
        for case in cases
    }
    assert outcomes == {
        "crashed[e0]": ["error"],
        "good[e0]": [],
        "good[e1]": [],
        "poor[e0]": ["error"],  # not run: the eval did not show it passes
        "stopped[e0]": ["skipped"],
        "unjudged[e0]": ["error"],
        "wrong[e0]": ["failure"],
    }
    assert {case.get("classname") for case in cases} == {"ev"}
    for element in (root, suite):
        counts = {key: element.get(key) for key in ("tests", "failures", "errors", "skipped")}
        assert counts == {"tests": "7", "failures": "1", "errors": "3", "skipped": "1"}
        assert element.get("time") == "10.500"
    by_name = {case.get("name"): case for case in cases}
    failure = by_name["wrong[e0]"].find("failure")
    assert failure is not None and failure.get("message") == "failed: exact"
    assert failure.text == "exact: 0 FAIL: expected 'ok'"
    error = by_name["crashed[e0]"].find("error")
    assert error is not None and error.get("message") == "Boom" and error.text == "Boom\nboom"
    judged = by_name["unjudged[e0]"].find("error")
    assert judged is not None and judged.get("message") == "could not score: judge"
    assert "ValueError: x" in (judged.text or "")
    not_run = by_name["poor[e0]"].find("error")
    assert not_run is not None and not_run.get("type") == "not run"
    assert not_run.get("message") == "not run: the eval's budget was spent"
    out = by_name["stopped[e0]"].find("system-out")
    assert out is not None and out.text == "half \ufffd[31mred\ufffd[0m \ufffd done"
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["not_started"] == "7" and properties["epochs"] == "2"


def test_a_run_that_errored_never_passes_in_any_report(tmp_path: Path) -> None:
    """One rule (`CaseResult.passed`): an outcome with an error is not a pass, even when
    every scorer passed it; the JSON, JUnit and HTML all say so (the
    scorecard: tests/cli/test_eval_cli_reports.py)."""
    from tiller.evals import render_html_report

    errored = result("flaky", "scored", {"exact": Score(1.0)}, error="Boom\nboom", text="ok")
    report = EvalReport.build("ev", 1, 1, [errored])
    assert not errored.passed
    assert (report.passed, report.errors, report.pass_rate) == (0, 1, 0.0)

    document = report_to_json(report)
    assert document["results"][0]["passed"] is False
    totals = document["totals"]
    assert (totals["passed"], totals["failed"], totals["errors"]) == (0, 1, 1)
    assert totals["pass_rate"] == 0.0

    suite = report_to_junit(report).find("testsuite")
    assert suite is not None
    assert (suite.get("errors"), suite.get("failures")) == ("1", "0")

    html = render_html_report(report)
    assert 'data-standing="error"' in html and 'data-standing="pass"' not in html


def test_a_scorer_summary_counts_no_pass_on_a_run_that_errored() -> None:
    """The scorecard's per-scorer rows follow the run's rule too: a scorer that passed
    what an errored run left is not a pass in its summary, nor in pass@k / pass^k, though
    its value still counts in the mean (the score was given)."""
    errored = result("flaky", "scored", {"exact": Score(1.0)}, error="Boom", text="ok")
    clean = result("fine", "scored", {"exact": Score(1.0)}, text="ok")
    summary = EvalReport.build("ev", 1, 2, [errored, clean]).scorers["exact"]
    assert (summary.scored, summary.passed, summary.pass_rate) == (2, 1, 0.5)
    assert summary.pass_at_k[1] == 0.5 and summary.pass_hat_k[1] == 0.5
    assert summary.mean == 1.0


def test_error_line_is_a_tracebacks_last_line_or_a_messages_first() -> None:
    from tiller.evals import error_line

    traceback = 'Traceback (most recent call last):\n  File "x.py"\nValueError: bad\n\n'
    assert error_line(traceback, 90) == "ValueError: bad"
    assert error_line("the fixture is missing\n  looked in /tmp/x", 90) == (
        "the fixture is missing"
    )
    assert error_line("\n\n", 90) == ""
    assert error_line("a" * 20, 10) == "a" * 9 + "…"


def test_the_json_counts_the_judges_spend_per_run_and_in_the_totals() -> None:
    """A run's `cost_usd`/`usage` are the agent's and its scoring's; `agent_*` and
    `scoring_*` say whose, and add up to them, per run and in the totals."""
    from dataclasses import replace

    judged = replace(
        result("judged", "scored", {"judge": Score.of(True, "fine")}, text="ok"),
        scoring_usage=Usage(input_tokens=5, output_tokens=2, requests=1),
        scoring_cost_usd=0.5,
    )
    plain = result("plain", "scored", {"judge": Score.of(True, "fine")}, text="ok")
    document = report_to_json(EvalReport.build("ev", 1, 2, [judged, plain]))
    run = next(run for run in document["results"] if run["case_id"] == "judged")
    assert (run["agent_cost_usd"], run["scoring_cost_usd"], run["cost_usd"]) == (0.25, 0.5, 0.75)
    assert run["agent_usage"]["input_tokens"] == 10
    assert run["scoring_usage"]["input_tokens"] == 5
    assert run["usage"]["input_tokens"] == 15 and run["usage"]["requests"] == 2
    totals = document["totals"]
    assert (totals["agent_cost_usd"], totals["scoring_cost_usd"]) == (0.5, 0.5)
    assert totals["cost_usd"] == 1.0
    assert totals["scoring_usage"]["requests"] == 1 and totals["agent_usage"]["requests"] == 2
    assert totals["usage"]["requests"] == 3
    assert sum(run["cost_usd"] for run in document["results"]) == totals["cost_usd"]

"""An eval's report as JUnit XML: what `tiller eval run|show --junit PATH` writes, so a CI
system that shows test results (GitLab, Jenkins, GitHub's test reporters) shows an eval's.

One `<testsuite>` per eval (in a `<testsuites>` root), one `<testcase>` per case run with a
record: `classname` is the eval id, `name` is `case[e<epoch>]` (the epoch 0-based, as in
the run id `{eval_id}:{case}:e{epoch}`), `time` the run's duration in seconds. A run
that passed (`CaseResult.passed`: scored, no error, every scorer passed) has no child but
its output; otherwise exactly one of:

- `<failure>`: scored, and some scorer failed it; `message` names the failing scorers,
  the text lists every scorer's value and explanation;
- `<error>`: the run ended in an error (`message` is the error), or a scorer could not
  judge it (a score with an error: the text is that scorer's traceback or reason), or it
  is `not_run` (type `not run`: the eval's budget was spent before the run could start,
  so the eval did not show what it was asked to; an error, not a skip, so that a CI
  system that passes a suite with skips does not pass this one);
- `<skipped>`: `cancelled` (the eval was cancelled while it ran, on purpose; a resumed
  eval runs it again).

`<system-out>` carries the run's final text. The suite's and the root's `tests`,
`failures`, `errors` and `skipped` count those elements; `time` sums the runs'. Runs that
have no record yet (the eval was stopped before they began) are not test cases; the
suite's `not_started` property counts them. Written with the standard library's
`xml.etree.ElementTree`, so the XML is escaped and well formed by construction.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from ._report import CaseResult, EvalReport

__all__ = ["report_to_junit", "write_junit_report"]

#: Characters XML 1.0 cannot carry at all, escaped or not (an agent's text may hold a
#: terminal's escape codes): each is written as U+FFFD, so the file always parses.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def report_to_junit(report: EvalReport) -> ET.Element:
    """`report` as a `<testsuites>` element (see the module docstring)."""
    suite = ET.Element("testsuite", name=report.eval_id)
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("epochs", report.epochs),
        ("runs", report.total),
        ("not_started", report.not_started),
        ("cancelled", str(report.cancelled).lower()),
        ("cost_usd", f"{report.cost_usd:.6f}"),
    ):
        ET.SubElement(properties, "property", name=name, value=str(value))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    for result in report.results:
        kind = _add_case(suite, report.eval_id, result)
        counts["tests"] += 1
        if kind is not None:
            counts[kind] += 1
        total_time += result.outcome.duration_s
    for name, count in counts.items():
        suite.set(name, str(count))
    suite.set("time", f"{total_time:.3f}")
    root = ET.Element("testsuites", name=f"tiller eval {report.eval_id}")
    for name, count in counts.items():
        root.set(name, str(count))
    root.set("time", f"{total_time:.3f}")
    root.append(suite)
    return root


def write_junit_report(report: EvalReport, path: str | os.PathLike[str]) -> Path:
    """Write `report_to_junit(report)` to `path` (its directory is made); the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tree = ET.ElementTree(report_to_junit(report))
    ET.indent(tree)
    tree.write(target, encoding="utf-8", xml_declaration=True)
    return target


def _add_case(suite: ET.Element, eval_id: str, result: CaseResult) -> str | None:
    """Add `result`'s `<testcase>`; which count it adds to (None: it passed)."""
    outcome = result.outcome
    case = ET.SubElement(
        suite,
        "testcase",
        classname=eval_id,
        name=_xml(f"{result.case.id}[e{result.epoch}]"),
        time=f"{outcome.duration_s:.3f}",
    )
    kind: str | None = None
    if result.status == "not_run":
        error = ET.SubElement(
            case, "error", message="not run: the eval's budget was spent", type="not run"
        )
        error.text = _xml(outcome.error or "the eval's budget was spent before it started")
        kind = "errors"
    elif result.status == "cancelled":
        ET.SubElement(case, "skipped", message="cancelled: the eval was cancelled during it")
        kind = "skipped"
    elif outcome.error is not None:
        error = ET.SubElement(case, "error", message=_line(outcome.error), type="run error")
        error.text = _xml(outcome.error)
        kind = "errors"
    elif broken := {name: s for name, s in result.scores.items() if s.error is not None}:
        names = ", ".join(sorted(broken))
        error = ET.SubElement(
            case, "error", message=_xml(f"could not score: {names}"), type="scorer error"
        )
        error.text = _xml("\n\n".join(f"{name}: {score.error}" for name, score in broken.items()))
        kind = "errors"
    elif not result.passed:
        failing = sorted(name for name, score in result.scores.items() if not score.passed)
        message = f"failed: {', '.join(failing)}" if failing else "no scorer scored it"
        failure = ET.SubElement(case, "failure", message=_xml(message), type="score")
        failure.text = _xml(_explanations(result))
        kind = "failures"
    if outcome.text:
        ET.SubElement(case, "system-out").text = _xml(outcome.text)
    return kind


def _explanations(result: CaseResult) -> str:
    return "\n".join(
        f"{name}: {score.value:.3g} {'pass' if score.passed else 'FAIL'}: {score.explanation}"
        for name, score in sorted(result.scores.items())
    )


def _line(text: str, limit: int = 200) -> str:
    """The first line of `text`, cut to `limit` characters (an attribute is one line)."""
    first = text.strip().splitlines()[0] if text.strip() else text
    return _xml(first if len(first) <= limit else first[: limit - 1] + "…")

"""The HTML report's runs: the table of every run, and one section per run with its
transcript, its scores and their explanations, and any error.

A run's section has the anchor `case-<id>-e<epoch>` (`case_anchor`), which the table's
links and the plots' points jump to. Each section is a `<details>`, closed until it is
asked for, so a large eval's page stays short; the page's script opens the one the address
names. All of a run's content is escaped (`esc`): it is model output, never markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..conversation import AssistantMessage, ToolCall, ToolResult, UserMessage
from ..loop import ToolTraceEntry
from ._error_line import error_line
from ._report import CaseResult
from ._report_format import (
    NOTHING,
    as_text,
    badge,
    esc,
    money,
    pretty_json,
    seconds,
    standing,
    tokens,
)
from ._report_plots import case_anchor
from ._score import Score

__all__ = ["run_sections", "run_table"]

#: An error column shows the first line of the error, at most this many characters.
ERROR_PREVIEW = 90


def _score_cell(result: CaseResult, name: str) -> str:
    score = result.scores.get(name)
    if score is None:
        return f'<td class="num muted">{NOTHING}</td>'
    mark = "✓" if score.passed else ("⚠" if score.error else "✗")
    kind = "pass" if score.passed else "fail"
    title = esc(score.explanation or "")
    return f'<td class="num score-{kind}" title="{title}">{mark} {score.value:.2f}</td>'


def _score_standing(score: Score) -> str:
    """A scorer that raised could not judge: an error, not the agent's fail."""
    if score.error:
        return "error"
    return "pass" if score.passed else "fail"


def run_table(results: Sequence[CaseResult], scorers: Iterable[str], *, prefix: str = "") -> str:
    """Every run as a row; its case links to its section. `prefix` tells the anchors of a
    second eval's runs (the comparison's baseline) from this eval's."""
    names = list(scorers)
    head = "".join(f'<th class="num">{esc(name)}</th>' for name in names)
    rows = []
    for result in results:
        anchor = case_anchor(result.case.id, result.epoch, prefix=prefix)
        outcome = result.outcome
        usage = result.usage
        error = outcome.error or next(
            (score.error for score in result.scores.values() if score.error), None
        )
        rows.append(
            f'<tr data-standing="{standing(result)}">'
            f'<td><a class="case-link" href="#{anchor}">{esc(result.case.id)}</a></td>'
            f'<td class="num">{result.epoch}</td>'
            f"<td>{badge(standing(result))}</td>"
            + "".join(_score_cell(result, name) for name in names)
            + f'<td class="num">{money(result.cost_usd)}</td>'
            f'<td class="num">{seconds(outcome.duration_s)}</td>'
            f'<td class="num">{tokens(usage.input_tokens + usage.output_tokens)}</td>'
            f'<td class="error-cell">{esc(error_line(error, ERROR_PREVIEW)) if error else ""}</td>'
            "</tr>"
        )
    return (
        '<table class="runs sortable"><thead><tr>'
        '<th>case</th><th class="num">epoch</th><th>result</th>'
        f'{head}<th class="num">cost</th><th class="num">duration</th>'
        '<th class="num">tokens</th><th>error</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _trace_note(entry: ToolTraceEntry | None) -> str:
    if entry is None:
        return ""
    notes = []
    if entry.refused_by is not None:
        notes.append(f"refused by {entry.refused_by}")
    if entry.unknown:
        notes.append("unknown tool")
    if entry.malformed_arguments:
        notes.append("malformed arguments")
    if entry.is_error and entry.refused_by is None:
        notes.append("failed")
    if entry.staged:
        notes.append("staged")
    if entry.rerun:
        notes.append("re-run after recovery")
    return "".join(f'<span class="tag tag-warn">{esc(note)}</span>' for note in notes)


def _tool_call(call: ToolCall, trace: dict[str, ToolTraceEntry]) -> str:
    return (
        '<div class="tool tool-call">'
        f'<div class="tool-head">→ calls <code>{esc(call.name)}</code>'
        f'<span class="muted">{esc(call.id)}</span>{_trace_note(trace.get(call.id))}</div>'
        f"<pre>{esc(pretty_json(call.arguments))}</pre></div>"
    )


def _tool_result(result: ToolResult) -> str:
    error = " tool-error" if result.is_error else ""
    tag = '<span class="tag tag-warn">error</span>' if result.is_error else ""
    return (
        f'<div class="tool tool-result{error}">'
        f'<div class="tool-head">← result of <code>{esc(result.name)}</code>'
        f'<span class="muted">{esc(result.call_id)}</span>{tag}</div>'
        f"<pre>{esc(result.content)}</pre></div>"
    )


def _message(message: UserMessage | AssistantMessage, trace: dict[str, ToolTraceEntry]) -> str:
    parts = []
    if isinstance(message, AssistantMessage):
        for reasoning in message.reasoning:
            shown = reasoning.text or ("(redacted)" if reasoning.redacted else "")
            if shown:
                parts.append(
                    '<details class="reasoning"><summary>reasoning</summary>'
                    f"<pre>{esc(shown)}</pre></details>"
                )
    if message.text:
        parts.append(f'<div class="text">{esc(message.text)}</div>')
    if isinstance(message, AssistantMessage):
        parts += [_tool_call(call, trace) for call in message.tool_calls]
    else:
        parts += [_tool_result(result) for result in message.tool_results]
    role = message.role
    who = "tool results" if role == "user" and not message.text and parts else role
    return f'<li class="msg msg-{role}"><div class="who">{esc(who)}</div>{"".join(parts)}</li>'


def _transcript(result: CaseResult) -> str:
    outcome = result.outcome
    if not outcome.messages:
        if not outcome.text:
            return '<p class="muted">No transcript was kept for this run.</p>'
        return (
            '<p class="muted">No transcript was kept; the run\'s final text:</p>'
            f'<div class="text final">{esc(outcome.text)}</div>'
        )
    trace = {entry.call_id: entry for entry in outcome.tool_trace}
    messages = "".join(_message(message, trace) for message in outcome.messages)
    return f'<ol class="transcript">{messages}</ol>'


def _scores(result: CaseResult) -> str:
    if not result.scores:
        return '<p class="muted">Not scored.</p>'
    rows = []
    for name, score in sorted(result.scores.items()):
        error = (
            f'<details class="traceback" open><summary>traceback</summary>'
            f"<pre>{esc(score.error)}</pre></details>"
            if score.error
            else ""
        )
        rows.append(
            f"<tr><td><code>{esc(name)}</code></td>"
            f'<td class="num">{score.value:.2f}</td>'
            f"<td>{badge(_score_standing(score))}</td>"
            f'<td class="explanation">{esc(score.explanation)}{error}</td></tr>'
        )
    return (
        '<table class="scores"><thead><tr><th>scorer</th><th class="num">score</th>'
        f"<th>result</th><th>explanation</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _facts(result: CaseResult) -> str:
    outcome = result.outcome
    usage = result.usage
    facts = [
        ("run id", result.run_id),
        ("status", result.status.replace("_", " ")),
        ("stopped because", getattr(outcome.stop_cause, "value", outcome.stop_cause)),
        ("steps", result.steps),
        ("tokens", f"{tokens(usage.input_tokens)} in · {tokens(usage.output_tokens)} out"),
        ("cost", money(result.cost_usd)),
        ("of it, scoring", money(result.scoring_cost_usd) if result.scoring_cost_usd else None),
        ("duration", seconds(outcome.duration_s)),
        ("attempt", result.attempt),
        ("capture", result.capture),
        ("workspace", result.workspace),
        ("diff", result.diff_ref),
        ("workspace note", result.workspace_note),
    ]
    shown = "".join(
        f"<dt>{esc(label)}</dt><dd>{esc(value)}</dd>"
        for label, value in facts
        if value is not None and value != ""
    )
    return f'<dl class="facts">{shown}</dl>'


def run_section(result: CaseResult, *, prefix: str = "", label: str = "") -> str:
    """One run's section: what it was asked, its scores, error, transcript and facts."""
    outcome = result.outcome
    case = result.case
    kind = standing(result)
    anchor = case_anchor(case.id, result.epoch, prefix=prefix)
    expected = (
        f'<div><h4>Expected</h4><pre class="scroll">{esc(as_text(case.expected))}</pre></div>'
        if case.expected is not None
        else ""
    )
    error = (
        f'<h4>Error</h4><pre class="traceback scroll">{esc(outcome.error)}</pre>'
        if outcome.error
        else ""
    )
    heading = f'<span class="muted">{esc(label)}</span>' if label else ""
    return (
        f'<details class="run run-{kind}" id="{anchor}">'
        f'<summary>{heading}<span class="run-title">{esc(case.id)}</span>'
        f'<span class="muted">epoch {result.epoch}</span>{badge(kind)}'
        f'<span class="run-meta">{money(result.cost_usd)} · {seconds(outcome.duration_s)}'
        f" · {result.steps} step{'' if result.steps == 1 else 's'}</span></summary>"
        '<div class="run-body">'
        '<div class="io">'
        f'<div><h4>Input</h4><pre class="scroll">{esc(as_text(case.input))}</pre></div>'
        f"{expected}</div>"
        f"<h4>Scores</h4>{_scores(result)}{error}"
        f"<h4>Transcript</h4>{_transcript(result)}"
        f"<h4>Run</h4>{_facts(result)}"
        f'<p class="back"><a href="#runs">↑ back to the runs</a></p>'
        "</div></details>"
    )


def run_sections(results: Iterable[CaseResult], *, prefix: str = "", label: str = "") -> str:
    """Every run's section, in the report's order (by case, then epoch)."""
    return "".join(run_section(result, prefix=prefix, label=label) for result in results)

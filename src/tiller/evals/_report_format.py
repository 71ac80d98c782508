"""Small pieces of the HTML report's markup: escaping, numbers as people read them, badges.

Everything a run produced (its text, its tool calls' arguments and results, a scorer's
explanation, a traceback, even a case's input) is untrusted: it passes through `esc`
before it reaches the page, so model output that contains markup shows as text and never
runs. Nothing here adds markup from data without escaping it.
"""

from __future__ import annotations

import html
import json
from typing import Any

from ._report import CaseResult

__all__ = [
    "NOTHING",
    "as_text",
    "badge",
    "esc",
    "money",
    "percent",
    "pretty_json",
    "seconds",
    "standing",
    "tokens",
]


#: What a cell shows when there is no value (an en dash).
NOTHING = "\N{EN DASH}"


def esc(value: object) -> str:
    """`value` as text that is safe inside an element or a quoted attribute."""
    return html.escape(str(value), quote=True)


def as_text(value: Any) -> str:
    """A case's input, expected value or a tool's arguments as readable text: a string
    as it is, anything else as indented JSON (or its repr when JSON cannot carry it)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def pretty_json(text: str) -> str:
    """A tool call's JSON arguments indented, or the text as it was if it is not JSON."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def money(value: float, *, digits: int = 6) -> str:
    """Dollars: cents and up to 4 decimals, below a cent `digits` decimals (a cheap run
    is not free: a millionth of a dollar still shows)."""
    if value == 0:
        return "$0"
    if value < 0.01:
        return f"${value:.{digits}f}"
    return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def seconds(value: float) -> str:
    if value < 60:
        return f"{value:.2f} s"
    minutes, rest = divmod(round(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {rest:02d}s"


def percent(value: float | None) -> str:
    return NOTHING if value is None else f"{value:.0%}"


def tokens(value: int) -> str:
    return f"{value:,}"


def standing(result: CaseResult) -> str:
    """`pass`, `fail`, `error` (scored, but the run ended in an error), `cancelled` or
    `not-run`: the class and the words of the run's badge. A run a scorer could not
    judge (it raised) is an error too: neither the agent's pass nor its fail."""
    if result.status == "cancelled":
        return "cancelled"
    if result.status == "not_run":
        return "not-run"
    if result.passed:
        return "pass"
    if result.outcome.error or any(score.error for score in result.scores.values()):
        return "error"
    return "fail"


_BADGE_WORDS = {
    "pass": "✓ pass",
    "fail": "✗ fail",
    "error": "⚠ error",
    "cancelled": "⊘ cancelled",
    "not-run": f"{NOTHING} not run",
    "regressed": "▼ regressed",
    "improved": "▲ improved",
    "unchanged": "= unchanged",
    "added": "+ added",
    "removed": "\N{MINUS SIGN} removed",
    "unscored": "? unscored",
}


def badge(kind: str) -> str:
    """A badge for a run's standing or a case's change: a symbol and a word, so it reads
    without its colour."""
    return f'<span class="badge badge-{esc(kind)}">{esc(_BADGE_WORDS.get(kind, kind))}</span>'

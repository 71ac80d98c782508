"""For the HTML report tests: two real evals, run by scripted agents on a SQLite store and
read back from it, the second a changed version of the first.

`after` (3 epochs): `arith` always passes; `capital` passes 2 epochs of 3; `lookup` calls
a tool, then answers with its result; `xss` answers with markup that would run if the page
did not escape it; `odd` is scored by a scorer that raises. `before` (2 epochs), the
baseline: `arith` fails, `capital` always passes, `lookup` the same, `gone` is only here.
So against `before`, `after` has `capital` regressed, `arith` improved, `lookup`
unchanged, `xss` and `odd` added and `gone` removed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tiller.evals import Case, CaseOutcome, Eval, EvalReport, FunctionScorer, Score, load_report
from tiller.loop import Agent, Budget, Pricing
from tiller.model import ScriptedModel
from tiller.model.scripted import TurnInfo, TurnLike
from tiller.store import open_bus
from tiller.tools import tool

from ._runner_support import Includes, Messages

#: What the `xss` case's model answers: markup a careless page would run.
XSS = (
    '<script>document.body.dataset.pwned = "script"</script>'
    "<img src=x onerror=\"document.body.dataset.pwned = 'img'\">"
)

CASES = {
    "arith": Case("arith", "What is 2 + 2?", expected="4"),
    "capital": Case("capital", "What is the capital of France?", expected="Paris"),
    "lookup": Case("lookup", "Look up the boiling point of water.", expected="100"),
    "xss": Case("xss", "Say something dangerous.", expected="safe"),
    "odd": Case("odd", "Say anything.", expected="anything"),
    "gone": Case("gone", "A case only the baseline has.", expected="here"),
}


@tool(read_only=True)
def look(topic: str) -> str:
    """Look something up."""
    return f"{topic}: 100 degrees Celsius at sea level"


def _brevity(outcome: CaseOutcome) -> Score:
    """A graded score (shorter answers score higher, 0.3 passes), which raises on the
    `odd` case."""
    if outcome.case.id == "odd":
        raise RuntimeError("the brevity scorer cannot judge this <b>odd</b> answer")
    length = len(outcome.text)
    value = min(1.0, 12 / max(length, 1))
    return Score(value, f"{length} characters; 12 or fewer is 1.0", passed=value >= 0.3)


def _agent(answers: Callable[[str, int], str]) -> Callable[[], Agent]:
    """An agent factory: the model answers `answers(prompt, nth time asked)`, after one
    `look` call when the prompt asks to look something up. A small delay per case makes
    the runs' durations differ (no test asserts on them)."""
    asked: dict[str, int] = {}

    def turn(messages: Messages, info: TurnInfo) -> TurnLike:
        prompt = messages[0].text
        if "Look up" in prompt and info.turn == 1:
            call = {"name": "look", "arguments": {"topic": "water"}}
            return {"tool_calls": [call], "text": "Let me look that up."}
        asked[prompt] = asked.get(prompt, 0) + 1
        delay = 0.01 * (len(prompt) % 7)
        return {"text": answers(prompt, asked[prompt]), "delay": delay}

    return lambda: Agent(ScriptedModel(turn), [look])


def _after(prompt: str, nth: int) -> str:
    if "2 + 2" in prompt:
        return "4"
    if "France" in prompt:
        return "Lyon, I think." if nth == 2 else "Paris is the capital of France."
    if "boiling" in prompt:
        return "Water boils at 100 °C at sea level."
    if "dangerous" in prompt:
        return XSS
    return "anything at all"


def _before(prompt: str, nth: int) -> str:
    if "2 + 2" in prompt:
        return "5"
    if "France" in prompt:
        return "Paris."
    if "boiling" in prompt:
        return "100 °C."
    return "here"


async def _run(
    store: str, eval_id: str, answers: Callable[[str, int], str], cases: list[Case], epochs: int
) -> EvalReport:
    await Eval(
        _agent(answers),
        cases,
        [Includes(), FunctionScorer(_brevity, name="brevity")],
        epochs=epochs,
        concurrency=1,
        budget=Budget(pricing={"scripted": Pricing(input=3.0, output=15.0)}),
        store=store,
        eval_id=eval_id,
    ).run()
    async with await open_bus(store) as bus:
        return await load_report(bus, eval_id)


@dataclass(frozen=True)
class Reports:
    after: EvalReport
    before: EvalReport


async def run_reports(folder: Path) -> Reports:
    """Both evals, run on one SQLite store in `folder` and read back from it."""
    store = f"sqlite:///{folder / 'evals.db'}"
    after_cases = [CASES[name] for name in ("arith", "capital", "lookup", "xss", "odd")]
    before_cases = [CASES[name] for name in ("arith", "capital", "lookup", "gone")]
    after = await _run(store, "support-bot-v2", _after, after_cases, epochs=3)
    before = await _run(store, "support-bot-v1", _before, before_cases, epochs=2)
    return Reports(after=after, before=before)


def run_reports_now(folder: Path) -> Reports:
    """`run_reports` for a synchronous test (the browser's, whose Playwright is sync)."""
    return asyncio.run(run_reports(folder))

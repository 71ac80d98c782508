"""`tiller eval run`'s progress bar, fed by a real eval's `on_progress`: drawn on a
terminal (runs done of all, passing, cost), and silent in a pipe."""

from __future__ import annotations

import io
import re

from rich.console import Console

from tiller.cli._eval_progress import EvalProgressBar
from tiller.evals import Case, Eval, Includes
from tiller.loop import Agent
from tiller.model import ScriptedModel

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def echoing() -> Eval:
    cases = [
        Case("a", "x", expected="x"),
        Case("b", "y", expected="y"),
        Case("c", "z", expected="no"),
    ]
    agent = Agent(ScriptedModel(lambda messages, info: messages[0].text))
    return Eval(agent, cases, [Includes()], concurrency=1, eval_id="bar")


async def test_on_a_terminal_the_bar_shows_done_passing_and_cost() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    ev = echoing()
    with EvalProgressBar(ev.eval_id, ev.total, console=console) as bar:
        report = await ev.run(on_progress=bar.update)
    assert report.passed == 2
    last = ANSI.sub("\n", out.getvalue()).strip().splitlines()[-1]
    assert re.search(r"^bar .* 3/3 2 passing \$0\.0000 ", last), last


async def test_in_a_pipe_the_bar_draws_nothing() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=120)
    ev = echoing()
    with EvalProgressBar(ev.eval_id, ev.total, console=console) as bar:
        await ev.run(on_progress=bar.update)
    assert out.getvalue() == ""

"""`agent.iter(...)`: a run step by step — watched, stopped, continued at its step.

The steps are the loop's own (`ModelTurn → Dispatch → (Suspend | ModelTurn | Finish)`),
each yielded before the loop takes it; the tool's side effect is a line in a file, so
"the loop waited" and "the stopped step never ran" are checked on disk.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._transcript import transcript_of
from tiller.cancel import CancellationToken
from tiller.errors import UsageError
from tiller.events import Event
from tiller.loop import (
    Agent,
    Budget,
    Dispatch,
    Finish,
    ModelTurn,
    PauseOnTools,
    RunContext,
    RunOptions,
    Step,
    Suspend,
)
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.store import open_bus
from tiller.testing import assert_valid_stream
from tiller.tools import ExecContext, tool


@tool
def append(text: str, ctx: ExecContext) -> str:
    """Append a line to log.txt."""
    with (ctx.workdir / "log.txt").open("a") as log:
        log.write(text + "\n")
    return f"appended {text}"


def lines(workspace: Path) -> list[str]:
    path = workspace / "log.txt"
    return path.read_text().splitlines() if path.exists() else []


def agent() -> Agent:
    calls = {"tool_calls": [{"name": "append", "arguments": {"text": "one"}}]}
    return Agent(ScriptedModel([calls, "done"]), [append])


def step_names(steps: list[Step]) -> list[str]:
    return [type(step).__name__ for step in steps]


async def test_the_steps_come_in_order_and_the_run_is_the_one_run_makes(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    steps: list[Step] = []
    async with agent().iter("go", workspace=tmp_path / "a", approver=AllowAll(), run_id="r") as run:
        async for step in run:
            steps.append(step)
    assert steps[0] == ModelTurn(1)
    assert isinstance(steps[1], Dispatch) and not steps[1].resumed
    assert [(c.name, c.arguments) for c in steps[1].calls] == [("append", '{"text":"one"}')]
    assert steps[2:] == [ModelTurn(2), Finish(StopCause.COMPLETED)]

    plain = await agent().run("go", workspace=tmp_path / "b", approver=AllowAll(), run_id="r")
    assert run.result.stop_cause is StopCause.COMPLETED
    assert transcript_of(run.result) == transcript_of(plain)
    assert run.result.text == plain.text == "done"
    assert lines(tmp_path / "a") == lines(tmp_path / "b") == ["one"]


async def test_the_loop_waits_for_the_caller_between_steps(tmp_path: Path) -> None:
    seen: list[tuple[str, list[str], int]] = []
    async with agent().iter("go", workspace=tmp_path, approver=AllowAll()) as run:
        async for step in run:
            assert run.state is not None
            # What the step boundary left, before the loop takes `step`.
            seen.append((type(step).__name__, lines(tmp_path), len(run.state.messages)))
    assert seen == [
        ("ModelTurn", [], 1),  # the prompt
        ("Dispatch", [], 2),  # the model asked; nothing ran yet
        ("ModelTurn", ["one"], 3),  # the call ran; its result is in the state
        ("Finish", ["one"], 4),
    ]


async def test_leaving_early_cancels_the_run_before_the_step_it_waits_to_take(
    tmp_path: Path,
) -> None:
    events: list[Event] = []
    steps: list[Step] = []
    iterated = agent().iter("go", workspace=tmp_path, approver=AllowAll(), on_event=events.append)
    async with iterated as run:
        async for step in run:
            steps.append(step)
            if isinstance(step, Dispatch):
                break
    assert step_names(steps) == ["ModelTurn", "Dispatch"]
    assert lines(tmp_path) == []  # the stopped step never ran
    result = run.result
    assert result.stop_cause is StopCause.CANCELLED
    # Law 1: the call the model made is answered, as not run; law 2: the stream is valid.
    dispatch = steps[1]
    assert isinstance(dispatch, Dispatch)
    (call,) = dispatch.calls
    assert result.state.calls[call.id].status == "failed"
    assert result.state.unanswered_calls() == []
    wire = assert_valid_stream(events)
    assert wire[-1]["type"] == "RUN_FINISHED"


async def test_the_stopped_call_is_answered_in_the_transcript(tmp_path: Path) -> None:
    async with agent().iter("go", workspace=tmp_path, approver=AllowAll(), run_id="r") as run:
        async for step in run:
            if isinstance(step, Dispatch):
                break
    assert transcript_of(run.result) == [
        "user: go",
        "assistant r-msg-1:",
        'call r-call-1 append {"text":"one"}',
        "error r-call-1 append: The run stopped before this call ran.",
    ]


async def test_an_error_in_the_block_cancels_the_run_and_propagates(tmp_path: Path) -> None:
    iterated = agent().iter("go", workspace=tmp_path, approver=AllowAll())
    with pytest.raises(RuntimeError, match="the caller's own bug"):
        async with iterated as run:
            async for step in run:
                if isinstance(step, Dispatch):
                    raise RuntimeError("the caller's own bug")
    assert run.result.stop_cause is StopCause.CANCELLED
    assert lines(tmp_path) == []


async def test_a_suspending_run_yields_suspend_then_finish(tmp_path: Path) -> None:
    ctx = RunContext.sandboxed(tmp_path)
    options = RunOptions(review_policy=PauseOnTools(["append"]))
    steps: list[Step] = []
    async with agent().iter("go", context=ctx, options=options) as run:
        async for step in run:
            steps.append(step)
    assert step_names(steps) == ["ModelTurn", "Suspend", "Finish"]
    suspend = steps[1]
    assert isinstance(suspend, Suspend) and [c.name for c in suspend.calls] == ["append"]
    assert steps[2] == Finish(StopCause.SUSPENDED)
    assert run.result.checkpoint is not None
    assert lines(tmp_path) == []


async def test_a_checkpoint_continues_at_its_step(tmp_path: Path) -> None:
    """Resume is "load the state, continue at its step": a run suspended on a call opens
    with that call's dispatch, not with a model turn."""
    ctx = RunContext.sandboxed(tmp_path)
    options = RunOptions(review_policy=PauseOnTools(["append"]))
    paused = await agent().run_in(ctx, "go", options, run_id="r")
    assert paused.checkpoint is not None

    steps: list[Step] = []
    model = ScriptedModel(["done after the review"], per_run=False)
    approving = RunContext.sandboxed(tmp_path, AllowAll())
    async with Agent(model, [append]).iter(paused.checkpoint, context=approving) as run:
        async for step in run:
            steps.append(step)
    first = steps[0]
    assert isinstance(first, Dispatch) and first.resumed
    assert [c.id for c in first.calls] == [c.id for c in paused.checkpoint.unanswered_calls()]
    assert steps[1:] == [ModelTurn(2), Finish(StopCause.COMPLETED)]
    assert lines(tmp_path) == ["one"]
    assert run.result.text == "done after the review"


async def test_the_iteration_is_used_as_documented(tmp_path: Path) -> None:
    iterated = agent().iter("go", workspace=tmp_path, approver=AllowAll())
    with pytest.raises(UsageError, match="async with"):
        await anext(aiter(iterated))
    with pytest.raises(UsageError, match="has not ended"):
        _ = iterated.result
    async with iterated as run:
        first = await anext(run)
        assert first == ModelTurn(1)
        with pytest.raises(UsageError, match="has not ended"):
            _ = run.result
        with pytest.raises(UsageError, match="already started"):
            await iterated.__aenter__()
    assert run.result.stop_cause is StopCause.CANCELLED
    assert lines(tmp_path) == []
    with pytest.raises(StopAsyncIteration):
        await anext(run)


async def test_the_caller_s_own_cancel_token_still_cancels_an_iterated_run(
    tmp_path: Path,
) -> None:
    token = CancellationToken()
    async with agent().iter("go", workspace=tmp_path, approver=AllowAll(), cancel=token) as run:
        async for step in run:
            if isinstance(step, Dispatch):
                token.cancel("the user pressed stop")
    assert run.result.stop_cause is StopCause.CANCELLED
    assert lines(tmp_path) == []
    assert token.is_cancelled


async def test_leaving_at_a_held_step_answers_the_calls_that_ran_too(tmp_path: Path) -> None:
    """Law 1: a durable, headless batch runs its read and holds its write (`Suspend` names
    only the held call); a caller who leaves at the `Suspend` cancels the run, and every
    call of the step is answered: the read with what it returned, the write as not run."""

    @tool(read_only=True)
    def peek(ctx: ExecContext) -> str:
        """Read log.txt."""
        return "nothing yet"

    turn = {
        "tool_calls": [
            {"name": "peek", "arguments": {}},
            {"name": "append", "arguments": {"text": "held"}},
        ]
    }
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        ctx = RunContext.sandboxed(tmp_path / "ws").with_store(bus)  # no approver: headless
        options = RunOptions(checkpoint_bucket="cp")
        iterated = Agent(ScriptedModel([turn]), [append, peek]).iter(
            "go", context=ctx, options=options, run_id="r"
        )
        async with iterated as run:
            async for step in run:
                if isinstance(step, Suspend):
                    assert [c.name for c in step.calls] == ["append"]
                    break
    assert run.result.stop_cause is StopCause.CANCELLED
    assert transcript_of(run.result) == [
        "user: go",
        "assistant r-msg-1:",
        "call r-call-1 peek {}",
        'call r-call-2 append {"text":"held"}',
        "result r-call-1 peek: nothing yet",
        "error r-call-2 append: The run stopped before this call ran.",
    ]
    assert [entry.call_id for entry in run.result.tool_trace] == ["r-call-1", "r-call-2"]
    assert lines(tmp_path / "ws") == []


async def test_a_run_held_at_its_model_turn_checks_the_budget_again(tmp_path: Path) -> None:
    """Law 7: two runs share a one-turn budget; both are held at `ModelTurn(1)`, which each
    checked while the turn was still free. The first takes it; the second, let go after,
    must see the budget spent and stop, not make a second model call."""
    budget = Budget(max_steps=1)
    first = RunContext.sandboxed(tmp_path / "a", AllowAll()).with_budget(budget)
    second = RunContext.sandboxed(tmp_path / "b", AllowAll()).with_budget(budget)
    iter_a = Agent(ScriptedModel(["from a"]), []).iter("go", context=first)
    iter_b = Agent(ScriptedModel(["from b"]), []).iter("go", context=second)
    async with iter_a as a, iter_b as b:
        assert await anext(a) == await anext(b) == ModelTurn(1)
        assert [step async for step in a] == [Finish(StopCause.COMPLETED)]
        assert [step async for step in b] == [Finish(StopCause.STEP_BUDGET)]
    assert a.result.text == "from a"
    assert b.result.stop_cause is StopCause.STEP_BUDGET
    assert budget.steps == 1


async def test_leaving_at_a_resumed_dispatch_answers_its_calls(tmp_path: Path) -> None:
    """A continued run stopped before its resumed step runs: the calls are answered as
    not run (law 1), so the stopped run's transcript stays legal."""
    ctx = RunContext.sandboxed(tmp_path)
    options = RunOptions(review_policy=PauseOnTools(["append"]))
    paused = await agent().run_in(ctx, "go", options, run_id="r")
    assert paused.checkpoint is not None
    approving = RunContext.sandboxed(tmp_path, AllowAll())
    async with agent().iter(paused.checkpoint, context=approving) as run:
        async for step in run:
            assert isinstance(step, Dispatch) and step.resumed
            break
    assert lines(tmp_path) == []
    assert run.result.stop_cause is StopCause.CANCELLED
    assert run.result.state.unanswered_calls() == []
    assert transcript_of(run.result)[-1] == (
        "error r-call-1 append: The run stopped before this call ran."
    )

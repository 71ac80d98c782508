"""The history window (`RunOptions.max_history_tokens`): whatever the budget, the request
keeps the first request and the newest exchange (task, call and result), shortening the
newest results with a marker if they alone are over it; every window is a legal
transcript (law 1) whose roles alternate."""

from __future__ import annotations

import itertools

from tiller.conversation import (
    AssistantMessage,
    ToolCall,
    ToolResult,
    UserMessage,
    check_transcript,
)
from tiller.loop import Agent, RunContext, RunOptions, estimate_tokens, history_window
from tiller.model import ScriptedModel
from tiller.state import StopCause
from tiller.tools import tool

from ._support import Messages, drive

CUT = "characters of this result were cut here to fit the history window"


def assert_legal_window(window: Messages) -> None:
    """What a provider checks: results follow their calls, roles alternate, user first."""
    check_transcript(window)
    assert window and isinstance(window[0], UserMessage)
    for before, after in itertools.pairwise(window):
        assert before.role != after.role, f"two {before.role} messages in a row"


def calls(step: int, *names: str) -> AssistantMessage:
    return AssistantMessage(
        id=f"a{step}",
        tool_calls=tuple(ToolCall(id=f"c{step}-{i}", name=n) for i, n in enumerate(names)),
    )


def results(step: int, *sizes: int) -> UserMessage:
    return UserMessage(
        tool_results=tuple(
            ToolResult(call_id=f"c{step}-{i}", name="read", content=str(i) * size)
            for i, size in enumerate(sizes)
        )
    )


async def test_a_newest_exchange_over_the_budget_is_sent_with_its_results_cut(
    ctx: RunContext,
) -> None:
    """Pins the break where a single tool result over `max_history_tokens` made the window
    drop the whole exchange: the request carried only a note, without the request, the
    call or the result, and the model had nothing to answer from."""
    huge = "".join(f"line {n}\n" for n in range(4000))

    @tool(read_only=True)
    def read() -> str:
        """Read a long file."""
        return huge

    model = ScriptedModel([{"tool_calls": [{"name": "read"}]}, "done"])
    run = await drive(
        Agent(model, [read]), "Summarise the log.", ctx, RunOptions(max_history_tokens=300)
    )
    assert run.result.stop_cause is StopCause.COMPLETED
    sent = model.requests[-1].messages
    assert_legal_window(sent)
    first, call, answer = sent
    assert isinstance(first, UserMessage) and first.text == "Summarise the log."
    assert isinstance(call, AssistantMessage) and [c.name for c in call.tool_calls] == ["read"]
    assert isinstance(answer, UserMessage)
    (result,) = answer.tool_results
    assert result.call_id == call.tool_calls[0].id
    assert result.content.startswith("line 0\nline 1\n")
    assert result.content.endswith("line 3999\n")  # the tail is kept too
    kept_chars = result.content.split("\n[… ")[0] + result.content.split(" …]\n")[1]
    cut = len(huge) - len(kept_chars)
    assert f"[… {cut} of {len(huge)} {CUT} (RunOptions.max_history_tokens) …]" in result.content
    assert sum(estimate_tokens(m) for m in sent) <= 300
    # Only the request was shortened: the run's own transcript keeps the whole result.
    kept = run.messages[2]
    assert isinstance(kept, UserMessage) and kept.tool_results[0].content == huge


async def test_the_first_request_stays_when_the_window_slides(ctx: RunContext) -> None:
    """Pins the break where, once the window slid past it, the original request (the
    first user message) was no longer sent: later turns forgot what the run was for."""
    long = "x" * 400

    @tool(read_only=True)
    def read() -> str:
        """Read a long file."""
        return long

    model = ScriptedModel([{"tool_calls": [{"name": "read"}]}] * 4 + ["done"])
    run = await drive(Agent(model, [read]), "Read it all.", ctx, RunOptions(max_history_tokens=250))
    assert run.result.stop_cause is StopCause.COMPLETED
    for request in model.requests:
        assert_legal_window(request.messages)
        assert request.messages[0].text.startswith("Read it all.")
        assert sum(estimate_tokens(m) for m in request.messages) <= 250
    last = model.requests[-1].messages
    assert len(last) < len(run.messages) - 1  # the window did slide
    assert last[0].text == "Read it all.\n\n[6 earlier message(s) left out of this window]"
    assert last[-2:] == run.messages[-3:-1]  # the newest call and its result, whole


def test_the_newest_task_is_carried_when_it_falls_before_the_kept_part() -> None:
    """A follow-up request stays in the window with its call and result: it is carried
    after the first request's note, so the model still knows what it works on."""
    history = [
        UserMessage(text="Fix the build."),
        AssistantMessage(id="a0", text="Fixed."),
        UserMessage(text="Now update the changelog."),
        calls(1, "read"),
        results(1, 600),
        calls(2, "read"),
        results(2, 600),
    ]
    window = history_window(history, 260)
    assert_legal_window(window)
    assert window[0].text == (
        "Fix the build.\n\n[3 earlier message(s) left out of this window]\n\n"
        "Now update the changelog."
    )
    assert window[1:] == history[-2:]


def test_every_call_of_the_newest_batch_keeps_exactly_one_result() -> None:
    """A parallel batch over the budget: the small result is kept whole, the big ones are
    shortened, each call still has its one result (law 1)."""
    history = [UserMessage(text="Look."), calls(1, "a", "b", "c"), results(1, 40, 9000, 12000)]
    window = history_window(history, 600)
    assert_legal_window(window)
    last = window[-1]
    assert isinstance(last, UserMessage)
    assert [r.call_id for r in last.tool_results] == ["c1-0", "c1-1", "c1-2"]
    small, big, bigger = last.tool_results
    assert small.content == "0" * 40
    assert CUT in big.content and "of 9000 characters" in big.content
    assert CUT in bigger.content and "of 12000 characters" in bigger.content
    assert sum(estimate_tokens(m) for m in window) <= 600


def test_a_tiny_budget_still_sends_the_request_and_the_newest_exchange() -> None:
    """Below what even the newest exchange needs, the window does not give up: it sends
    the first request, the call, and a readable head and tail of each result."""
    history = [UserMessage(text="Go."), calls(1, "read"), results(1, 5000), calls(2, "read")]
    history.append(results(2, 5000))
    window = history_window(history, 1)
    assert_legal_window(window)
    assert window[0].text == "Go.\n\n[2 earlier message(s) left out of this window]"
    assert window[1] == history[3]
    last = window[-1]
    assert isinstance(last, UserMessage)
    assert CUT in last.tool_results[0].content
    assert last.tool_results[0].content.startswith("0" * 100)


def test_a_window_that_fits_is_the_whole_history() -> None:
    history = [UserMessage(text="Go."), calls(1, "read"), results(1, 10)]
    assert history_window(history, 10_000) == history
    assert history_window(history, None) == history

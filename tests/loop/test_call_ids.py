"""Law 10: tool call ids are the runtime's, and a decision answers one call, once.

A provider's call id is only what that provider called the call: it may repeat (two calls
`call-1-0` in one response, the same id every step, a script that starts over after a
resume) or be empty. Every call gets the run's own id (`{run_id}-call-{n}`) as it is parsed,
so the transcript, the stream and the store never see two calls with one id; and a
person's decision is bound to the call it was made for and spent there, so a later call
under a reused id is held, never run unasked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tiller.conversation import AssistantMessage
from tiller.events import Event
from tiller.loop import Agent, ResumeDecision, RunContext, RunOptions
from tiller.model import ScriptedModel
from tiller.state import StopCause
from tiller.store import open_bus
from tiller.testing import assert_valid_stream
from tiller.tools import ExecContext, tool

from ._support import drive


@tool
def append(text: str, ctx: ExecContext) -> str:
    """Append a line to log.txt (a side effect that must never run unasked)."""
    with (ctx.workdir / "log.txt").open("a") as log:
        log.write(text + "\n")
    return f"appended {text}"


def lines(workspace: Path) -> list[str]:
    path = workspace / "log.txt"
    return path.read_text().splitlines() if path.exists() else []


def call(text: str, provider_id: str | None = "call-1-0") -> dict[str, Any]:
    return {"id": provider_id, "name": "append", "arguments": {"text": text}}


def all_calls(messages: Any) -> list[Any]:
    return [c for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls]


async def test_two_calls_with_one_provider_id_in_a_turn_both_run(ctx: RunContext) -> None:
    """Broke: the second `call-1-0` of one response ended the run with
    `PROTOCOL_VIOLATION ReusedId` (and the transcript held two calls with one id)."""
    model = ScriptedModel([{"tool_calls": [call("a"), call("b")]}, "done"])
    run = await drive(Agent(model, [append]), "go", ctx)  # checks the stream is valid
    assert run.result.stop_cause is StopCause.COMPLETED
    assert sorted(lines(ctx.jail.root)) == ["a", "b"]  # the batch runs concurrently
    calls = all_calls(run.messages)
    assert [c.id for c in calls] == ["r1-call-1", "r1-call-2"]
    assert [c.provider_id for c in calls] == ["call-1-0", "call-1-0"]
    starts = [e["toolCallId"] for e in run.wire if e["type"] == "TOOL_CALL_START"]
    assert starts == ["r1-call-1", "r1-call-2"]
    results = [e["toolCallId"] for e in run.wire if e["type"] == "TOOL_CALL_RESULT"]
    assert results == ["r1-call-1", "r1-call-2"]
    assert set(run.result.state.calls) == {"r1-call-1", "r1-call-2"}


async def test_one_provider_id_every_turn_gives_distinct_calls(ctx: RunContext) -> None:
    """Broke: a provider that names every step's call the same (`call_0`, as servers
    without ids get) put two calls with one id in the transcript, which every provider
    rejects, and the second `TOOL_CALL_START` was a `ReusedId` violation."""
    model = ScriptedModel(
        [{"tool_calls": [call("a", "call_0")]}, {"tool_calls": [call("b", "call_0")]}, "done"]
    )
    run = await drive(Agent(model, [append]), "go", ctx)
    assert lines(ctx.jail.root) == ["a", "b"]  # one call a step: in order
    assert [c.id for c in all_calls(run.messages)] == ["r1-call-1", "r1-call-2"]
    # The model's third request pairs each result with its own call.
    third = model.requests[2].messages
    assert [c.id for c in all_calls(third)] == ["r1-call-1", "r1-call-2"]


async def test_an_empty_provider_id_never_reaches_the_transcript(ctx: RunContext) -> None:
    """Broke: a call streamed with an empty id went into the transcript, the stream and
    the call records as `""`."""
    model = ScriptedModel([{"tool_calls": [call("a", ""), call("b", "")]}, "done"])
    run = await drive(Agent(model, [append]), "go", ctx)
    calls = all_calls(run.messages)
    assert [c.id for c in calls] == ["r1-call-1", "r1-call-2"]
    assert [c.provider_id for c in calls] == ["", ""]
    assert "" not in run.result.state.calls
    assert all(e.get("toolCallId") != "" for e in run.wire)


async def test_a_call_reusing_an_approved_calls_id_is_held_not_run(tmp_path: Path) -> None:
    """Broke: after `resume` approved `call-1-0`, the model's next call with the same
    provider id — another call, other arguments — found the decision by id and ran with
    no one asked. Now it gets its own id, the decision was spent, and it is held."""
    workspace = tmp_path / "ws"
    events: list[Event] = []
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        ctx = RunContext.sandboxed(workspace).with_store(bus)  # headless: Asks are held
        options = RunOptions(checkpoint_bucket="cp")
        model = ScriptedModel(
            [
                {"tool_calls": [call("approved")]},
                {"tool_calls": [call("never asked")]},  # the same provider id
                {"tool_calls": [call("approved")]},  # and the very same call again
                "done",
            ]
        )
        agent = Agent(model, [append])
        paused = await agent.run_in(ctx, "go", options, run_id="reuse-1")
        assert paused.stop_cause is StopCause.SUSPENDED
        (first,) = paused.state.waiting_calls()
        assert first.id == "reuse-1-call-1"

        again = await agent.resume(
            "reuse-1",
            {first.id: ResumeDecision.approved()},
            ctx=ctx,
            bucket="cp",
            on_event=events.append,
        )
        assert_valid_stream(events)
        assert lines(workspace) == ["approved"]
        assert again.stop_cause is StopCause.SUSPENDED
        (second,) = again.state.waiting_calls()
        assert second.id == "reuse-1-call-2" and second.provider_id == "call-1-0"
        assert [i["toolCallId"] for i in again.state.interrupts] == [second.id]

        # Decided, the second runs; the third (identical to the first) is held in turn.
        third = await agent.resume(
            "reuse-1", {second.id: ResumeDecision.approved()}, ctx=ctx, bucket="cp"
        )
        assert lines(workspace) == ["approved", "never asked"]
        assert third.stop_cause is StopCause.SUSPENDED
        assert [c.id for c in third.state.waiting_calls()] == ["reuse-1-call-3"]
        ids = [c.id for c in all_calls(third.state.messages)]
        assert ids == ["reuse-1-call-1", "reuse-1-call-2", "reuse-1-call-3"]


async def test_a_decision_shown_for_another_call_is_not_applied(tmp_path: Path) -> None:
    """A decision is bound to the tool and arguments the person was shown: one for
    `append({"text": "other"})` does not answer the pending `append({"text": "a"})`,
    which is held again with the reason, and runs nothing."""
    workspace = tmp_path / "ws"
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        ctx = RunContext.sandboxed(workspace).with_store(bus)
        options = RunOptions(checkpoint_bucket="cp")
        agent = Agent(ScriptedModel([{"tool_calls": [call("a")]}, "done"]), [append])
        paused = await agent.run_in(ctx, "go", options, run_id="bound-1")
        (pending,) = paused.state.waiting_calls()
        assert paused.state.interrupts[0]["metadata"] == {
            "tool": "append",
            "arguments": '{"text":"a"}',
            "risk": "external_access",
        }
        shown_other = ResumeDecision.approved().bound_to("append", {"text": "other"})
        held = await agent.resume("bound-1", {pending.id: shown_other}, ctx=ctx, bucket="cp")
        assert lines(workspace) == []
        assert held.stop_cause is StopCause.SUSPENDED
        (interrupt,) = held.state.interrupts
        assert interrupt["toolCallId"] == pending.id
        assert "was not applied" in interrupt["message"]

        # Shown the call itself (keys in another order: canonical JSON), it runs, once.
        fits = ResumeDecision.approved().bound_to("append", '{ "text" : "a" }')
        done = await agent.resume("bound-1", {pending.id: fits}, ctx=ctx, bucket="cp")
        assert done.stop_cause is StopCause.COMPLETED
        assert lines(workspace) == ["a"]


async def test_edited_arguments_are_the_decided_ones(tmp_path: Path) -> None:
    """Edited arguments replace the model's and the decision is bound to them: the call
    runs with them, once."""
    workspace = tmp_path / "ws"
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        ctx = RunContext.sandboxed(workspace).with_store(bus)
        options = RunOptions(checkpoint_bucket="cp")
        agent = Agent(ScriptedModel([{"tool_calls": [call("a")]}, "done"]), [append])
        paused = await agent.run_in(ctx, "go", options, run_id="edit-1")
        (pending,) = paused.state.waiting_calls()
        edited = ResumeDecision.approved({"text": "edited"}).bound_to("append", {"text": "a"})
        done = await agent.resume("edit-1", {pending.id: edited}, ctx=ctx, bucket="cp")
        assert done.stop_cause is StopCause.COMPLETED
        assert lines(workspace) == ["edited"]
        (ran,) = all_calls(done.state.messages)
        assert ran.id == pending.id and ran.parsed_arguments() == {"text": "edited"}


async def test_a_conversation_holding_the_runs_ids_is_numbered_past(ctx: RunContext) -> None:
    """A run given a conversation that already holds `r1-call-1` (a client sending a run
    id again, a state without its counters) numbers its calls past it, so no two calls
    share an id."""
    from tiller.conversation import ToolCall, ToolResult, UserMessage

    earlier = ToolCall(id="r1-call-1", name="append", arguments='{"text": "before"}')
    conversation = [
        UserMessage(text="go"),
        AssistantMessage(id="r1-msg-1", tool_calls=(earlier,)),
        UserMessage(
            tool_results=(ToolResult(call_id="r1-call-1", name="append", content="ok"),),
            text="again",
        ),
    ]
    model = ScriptedModel([{"tool_calls": [call("now")]}, "done"])
    run = await drive(Agent(model, [append]), conversation, ctx)
    assert [c.id for c in all_calls(run.messages)] == ["r1-call-1", "r1-call-2"]
    assistant_ids = [m.id for m in run.messages if isinstance(m, AssistantMessage)]
    assert len(set(assistant_ids)) == len(assistant_ids)

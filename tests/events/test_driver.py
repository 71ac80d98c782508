"""`run_agent`: one valid stream per run, whatever the agent does."""

# Inline snapshots hold each event line whole, as the run wrote it.
# ruff: noqa: E501

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from dirty_equals import IsStr
from inline_snapshot import snapshot
from pydantic import BaseModel

from tiller import CancellationToken, Cancelled
from tiller.events import (
    AgUiContext,
    Event,
    FilterToolCalls,
    Interrupt,
    RunFinishedEvent,
    RunOutcome,
    RunStream,
    StreamConsumed,
    TextMessageContentEvent,
    run_agent,
)
from tiller.testing import assert_valid_stream

from .._transcript import event_lines

INPUT = {
    "threadId": "t1",
    "runId": "r1",
    "messages": [{"id": "u1", "role": "user", "content": "hi"}],
}


async def collect(stream: RunStream) -> list[dict[str, Any]]:
    async with asyncio.timeout(10):  # hang guard only
        events = await stream.collect()
    return assert_valid_stream(events)


def kinds(wire: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in wire]


async def test_success_with_protocol_version() -> None:
    async def agent(ctx: AgUiContext[Any]) -> None:
        ctx.say("hello")

    wire = await collect(run_agent(agent, INPUT))
    assert wire[0] == {
        "type": "RUN_STARTED",
        "threadId": "t1",
        "runId": "r1",
        "protocolVersion": "1.0",
    }
    assert wire[-1] == {
        "type": "RUN_FINISHED",
        "threadId": "t1",
        "runId": "r1",
        "outcome": {"type": "success"},
    }


async def test_echo_input_and_parent_run_id() -> None:
    async def agent(ctx: AgUiContext[Any]) -> None:
        return None

    wire = await collect(run_agent(agent, {**INPUT, "parentRunId": "p"}, echo_input=True))
    assert wire[0]["parentRunId"] == "p"
    assert wire[0]["input"]["messages"][0]["content"] == "hi"


async def test_pending_frontend_tool_calls() -> None:
    class Frontend:
        async def run(self, ctx: AgUiContext[Any]) -> RunOutcome:
            call = ctx.tool_call("confirm")
            call.args_json({"question": "ok?"})
            call.end()
            return RunOutcome.success([call.id])

    wire = await collect(run_agent(Frontend(), INPUT))
    assert wire[-1]["outcome"] == {"type": "success", "pendingToolCallIds": ["r1-call-1"]}


class Approvals(BaseModel):
    asked: int = 0


async def test_interrupt_sends_state_first() -> None:
    class Asker:
        state_type = Approvals

        async def run(self, ctx: AgUiContext[Approvals]) -> RunOutcome:
            ctx.state_mut().asked += 1
            return RunOutcome.interrupt([Interrupt("i1", "question", message="why?")])

    wire = await collect(run_agent(Asker(), INPUT))
    assert kinds(wire) == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert wire[1]["snapshot"] == {"asked": 1}
    assert wire[-1]["outcome"] == {
        "type": "interrupt",
        "interrupts": [{"id": "i1", "reason": "question", "message": "why?"}],
    }


async def test_exception_becomes_run_error() -> None:
    async def agent(ctx: AgUiContext[Any]) -> None:
        ctx.assistant_message().delta("half")  # left open: RUN_ERROR needs nothing closed
        raise KeyError("boom")

    wire = await collect(run_agent(agent, INPUT))
    assert wire[-1] == {"type": "RUN_ERROR", "message": "KeyError: 'boom'", "code": "AGENT_ERROR"}


async def test_a_protocol_violation_becomes_run_error() -> None:
    async def agent(ctx: AgUiContext[Any]) -> None:
        ctx.emit(TextMessageContentEvent("ghost", "x"))

    wire = await collect(run_agent(agent, INPUT))
    assert event_lines(wire) == snapshot(
        [
            'RUN_STARTED r1 thread=t1 {"protocolVersion":"1.0"}',
            'RUN_ERROR {"message":"NotOpen: TEXT_MESSAGE_CONTENT for ghost, which is not open","code":"PROTOCOL_VIOLATION"}',
        ]
    )


async def test_finishing_with_something_open_is_an_error_naming_the_rule() -> None:
    async def agent(ctx: AgUiContext[Any]) -> None:
        ctx.step("never finished")

    wire = await collect(run_agent(agent, INPUT))
    assert event_lines(wire) == snapshot(
        [
            'RUN_STARTED r1 thread=t1 {"protocolVersion":"1.0"}',
            "STEP_STARTED never finished",
            'RUN_ERROR {"message":"OpenAtFinish: RUN_FINISHED while open: step \'never finished\'","code":"PROTOCOL_VIOLATION"}',
        ]
    )


async def test_state_decode_failure() -> None:
    class Typed:
        state_type = Approvals

        async def run(self, ctx: AgUiContext[Approvals]) -> None:
            raise AssertionError("never runs")

    wire = await collect(run_agent(Typed(), {**INPUT, "state": {"asked": "lots"}}))
    assert event_lines(wire) == snapshot(
        [
            'RUN_STARTED r1 thread=t1 {"protocolVersion":"1.0"}',
            # pydantic's own words (and its version, in a link) follow the first line.
            IsStr(
                regex=r'RUN_ERROR \{"message":"the run\'s state does not fit Approvals: 1 validation error for Approvals\\nasked\\n  Input should be a valid integer.*","code":"SERIALIZATION"\}'
            ),
        ]
    )
    for empty in (None, {}):
        ok = await collect(run_agent(_Quiet(), {**INPUT, "state": empty}))
        assert ok[-1]["type"] == "RUN_FINISHED"


class _Quiet:
    state_type = Approvals

    async def run(self, ctx: AgUiContext[Approvals]) -> None:
        assert ctx.state == Approvals()


async def test_agent_that_sends_its_own_terminal_event() -> None:
    async def agent(ctx: AgUiContext[Any]) -> None:
        ctx.emit(RunFinishedEvent(ctx.thread_id, ctx.run_id, result={"done": True}))

    wire = await collect(run_agent(agent, INPUT))
    assert event_lines(wire) == snapshot(
        [
            'RUN_STARTED r1 thread=t1 {"protocolVersion":"1.0"}',
            'RUN_FINISHED r1 thread=t1 {"result":{"done":true}}',
        ]
    )


async def test_returning_something_else_is_an_error() -> None:
    async def agent(ctx: AgUiContext[Any]) -> Any:
        return "done"

    wire = await collect(run_agent(agent, INPUT))
    assert event_lines(wire) == snapshot(
        [
            'RUN_STARTED r1 thread=t1 {"protocolVersion":"1.0"}',
            'RUN_ERROR {"message":"the agent returned str; return a RunOutcome or None","code":"AGENT_ERROR"}',
        ]
    )


# ── cancellation ─────────────────────────────────────────────────────────────────


async def test_cancel_mid_stream_closes_what_was_open() -> None:
    token = CancellationToken()
    blocked = asyncio.Event()

    async def agent(ctx: AgUiContext[Any]) -> None:
        with ctx.step("work"):
            message = ctx.assistant_message()  # explicit: the driver must close it
            message.delta("partial answer")
            ctx.reasoning().delta("partial thought")
            blocked.set()
            await asyncio.sleep(3600)  # interrupted, not merely flagged

    stream = run_agent(agent, INPUT, cancel=token)
    seen: list[Event] = []
    async with asyncio.timeout(10):
        async for event in stream:
            seen.append(event)
            if blocked.is_set() and not token.is_cancelled:
                token.cancel("user pressed stop")
    wire = assert_valid_stream(seen)
    # What was produced is kept, and every bracket closes before the terminal event.
    assert event_lines(wire) == snapshot(
        [
            'RUN_STARTED r1 thread=t1 {"protocolVersion":"1.0"}',
            "STEP_STARTED work",
            "TEXT_MESSAGE_START r1-msg-1",
            "TEXT_MESSAGE_CONTENT r1-msg-1 partial answer",
            "REASONING_START r1-msg-2",
            "REASONING_MESSAGE_START r1-msg-2",
            "REASONING_MESSAGE_CONTENT r1-msg-2 partial thought",
            "REASONING_MESSAGE_END r1-msg-2",
            "REASONING_END r1-msg-2",
            "TEXT_MESSAGE_END r1-msg-1",
            "STEP_FINISHED work",
            'RUN_FINISHED r1 thread=t1 {"outcome":{"type":"cancelled"}}',
        ]
    )


async def test_cancel_with_unparseable_tool_args_is_a_cancelled_error() -> None:
    token = CancellationToken()

    async def agent(ctx: AgUiContext[Any]) -> None:
        call = ctx.tool_call("search")
        call.args('{"query": "half')
        token.cancel()
        await asyncio.sleep(3600)

    wire = await collect(run_agent(agent, INPUT, cancel=token))
    assert event_lines(wire) == snapshot(
        [
            'RUN_STARTED r1 thread=t1 {"protocolVersion":"1.0"}',
            "TOOL_CALL_START r1-call-1 search",
            'TOOL_CALL_ARGS r1-call-1 {"query": "half',
            'RUN_ERROR {"message":"the run was cancelled","code":"CANCELLED"}',
        ]
    )


async def test_cancel_inside_with_blocks() -> None:
    token = CancellationToken()

    async def agent(ctx: AgUiContext[Any]) -> None:
        with ctx.subagent("helper"), ctx.tool_call("slow") as call:
            call.args_json({"n": 1})
            token.cancel()
            ctx.say("refused after cancel")  # raises Cancelled; the brackets close

    wire = await collect(run_agent(agent, INPUT, cancel=token))
    assert event_lines(wire) == snapshot(
        [
            'RUN_STARTED r1 thread=t1 {"protocolVersion":"1.0"}',
            'SUBAGENT_STARTED {"subagentRunId":"r1-sub-1","name":"helper"}',
            'TOOL_CALL_START r1-call-1 slow {"subagentRunId":"r1-sub-1"}',
            'TOOL_CALL_ARGS r1-call-1 {"n":1}',
            'TOOL_CALL_END r1-call-1 {"subagentRunId":"r1-sub-1"}',
            'SUBAGENT_ERROR {"subagentRunId":"r1-sub-1","message":"the subagent was cancelled","code":"CANCELLED"}',
            'RUN_FINISHED r1 thread=t1 {"outcome":{"type":"cancelled"}}',
        ]
    )


async def test_agent_returning_cancelled() -> None:
    async def agent(ctx: AgUiContext[Any]) -> RunOutcome:
        ctx.step("left open by the agent")
        return RunOutcome.cancelled()

    wire = await collect(run_agent(agent, INPUT))
    assert event_lines(wire) == snapshot(
        [
            'RUN_STARTED r1 thread=t1 {"protocolVersion":"1.0"}',
            "STEP_STARTED left open by the agent",
            "STEP_FINISHED left open by the agent",
            'RUN_FINISHED r1 thread=t1 {"outcome":{"type":"cancelled"}}',
        ]
    )


async def test_a_shared_batch_token_cancels_every_run_but_each_has_its_own_child() -> None:
    batch = CancellationToken()
    started = 0
    all_started = asyncio.Event()

    async def agent(ctx: AgUiContext[Any]) -> None:
        nonlocal started
        started += 1
        if started == 20:
            all_started.set()
        assert ctx.cancel_token is not batch
        await ctx.cancelled()
        ctx.check_cancelled()

    streams = [run_agent(agent, {**INPUT, "runId": f"r{i}"}, cancel=batch) for i in range(20)]
    tasks = [asyncio.create_task(s.collect()) for s in streams]
    async with asyncio.timeout(10):
        await all_started.wait()
    streams[0].cancel.cancel()  # one run's own token: the others go on
    first = await tasks[0]
    assert first[-1].to_wire()["outcome"] == {"type": "cancelled"}
    assert not any(t.done() for t in tasks[1:])
    batch.cancel()
    async with asyncio.timeout(10):
        results = await asyncio.gather(*tasks[1:])
    assert all(r[-1].to_wire()["outcome"] == {"type": "cancelled"} for r in results)


async def test_consumer_leaving_cancels_the_run() -> None:
    unwound = asyncio.Event()

    async def agent(ctx: AgUiContext[Any]) -> None:
        try:
            while True:
                ctx.say("tick")
                await asyncio.sleep(0)
        finally:
            unwound.set()

    stream = run_agent(agent, INPUT)
    async for event in stream:
        if event.type == "TEXT_MESSAGE_END":
            break
    await stream.aclose()
    assert unwound.is_set()
    assert stream.cancel.is_cancelled
    with pytest.raises(StreamConsumed):
        stream.__aiter__()


async def test_outside_cancellation_of_the_consumer_propagates() -> None:
    async def agent(ctx: AgUiContext[Any]) -> None:
        await asyncio.sleep(3600)

    stream = run_agent(agent, INPUT)

    async def consume() -> None:
        async with stream:
            async for _ in stream:
                pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stream.cancel.is_cancelled  # the run was stopped, not leaked


async def test_cancelled_never_escapes() -> None:
    async def agent(ctx: AgUiContext[Any]) -> None:
        raise Cancelled()

    wire = await collect(run_agent(agent, INPUT))
    assert wire[-1]["outcome"] == {"type": "cancelled"}


async def test_transformers_apply_to_the_driven_stream() -> None:
    async def agent(ctx: AgUiContext[Any]) -> None:
        ctx.tool_call("secret").result("hidden")
        ctx.tool_call("public").result("shown")

    wire = await collect(run_agent(agent, INPUT, transformers=[FilterToolCalls.deny(["secret"])]))
    assert event_lines(wire) == snapshot(
        [
            'RUN_STARTED r1 thread=t1 {"protocolVersion":"1.0"}',
            "TOOL_CALL_START r1-call-2 public",
            "TOOL_CALL_END r1-call-2",
            "TOOL_CALL_RESULT r1-call-2 (r1-msg-2): shown",
            'RUN_FINISHED r1 thread=t1 {"outcome":{"type":"success"}}',
        ]
    )


async def test_run_to_end_drives_the_run_for_its_listeners_only() -> None:
    seen: list[Event] = []

    async def agent(ctx: AgUiContext[Any]) -> None:
        ctx.say("hello")
        await asyncio.sleep(0)  # a real suspension: the caller is not woken by it
        ctx.say("again")

    stream = run_agent(agent, INPUT, listeners=[seen.append])
    async with asyncio.timeout(10):  # hang guard only
        await stream.run_to_end()
    wire = assert_valid_stream(seen)
    assert kinds(wire)[-1] == "RUN_FINISHED"
    assert [e["delta"] for e in wire if e["type"] == "TEXT_MESSAGE_CONTENT"] == [
        "hello",
        "again",
    ]
    with pytest.raises(StreamConsumed):
        await stream.run_to_end()
    with pytest.raises(StreamConsumed):
        stream.__aiter__()  # its one run is over, and nothing was kept to read


async def test_cancelling_run_to_end_cancels_the_run_through_its_token() -> None:
    seen: list[Event] = []
    started = asyncio.Event()
    unwound = asyncio.Event()

    async def agent(ctx: AgUiContext[Any]) -> None:
        try:
            with ctx.step("work"):
                started.set()
                await ctx.cancelled()
                ctx.check_cancelled()
        finally:
            unwound.set()

    stream = run_agent(agent, INPUT, listeners=[seen.append])
    task = asyncio.ensure_future(stream.run_to_end())
    async with asyncio.timeout(10):
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert unwound.is_set() and stream.cancel.is_cancelled
    wire = assert_valid_stream(seen)
    assert wire[-1]["type"] == "RUN_FINISHED"
    assert wire[-1]["outcome"] == {"type": "cancelled"}

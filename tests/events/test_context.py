"""`AgUiContext`: accessors, ids, emitters and their handles, state, resume, cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from tiller import (
    CancellationToken,
    Cancelled,
    HandleClosed,
    InvalidResume,
    InvalidToolArguments,
    ProtocolViolation,
    StateDecodeError,
    UsageError,
)
from tiller.events import (
    AgUiContext,
    Event,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageEndEvent,
)
from tiller.testing import assert_valid_stream, wire_events


def make(**extra: Any) -> tuple[AgUiContext[Any], Any]:
    return AgUiContext.new({"threadId": "t1", "runId": "r1", "messages": [], **extra})


def types(events: list[Event]) -> list[str]:
    return [e.type for e in events]


def valid(events: list[Event]) -> list[dict[str, Any]]:
    """Wrap harness output in RUN_STARTED / RUN_FINISHED and validate it."""
    return assert_valid_stream([RunStartedEvent("t1", "r1"), *events, RunFinishedEvent("t1", "r1")])


# ── the request ──────────────────────────────────────────────────────────────────


def test_accessors() -> None:
    ctx, _ = make(
        parentRunId="p0",
        messages=[
            {"id": "s", "role": "system", "content": "be nice"},
            {"id": "u1", "role": "user", "content": "first"},
            {"id": "a1", "role": "assistant", "content": "ok"},
            {
                "id": "u2",
                "role": "user",
                "content": [
                    {"type": "text", "text": "look at "},
                    {"type": "image", "source": {"type": "url", "value": "http://x/y.png"}},
                    {"type": "text", "text": "this"},
                ],
            },
        ],
        tools=[{"name": "confirm", "description": "ask", "parameters": {"type": "object"}}],
        context=[{"description": "tz", "value": "UTC"}],
        forwardedProps={"tiller": {"detach": True}},
    )
    assert (ctx.thread_id, ctx.run_id, ctx.parent_run_id) == ("t1", "r1", "p0")
    assert [m.id for m in ctx.messages] == ["s", "u1", "a1", "u2"]
    assert ctx.last_user_text == "look at this"  # non-text parts dropped
    assert [t.name for t in ctx.tools] == ["confirm"]
    assert ctx.tool("confirm") is not None and ctx.tool("missing") is None
    assert ctx.context[0].value == "UTC"
    assert ctx.forwarded_props == {"tiller": {"detach": True}}
    assert not ctx.is_resume and ctx.resume == []


def test_last_user_text_none_versus_empty() -> None:
    ctx, _ = make(messages=[{"id": "a", "role": "assistant", "content": "hi"}])
    assert ctx.last_user_text is None
    ctx, _ = make(messages=[{"id": "u", "role": "user", "content": ""}])
    assert ctx.last_user_text == ""


def test_bad_input_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="RunAgentInput"):
        AgUiContext.new({"threadId": "t"})


def test_ids_are_deterministic() -> None:
    ctx, _ = make()
    assert [ctx.new_message_id(), ctx.new_message_id()] == ["r1-msg-1", "r1-msg-2"]
    assert ctx.new_tool_call_id() == "r1-call-1"
    assert ctx.new_subagent_run_id() == "r1-sub-1"
    empty, _ = AgUiContext.new({"threadId": "t", "runId": "", "messages": []})
    assert empty.new_message_id() == "run-msg-1"


# ── emitters ─────────────────────────────────────────────────────────────────────


def test_say_think_and_explicit_message() -> None:
    ctx, rx = make()
    ctx.say("hello")
    ctx.think("hmm")
    message = ctx.message("assistant")
    message.delta("a")
    message.delta("")  # nothing sent: clients warn on empty deltas
    message.end()
    message.end()  # double close does nothing
    with pytest.raises(HandleClosed):
        message.delta("late")
    events = rx.drain()
    assert types(events) == [
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END", "REASONING_END",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
    ]  # fmt: skip
    valid(events)


def test_message_with_id_and_role() -> None:
    ctx, rx = make()
    with ctx.message_with_id("custom", "user") as m:
        m.delta("typed by the user")
    with ctx.message("developer", name="ops") as m:
        m.delta("note")
    wire = valid(rx.drain())
    assert wire[1] == {"type": "TEXT_MESSAGE_START", "messageId": "custom", "role": "user"}
    assert wire[4]["name"] == "ops"


def test_reasoning_encrypted_value() -> None:
    ctx, rx = make()
    with ctx.reasoning_with_id("rz") as block:
        block.delta("thinking")
        block.encrypted_value("opaque")
    wire = valid(rx.drain())
    assert {
        "type": "REASONING_ENCRYPTED_VALUE",
        "subtype": "message",
        "entityId": "rz",
        "encryptedValue": "opaque",
    } in wire


class Args(BaseModel):
    city: str


def test_tool_call_handle() -> None:
    ctx, rx = make()
    with ctx.tool_call("weather") as call:
        assert call.result_message_id == "r1-msg-1"  # allocated when the call opens
        call.args('{"city": ')
        call.args('"Oslo"}')
        assert call.raw_args == '{"city": "Oslo"}'
        assert call.parse_args(Args) == Args(city="Oslo")
        assert call.parse_args(dict[str, str]) == {"city": "Oslo"}
        call.encrypted_value("sig")
        assert call.result({"sky": "snow"}) == "r1-msg-1"
    with pytest.raises(HandleClosed):
        call.result("again")
    with pytest.raises(HandleClosed):
        call.args("{}")
    wire = valid(rx.drain())
    assert wire[-2] == {
        "type": "TOOL_CALL_RESULT", "messageId": "r1-msg-1", "toolCallId": "r1-call-1",
        "content": '{"sky":"snow"}', "role": "tool",
    }  # fmt: skip


def test_parse_args_errors_are_typed() -> None:
    ctx, _ = make()
    call = ctx.tool_call("weather")
    call.args_json({"town": "Oslo"})
    with pytest.raises(InvalidToolArguments, match="weather"):
        call.parse_args(Args)
    empty = ctx.tool_call("noargs")
    assert empty.parse_args(dict[str, int]) == {}


def test_end_leaves_a_call_for_the_frontend() -> None:
    ctx, rx = make()
    call = ctx.tool_call_with_id("front-1", "confirm", parent_message_id=ctx.say("asking"))
    call.args_json({"q": "ok?"})
    call.end()
    call.end()
    events = rx.drain()
    assert types(events)[-1] == "TOOL_CALL_END"
    valid(events)


def test_result_before_end_ends_first_but_a_raw_one_is_refused() -> None:
    ctx, rx = make()
    call = ctx.tool_call("t")
    with pytest.raises(ProtocolViolation) as info:
        from tiller.events import ToolCallResultEvent

        ctx.emit(ToolCallResultEvent("m", call.id, "too early"))
    assert info.value.rule == "OutOfOrder"
    call.result("fine")  # the handle ends the call before its result
    assert types(rx.drain())[-3:] == ["TOOL_CALL_START", "TOOL_CALL_END", "TOOL_CALL_RESULT"][-3:]


def test_unknown_id_is_refused() -> None:
    ctx, _ = make()
    from tiller.events import TextMessageContentEvent

    with pytest.raises(ProtocolViolation, match="NotOpen"):
        ctx.emit(TextMessageContentEvent("ghost", "boo"))


@pytest.mark.parametrize("kind", ["message", "reasoning", "tool_call", "step", "subagent"])
def test_an_exception_inside_each_handle_closes_it(kind: str) -> None:
    ctx, rx = make()
    opener = {
        "message": lambda: ctx.assistant_message(),
        "reasoning": lambda: ctx.reasoning(),
        "tool_call": lambda: ctx.tool_call("t"),
        "step": lambda: ctx.step("s"),
        "subagent": lambda: ctx.subagent("helper"),
    }[kind]
    with pytest.raises(RuntimeError, match="inside"), opener():
        raise RuntimeError("inside")
    events = rx.drain()
    valid(events)
    if kind == "subagent":
        assert events[-1].to_wire() == {
            "type": "SUBAGENT_ERROR",
            "subagentRunId": "r1-sub-1",
            "message": "inside",
            "code": "AGENT_ERROR",
        }
    assert ctx.open_handles() == []


def test_tool_call_with_broken_args_is_left_open_on_exception() -> None:
    ctx, rx = make()
    with pytest.raises(ValueError), ctx.tool_call("t") as call:
        call.args('{"half": ')
        raise ValueError("model stream died")
    assert types(rx.drain()) == ["TOOL_CALL_START", "TOOL_CALL_ARGS"]
    assert ctx.open_handles() == [call]  # the driver will end the run with RUN_ERROR
    # Leaving normally with broken args is the author's bug: the verifier says so.
    other = ctx.tool_call("t")
    other.args("{")
    with pytest.raises(ProtocolViolation, match="ArgsNotJson"):
        other.__exit__(None, None, None)


async def test_async_with_works_too() -> None:
    ctx, rx = make()
    async with ctx.step("s"), ctx.assistant_message() as m:
        m.delta("x")
    valid(rx.drain())


# ── subagents ────────────────────────────────────────────────────────────────────


def test_subagent_attribution_and_nesting() -> None:
    ctx, rx = make()
    with ctx.subagent("outer", parent_tool_call_id="c0") as outer:
        assert ctx.subagent_run_id() == outer.id
        ctx.say("from outer")
        with ctx.subagent("inner") as inner:
            ctx.say("from inner")
            inner.finish_with({"n": 1})
        ctx.say("outer again")
    assert ctx.subagent_run_id() is None
    ctx.say("from the agent")
    wire = valid(rx.drain())
    started = [e for e in wire if e["type"] == "SUBAGENT_STARTED"]
    assert started[0] == {
        "type": "SUBAGENT_STARTED",
        "subagentRunId": "r1-sub-1",
        "name": "outer",
        "parentToolCallId": "c0",
    }
    assert started[1]["parentSubagentRunId"] == "r1-sub-1"
    owners = [e.get("subagentRunId") for e in wire if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert owners == ["r1-sub-1", "r1-sub-2", "r1-sub-1", None]


def test_subagent_verbs() -> None:
    ctx, rx = make()
    ctx.subagent("a").finish()
    ctx.subagent("b").fail("nope")
    ctx.subagent("c").fail_with_code("nope", "TIMEOUT")
    s = ctx.subagent("d")
    s.suspend(["i1"])
    s.finish()  # already closed: nothing
    wire = valid(rx.drain())
    assert wire[-2] == {
        "type": "SUBAGENT_FINISHED", "subagentRunId": "r1-sub-4",
        "outcome": {"type": "suspended", "interruptIds": ["i1"]},
    }  # fmt: skip
    assert ctx.subagent_run_id() is None


async def test_ten_concurrent_subagents_are_attributed_by_task() -> None:
    ctx, rx = make()

    async def work(i: int) -> None:
        with ctx.subagent(f"worker-{i}") as sub:
            for step in range(3):
                with ctx.assistant_message() as m:
                    await asyncio.sleep(0)
                    m.delta(f"{sub.id}:{step}")
                await asyncio.sleep(0)

    await asyncio.gather(*(work(i) for i in range(10)))
    wire = valid(rx.drain())
    contents = [e for e in wire if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert len(contents) == 30
    for event in contents:
        assert event["delta"].split(":")[0] == event["subagentRunId"]


async def test_emit_from_a_worker_thread() -> None:
    ctx, rx = make()
    threads: list[int] = []

    def blocking_tool() -> None:
        import threading

        threads.append(threading.get_ident())
        ctx.say("from a thread")
        with pytest.raises(ProtocolViolation, match="NotOpen"):  # refusals reach the thread
            ctx.emit(TextMessageEndEvent("never-opened"))

    with ctx.subagent("threaded"):
        await asyncio.to_thread(blocking_tool)
    import threading

    assert threads and threads[0] != threading.get_ident()
    wire = valid(rx.drain())
    assert [e["type"] for e in wire[2:5]] == [
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
    ]
    assert wire[2]["subagentRunId"] == "r1-sub-1"  # attribution followed into the thread


# ── state ────────────────────────────────────────────────────────────────────────


class Counter(BaseModel):
    n: int = 0
    items: list[str] = []
    notes: str = "a state large enough that a one-field change is cheaper as a delta"


def test_state_publishing() -> None:
    ctx, rx = AgUiContext.new(
        {"threadId": "t", "runId": "r", "messages": [], "state": {}}, state_type=Counter
    )
    assert ctx.state == Counter()
    ctx.publish_state()
    ctx.publish_state()  # unchanged: nothing
    ctx.state_mut().items.append("a")
    ctx.publish_state()
    ctx.update_state(lambda s: Counter(n=5, items=s.items))
    ctx.update_state(lambda s: None)  # in place, nothing changed: nothing sent
    ctx.set_state(Counter(n=6, items=["a"]))
    ctx.patch_state([{"op": "replace", "path": "/n", "value": 7}])
    assert ctx.state == Counter(n=7, items=["a"])
    small, small_rx = make(state={"n": 0})
    small.publish_state()
    small.state_mut()["n"] = 1
    small.publish_state()  # the delta would be larger than the snapshot
    assert [e.type for e in small_rx.drain()] == ["STATE_SNAPSHOT", "STATE_SNAPSHOT"]
    wire = wire_events(rx.drain())
    assert [e["type"] for e in wire] == [
        "STATE_SNAPSHOT",
        "STATE_DELTA",
        "STATE_DELTA",
        "STATE_DELTA",
        "STATE_DELTA",
    ]
    assert wire[0]["snapshot"] == Counter().model_dump()
    assert wire[-1]["delta"] == [{"op": "replace", "path": "/n", "value": 7}]
    ctx.reset_state_stream()
    ctx.publish_state()
    assert rx.drain()[0].type == "STATE_SNAPSHOT"


def test_state_decoding() -> None:
    for raw in (None, {}):
        ctx, _ = AgUiContext.new(
            {"threadId": "t", "runId": "r", "messages": [], "state": raw}, state_type=Counter
        )
        assert ctx.state == Counter()
    ctx, _ = make(state={"free": ["json"]})
    assert ctx.state == {"free": ["json"]}
    with pytest.raises(StateDecodeError, match="Counter"):
        AgUiContext.new(
            {"threadId": "t", "runId": "r", "messages": [], "state": {"n": "many"}},
            state_type=Counter,
        )


def test_invalid_patch_leaves_state_alone() -> None:
    ctx, rx = AgUiContext.new({"threadId": "t", "runId": "r", "messages": []}, state_type=Counter)
    ctx.publish_state()
    rx.drain()
    with pytest.raises(UsageError):
        ctx.patch_state([{"op": "replace", "path": "/missing/deep", "value": 1}])
    assert ctx.state == Counter()
    assert rx.drain() == []


# ── resume ───────────────────────────────────────────────────────────────────────


def test_resume_accessors_and_checks() -> None:
    ctx, _ = make(
        resume=[
            {"interruptId": "i1", "status": "resolved", "payload": {"decision": "approve"}},
            {"interruptId": "i2", "status": "cancelled"},
        ]
    )
    assert ctx.is_resume
    assert ctx.resume_for("i1").payload == {"decision": "approve"}  # type: ignore[union-attr]
    assert ctx.resume_for("i2").status == "cancelled"  # type: ignore[union-attr]
    assert ctx.resume_for("unknown") is None
    assert set(ctx.check_resume(["i1", "i2"])) == {"i1", "i2"}
    with pytest.raises(InvalidResume, match="unknown interrupt"):
        ctx.check_resume(["i1"])
    with pytest.raises(InvalidResume, match="unanswered"):
        ctx.check_resume(["i1", "i2", "i3"])
    twice, _ = make(resume=[{"interruptId": "i", "status": "cancelled"}] * 2)
    with pytest.raises(InvalidResume, match="twice"):
        twice.check_resume(["i"])


# ── cancellation ─────────────────────────────────────────────────────────────────


def test_emit_after_cancel_refuses_content_but_lets_closing_through() -> None:
    token = CancellationToken()
    ctx, rx = AgUiContext.new({"threadId": "t1", "runId": "r1", "messages": []}, cancel=token)
    step = ctx.step("s")
    message = ctx.assistant_message()
    message.delta("partial")
    token.cancel()
    assert ctx.is_cancelled
    with pytest.raises(Cancelled):
        ctx.check_cancelled()
    with pytest.raises(Cancelled):
        message.delta("more")
    with pytest.raises(Cancelled):
        ctx.say("new")
    message.end()
    step.end()
    ctx.emit(RunFinishedEvent("t1", "r1", outcome={"type": "cancelled"}))
    assert_valid_stream([RunStartedEvent("t1", "r1"), *rx.drain()])


async def test_until_cancelled_and_cancelled() -> None:
    ctx, _ = make()
    assert await ctx.until_cancelled(asyncio.sleep(0, result=5)) == 5
    asyncio.get_running_loop().call_soon(ctx.cancel_token.cancel)
    assert await ctx.until_cancelled(asyncio.sleep(3600)) is None
    await ctx.cancelled()


def test_a_state_event_that_never_went_out_is_not_counted_as_published() -> None:
    """If emitting a state event fails, the next publish is a snapshot: a delta would
    apply to a state the client never received."""

    class FailOnce:
        failed = False

        def transform(self, event: Event) -> list[Event]:
            if event.type == "STATE_DELTA" and not self.failed:
                self.failed = True
                raise RuntimeError("the transport hiccuped")
            return [event]

    ctx, rx = AgUiContext.new(
        {"threadId": "t", "runId": "r", "messages": []},
        state_type=Counter,
        transformers=[FailOnce()],
    )
    ctx.publish_state()
    ctx.state_mut().n = 1
    with pytest.raises(RuntimeError, match="hiccuped"):
        ctx.publish_state()
    ctx.state_mut().n = 2
    ctx.publish_state()
    kinds = [e.type for e in rx.drain()]
    assert kinds == ["STATE_SNAPSHOT", "STATE_SNAPSHOT"]


def test_a_message_with_a_role_text_messages_cannot_have_is_refused() -> None:
    """Broke on main: `ctx.message("tool")` opened a text message with role `tool`, which
    the AG-UI schema does not allow (AGUI504): a tool's output is a TOOL_CALL_RESULT."""
    ctx, rx = make()
    for role in ("tool", "reasoning", "bot"):
        with pytest.raises(ProtocolViolation, match="InvalidRole"):
            ctx.message(role)
    assert rx.drain() == []
    with ctx.message("system") as message:
        message.delta("be brief")
    valid(rx.drain())

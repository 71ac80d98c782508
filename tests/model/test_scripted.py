"""Tests for `ScriptedModel`: turns as data, files, functions, errors, delays."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tiller.conversation import (
    AssistantMessage,
    Reasoning,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)
from tiller.errors import UsageError
from tiller.model import (
    ContextOverflow,
    DroppedCall,
    Finish,
    Model,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelRequest,
    ModelTimeout,
    ReasoningDelta,
    ResponseAccumulator,
    ScriptedModel,
    StreamEvent,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
    Turn,
    TurnCall,
    TurnInfo,
    UsageReport,
)


def request(text: str = "hi", **kwargs: Any) -> ModelRequest:
    system = kwargs.pop("system", None)
    return ModelRequest(system=system, messages=[UserMessage(text=text)], **kwargs)


async def collect(model: Model, req: ModelRequest | None = None) -> list[StreamEvent]:
    async with asyncio.timeout(5):  # a hang guard, never a timing assertion
        return [event async for event in model.stream(req or request())]


async def respond(model: Model, req: ModelRequest | None = None) -> ResponseAccumulator:
    acc = ResponseAccumulator()
    for event in await collect(model, req):
        acc.feed(event)
    return acc


def test_it_is_a_model_and_not_a_test_class() -> None:
    model = ScriptedModel(["x"], name="bot", context_window=8000)
    assert isinstance(model, Model)
    assert (model.provider, model.name, model.context_window) == ("scripted", "bot", 8000)
    assert ScriptedModel.__test__ is False


async def test_a_text_turn_streams_word_by_word_then_usage_and_finish() -> None:
    model = ScriptedModel(["Hello there,  world."])
    events = await collect(model, request("abcdefgh", system="sys"))
    assert events == [
        TextDelta("Hello"),
        TextDelta(" there,"),
        TextDelta("  world."),
        # 11 input characters (system + message) and 20 output characters, 4 per token
        UsageReport(Usage(input_tokens=3, output_tokens=5, requests=1)),
        Finish("stop"),
    ]


async def test_a_tool_call_turn_streams_arguments_in_fragments() -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 22}}]}])
    events = await collect(model)
    assert events[0] == ToolCallStart(0, "call-1-0", "add")
    fragments = [e.delta for e in events if isinstance(e, ToolCallArgsDelta)]
    assert len(fragments) == 3
    assert "".join(fragments) == '{"a":1,"b":22}'
    assert events[-3:-2] == [ToolCallEnd(0)]
    assert events[-1] == Finish("tool_calls")


async def test_call_ids_are_deterministic_per_turn_and_index_unless_given() -> None:
    turn = {"tool_calls": [{"name": "f"}, {"name": "g", "id": "mine"}, {"name": "h"}]}
    model = ScriptedModel([turn, turn])
    await collect(model)
    second = await respond(model)
    assert [c.id for c in second.get().message.tool_calls] == ["call-2-0", "mine", "call-2-2"]
    assert [c.arguments for c in second.get().message.tool_calls] == ["{}", "{}", "{}"]


async def test_a_full_turn_accumulates_to_the_scripted_message() -> None:
    model = ScriptedModel(
        [
            {
                "reasoning": {"text": "let me see", "signature": "sig"},
                "chunks": ["Chec", "king"],
                "tool_calls": [{"name": "read", "arguments": '{"path": "a.txt"}', "id": "r1"}],
                "usage": {"input_tokens": 50, "output_tokens": 7},
                "finish": "tool_calls",
            }
        ]
    )
    events = await collect(model)
    assert events[:4] == [
        ReasoningDelta(text="let me see"),
        ReasoningDelta(signature="sig"),
        TextDelta("Chec"),
        TextDelta("king"),
    ]
    acc = ResponseAccumulator()
    for event in events:
        acc.feed(event)
    response = acc.get()
    assert response.status == "complete"
    assert response.message == AssistantMessage(
        text="Checking",
        reasoning=(Reasoning(text="let me see", signature="sig"),),
        tool_calls=(ToolCall(id="r1", name="read", arguments='{"path": "a.txt"}'),),
    )
    assert response.usage == Usage(input_tokens=50, output_tokens=7, requests=1)


async def test_raw_arguments_are_sent_verbatim_even_when_not_json() -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "f", "arguments": "{not json"}]}])
    acc = await respond(model)
    assert acc.get().message.tool_calls == ()
    assert acc.dropped == (DroppedCall(0, "call-1-0", "f", "{not json", "invalid_json"),)


async def test_turn_objects_work_like_mappings() -> None:
    model = ScriptedModel(
        [Turn(text="a", tool_calls=(TurnCall("f", {"x": 1}),), finish="stop"), "plain"]
    )
    first = await respond(model)
    call = ToolCall(id="call-1-0", name="f", arguments='{"x":1}')
    assert first.get().message.tool_calls == (call,)
    assert first.finish_reason == "stop"
    assert (await respond(model)).text == "plain"


async def test_requests_are_recorded() -> None:
    model = ScriptedModel(["one", "two"])
    assert model.last_request is None
    first, second = request("a"), request("b")
    await collect(model, first)
    await collect(model, second)
    assert model.requests == [first, second]
    assert model.last_request is second


async def test_a_run_past_the_end_of_the_script_fails_clearly() -> None:
    model = ScriptedModel(["only"])
    await collect(model)
    with pytest.raises(ModelError, match=r"the script has no turn 2; it has 1 turn$") as info:
        await collect(model)
    assert not info.value.retryable
    with pytest.raises(ModelError, match="no turn 1; it has 0 turns"):
        await collect(ScriptedModel([]))


async def test_when_exhausted_repeat_and_done() -> None:
    repeat = ScriptedModel([{"tool_calls": [{"name": "f"}]}], when_exhausted="repeat")
    await collect(repeat)
    again = await respond(repeat)
    assert [c.id for c in again.get().message.tool_calls] == ["call-2-0"]  # still unique
    done = ScriptedModel(["first"], when_exhausted="done")
    await collect(done)
    assert (await respond(done)).text == "done"
    with pytest.raises(UsageError, match="when_exhausted"):
        ScriptedModel([], when_exhausted="loop")  # type: ignore[arg-type]


async def test_a_single_turn_needs_no_list() -> None:
    assert (await respond(ScriptedModel("just this"))).text == "just this"
    assert (await respond(ScriptedModel({"text": "a mapping"}))).text == "a mapping"


# -- errors -----------------------------------------------------------------------------


async def test_an_error_turn_raises_before_any_event() -> None:
    model = ScriptedModel([{"error": {"status": 429, "retry_after": 1, "message": "slow down"}}])
    stream = model.stream(request())
    with pytest.raises(ModelHTTPError) as info:
        await anext(stream)
    assert (info.value.status, info.value.retry_after, info.value.retryable) == (429, 1.0, True)
    assert info.value.provider == "scripted"
    assert "slow down" in str(info.value)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ({"kind": "timeout"}, ModelTimeout),
        ({"kind": "connection"}, ModelConnectionError),
        ({"kind": "context_overflow"}, ContextOverflow),
        ({"status": 400}, ModelHTTPError),
    ],
)
async def test_error_kinds(error: dict[str, Any], kind: type[ModelError]) -> None:
    with pytest.raises(kind):
        await collect(ScriptedModel([{"error": error}]))


async def test_an_error_after_content_keeps_the_partial_turn_and_drops_the_open_call() -> None:
    model = ScriptedModel(
        [
            {
                "text": "partial answer",
                "tool_calls": [{"name": "rm", "arguments": {"path": "/"}}],
                "error": {"kind": "connection", "message": "reset"},
            }
        ]
    )
    acc = ResponseAccumulator()
    with pytest.raises(ModelConnectionError, match="reset"):
        async for event in model.stream(request()):
            acc.feed(event)
    acc.interrupt()
    response = acc.get()
    assert response.status == "interrupted"
    assert response.message.text == "partial answer"
    assert response.message.tool_calls == ()  # law 1: never executed
    assert [d.reason for d in response.dropped] == ["incomplete"]


async def test_each_call_gets_a_fresh_exception() -> None:
    model = ScriptedModel([{"error": {"status": 500}}], when_exhausted="repeat")
    errors = []
    for _ in range(2):
        with pytest.raises(ModelHTTPError) as info:
            await collect(model)
        errors.append(info.value)
    assert errors[0] is not errors[1]


async def test_cancelling_during_a_delay_propagates() -> None:
    model = ScriptedModel([{"text": "never", "delay": 60}])
    task = asyncio.create_task(collect(model))
    await asyncio.sleep(0)  # one step runs the task into the delay (ready tasks run FIFO)
    assert model.requests  # recorded right before the delay starts
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_short_delay_then_streams() -> None:
    assert (await respond(ScriptedModel([{"text": "late", "delay": 0.001}]))).text == "late"


# -- turn functions ---------------------------------------------------------------------


async def test_a_sync_function_gets_messages_and_info() -> None:
    seen: list[TurnInfo] = []

    def turn(messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo) -> str:
        seen.append(info)
        return f"turn {info.turn}: {messages[-1].text}"

    model = ScriptedModel(turn)
    tools = [ToolSpec("f", "does f", {"type": "object"})]
    req = request("ping", system="be brief", tools=tools, max_tokens=99)
    assert (await respond(model, req)).text == "turn 1: ping"
    assert (await respond(model)).text == "turn 2: hi"
    info = seen[0]
    assert (info.turn, info.system, list(info.tools), info.max_tokens) == (
        1,
        "be brief",
        tools,
        99,
    )
    assert info.request is req


async def test_an_async_function_may_return_a_mapping() -> None:
    async def turn(messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo) -> Any:
        await asyncio.sleep(0)
        return {"tool_calls": [{"name": "look", "arguments": {"turn": info.turn}}]}

    acc = await respond(ScriptedModel(turn))
    assert acc.get().message.tool_calls == (
        ToolCall(id="call-1-0", name="look", arguments='{"turn":1}'),
    )


async def test_an_async_generator_streams_its_chunks() -> None:
    closed = False

    async def turn(
        messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo
    ) -> AsyncIterator[str]:
        nonlocal closed
        try:
            for chunk in ("str", "", "eam", "ed"):
                yield chunk
        finally:
            closed = True

    events = await collect(ScriptedModel(turn), request("12345678"))
    assert events == [
        TextDelta("str"),
        TextDelta("eam"),
        TextDelta("ed"),
        UsageReport(Usage(input_tokens=2, output_tokens=2, requests=1)),
        Finish("stop"),
    ]
    assert closed


async def test_an_async_generator_must_yield_text() -> None:
    async def turn(messages: Any, info: TurnInfo) -> AsyncIterator[Any]:
        yield 42

    with pytest.raises(UsageError, match="text chunks"):
        await collect(ScriptedModel(turn))


async def test_a_function_that_raises_propagates_untouched() -> None:
    def turn(messages: Any, info: TurnInfo) -> str:
        raise KeyError("bug in the test")

    with pytest.raises(KeyError, match="bug in the test"):
        await collect(ScriptedModel(turn))


async def test_a_function_returning_none_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="returned None for turn 1"):
        await collect(ScriptedModel(lambda messages, info: None))  # type: ignore[arg-type,return-value]


async def test_echo() -> None:
    model = ScriptedModel.echo()
    assert (await respond(model, request("repeat me"))).text == "repeat me"
    empty = ModelRequest(system=None, messages=[])
    assert (await respond(model, empty)).text == "(nothing to echo)"
    async with model:
        pass


# -- scripts as data --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("turn", "message"),
    [
        ({"txt": "typo"}, r"turn 2: unknown key\(s\) \['txt'\]"),
        ({"tool_calls": [{"arguments": {}}]}, "turn 2: a tool call needs a `name`"),
        ({"tool_calls": [{"name": "f", "argz": {}}]}, r"unknown tool call key\(s\)"),
        ({"tool_calls": {"name": "f"}}, "`tool_calls` must be a list"),
        ({"finish": "bored"}, "finish 'bored' is not one of"),
        ({"usage": {"tokens": 3}}, "`usage`: tokens"),
        ({"error": {"message": "x"}}, "an error needs a `status`"),
        ({"error": {"kind": "gremlins"}}, "error kind 'gremlins'"),
        ({"error": {"status": 500, "when": "now"}}, r"unknown error key\(s\)"),
        ({"text": "ab", "chunks": ["a", "c"]}, "`chunks` must join up to `text`"),
        ({"chunks": "abc"}, "`chunks` must be a list"),
        ({"delay": -1}, "delay must not be negative"),
        ({"delay": "soon"}, "`delay` has the wrong type"),
        ({"reasoning": 3}, "`reasoning` is text or a mapping"),
        ({"reasoning": {"txt": "x"}}, "`reasoning`: txt"),
        (7, "a turn is a string or a mapping, not int"),
    ],
)
def test_a_bad_turn_is_rejected_when_the_script_is_made(turn: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ScriptedModel(["fine", turn])


YAML_SCRIPT = """\
name: weather-bot
context_window: 32000
turns:
  - tool_calls:
      - {name: get_weather, arguments: {city: Paris}}
  - error: {status: 503}
  - text: It is sunny in Paris.
    usage: {input_tokens: 120, output_tokens: 9}
  - Thanks!
"""


async def test_from_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "weather.yaml"
    path.write_text(YAML_SCRIPT)
    model = ScriptedModel.from_file(path)
    assert (model.name, model.context_window, len(model.turns)) == ("weather-bot", 32000, 4)
    first = await respond(model)
    assert first.get().message.tool_calls == (
        ToolCall(id="call-1-0", name="get_weather", arguments='{"city":"Paris"}'),
    )
    with pytest.raises(ModelHTTPError):
        await collect(model)
    third = await respond(model)
    assert third.text == "It is sunny in Paris."
    assert third.usage == Usage(input_tokens=120, output_tokens=9, requests=1)
    assert (await respond(model)).text == "Thanks!"


async def test_from_json_file_with_a_bare_list_and_options(tmp_path: Path) -> None:
    path = tmp_path / "hello.json"
    path.write_text('["hello", {"text": "bye"}]')
    model = ScriptedModel.from_file(str(path), when_exhausted="done")
    assert model.name == "hello"  # the file's stem
    assert [(await respond(model)).text for _ in range(3)] == ["hello", "bye", "done"]


@pytest.mark.parametrize(
    ("name", "source", "message"),
    [
        ("bad.yaml", "turns: [unclosed", "not valid YAML"),
        ("bad.json", '["unclosed"', "not valid JSON"),
        ("bad.yaml", "just a string", "a script is a list of turns, not str"),
        ("bad.yaml", "turns: []\nmodel: x", "a mapping with `turns`"),
        ("bad.yaml", "- ok\n- {text: 1}", "turn 2: `text` has the wrong type"),
    ],
)
def test_a_malformed_file_is_a_usage_error_naming_it(
    tmp_path: Path, name: str, source: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(source)
    with pytest.raises(UsageError, match=message) as info:
        ScriptedModel.from_file(path)
    assert str(path) in str(info.value)


def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read the model script"):
        ScriptedModel.from_file(tmp_path / "nope.yaml")


# -- the usage estimate costs a turn what the turn added (issue 19) ----------------------


def _history(exchanges: int) -> list[UserMessage | AssistantMessage]:
    """A run's history: the request, then `exchanges` calls each with its result."""
    messages: list[UserMessage | AssistantMessage] = [UserMessage(text="add them up")]
    for n in range(exchanges):
        call = ToolCall(id=f"c{n}", name="add", arguments=f'{{"a": {n}, "b": 1}}')
        messages.append(AssistantMessage(text="adding", tool_calls=(call,)))
        result = ToolResult(call_id=call.id, name="add", content=str(n + 1))
        messages.append(UserMessage(tool_results=(result,)))
    return messages


def _calls_to_answer(model: ScriptedModel, req: ModelRequest) -> tuple[int, list[StreamEvent]]:
    """Python and C function calls made while `model` answers `req` (a count, not a time)."""
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    async def answer() -> list[StreamEvent]:
        stream = model.stream(req)
        sys.setprofile(count)
        try:
            return [event async for event in stream]
        finally:
            sys.setprofile(None)

    events = asyncio.run(answer())
    return calls, events


def _estimated_twice(exchanges: int) -> tuple[int, list[StreamEvent]]:
    """The calls made to answer a run's second request, `exchanges` deep, and its events."""
    model = ScriptedModel(["thinking", "done"])
    history = _history(exchanges)
    model_request = ModelRequest(system="sys", messages=list(history), run_id="r", run_call=1)
    asyncio.run(collect(model, model_request))
    history += [AssistantMessage(text="thinking"), UserMessage(text="go on")]
    second = ModelRequest(system="sys", messages=list(history), run_id="r", run_call=2)
    return _calls_to_answer(model, second)


def test_the_estimate_of_a_runs_next_request_reads_only_its_new_messages() -> None:
    short_calls, short_events = _estimated_twice(10)
    long_calls, long_events = _estimated_twice(300)
    assert long_calls == short_calls  # the same work, however long the history
    new = [AssistantMessage(text="thinking"), UserMessage(text="go on")]
    for exchanges, events in ((10, short_events), (300, long_events)):
        usage = next(e for e in events if isinstance(e, UsageReport)).usage
        # the figures are the full count's: system and messages, 4 characters a token
        chars = len("sys") + _chars_by_hand([*_history(exchanges), *new])
        assert usage == Usage(input_tokens=-(-chars // 4), output_tokens=1, requests=1)


async def test_a_history_rewritten_in_place_is_estimated_again_in_full() -> None:
    """Compaction thins a result in place: same length, same first and last message."""
    model = ScriptedModel(["a", "b", "c"])
    history = _history(40)
    first = ModelRequest(system=None, messages=list(history), run_id="r", run_call=1)
    await collect(model, first)
    thinned = history[2].model_copy(update={"tool_results": ()})
    rewritten = [*history[:2], thinned, *history[3:]]
    for call, messages in ((2, rewritten), (3, rewritten[:5])):
        req = ModelRequest(system=None, messages=messages, run_id="r", run_call=call)
        report = next(e for e in await collect(model, req) if isinstance(e, UsageReport))
        assert report.usage.input_tokens == -(-_chars_by_hand(messages) // 4)


def _chars_by_hand(messages: Sequence[UserMessage | AssistantMessage]) -> int:
    """The characters the estimate counts: texts, call arguments, result contents."""
    chars = 0
    for message in messages:
        chars += len(message.text)
        if isinstance(message, AssistantMessage):
            chars += sum(len(call.arguments) for call in message.tool_calls)
        else:
            chars += sum(len(result.content) for result in message.tool_results)
    return chars

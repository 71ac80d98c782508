"""Capture and replay: a captured run, replayed offline through the same agent, emits the
identical AG-UI stream (ids included) and transcript; a changed agent diverges at the step
that shows the change; captures grow linearly; the store sink stores what `load_capture`
reads back; capture never breaks a run."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tiller.capture import (
    Capture,
    CaptureError,
    CaptureRecord,
    CaptureSink,
    ModelCallRecord,
    ToolResultRecord,
    bus_capture,
    load_capture,
    memory_capture,
)
from tiller.conversation import UserMessage
from tiller.events import Event
from tiller.loop import Agent, RunContext, RunOptions, RunResult
from tiller.model import ModelError, ModelRequest, ScriptedModel, Turn, TurnCall
from tiller.model.replay import Divergence, ReplayModel
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.store import open_bus
from tiller.testing import assert_valid_stream, run_capture, run_scripted
from tiller.tools import Tool, tool

RUN_ID = "run-capture"


@tool(read_only=True)
def lookup(n: int) -> str:
    """Look a number up."""
    return f"entry {n}: ok"


def script(steps: int) -> list[Turn]:
    """`steps` steps: each but the last streams a few text chunks and calls `lookup`;
    the last answers."""
    turns = [
        Turn(
            chunks=("Looking ", "up ", f"item {n:04d}", "."),
            tool_calls=(TurnCall("lookup", {"n": n}),),
        )
        for n in range(1, steps)
    ]
    turns.append(Turn(chunks=("All ", "done.")))
    return turns


def options(steps: int, factory: Callable[[str], CaptureSink] | None = None) -> RunOptions:
    return RunOptions(max_steps=steps + 1, capture_sink=factory)


@dataclasses.dataclass
class Run:
    result: RunResult
    wire: list[dict[str, Any]]


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    return RunContext.sandboxed(tmp_path, AllowAll())


async def drive(
    model: Any,
    ctx: RunContext,
    opts: RunOptions,
    tools: tuple[Tool, ...] = (lookup,),
    prompt: str = "Look everything up.",
    **agent: Any,
) -> Run:
    """Run to the end (with a hang guard) and check the stream is valid AG-UI. `agent`:
    the `Agent`'s keyword arguments (a system prompt, an output type)."""
    events: list[Event] = []
    async with asyncio.timeout(30):
        result = await Agent(model, tools, **agent).run_in(
            ctx, prompt, opts, on_event=events.append, run_id=RUN_ID
        )
    return Run(result, assert_valid_stream(events))


async def captured(steps: int, ctx: RunContext) -> tuple[Run, Capture]:
    captures = memory_capture()
    run = await drive(ScriptedModel(script(steps)), ctx, options(steps, captures))
    assert run.result.stop_cause is StopCause.COMPLETED
    assert run.result.steps == steps
    return run, captures[RUN_ID]


# ── replay identity ──────────────────────────────────────────────────────────────────


async def test_a_100_step_run_replays_to_the_identical_stream(ctx: RunContext) -> None:
    original, capture = await captured(100, ctx)
    assert len(capture.model_calls) == 100
    assert len(capture.tool_results) == 99
    assert [r.step for r in capture.model_calls] == list(range(1, 101))

    replay = ReplayModel(capture)
    assert (replay.provider, replay.name) == ("scripted", "scripted")
    again = await drive(replay, ctx, options(100))

    assert again.wire == original.wire  # every event, ids and usage included
    assert again.result.state.messages == original.result.state.messages
    assert again.result.text == original.result.text == "All done."
    assert again.result.usage == original.result.usage
    assert replay.served == 100 and replay.remaining == 0
    assert replay.mismatches == []


async def test_a_capture_round_trips_through_json_and_jsonl(ctx: RunContext) -> None:
    original, capture = await captured(5, ctx)
    assert Capture.from_json(capture.to_json()) == capture
    assert Capture.from_jsonl(capture.to_jsonl()) == capture
    assert capture.to_dict()["schema_version"] == 2
    again = await drive(ReplayModel(Capture.from_json(capture.to_json())), ctx, options(5))
    assert again.wire == original.wire


def test_a_capture_of_another_schema_version_is_refused() -> None:
    with pytest.raises(CaptureError, match="schema version 99"):
        Capture.from_json(b'{"schema_version": 99, "run_id": "r", "records": []}')
    with pytest.raises(CaptureError, match="not valid JSON"):
        Capture.from_json(b"{")
    with pytest.raises(CaptureError, match="unknown capture record type"):
        Capture.from_json(b'{"schema_version": 1, "run_id": "r", "records": [{"type": "x"}]}')


async def test_an_empty_turn_and_its_nudge_replay_identically(ctx: RunContext) -> None:
    """The empty response is not kept in the transcript: the next call's new messages
    are found without it."""
    turns = [Turn(tool_calls=(TurnCall("lookup", {"n": 1}),)), Turn(), Turn(text="Done.")]
    captures = memory_capture()
    original = await drive(ScriptedModel(turns), ctx, options(3, captures))
    assert original.result.stop_cause is StopCause.COMPLETED
    replay = ReplayModel(captures[RUN_ID])
    again = await drive(replay, ctx, options(3))
    assert again.wire == original.wire
    assert replay.served == 3


async def test_a_run_with_a_history_window_replays_identically(ctx: RunContext) -> None:
    """Requests carry only the window, which loses old messages between calls: the new
    messages are still found (after the previous response)."""
    windowed = RunOptions(max_steps=31, max_history_tokens=120)
    captures = memory_capture()
    model = ScriptedModel(script(30))
    original = await drive(model, ctx, windowed.with_capture_sink(captures))
    assert original.result.stop_cause is StopCause.COMPLETED
    last = model.requests[-1].messages
    assert len(last) < len(original.result.state.messages) - 1  # the window did cut
    again = await drive(ReplayModel(captures[RUN_ID]), ctx, windowed)
    assert again.wire == original.wire


@tool(read_only=True)
def dump(n: int) -> str:
    """Dump a long log."""
    return "".join(f"{n}: line {i}\n" for i in range(2000))


async def test_a_run_whose_newest_results_were_cut_replays_identically(
    ctx: RunContext,
) -> None:
    """The window shortens results over `max_history_tokens`; the capture records them as
    the model was sent them, so a replay (which builds the same window) does not diverge."""
    windowed = RunOptions(max_steps=5, max_history_tokens=400)
    turns = [Turn(tool_calls=(TurnCall("dump", {"n": n}),)) for n in range(3)]
    turns.append(Turn(text="Read them."))
    captures = memory_capture()
    model = ScriptedModel(turns)
    original = await drive(model, ctx, windowed.with_capture_sink(captures), tools=(dump,))
    assert original.result.stop_cause is StopCause.COMPLETED
    (cut,) = model.requests[-1].messages[-1].tool_results
    assert "characters of this result were cut here" in cut.content  # the window did cut
    replay = ReplayModel(captures[RUN_ID])
    again = await drive(replay, ctx, windowed, tools=(dump,))
    assert replay.mismatches == []
    assert again.wire == original.wire
    assert again.result.state.messages == original.result.state.messages


# ── size ─────────────────────────────────────────────────────────────────────────────


async def test_a_capture_grows_linearly_with_the_run(ctx: RunContext) -> None:
    sizes = {}
    for steps in (50, 100, 200):
        _, capture = await captured(steps, ctx)
        sizes[steps] = len(capture.to_json())
    # Recording the whole history per call would make these ratios about 4 (quadratic).
    assert 1.8 < sizes[100] / sizes[50] < 2.2, sizes
    assert 1.8 < sizes[200] / sizes[100] < 2.2, sizes


# ── divergence ───────────────────────────────────────────────────────────────────────


def assert_failed_with(run: Run, divergence_step: int) -> None:
    assert run.result.stop_cause is StopCause.ERROR
    assert run.result.error is not None
    assert run.result.error.startswith(f"replay diverged at step {divergence_step}:")
    assert run.wire[-1]["type"] == "RUN_ERROR"
    assert run.wire[-1]["code"] == "MODEL_ERROR"


async def test_a_tool_that_returns_something_else_diverges_at_the_next_step(
    ctx: RunContext,
) -> None:
    original, capture = await captured(20, ctx)

    @tool(read_only=True, name="lookup")
    def changed(n: int) -> str:
        """Look a number up."""  # as recorded: only what it returns changed
        return "entry 7: MOVED" if n == 7 else f"entry {n}: ok"

    replay = ReplayModel(capture)
    run = await drive(replay, ctx, options(20), tools=(changed,))
    # Call 7 asked for `lookup(7)`; its result is among the new messages of call 8.
    assert_failed_with(run, 8)
    assert run.result.error is not None
    assert "run-capture-call-7 (lookup)" in run.result.error
    assert "'entry 7: ok'" in run.result.error and "'entry 7: MOVED'" in run.result.error
    diff = run.result.error.splitlines()  # a unified diff of the new messages follows
    assert any(line.startswith("-") and '"entry 7: ok"' in line for line in diff)
    assert any(line.startswith("+") and '"entry 7: MOVED"' in line for line in diff)
    # Up to the divergence the run is the recorded one.
    assert run.result.state.messages[:14] == original.result.state.messages[:14]
    assert replay.served == 8


async def test_a_changed_agent_with_another_tool_diverges_naming_the_step(
    ctx: RunContext,
) -> None:
    _, capture = await captured(10, ctx)

    @tool(read_only=True)
    def search(query: str) -> str:
        """Search instead of looking up."""
        return query

    run = await drive(ReplayModel(capture), ctx, options(10), tools=(search,))
    # The model was shown `lookup`, not `search`: the very first request differs.
    assert_failed_with(run, 1)
    assert run.result.error is not None
    assert "the tools differ (added search; removed lookup)" in run.result.error
    # Leniently, the replay goes on: the recorded model calls `lookup` at step 1, which
    # this agent has not, so the result read at step 2 is a refusal, not the entry.
    lenient = ReplayModel(capture, strict=False)
    await drive(lenient, ctx, options(10), tools=(search,))
    first, second = lenient.mismatches[:2]
    assert first.step == 1 and "the tools differ" in first.reason
    assert second.step == 2 and "run-capture-call-1 (lookup)" in second.reason
    assert "Unknown tool 'lookup'" in second.reason


# ── a changed agent (issue 18) ──────────────────────────────────────────────────────


async def captured_with(ctx: RunContext, steps: int = 3, **agent: Any) -> Capture:
    captures = memory_capture()
    run = await drive(ScriptedModel(script(steps)), ctx, options(steps, captures), **agent)
    assert run.result.stop_cause is StopCause.COMPLETED
    return captures[RUN_ID]


async def test_a_changed_system_prompt_diverges_unless_prompt_edits_are_allowed(
    ctx: RunContext,
) -> None:
    capture = await captured_with(ctx, system_prompt="Be brief.\nLook things up.")
    assert capture.model_calls[0].agent is not None
    assert capture.model_calls[1].agent is None  # unchanged since the first: not repeated
    run = await drive(
        ReplayModel(capture), ctx, options(3), system_prompt="Be thorough.\nLook things up."
    )
    assert_failed_with(run, 1)
    assert run.result.error is not None
    assert "the system prompt differs from the recording" in run.result.error
    assert "-Be brief." in run.result.error and "+Be thorough." in run.result.error
    # Only the prompt was reworded: with the switch, the replay goes on to the end.
    allowing = ReplayModel(capture, allow_prompt_edits=True)
    again = await drive(allowing, ctx, options(3), system_prompt="Be thorough.")
    assert again.result.stop_cause is StopCause.COMPLETED
    assert allowing.mismatches == [] and allowing.remaining == 0


async def test_a_changed_tool_diverges_even_when_prompt_edits_are_allowed(
    ctx: RunContext,
) -> None:
    capture = await captured_with(ctx)

    @tool(read_only=True, name="lookup")
    def wider(n: int, verbose: bool = False) -> str:
        """Look a number up."""
        return f"entry {n}: ok"

    replay = ReplayModel(capture, allow_prompt_edits=True)
    run = await drive(replay, ctx, options(3), tools=(wider,))
    assert_failed_with(run, 1)
    assert run.result.error is not None
    assert "the tools differ (changed lookup)" in run.result.error
    assert '"verbose"' in run.result.error  # the diff shows the new parameter


class Answer(BaseModel):
    value: int


class Renamed(BaseModel):
    amount: int


async def test_a_changed_output_schema_diverges_even_when_prompt_edits_are_allowed(
    ctx: RunContext,
) -> None:
    captures = memory_capture()
    recorded = await drive(
        ScriptedModel(['{"value": 3}']), ctx, options(1, captures), output_type=Answer
    )
    assert recorded.result.stop_cause is StopCause.COMPLETED
    capture = captures[RUN_ID]
    shape = capture.model_calls[0].agent
    assert shape is not None and shape["output_schema"] == Answer.model_json_schema()
    same = await drive(ReplayModel(capture), ctx, options(1), output_type=Answer)
    assert same.result.stop_cause is StopCause.COMPLETED
    replay = ReplayModel(capture, allow_prompt_edits=True)
    run = await drive(replay, ctx, options(1), output_type=Renamed)
    assert_failed_with(run, 1)
    assert run.result.error is not None
    assert "the output schema differs from the recording" in run.result.error


async def test_a_capture_from_before_shapes_were_recorded_replays_unchecked_for_them(
    ctx: RunContext,
) -> None:
    capture = await captured_with(ctx, system_prompt="Be brief.")
    old = capture.to_dict()
    old["schema_version"] = 1
    for record in old["records"]:
        record.pop("agent", None)
    legacy = Capture.from_dict(old)
    assert all(record.agent is None for record in legacy.model_calls)
    replay = ReplayModel(legacy)
    run = await drive(replay, ctx, options(3), system_prompt="Be thorough.")
    assert run.result.stop_cause is StopCause.COMPLETED
    assert replay.mismatches == []


async def test_the_divergence_is_a_non_retryable_model_error() -> None:
    replay = ReplayModel(Capture("r", []))
    request = ModelRequest(system=None, messages=[UserMessage(text="hi")])
    with pytest.raises(Divergence) as info:
        async for _ in replay.stream(request):
            pass
    assert isinstance(info.value, ModelError)
    assert info.value.retryable is False
    assert info.value.step == 1
    assert "has only 0 calls" in str(info.value)


async def test_running_out_of_records_is_a_divergence(ctx: RunContext) -> None:
    _, capture = await captured(10, ctx)
    calls = 0
    kept: list[CaptureRecord] = []
    for record in capture.records:
        if isinstance(record, ModelCallRecord):
            calls += 1
            if calls > 4:
                break
        kept.append(record)
    short = Capture(capture.run_id, kept)
    replay = ReplayModel(short)
    run = await drive(replay, ctx, options(10))
    assert_failed_with(run, 5)
    assert run.result.error is not None
    assert "has only 4 calls" in run.result.error
    assert replay.served == 4


async def test_a_lenient_replay_collects_mismatches_and_goes_on(ctx: RunContext) -> None:
    original, capture = await captured(6, ctx)

    @tool(read_only=True, name="lookup")
    def changed(n: int) -> str:
        """Look a number up."""  # as recorded: only what it returns changed (for 2 and 4)
        return "different" if n in (2, 4) else f"entry {n}: ok"

    replay = ReplayModel(capture, strict=False)
    run = await drive(replay, ctx, options(6), tools=(changed,))
    assert run.result.stop_cause is StopCause.COMPLETED
    assert [d.step for d in replay.mismatches] == [3, 5]
    assert run.result.text == original.result.text


# ── sinks ────────────────────────────────────────────────────────────────────────────


def tee(*factories: Callable[[str], CaptureSink]) -> Callable[[str], CaptureSink]:
    """One run captured by several factories at once."""

    class Tee:
        def __init__(self, sinks: list[CaptureSink]) -> None:
            self.sinks = sinks

        def model_call(self, record: ModelCallRecord) -> None:
            for sink in self.sinks:
                sink.model_call(record)

        def tool_result(self, record: ToolResultRecord) -> None:
            for sink in self.sinks:
                sink.tool_result(record)

        def close(self) -> None:
            for sink in self.sinks:
                sink.close()

    return lambda run_id: Tee([factory(run_id) for factory in factories])


async def test_the_bus_sink_stores_the_capture_on_sqlite(ctx: RunContext, tmp_path: Path) -> None:
    bus = await open_bus(f"sqlite:///{tmp_path / 'bus.db'}")
    try:
        stored = bus_capture(bus)
        memory = memory_capture()
        original = await drive(ScriptedModel(script(12)), ctx, options(12, tee(stored, memory)))
        await stored.wait()
        assert stored.pending == 0 and stored.failed == []
        loaded = await load_capture(bus, RUN_ID)
        assert loaded == memory[RUN_ID]
        assert len(loaded.model_calls) == 12
        again = await drive(ReplayModel(loaded), ctx, options(12))
        assert again.wire == original.wire
        with pytest.raises(CaptureError, match="no capture of run 'nope'"):
            await load_capture(bus, "nope")
    finally:
        await bus.aclose()


async def test_a_resumed_run_id_appends_to_its_stored_capture(
    ctx: RunContext, tmp_path: Path
) -> None:
    bus = await open_bus(f"sqlite:///{tmp_path / 'bus.db'}")
    try:
        stored = bus_capture(bus, "my-captures")
        sink = stored(RUN_ID)
        sink.tool_result(ToolResultRecord(RUN_ID, 1, "c1", "lookup", "one"))
        sink.close()
        sink.close()  # idempotent: written once
        await stored.wait()
        sink = stored(RUN_ID)
        sink.tool_result(ToolResultRecord(RUN_ID, 2, "c2", "lookup", "two"))
        sink.close()
        await stored.wait()
        loaded = await load_capture(bus, RUN_ID, bucket="my-captures")
        assert [r.content for r in loaded.tool_results] == ["one", "two"]
    finally:
        await bus.aclose()


async def test_a_failed_bus_write_is_logged_not_raised(
    ctx: RunContext, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bus = await open_bus(f"sqlite:///{tmp_path / 'bus.db'}")
    await bus.aclose()  # every write will fail
    stored = bus_capture(bus)
    with caplog.at_level(logging.ERROR, logger="tiller.capture"):
        run = await drive(ScriptedModel(script(3)), ctx, options(3, stored))
        await stored.wait()
    assert run.result.stop_cause is StopCause.COMPLETED
    assert stored.failed == [RUN_ID]
    assert any("could not be written" in r.getMessage() for r in caplog.records)


async def test_a_sink_that_raises_does_not_break_the_run(
    ctx: RunContext, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def model_call(self, record: ModelCallRecord) -> None:
            raise RuntimeError("disk full")

        def tool_result(self, record: ToolResultRecord) -> None:
            raise RuntimeError("disk full")

        def close(self) -> None:
            raise RuntimeError("disk full")

    with caplog.at_level(logging.ERROR):
        run = await drive(ScriptedModel(script(4)), ctx, options(4, lambda run_id: Broken()))
    assert run.result.stop_cause is StopCause.COMPLETED
    assert run.result.text == "All done."
    failures = [r for r in caplog.records if "capture sink failed" in r.getMessage()]
    assert len(failures) == 4 + 3 + 1  # every call, every result, the close


async def test_a_factory_that_raises_leaves_the_run_uncaptured(
    ctx: RunContext, caplog: pytest.LogCaptureFixture
) -> None:
    def factory(run_id: str) -> CaptureSink:
        raise RuntimeError("no sink today")

    with caplog.at_level(logging.ERROR):
        run = await drive(ScriptedModel(script(2)), ctx, options(2, factory))
    assert run.result.stop_cause is StopCause.COMPLETED
    assert any("factory failed" in r.getMessage() for r in caplog.records)


# ── redaction ────────────────────────────────────────────────────────────────────────


@tool(read_only=True)
def secret(n: int) -> str:
    """Returns something that must not be stored."""
    return f"password-{n}"


def redact(record: CaptureRecord) -> CaptureRecord:
    """Scrub passwords from tool results and from the messages that carry them."""
    if isinstance(record, ToolResultRecord):
        return dataclasses.replace(record, content="[redacted]")
    messages = [
        {
            **m,
            "tool_results": [{**r, "content": "[redacted]"} for r in m.get("tool_results", ())],
        }
        for m in record.new_messages
    ]
    return dataclasses.replace(record, new_messages=messages)


def secret_script(steps: int) -> list[Turn]:
    turns = [Turn(tool_calls=(TurnCall("secret", {"n": n}),)) for n in range(1, steps)]
    return [*turns, Turn(text="Kept it quiet.")]


async def test_redaction_runs_before_the_capture_is_stored(ctx: RunContext, tmp_path: Path) -> None:
    bus = await open_bus(f"sqlite:///{tmp_path / 'bus.db'}")
    try:
        stored = bus_capture(bus, redact=redact)
        memory = memory_capture(redact=redact)
        original = await drive(
            ScriptedModel(secret_script(4)), ctx, options(4, tee(stored, memory)), tools=(secret,)
        )
        await stored.wait()
        assert "password" in str(original.result.state.messages)  # the run itself saw it
        loaded = await load_capture(bus, RUN_ID)
        assert loaded == memory[RUN_ID]
        assert b"password" not in loaded.to_json()
        assert b"[redacted]" in loaded.to_json()
    finally:
        await bus.aclose()
    # Strict replay sees the redaction as a change; a lenient one replays the run.
    strict = await drive(ReplayModel(loaded), ctx, options(4), tools=(secret,))
    assert strict.result.stop_cause is StopCause.ERROR
    lenient = ReplayModel(loaded, strict=False)
    again = await drive(lenient, ctx, options(4), tools=(secret,))
    assert again.wire == original.wire
    assert [d.step for d in lenient.mismatches] == [2, 3, 4]


async def test_a_redactor_that_raises_drops_the_record_not_the_run(
    ctx: RunContext, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(record: CaptureRecord) -> CaptureRecord:
        if isinstance(record, ToolResultRecord):
            raise ValueError("cannot redact")
        return record

    captures = memory_capture(redact=broken)
    with caplog.at_level(logging.ERROR, logger="tiller.capture"):
        run = await drive(ScriptedModel(script(3)), ctx, options(3, captures))
    assert run.result.stop_cause is StopCause.COMPLETED
    assert len(captures[RUN_ID].model_calls) == 3
    assert captures[RUN_ID].tool_results == []  # dropped, never stored unredacted
    assert any("redactor failed" in r.getMessage() for r in caplog.records)


def _as_before_runtime_ids(message: dict[str, Any], provider: dict[str, str]) -> dict[str, Any]:
    """A message as a capture made before runtime call ids holds it: every call and result
    under the provider's id, and no `provider_id`."""
    message = dict(message)
    if "tool_calls" in message:
        calls = []
        for call in message["tool_calls"]:
            call = {k: v for k, v in call.items() if k != "provider_id"}
            call["id"] = provider[call["id"]]
            calls.append(call)
        message["tool_calls"] = calls
    if "tool_results" in message:
        message["tool_results"] = [
            {**r, "call_id": provider[r["call_id"]]} for r in message["tool_results"]
        ]
    return message


async def test_a_capture_from_before_runtime_call_ids_still_replays(ctx: RunContext) -> None:
    """Calls now carry the runtime's id (law 10); a capture recorded when they carried the
    provider's still replays, strictly, to the same answers."""
    original, capture = await captured(4, ctx)
    provider = {
        call.id: call.provider_id
        for message in original.result.state.messages
        for call in getattr(message, "tool_calls", ())
    }
    assert len(provider) == 3 and all(provider.values())
    legacy = Capture(
        capture.run_id,
        [
            dataclasses.replace(
                record,
                new_messages=[_as_before_runtime_ids(m, provider) for m in record.new_messages],
                response=_as_before_runtime_ids(record.response, provider),
            )
            if isinstance(record, ModelCallRecord)
            else record
            for record in capture.records
        ],
    )
    assert legacy.model_calls[1].new_messages != capture.model_calls[1].new_messages
    replay = ReplayModel(legacy)
    again = await drive(replay, ctx, options(4))
    assert replay.mismatches == [] and replay.remaining == 0
    assert again.result.state.messages == original.result.state.messages
    assert again.wire == original.wire


# ── a factory-built agent keeps the recorded output mode ─────────────────────────────


class NativeScripted(ScriptedModel):
    """A scripted model declaring native structured output, as OpenAI-compatible ones do."""

    output_modes = ("native",)


async def test_a_factory_built_agent_replays_in_the_recorded_output_mode(
    ctx: RunContext,
) -> None:
    """The factory is called on the replay model, so the agent chooses its output mode
    from it: the replay model declares the recorded one, so the run asks as it did."""

    def factory(model: Any) -> Agent:
        return Agent(model, (lookup,), system_prompt="Be brief.", output_type=Answer)

    captures = memory_capture()
    recorded, _ = await run_scripted(
        factory,
        NativeScripted(['{"value": 3}']),
        "Answer.",
        context=ctx,
        options=options(1, captures),
        run_id=RUN_ID,
    )
    assert recorded.output == Answer(value=3)
    capture = captures[RUN_ID]
    again, _ = await run_capture(factory, capture, "Answer.", context=ctx)
    assert again.stop_cause is StopCause.COMPLETED
    assert again.output == recorded.output
    assert capture.model_calls[0].agent is not None
    assert capture.model_calls[0].agent["output_mode"] == "native"
    assert ReplayModel(capture).output_modes == ("native",)


async def test_a_capture_without_a_recorded_output_mode_replays_as_before(
    ctx: RunContext,
) -> None:
    """A capture written before the mode was recorded: the replay model declares no mode
    (so a factory-built agent asks in prompted mode, as it did), and the missing key is
    not a divergence for an agent that keeps its mode."""
    captures = memory_capture()
    agent = Agent(NativeScripted(['{"value": 3}']), (lookup,), output_type=Answer)
    await agent.run("Answer.", context=ctx, options=options(1, captures), run_id=RUN_ID)
    capture = captures[RUN_ID]
    for record in capture.model_calls:
        if record.agent is not None:
            record.agent.pop("output_mode", None)
    replay = ReplayModel(capture)
    assert replay.output_modes == ()
    again, _ = await run_capture(agent, capture, "Answer.", context=ctx)
    assert again.output == Answer(value=3)
    _, plain = await captured(2, ctx)  # no output type: no mode to declare
    assert ReplayModel(plain).output_modes == ()

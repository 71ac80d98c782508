"""Helpers for the loop tests: drive a run with a hang guard, and check the laws on it.

Every run a test makes goes through `drive`, which checks what must hold of *any* run,
whatever it was testing: the event stream is valid AG-UI 1.0 (`assert_valid_stream`,
zero warnings), the transcript is legal (every tool call has exactly one result, roles
alternate, no empty assistant turn), and the final `RunState` round-trips through JSON.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tiller.conversation import (
    AssistantMessage,
    ToolResult,
    UserMessage,
    check_transcript,
    pending_tool_calls,
)
from tiller.events import Event
from tiller.loop import Agent, RunContext, RunOptions, RunResult
from tiller.state import RunState
from tiller.testing import assert_valid_stream

Messages = Sequence[UserMessage | AssistantMessage]


@dataclass
class Run:
    """One finished run: its result, its events, and the events as a client reads them."""

    result: RunResult
    events: list[Event]
    wire: list[dict[str, Any]]

    @property
    def messages(self) -> list[UserMessage | AssistantMessage]:
        return list(self.result.state.messages)

    @property
    def kinds(self) -> list[str]:
        return [event["type"] for event in self.wire]

    @property
    def terminal(self) -> dict[str, Any]:
        return self.wire[-1]

    def custom(self, name: str) -> list[Any]:
        return [e["value"] for e in self.wire if e["type"] == "CUSTOM" and e["name"] == name]

    def results(self) -> list[ToolResult]:
        return tool_results(self.messages)


def tool_results(messages: Messages) -> list[ToolResult]:
    return [r for m in messages if isinstance(m, UserMessage) for r in m.tool_results]


def assert_legal(messages: Messages) -> None:
    """Law 1, as strictly as a provider would check it."""
    check_transcript(messages)
    assert pending_tool_calls(messages) == [], "a tool call was left without a result"
    calls = [c.id for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    answered = [r.call_id for r in tool_results(messages)]
    assert len(set(calls)) == len(calls), f"duplicate call ids: {calls}"
    assert sorted(answered) == sorted(calls), "every call needs exactly one result"
    for message in messages:
        if isinstance(message, AssistantMessage):
            assert not message.is_empty, f"an empty assistant turn was kept: {message}"
    for before, after in itertools.pairwise(messages):
        assert before.role != after.role, f"two {before.role} messages in a row"
    if messages:
        assert isinstance(messages[0], UserMessage)


def assert_round_trips(state: RunState) -> None:
    assert RunState.from_json(state.to_json()) == state


async def drive(
    agent: Agent,
    conversation: str | Messages | RunState,
    ctx: RunContext,
    options: RunOptions | None = None,
    *,
    on_event: Callable[[Event], None] | None = None,
    run_id: str = "r1",
) -> Run:
    """Run `agent` to the end (ten seconds at most: a hang guard, not a timing check),
    then check the stream, the transcript and the state's serialization."""
    events: list[Event] = []

    def record(event: Event) -> None:
        events.append(event)
        if on_event is not None:
            on_event(event)

    async with asyncio.timeout(10):
        result = await agent.run_in(ctx, conversation, options, on_event=record, run_id=run_id)
    wire = assert_valid_stream(events)
    assert_legal(result.state.messages)
    assert_round_trips(result.state)
    assert result.state.stop_cause is result.stop_cause
    return Run(result, events, wire)


def texts(messages: Messages) -> list[tuple[str, str]]:
    """The transcript as (role, text) pairs, for compact assertions."""
    return [(m.role, m.text) for m in messages]


def assistant_turns(messages: Messages) -> list[AssistantMessage]:
    return [m for m in messages if isinstance(m, AssistantMessage)]


def last_user(messages: Messages) -> UserMessage:
    for message in reversed(messages):
        if isinstance(message, UserMessage):
            return message
    raise AssertionError("no user message")

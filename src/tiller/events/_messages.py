"""Rebuild the conversation a client sees from a run's events.

An AG-UI client folds the stream into messages (text, reasoning, tool calls with their
arguments, tool results). `MessageLog` does the same on the server side, so a run can send
a `MESSAGES_SNAPSHOT`, a test can assert on the conversation, and a resume input can be
built from a recorded stream exactly as `@ag-ui/client` would build it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._types import (
    Event,
    ReasoningMessageContentEvent,
    ReasoningMessageStartEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

__all__ = ["MessageLog"]


class MessageLog:
    """Messages as AG-UI wire dicts, built by feeding events in stream order."""

    def __init__(self, messages: Iterable[dict[str, Any]] = ()) -> None:
        self._messages: list[dict[str, Any]] = [dict(m) for m in messages]
        self._by_id: dict[str, dict[str, Any]] = {m["id"]: m for m in self._messages}
        self._calls: dict[str, dict[str, Any]] = {}
        self._chunk_message: str | None = None
        self._chunk_call: str | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self._messages

    def feed_all(self, events: Iterable[Event]) -> MessageLog:
        for event in events:
            self.feed(event)
        return self

    def feed(self, event: Event) -> None:
        if isinstance(event, TextMessageStartEvent):
            self._message(event.message_id, event.role, event.subagent_run_id)
        elif isinstance(event, TextMessageContentEvent):
            self._append_text(event.message_id, event.delta)
        elif isinstance(event, TextMessageChunkEvent):
            self._text_chunk(event)
        elif isinstance(event, ReasoningMessageStartEvent):
            self._message(event.message_id, "reasoning", event.subagent_run_id)
        elif isinstance(event, ReasoningMessageContentEvent):
            self._append_text(event.message_id, event.delta)
        elif isinstance(event, ToolCallStartEvent):
            self._start_call(event.tool_call_id, event.tool_call_name, event.parent_message_id)
        elif isinstance(event, ToolCallArgsEvent):
            call = self._calls.get(event.tool_call_id)
            if call is not None:
                call["function"]["arguments"] += event.delta
        elif isinstance(event, ToolCallChunkEvent):
            self._call_chunk(event)
        elif isinstance(event, ToolCallResultEvent):
            self._messages.append(
                {
                    "id": event.message_id,
                    "role": "tool",
                    "toolCallId": event.tool_call_id,
                    "content": event.content,
                }
            )
            self._by_id[event.message_id] = self._messages[-1]

    def _text_chunk(self, event: TextMessageChunkEvent) -> None:
        """A chunk: its message started on first sight, its id carried to later chunks."""
        message_id = event.message_id or self._chunk_message
        if message_id is None:
            return
        self._chunk_message = message_id
        self._message(message_id, event.role or "assistant", event.subagent_run_id)
        if event.delta:
            self._append_text(message_id, event.delta)

    def _call_chunk(self, event: ToolCallChunkEvent) -> None:
        """A tool call chunk: the call started on first sight (when named), its id carried
        to later chunks."""
        call_id = event.tool_call_id or self._chunk_call
        if call_id is None:
            return
        if call_id not in self._calls and event.tool_call_name is not None:
            self._start_call(call_id, event.tool_call_name, event.parent_message_id)
        self._chunk_call = call_id
        call = self._calls.get(call_id)
        if call is not None and event.delta:
            call["function"]["arguments"] += event.delta

    def _message(self, message_id: str, role: str, owner: str | None) -> dict[str, Any]:
        message = self._by_id.get(message_id)
        if message is None:
            message = {"id": message_id, "role": role, "content": ""}
            if owner is not None:
                message["subagentRunId"] = owner
            self._messages.append(message)
            self._by_id[message_id] = message
        return message

    def _append_text(self, message_id: str, delta: str) -> None:
        message = self._by_id.get(message_id)
        if message is not None:
            message["content"] = (message.get("content") or "") + delta

    def _start_call(self, call_id: str, name: str, parent_message_id: str | None) -> None:
        parent = self._by_id.get(parent_message_id) if parent_message_id else None
        if parent is None or parent.get("role") != "assistant":
            last = self._messages[-1] if self._messages else None
            if last is not None and last.get("role") == "assistant" and parent_message_id is None:
                parent = last
            else:
                parent = {"id": parent_message_id or f"{call_id}-message", "role": "assistant"}
                self._messages.append(parent)
                self._by_id[parent["id"]] = parent
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        parent.setdefault("toolCalls", []).append(call)
        self._calls[call_id] = call

    def pending_tool_calls(self) -> list[dict[str, Any]]:
        """Tool calls that have no result message yet, in order."""
        answered = {m["toolCallId"] for m in self._messages if m.get("role") == "tool"}
        return [
            call
            for m in self._messages
            for call in m.get("toolCalls") or ()
            if call["id"] not in answered
        ]

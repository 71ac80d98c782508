"""The conversation as AG-UI messages, for the `MESSAGES_SNAPSHOT` a continued run starts
with (law 2: results for calls made before refer to calls the client knows).

A `UserMessage` carries tool results first and then text; AG-UI has a `tool` message per
result and a `user` message for the text, so one becomes several, in that order. Messages
without an id get a stable one derived from their position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..conversation import AssistantMessage, ToolResult, UserMessage

__all__ = ["agui_messages"]


def agui_messages(
    messages: Sequence[UserMessage | AssistantMessage],
    *,
    id_prefix: str,
    pending_results: Sequence[ToolResult] = (),
    result_ids: Mapping[str, str] | None = None,
    index_offset: int = 0,
) -> list[dict[str, Any]]:
    """AG-UI wire dicts for `messages` (ids `{id_prefix}-hist-{n}` where one is missing;
    pass a prefix that stays the same across the runs of a thread, such as its id, so a
    client that merges snapshots by id sees the same message under the same id).

    A tool result is named by the id it was streamed with (`result_ids`, by call id).
    `index_offset`: where `messages` start in the whole conversation (for fallback ids).

    `pending_results` are results of the last assistant turn's calls that are not in the
    transcript yet (a step suspended with some of its calls answered): they follow as
    `tool` messages, so a client that replaces its messages keeps them."""
    streamed = result_ids or {}
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages, start=index_offset):
        base_id = message.id or f"{id_prefix}-hist-{index}"
        if isinstance(message, AssistantMessage):
            wire: dict[str, Any] = {"id": base_id, "role": "assistant"}
            if message.text:
                wire["content"] = message.text
            if message.tool_calls:
                wire["toolCalls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in message.tool_calls
                ]
            out.append(wire)
            continue
        for n, result in enumerate(message.tool_results):
            out.append(_tool_message(streamed.get(result.call_id, f"{base_id}-result-{n}"), result))
        if message.text or not message.tool_results:
            out.append({"id": base_id, "role": "user", "content": message.text})
    for n, result in enumerate(pending_results):
        fallback = f"{id_prefix}-pending-result-{n}"
        out.append(_tool_message(streamed.get(result.call_id, fallback), result))
    return out


def _tool_message(message_id: str, result: ToolResult) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "id": message_id,
        "role": "tool",
        "toolCallId": result.call_id,
        "content": result.content,
    }
    if result.is_error:
        tool["error"] = result.content
    return tool

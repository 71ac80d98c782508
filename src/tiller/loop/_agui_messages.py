"""The conversation as AG-UI messages, for the `MESSAGES_SNAPSHOT` a continued run starts
with (law 2: results for calls made before refer to calls the client knows).

A `UserMessage` carries tool results first and then text; AG-UI has a `tool` message per
result and a `user` message for the text, so one becomes several, in that order. Messages
without an id get a stable one derived from their position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..conversation import AssistantMessage, UserMessage

__all__ = ["agui_messages"]


def agui_messages(
    messages: Sequence[UserMessage | AssistantMessage], *, id_prefix: str
) -> list[dict[str, Any]]:
    """AG-UI wire dicts for `messages` (ids `{id_prefix}-hist-{n}` where one is missing)."""
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
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
            tool: dict[str, Any] = {
                "id": f"{base_id}-result-{n}",
                "role": "tool",
                "toolCallId": result.call_id,
                "content": result.content,
            }
            if result.is_error:
                tool["error"] = result.content
            out.append(tool)
        if message.text or not message.tool_results:
            out.append({"id": base_id, "role": "user", "content": message.text})
    return out

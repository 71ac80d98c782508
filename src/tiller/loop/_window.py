"""The history window: the most recent part of the conversation that fits a token budget.

Tokens are estimated (about four bytes a token), never counted with a downloaded
tokenizer. The window starts at a user message. If that message carries tool results whose
calls fell outside the window, the results are replaced by a one-line note, so no result is
orphaned and no call is separated from its result (law 1). The newest exchange is always
sent, even if alone it is over the budget: the model cannot answer without it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..conversation import AssistantMessage, UserMessage

__all__ = ["estimate_tokens", "history_window"]

Messages = Sequence[UserMessage | AssistantMessage]


def estimate_tokens(message: UserMessage | AssistantMessage) -> int:
    """A fast, provider-neutral estimate: about four bytes of content per token."""
    size = 16
    if isinstance(message, UserMessage):
        size += len(message.text) + sum(len(r.content) + 24 for r in message.tool_results)
    else:
        size += len(message.text) + sum(len(r.text) for r in message.reasoning)
        size += sum(len(c.name) + len(c.arguments) + 24 for c in message.tool_calls)
    return size // 4 + 1


def history_window(
    messages: Messages, max_tokens: int | None
) -> list[UserMessage | AssistantMessage]:
    """The longest suffix of `messages` within `max_tokens` that starts at a user message."""
    if max_tokens is None or not messages:
        return list(messages)
    total = 0
    start: int | None = None
    for index in range(len(messages) - 1, -1, -1):
        total += estimate_tokens(messages[index])
        if total > max_tokens and start is not None:
            break
        if isinstance(messages[index], UserMessage):
            start = index
    if start is None or start == 0:
        return list(messages)
    first = messages[start]
    assert isinstance(first, UserMessage)
    window: list[UserMessage | AssistantMessage] = list(messages[start:])
    if first.tool_results:
        note = f"[{len(first.tool_results)} earlier tool result(s) left out of this window]"
        text = f"{note}\n\n{first.text}" if first.text else note
        window[0] = UserMessage(id=first.id, text=text)
    return window

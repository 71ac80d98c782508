"""The history window: what of the conversation is sent, when all of it is over a budget.

Tokens are estimated (about four bytes a token), never counted with a downloaded
tokenizer. Whatever the budget, the window keeps two things the model cannot answer
without:

- the *first request* (the conversation's first user message), which says what the run
  is for; a one-line note after it says how many messages were left out;
- the *newest exchange*: the newest task (the last user message that is a request, not
  only results) and the last assistant turn with its tool results.

Between them it keeps as many of the newest messages as fit. The part kept after the
first request always starts at an assistant turn, so roles still alternate and no result
is separated from its call (law 1). If the newest exchange alone is over the budget, its
tool *results* are shortened (the head and the tail of each are kept) with a marker
saying how many characters were cut; the calls, and every call's single result, stay.
A task that fell before the kept part is carried in the first request's message, after
the note, so it is not lost either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ..conversation import AssistantMessage, ToolResult, UserMessage

__all__ = ["estimate_tokens", "history_window", "shortened_result"]

Messages = Sequence[UserMessage | AssistantMessage]

#: Characters of each result kept however small the budget: a result cut to nothing would
#: leave the model guessing what its call did.
MIN_KEPT_CHARS: Final = 256
#: Tokens the note on left-out messages adds to the first request.
_NOTE_TOKENS: Final = 16
#: Characters held back for the marker in each shortened result.
_MARKER_ROOM: Final = 160
#: Estimated bytes a token.
_BYTES_PER_TOKEN: Final = 4


def estimate_tokens(message: UserMessage | AssistantMessage) -> int:
    """A fast, provider-neutral estimate: about four bytes of content per token."""
    size = 16
    if isinstance(message, UserMessage):
        size += len(message.text) + sum(len(r.content) + 24 for r in message.tool_results)
    else:
        size += len(message.text) + sum(len(r.text) for r in message.reasoning)
        size += sum(len(c.name) + len(c.arguments) + 24 for c in message.tool_calls)
    return size // _BYTES_PER_TOKEN + 1


def shortened_result(result: ToolResult, keep: int) -> ToolResult:
    """`result` with its content cut to about `keep` characters (head and tail kept), and a
    marker in the middle saying how many characters were cut; unchanged if it fits."""
    content = result.content
    keep = max(keep, MIN_KEPT_CHARS)
    if len(content) <= keep:
        return result
    head = keep - keep // 3
    tail = keep - head
    cut = len(content) - head - tail
    marker = (
        f"\n[… {cut} of {len(content)} characters of this result were cut here to fit the "
        "history window (RunOptions.max_history_tokens) …]\n"
    )
    shortened = content[:head] + marker + (content[-tail:] if tail else "")
    return result.model_copy(update={"content": shortened})


def history_window(
    messages: Messages, max_tokens: int | None
) -> list[UserMessage | AssistantMessage]:
    """The part of `messages` sent within `max_tokens`: the first request, the newest
    exchange, and as many of the newest messages between them as fit (module docstring)."""
    if max_tokens is None or not messages:
        return list(messages)
    costs = [estimate_tokens(message) for message in messages]
    if sum(costs) <= max_tokens:
        return list(messages)
    first = messages[0]
    assistants = [i for i, m in enumerate(messages) if isinstance(m, AssistantMessage)]
    if not isinstance(first, UserMessage) or not assistants:
        return _shorten_newest(list(messages), max_tokens)
    task = _newest_task(messages)
    # The kept part starts at an assistant turn: the newest one, or earlier while it fits
    # beside the first request (and the newest task, carried while it is not inside).
    start = assistants[-1]
    kept = sum(costs[start:])
    for index in reversed(assistants[:-1]):
        carried = costs[task] if task is not None and task < index else 0
        if costs[0] + _NOTE_TOKENS + carried + kept + sum(costs[index:start]) > max_tokens:
            break
        kept += sum(costs[index:start])
        start = index
    if start == 1:  # nothing left out: only the newest results can give
        return _shorten_newest(list(messages), max_tokens)
    carry = messages[task] if task is not None and task < start else None
    left_out = start - 1 - (1 if carry is not None else 0)
    head = _head(first, left_out, carry)
    return _shorten_newest([head, *messages[start:]], max_tokens)


def _newest_task(messages: Messages) -> int | None:
    """The index of the newest request (a user message with text and no results) after
    the first message; None if the first request is the newest."""
    for index in range(len(messages) - 1, 0, -1):
        message = messages[index]
        if isinstance(message, UserMessage) and message.text and not message.tool_results:
            return index
    return None


def _head(
    first: UserMessage, left_out: int, task: UserMessage | AssistantMessage | None
) -> UserMessage:
    """The first request, with the note on what was left out and, if it fell before the
    kept part, the newest task."""
    note = f"[{left_out} earlier message(s) left out of this window]"
    parts = [part for part in (first.text, note) if part]
    if task is not None:
        parts.append(task.text)
    return first.model_copy(update={"text": "\n\n".join(parts)})


def _shorten_newest(
    window: list[UserMessage | AssistantMessage], max_tokens: int
) -> list[UserMessage | AssistantMessage]:
    """Shorten the tool results of the window's last message until the window fits (never
    below `MIN_KEPT_CHARS` each); the window unchanged if it fits or has no results."""
    last = window[-1]
    if not isinstance(last, UserMessage) or not last.tool_results:
        return window
    others = sum(estimate_tokens(message) for message in window[:-1])
    if others + estimate_tokens(last) <= max_tokens:
        return window
    # Bytes the results may take: what the budget leaves after everything else.
    room = (max_tokens - others) * _BYTES_PER_TOKEN - 16 - len(last.text)
    room -= (24 + _MARKER_ROOM) * len(last.tool_results)
    keep = _shares(room, [len(r.content) for r in last.tool_results])
    results = tuple(shortened_result(r, k) for r, k in zip(last.tool_results, keep, strict=True))
    window[-1] = last.model_copy(update={"tool_results": results})
    return window


def _shares(room: int, sizes: list[int]) -> list[int]:
    """Split `room` characters among results of `sizes`: a result that needs less than an
    equal share keeps all of it, and what it leaves goes to the others."""
    keep = [0] * len(sizes)
    left = max(room, 0)
    pending = sorted(range(len(sizes)), key=lambda i: sizes[i])
    while pending:
        share = left // len(pending)
        index = pending.pop(0)
        keep[index] = min(sizes[index], share)
        left -= keep[index]
    return keep

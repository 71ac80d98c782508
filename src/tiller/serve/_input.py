"""A `RunAgentInput`'s messages as tiller's conversation, checked.

An AG-UI client sends the whole thread with every request. The conversation a new run
works on is built from it: user and assistant messages as they are, each run of `tool`
messages folded into the user turn that carries the results (with the text that follows
them, if any), as tiller's transcript has it. `system` and `developer` messages are not
taken: the served agent's own system prompt governs, and a page must not replace it. The
request's `context` entries are added to the last user turn, so the model sees them.

What would make an illegal transcript is refused with `InvalidRunInput` (the server's
400): a result for a call that was never made, a call answered twice, or a call left
without a result before the conversation goes on. Only the calls of the last assistant
turn may be open, and only when the request brings nothing after them (the client is
still running them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..conversation import AssistantMessage, ToolCall, ToolResult, UserMessage
from ..errors import UsageError

__all__ = ["InvalidRunInput", "conversation_from_agui"]

Conversation = list[UserMessage | AssistantMessage]


class InvalidRunInput(UsageError):
    """The request's messages do not make a legal conversation; the message says where."""


def conversation_from_agui(
    messages: Sequence[dict[str, Any]], context: Sequence[dict[str, Any]] = ()
) -> Conversation:
    """The conversation in AG-UI `messages` (wire dicts), with `context` in the last user
    turn. Raises `InvalidRunInput` for an illegal transcript."""
    out: Conversation = []
    open_calls: dict[str, ToolCall] = {}
    results: list[ToolResult] = []
    result_id = ""

    def close_results(text: str = "", message_id: str = "") -> None:
        nonlocal results, result_id
        if results or text:
            out.append(
                UserMessage(id=message_id or result_id, text=text, tool_results=tuple(results))
            )
        results, result_id = [], ""

    for index, message in enumerate(messages):
        role = message.get("role")
        message_id = str(message.get("id") or "")
        if role == "tool":
            call_id = str(message.get("toolCallId") or "")
            call = open_calls.pop(call_id, None)
            if call is None:
                raise InvalidRunInput(
                    f"message {index} ({message_id or 'no id'}) is the result of tool call "
                    f"{call_id!r}, which no earlier assistant message made (or which already "
                    "has a result)"
                )
            error = message.get("error")
            content = _text(message.get("content"))
            results.append(
                ToolResult(
                    call_id=call_id,
                    name=call.name,
                    content=content or (str(error) if error else ""),
                    is_error=bool(error),
                )
            )
            result_id = result_id or message_id
            continue
        if role == "user":
            _no_open_calls(open_calls, index)
            text = _text(message.get("content"))
            if out and isinstance(out[-1], UserMessage) and not results:
                # Two user turns in a row: one turn (law 1).
                last = out[-1]
                out[-1] = last.model_copy(update={"text": f"{last.text}\n\n{text}".strip()})
                continue
            close_results(text, message_id)
            continue
        if role == "assistant":
            _no_open_calls(open_calls, index)
            close_results()
            calls = tuple(_tool_call(raw, index) for raw in message.get("toolCalls") or ())
            text = _text(message.get("content"))
            if not text.strip() and not calls:
                continue  # law 1: no empty assistant turns
            if out and isinstance(out[-1], AssistantMessage):
                raise InvalidRunInput(
                    f"message {index} ({message_id or 'no id'}) is an assistant message right "
                    "after another one; a user message or tool results must come between"
                )
            out.append(AssistantMessage(id=message_id, text=text, tool_calls=calls))
            open_calls = {call.id: call for call in calls}
            continue
        # system, developer, reasoning, activity: not part of the model's conversation.
    if results:
        if open_calls:
            missing = ", ".join(sorted(open_calls))
            raise InvalidRunInput(
                f"the last assistant turn's tool calls {missing} have no result; send a "
                "tool message for every call of that turn"
            )
        close_results()
    notes = _context_text(context)
    if notes:
        if out and isinstance(out[-1], UserMessage):
            last = out[-1]
            out[-1] = last.model_copy(update={"text": f"{last.text}\n\n{notes}".strip()})
        elif not open_calls:
            out.append(UserMessage(text=notes))
    if not out:
        raise InvalidRunInput("the request has no user message to run on")
    if open_calls:
        raise InvalidRunInput(
            "the last assistant turn's tool calls "
            f"{', '.join(sorted(open_calls))} have no result; send their tool messages"
        )
    if isinstance(out[-1], AssistantMessage):
        raise InvalidRunInput(
            "the conversation ends with an assistant message; add a user message to run on"
        )
    return out


def _no_open_calls(open_calls: dict[str, ToolCall], index: int) -> None:
    if open_calls:
        raise InvalidRunInput(
            f"message {index} comes before tool calls {', '.join(sorted(open_calls))} got "
            "their results; every call needs a tool message right after its assistant turn"
        )


def _tool_call(raw: Any, index: int) -> ToolCall:
    if not isinstance(raw, dict) or not isinstance(raw.get("function"), dict):
        raise InvalidRunInput(f"message {index} has a tool call that is not an AG-UI tool call")
    function = raw["function"]
    call_id, name = raw.get("id"), function.get("name")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise InvalidRunInput(f"message {index} has a tool call without an id or a name")
    arguments = function.get("arguments")
    return ToolCall(
        id=call_id, name=name, arguments=arguments if isinstance(arguments, str) else "{}"
    )


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'attachment')} omitted: not supported yet]")
        return "\n".join(parts)
    return str(content)


def _context_text(context: Sequence[dict[str, Any]]) -> str:
    lines = [
        f"- {entry.get('description', '')}: {entry.get('value', '')}"
        for entry in context
        if isinstance(entry, dict)
    ]
    return "Context from the app:\n" + "\n".join(lines) if lines else ""

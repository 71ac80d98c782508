"""A `RunAgentInput`'s messages as tiller's conversation, checked.

An AG-UI client sends the whole thread with every request. The conversation a new run
works on is built from it: user and assistant messages as they are, each run of `tool`
messages folded into the user turn that carries the results (with the text that follows
them, if any), as tiller's transcript has it. `system` and `developer` messages are not
taken: the served agent's own system prompt governs, and a page must not replace it. The
request's `context` entries are added to the last user turn, so the model sees them.

A call the client sends no result for is answered from `known` (results the store holds
for the thread: a call cancelled or expired while the client was away). What would still
make an illegal transcript is refused with `InvalidRunInput` (the server's 400): a result
for a call that was never made, a call answered twice, a call left without a result.

A run that starts from one prompt (`tiller serve --fleet`: a fleet job carries a prompt,
not a conversation) takes `prompt_from_agui`: the last user turn of that same
conversation, read the same way (text parts joined by lines, other parts marked, the
context added), so a request means the same thing on either path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..conversation import AssistantMessage, ToolCall, ToolResult, UserMessage
from ..errors import UsageError

__all__ = ["InvalidRunInput", "conversation_from_agui", "prompt_from_agui"]

Conversation = list[UserMessage | AssistantMessage]


class InvalidRunInput(UsageError):
    """The request's messages do not make a legal conversation; the message says where."""


class _Builder:
    """Folds AG-UI messages into a transcript, one at a time."""

    def __init__(self, known: Mapping[str, ToolResult]) -> None:
        self.out: Conversation = []
        self.known = known
        #: Calls of the last assistant turn still without a result.
        self.open_calls: dict[str, ToolCall] = {}
        self.results: list[ToolResult] = []
        self.result_id = ""

    def tool(self, index: int, message: Mapping[str, Any]) -> None:
        call_id = str(message.get("toolCallId") or "")
        call = self.open_calls.pop(call_id, None)
        if call is None:
            raise InvalidRunInput(
                f"message {index} ({message.get('id') or 'no id'}) is the result of tool call "
                f"{call_id!r}, which no earlier assistant message made (or which already "
                "has a result)"
            )
        error = message.get("error")
        content = _text(message.get("content"))
        self.results.append(
            ToolResult(
                call_id=call_id,
                name=call.name,
                content=content or (str(error) if error else ""),
                is_error=bool(error),
            )
        )
        self.result_id = self.result_id or str(message.get("id") or "")

    def user(self, index: int, message: Mapping[str, Any]) -> None:
        self.settle(index)
        text = _text(message.get("content"))
        if self.out and isinstance(self.out[-1], UserMessage) and not self.results:
            # Two user turns in a row are one turn (law 1).
            last = self.out[-1]
            self.out[-1] = last.model_copy(update={"text": f"{last.text}\n\n{text}".strip()})
            return
        self.close(text, str(message.get("id") or ""))

    def assistant(self, index: int, message: Mapping[str, Any]) -> None:
        self.settle(index)
        self.close()
        calls = tuple(_tool_call(raw, index) for raw in message.get("toolCalls") or ())
        text = _text(message.get("content"))
        if not text.strip() and not calls:
            return  # law 1: no empty assistant turns
        if self.out and isinstance(self.out[-1], AssistantMessage):
            raise InvalidRunInput(
                f"message {index} ({message.get('id') or 'no id'}) is an assistant message "
                "right after another one; a user message or tool results must come between"
            )
        self.out.append(
            AssistantMessage(id=str(message.get("id") or ""), text=text, tool_calls=calls)
        )
        self.open_calls = {call.id: call for call in calls}

    def settle(self, index: int | None) -> None:
        """The conversation goes on: every open call needs its result now, from the
        client or from `known`."""
        for call_id in list(self.open_calls):
            found = self.known.get(call_id)
            if found is not None:
                self.results.append(found)
                del self.open_calls[call_id]
        if self.open_calls:
            missing = ", ".join(sorted(self.open_calls))
            where = "the end of the conversation" if index is None else f"message {index}"
            raise InvalidRunInput(
                f"tool calls {missing} have no result before {where}; send a tool message "
                "for every call right after the assistant turn that made it"
            )

    def close(self, text: str = "", message_id: str = "") -> None:
        if self.results or text:
            self.out.append(
                UserMessage(
                    id=message_id or self.result_id, text=text, tool_results=tuple(self.results)
                )
            )
        self.results, self.result_id = [], ""


def conversation_from_agui(
    messages: Sequence[Mapping[str, Any]],
    context: Sequence[Mapping[str, Any]] = (),
    *,
    known: Mapping[str, ToolResult] | None = None,
) -> Conversation:
    """The conversation in AG-UI `messages` (wire dicts), with `context` in the last user
    turn, and `known` results for calls the client sent none for. Raises
    `InvalidRunInput` for an illegal transcript."""
    builder = _Builder(known or {})
    for index, message in enumerate(messages):
        role = message.get("role")
        if message.get("subagentRunId"):
            continue  # a subagent's conversation is its own, not this agent's
        if role == "tool":
            builder.tool(index, message)
        elif role == "user":
            builder.user(index, message)
        elif role == "assistant":
            builder.assistant(index, message)
        # system, developer, reasoning, activity: not part of the model's conversation.
    builder.settle(None)
    builder.close()
    out = builder.out
    notes = _context_text(context)
    if notes and out and isinstance(out[-1], UserMessage):
        last = out[-1]
        out[-1] = last.model_copy(update={"text": f"{last.text}\n\n{notes}".strip()})
    elif notes:
        out.append(UserMessage(text=notes))
    if not out:
        raise InvalidRunInput("the request has no user message to run on")
    if isinstance(out[-1], AssistantMessage):
        raise InvalidRunInput(
            "the conversation ends with an assistant message; add a user message to run on"
        )
    return out


def prompt_from_agui(
    messages: Sequence[Mapping[str, Any]],
    context: Sequence[Mapping[str, Any]] = (),
    *,
    known: Mapping[str, ToolResult] | None = None,
) -> str:
    """The text of the last user turn of the conversation `conversation_from_agui` reads
    in `messages` (with `context` in it): what a run that starts from a prompt works on.
    Raises `InvalidRunInput` as that does, and when the turn has no text of its own (only
    tool results, which a prompt cannot carry)."""
    last = conversation_from_agui(messages, context, known=known)[-1]
    if not last.text.strip():
        raise InvalidRunInput(
            "the request's last user turn has no text (only tool results); a run that "
            "starts from a prompt needs one: say what the agent should do"
        )
    return last.text


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


def _context_text(context: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        f"- {entry.get('description', '')}: {entry.get('value', '')}"
        for entry in context
        if isinstance(entry, Mapping)
    ]
    return "Context from the app:\n" + "\n".join(lines) if lines else ""

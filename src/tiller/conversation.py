"""The conversation: messages, their parts, tool calls and results, usage, taint.

One provider-neutral shape, serializable with pydantic, that every model adapter maps to
and from its wire format. Its shape follows the transcript rules (law 1):

- a `UserMessage` carries the results of the previous assistant turn's tool calls *and*
  any user text that arrived meanwhile (steering), results first — Anthropic's layout;
  the OpenAI adapter splits it into `tool` messages followed by one `user` message;
- an `AssistantMessage` carries its text, its reasoning and its tool calls together;
- every tool call gets exactly one result, in the user message that follows it.

`check_transcript` enforces these rules; the loop calls it before every model request.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from .errors import TillerError, UsageError

__all__ = [
    "AssistantMessage",
    "Message",
    "Reasoning",
    "Taint",
    "ToolCall",
    "ToolResult",
    "TranscriptChecker",
    "TranscriptError",
    "Usage",
    "UserMessage",
    "canonical_json_text",
    "check_transcript",
    "pending_tool_calls",
]


class TranscriptError(TillerError):
    """The conversation breaks a transcript rule (an orphaned result, a call without one)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """A call the model asked for; `arguments` is the JSON text exactly as the model wrote it.

    `id` is the runtime's (`{run_id}-call-{n}`, law 10): the transcript, the AG-UI stream,
    the store and every decision name the call by it. `provider_id` is what the provider
    called it, kept only to talk to that provider (`model._wire_ids`); it may be empty or
    repeated, which is why nothing else may key on it. Empty for calls that never came
    from a provider (and for calls stored before runtime ids, whose `id` is the provider's).
    """

    id: str
    name: str
    arguments: str = "{}"
    provider_id: str = ""

    def parsed_arguments(self) -> Any:
        """The arguments as JSON (raises `orjson.JSONDecodeError` if they are not JSON)."""
        return orjson.loads(self.arguments or "{}")

    def canonical_arguments(self) -> str:
        """The arguments as canonical JSON (sorted keys, no whitespace), what a decision is
        bound to: two spellings of the same arguments are one call, any change is another.
        Text that is not JSON is its own canonical form."""
        return canonical_json_text(self.arguments)


def canonical_json_text(text: str) -> str:
    """`text` (JSON) re-encoded canonically: sorted keys, no whitespace; text that is not
    JSON comes back unchanged."""
    try:
        value = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return text
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


class ToolResult(_Frozen):
    """What a tool call returned, as the model will read it."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


class Reasoning(_Frozen):
    """A reasoning block; `signature` is the provider's opaque proof (Anthropic thinking)."""

    text: str = ""
    signature: str | None = None
    redacted: str | None = None


class UserMessage(_Frozen):
    """The user's turn: tool results of the previous turn first, then any text."""

    role: Literal["user"] = "user"
    id: str = ""
    text: str = ""
    tool_results: tuple[ToolResult, ...] = ()


class AssistantMessage(_Frozen):
    """The model's turn: reasoning, text and tool calls."""

    role: Literal["assistant"] = "assistant"
    id: str = ""
    text: str = ""
    reasoning: tuple[Reasoning, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.text.strip() and not self.tool_calls


Message = Annotated[UserMessage | AssistantMessage, Field(discriminator="role")]


class Usage(_Frozen):
    """Token counts for one or more model calls. `input_tokens` includes cached ones."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    requests: int = 0

    def __add__(self, other: Usage) -> Usage:
        # Validated from a dict, as `Usage(**counts)` is, without its keyword detour: a
        # run adds usages at every step (its own, its budget's).
        return _validate_usage(
            {
                "input_tokens": self.input_tokens + other.input_tokens,
                "output_tokens": self.output_tokens + other.output_tokens,
                "cached_input_tokens": self.cached_input_tokens + other.cached_input_tokens,
                "reasoning_tokens": self.reasoning_tokens + other.reasoning_tokens,
                "requests": self.requests + other.requests,
            }
        )

    def __sub__(self, other: Usage) -> Usage:
        """What `self` counts beyond `other`, an earlier reading of the same ledger (a
        ledger only grows): `UsageError` if `other` counts more of anything, since a
        usage is never negative."""
        spent = {name: getattr(self, name) - getattr(other, name) for name in Usage.model_fields}
        if any(count < 0 for count in spent.values()):
            raise UsageError(
                f"cannot subtract {other!r} from {self!r}: it counts more, and a usage is "
                "never negative (subtract an earlier reading of the same ledger)"
            )
        return Usage(**spent)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


#: `Usage` from a dict of counts, validated (`Usage.__add__`).
_validate_usage: Callable[[dict[str, int]], Usage] = Usage.__pydantic_validator__.validate_python


class Taint(enum.Flag):
    """What the conversation has been exposed to; it only grows (law 6)."""

    NONE = 0
    PRIVATE_DATA = enum.auto()
    UNTRUSTED_INPUT = enum.auto()


def pending_tool_calls(messages: Sequence[UserMessage | AssistantMessage]) -> list[ToolCall]:
    """The last assistant message's calls that have no result yet (none if it was answered)."""
    if not messages or not isinstance(messages[-1], AssistantMessage):
        return []
    return list(messages[-1].tool_calls)


def _check_message(
    open_calls: dict[str, str], message: UserMessage | AssistantMessage, index: int
) -> dict[str, str]:
    """One step of the transcript rules: the calls still open after `message`."""
    if isinstance(message, AssistantMessage):
        if open_calls:
            raise TranscriptError(
                f"message {index}: assistant turn while calls {sorted(open_calls)} have no result"
            )
        if not message.tool_calls:
            return {}
        opened = {call.id: call.name for call in message.tool_calls}
        if len(opened) != len(message.tool_calls):
            ids = [call.id for call in message.tool_calls]
            raise TranscriptError(f"message {index}: duplicate tool call ids {ids}")
        return opened
    if not message.tool_results and not open_calls:
        return open_calls
    answered = [result.call_id for result in message.tool_results]
    if len(answered) == len(open_calls) and set(answered) == open_calls.keys():
        return {}
    if len(set(answered)) != len(answered):
        raise TranscriptError(f"message {index}: a call has two results: {answered}")
    orphans = sorted(set(answered) - set(open_calls))
    if orphans:
        raise TranscriptError(f"message {index}: results for unknown calls {orphans}")
    missing = sorted(set(open_calls) - set(answered))
    raise TranscriptError(f"message {index}: calls {missing} have no result")


def check_transcript(messages: Sequence[UserMessage | AssistantMessage]) -> None:
    """Raise `TranscriptError` unless every tool call has exactly one result, in the user
    message right after its assistant message, and no result is orphaned.

    A trailing assistant message may still have unanswered calls (they are about to run).
    """
    open_calls: dict[str, str] = {}
    for index, message in enumerate(messages):
        open_calls = _check_message(open_calls, message, index)


class TranscriptChecker:
    """`check_transcript` for a conversation that only grows, in time proportional to what
    changed: it remembers the checked prefix, and re-checks only the new messages plus the
    last checked one (which steering may have rewritten in place)."""

    __slots__ = ("_checked", "_open_before_last")

    def __init__(self) -> None:
        self._checked = 0
        self._open_before_last: dict[str, str] = {}

    def check(self, messages: Sequence[UserMessage | AssistantMessage]) -> None:
        if len(messages) < self._checked:  # shortened: start again
            self._checked = 0
            self._open_before_last = {}
        start = max(self._checked - 1, 0)
        open_calls = self._open_before_last if start > 0 else {}
        for index in range(start, len(messages)):
            if index == len(messages) - 1:
                self._open_before_last = open_calls
            open_calls = _check_message(open_calls, messages[index], index)
        self._checked = len(messages)

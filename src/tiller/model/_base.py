"""The model seam: one request in, a stream of typed events out.

A `Model` has one async method, `stream(request)`, yielding `StreamEvent`s, plus `aclose`.
Adapters translate their provider's wire format into these events and their errors into
`ModelError`s; nothing above `tiller.model` sees httpx or a provider SDK.

Tool call events are keyed by `index` (the position of the call in the response), because
that is how providers stream parallel calls: a call's id and name arrive first, its
argument fragments after, possibly interleaved with other calls'.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from ..conversation import AssistantMessage, Usage, UserMessage
from ._output import OutputSchema, ToolChoice

__all__ = [
    "Finish",
    "FinishReason",
    "Model",
    "ModelRequest",
    "ReasoningDelta",
    "StreamEvent",
    "TextDelta",
    "ToolCallArgsDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolSpec",
    "UsageReport",
]

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "refusal", "other"]


@dataclass(slots=True, frozen=True)
class ToolSpec:
    """A tool as the model sees it: name, description, JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(slots=True)
class ModelRequest:
    """Everything one model call needs. `max_tokens` is already capped by the budget."""

    system: str | None
    messages: Sequence[UserMessage | AssistantMessage]
    tools: Sequence[ToolSpec] = ()
    max_tokens: int | None = None
    temperature: float | None = None
    #: Provider-specific extras passed through untouched (e.g. `{"top_p": 0.9}`).
    extra: dict[str, Any] = field(default_factory=dict)
    #: The structured final answer asked for (None: free text). In `native` mode the
    #: adapter sends the schema; in `tool` mode the output tool is among `tools`.
    output: OutputSchema | None = None
    #: Whether (and which) tool the model must call; None is the provider's default.
    tool_choice: ToolChoice | None = None
    #: The run this call is part of, and the call's number in that run (from 1; each
    #: attempt counts, a retry included; a resumed run goes on counting). Set by the loop
    #: for the agent's own model; None outside a run. Never sent to a provider: offline
    #: models (`ScriptedModel`) keep their place in a script by it, run by run.
    run_id: str | None = None
    run_call: int | None = None
    #: The JSON Schema the final answer must fit, whatever the output mode (`output` is
    #: how this request asks for it, which depends on the mode); None: free text. Replay
    #: compares it, so a changed schema diverges even where prompt edits are allowed.
    output_schema: dict[str, Any] | None = None


@dataclass(slots=True, frozen=True)
class TextDelta:
    """A piece of the answer's text."""

    text: str


@dataclass(slots=True, frozen=True)
class ReasoningDelta:
    """Reasoning text; `signature` (Anthropic) or `redacted` arrive as their own deltas."""

    text: str = ""
    signature: str | None = None
    redacted: str | None = None


@dataclass(slots=True, frozen=True)
class ToolCallStart:
    """The model starts tool call `index` (the provider's `id`, the tool's `name`)."""

    index: int
    id: str
    name: str


@dataclass(slots=True, frozen=True)
class ToolCallArgsDelta:
    """A piece of tool call `index`'s JSON arguments."""

    index: int
    delta: str


@dataclass(slots=True, frozen=True)
class ToolCallEnd:
    """The call's arguments are complete (adapters emit it for every started call)."""

    index: int


@dataclass(slots=True, frozen=True)
class UsageReport:
    """Usage for this call; may come more than once (the last report wins per field)."""

    usage: Usage


@dataclass(slots=True, frozen=True)
class Finish:
    """The response ended, and why."""

    reason: FinishReason
    #: The provider's own word for it, for logs ("end_turn", "max_tokens", ...).
    raw: str | None = None
    #: The model that answered, as the provider names it ("gpt-4o-2024-08-06"), when it
    #: says (traces' `gen_ai.response.model`). A fact about who answered, not part of the
    #: answer: two finishes that differ only in it are equal.
    model: str | None = field(default=None, compare=False)


StreamEvent = (
    TextDelta
    | ReasoningDelta
    | ToolCallStart
    | ToolCallArgsDelta
    | ToolCallEnd
    | UsageReport
    | Finish
)


@runtime_checkable
class Model(Protocol):
    """A chat model that streams.

    `provider` and `name` label usage and pricing; `context_window` (tokens) is None when
    unknown. A model may also declare `output_modes` (a tuple of `OutputMode`, best
    first): the structured-output modes it supports (none declared: `prompted` only by
    default, any mode on request), and `native_schema_problem(schema) -> str | None`:
    why a schema cannot go natively (`auto` then takes the next mode, `native` is
    refused).
    """

    provider: str
    name: str
    context_window: int | None

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one response. Raises `ModelError` subclasses, before or during the stream."""
        ...

    async def aclose(self) -> None:
        """Release connections; idempotent."""
        ...

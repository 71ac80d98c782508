"""The AG-UI core: light events, the sink, the verifier, state, the run context, the driver.

Everything tiller does is seen through one AG-UI 1.0 event stream; this package makes that
stream valid by construction and cheap to produce.
"""

from typing import TYPE_CHECKING

from .. import _public

if TYPE_CHECKING:
    # For tiller's own packages (not API; not in __all__).
    from ._context import RUNTIME_STATE_KEY as RUNTIME_STATE_KEY
    from ._context import AgUiContext
    from ._context import decode_state as decode_state
    from ._context import parse_input as parse_input
    from ._driver import AgUiAgent, RunStream, StreamConsumed, run_agent
    from ._encode import SSE_CONTENT_TYPE, encode_sse

    # For tiller's own packages (not API; not in __all__).
    from ._encode import encode_json as encode_json
    from ._encode import keep_alive_frame as keep_alive_frame
    from ._handles import MessageHandle, ReasoningHandle, StepHandle, SubagentHandle, ToolCallHandle
    from ._messages import MessageLog

    # For tiller's own packages (not API; not in __all__).
    from ._outcome import APPROVAL_SCHEMA as APPROVAL_SCHEMA
    from ._outcome import Interrupt, ResumeEntry, RunOutcome
    from ._outcome import approval_interrupt_id as approval_interrupt_id

    # For tiller's own packages (not API; not in __all__).
    from ._sink import CLOSING_TYPES as CLOSING_TYPES
    from ._sink import EventSink as EventSink
    from ._sink import Transformer, TransformerFactory
    from ._sink import check_transformer_factory as check_transformer_factory
    from ._sink import transformers_of as transformers_of
    from ._transformers import FilterToolCalls, SubagentVisibility, ToolResultToState

    # For tiller's own packages (not API; not in __all__).
    from ._types import EVENT_TYPES as EVENT_TYPES
    from ._types import (
        ActivityDeltaEvent,
        ActivitySnapshotEvent,
        CustomEvent,
        Event,
        MessagesSnapshotEvent,
        RawEvent,
        ReasoningEncryptedValueEvent,
        ReasoningEndEvent,
        ReasoningMessageChunkEvent,
        ReasoningMessageContentEvent,
        ReasoningMessageEndEvent,
        ReasoningMessageStartEvent,
        ReasoningStartEvent,
        RunErrorEvent,
        RunFinishedEvent,
        RunStartedEvent,
        StateDeltaEvent,
        StateSnapshotEvent,
        StepFinishedEvent,
        StepStartedEvent,
        SubagentErrorEvent,
        SubagentFinishedEvent,
        SubagentStartedEvent,
        TextMessageChunkEvent,
        TextMessageContentEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
        ToolCallArgsEvent,
        ToolCallChunkEvent,
        ToolCallEndEvent,
        ToolCallResultEvent,
        ToolCallStartEvent,
        event_from_wire,
    )

    # For tiller's own packages (not API; not in __all__).
    from ._verifier import Verifier as Verifier

__all__ = [
    "SSE_CONTENT_TYPE",
    "ActivityDeltaEvent",
    "ActivitySnapshotEvent",
    "AgUiAgent",
    "AgUiContext",
    "CustomEvent",
    "Event",
    "FilterToolCalls",
    "Interrupt",
    "MessageHandle",
    "MessageLog",
    "MessagesSnapshotEvent",
    "RawEvent",
    "ReasoningEncryptedValueEvent",
    "ReasoningEndEvent",
    "ReasoningHandle",
    "ReasoningMessageChunkEvent",
    "ReasoningMessageContentEvent",
    "ReasoningMessageEndEvent",
    "ReasoningMessageStartEvent",
    "ReasoningStartEvent",
    "ResumeEntry",
    "RunErrorEvent",
    "RunFinishedEvent",
    "RunOutcome",
    "RunStartedEvent",
    "RunStream",
    "StateDeltaEvent",
    "StateSnapshotEvent",
    "StepFinishedEvent",
    "StepHandle",
    "StepStartedEvent",
    "StreamConsumed",
    "SubagentErrorEvent",
    "SubagentFinishedEvent",
    "SubagentHandle",
    "SubagentStartedEvent",
    "SubagentVisibility",
    "TextMessageChunkEvent",
    "TextMessageContentEvent",
    "TextMessageEndEvent",
    "TextMessageStartEvent",
    "ToolCallArgsEvent",
    "ToolCallChunkEvent",
    "ToolCallEndEvent",
    "ToolCallHandle",
    "ToolCallResultEvent",
    "ToolCallStartEvent",
    "ToolResultToState",
    "Transformer",
    "TransformerFactory",
    "encode_sse",
    "event_from_wire",
    "run_agent",
]

#: Where each name lives. A name's module is imported the first time the name is asked
#: for (PEP 562), so importing one name does not import the whole namespace (DESIGN §10).
_HOMES = {
    "._context": ("RUNTIME_STATE_KEY", "AgUiContext", "decode_state", "parse_input"),
    "._driver": ("AgUiAgent", "RunStream", "StreamConsumed", "run_agent"),
    "._encode": ("SSE_CONTENT_TYPE", "encode_sse", "encode_json", "keep_alive_frame"),
    "._handles": (
        "MessageHandle",
        "ReasoningHandle",
        "StepHandle",
        "SubagentHandle",
        "ToolCallHandle",
    ),
    "._messages": ("MessageLog",),
    "._outcome": (
        "APPROVAL_SCHEMA",
        "Interrupt",
        "ResumeEntry",
        "RunOutcome",
        "approval_interrupt_id",
    ),
    "._sink": (
        "CLOSING_TYPES",
        "EventSink",
        "Transformer",
        "TransformerFactory",
        "check_transformer_factory",
        "transformers_of",
    ),
    "._transformers": ("FilterToolCalls", "SubagentVisibility", "ToolResultToState"),
    "._types": (
        "EVENT_TYPES",
        "ActivityDeltaEvent",
        "ActivitySnapshotEvent",
        "CustomEvent",
        "Event",
        "MessagesSnapshotEvent",
        "RawEvent",
        "ReasoningEncryptedValueEvent",
        "ReasoningEndEvent",
        "ReasoningMessageChunkEvent",
        "ReasoningMessageContentEvent",
        "ReasoningMessageEndEvent",
        "ReasoningMessageStartEvent",
        "ReasoningStartEvent",
        "RunErrorEvent",
        "RunFinishedEvent",
        "RunStartedEvent",
        "StateDeltaEvent",
        "StateSnapshotEvent",
        "StepFinishedEvent",
        "StepStartedEvent",
        "SubagentErrorEvent",
        "SubagentFinishedEvent",
        "SubagentStartedEvent",
        "TextMessageChunkEvent",
        "TextMessageContentEvent",
        "TextMessageEndEvent",
        "TextMessageStartEvent",
        "ToolCallArgsEvent",
        "ToolCallChunkEvent",
        "ToolCallEndEvent",
        "ToolCallResultEvent",
        "ToolCallStartEvent",
        "event_from_wire",
    ),
    "._verifier": ("Verifier",),
}

# Hidden from type checkers, which see the names through the imports above: a visible
# module `__getattr__` would make every misspelt `tiller.events.X` type-check.
if not TYPE_CHECKING:
    __getattr__ = _public.lazy_names(__name__, globals(), _HOMES)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

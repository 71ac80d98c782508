"""Models: the seam (`Model`, `ModelRequest`, stream events), its errors, retry, the
response accumulator, the offline `ScriptedModel`, provider adapters and model strings.

The provider adapters (`OpenAICompatModel`, `AnthropicModel`) are loaded on first use, so
`import tiller.model` stays cheap for programs that only script or replay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _public

if TYPE_CHECKING:
    # For tiller's own packages (not API; not in __all__).
    from ._accumulate import AccumulatedResponse as AccumulatedResponse
    from ._accumulate import DroppedCall as DroppedCall
    from ._accumulate import ResponseAccumulator as ResponseAccumulator
    from ._base import (
        Finish,
        FinishReason,
        Model,
        ModelRequest,
        ReasoningDelta,
        StreamEvent,
        TextDelta,
        ToolCallArgsDelta,
        ToolCallEnd,
        ToolCallStart,
        ToolSpec,
        UsageReport,
    )

    # For tiller's own packages (not API; not in __all__).
    from ._codec import stream_event_to_json as stream_event_to_json
    from ._errors import (
        ContextOverflow,
        ModelConnectionError,
        ModelError,
        ModelHTTPError,
        ModelProtocolError,
        ModelTimeout,
    )
    from ._output import (
        OUTPUT_MODES,
        OUTPUT_TOOL_NAME,
        ForceTool,
        OutputMode,
        OutputSchema,
        ToolChoice,
        strict_json_schema,
    )

    # For tiller's own packages (not API; not in __all__).
    from ._output import OUTPUT_WRAPPER_KEY as OUTPUT_WRAPPER_KEY
    from ._output import object_root_schema as object_root_schema
    from ._output import schema_name as schema_name
    from ._output import wrap_in_object as wrap_in_object
    from ._request_shape import request_shape as request_shape
    from ._resolve import resolve_model
    from ._retry import RetryNotice, RetryPolicy
    from ._retry import stream_with_retry as stream_with_retry
    from .anthropic import AnthropicModel
    from .openai_compat import OpenAICompatModel
    from .scripted import ScriptedModel, Turn, TurnCall, TurnError, TurnInfo

__all__ = [
    "AnthropicModel",
    "ContextOverflow",
    "Finish",
    "FinishReason",
    "ForceTool",
    "Model",
    "ModelConnectionError",
    "ModelError",
    "ModelHTTPError",
    "ModelProtocolError",
    "ModelRequest",
    "ModelTimeout",
    "OUTPUT_MODES",
    "OUTPUT_TOOL_NAME",
    "OpenAICompatModel",
    "OutputMode",
    "OutputSchema",
    "ReasoningDelta",
    "RetryNotice",
    "RetryPolicy",
    "ScriptedModel",
    "StreamEvent",
    "TextDelta",
    "ToolCallArgsDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolChoice",
    "ToolSpec",
    "Turn",
    "TurnCall",
    "TurnError",
    "TurnInfo",
    "UsageReport",
    "resolve_model",
    "strict_json_schema",
]

#: Where each name lives. A name's module is imported the first time the name is asked
#: for (PEP 562), so importing one name does not import the whole namespace (DESIGN §10).
_HOMES = {
    "._accumulate": ("AccumulatedResponse", "DroppedCall", "ResponseAccumulator"),
    "._base": (
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
    ),
    "._codec": ("stream_event_to_json",),
    "._errors": (
        "ContextOverflow",
        "ModelConnectionError",
        "ModelError",
        "ModelHTTPError",
        "ModelProtocolError",
        "ModelTimeout",
    ),
    "._output": (
        "OUTPUT_MODES",
        "OUTPUT_TOOL_NAME",
        "ForceTool",
        "OutputMode",
        "OutputSchema",
        "ToolChoice",
        "strict_json_schema",
        "object_root_schema",
        "schema_name",
        "OUTPUT_WRAPPER_KEY",
        "wrap_in_object",
    ),
    "._request_shape": ("request_shape",),
    "._resolve": ("resolve_model",),
    "._retry": ("RetryNotice", "RetryPolicy", "stream_with_retry"),
    ".anthropic": ("AnthropicModel",),
    ".openai_compat": ("OpenAICompatModel",),
    ".scripted": ("ScriptedModel", "Turn", "TurnCall", "TurnError", "TurnInfo"),
}

# Hidden from type checkers, which see the names through the imports above: a visible
# module `__getattr__` would make every misspelt `tiller.model.X` type-check.
if not TYPE_CHECKING:
    __getattr__ = _public.lazy_names(__name__, globals(), _HOMES)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

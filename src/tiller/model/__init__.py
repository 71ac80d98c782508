"""Models: the seam (`Model`, `ModelRequest`, stream events), its errors, retry, the
response accumulator, the offline `ScriptedModel`, provider adapters and model strings.

The provider adapters (`OpenAICompatModel`, `AnthropicModel`) are loaded on first use, so
`import tiller.model` stays cheap for programs that only script or replay.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .. import _public

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
from ._output import OUTPUT_WRAPPER_KEY as OUTPUT_WRAPPER_KEY

# For tiller's own packages (not API; not in __all__).
from ._output import object_root_schema as object_root_schema
from ._output import schema_name as schema_name
from ._output import wrap_in_object as wrap_in_object
from ._request_shape import request_shape as request_shape
from ._resolve import resolve_model
from ._retry import RetryNotice, RetryPolicy
from ._retry import stream_with_retry as stream_with_retry
from .scripted import ScriptedModel, Turn, TurnCall, TurnError, TurnInfo

if TYPE_CHECKING:
    from .anthropic import AnthropicModel
    from .openai_compat import OpenAICompatModel

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

_LAZY = {"AnthropicModel": ".anthropic", "OpenAICompatModel": ".openai_compat"}

# Hidden from type checkers, which see the adapters through the imports above: a visible
# module `__getattr__` would make every misspelt `tiller.model.X` type-check.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """Import a provider adapter the first time it is asked for (PEP 562)."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())

"""The agent loop: `Agent`, the per-run `RunContext`, `RunOptions`, `Budget`, `RunResult`."""

from ._agent import Agent
from ._budget import Budget, Pricing
from ._context import RunContext
from ._guardrails import Guardrail, GuardrailOutcome, MaxResponseLength, RefusalKeywords
from ._options import RunOptions
from ._result import RunResult, ToolTraceEntry
from ._run import LoopFailed, ResponseTooLarge
from ._steering import SteeringQueue
from ._window import estimate_tokens, history_window

__all__ = [
    "Agent",
    "Budget",
    "Guardrail",
    "GuardrailOutcome",
    "LoopFailed",
    "MaxResponseLength",
    "Pricing",
    "RefusalKeywords",
    "ResponseTooLarge",
    "RunContext",
    "RunOptions",
    "RunResult",
    "SteeringQueue",
    "ToolTraceEntry",
    "estimate_tokens",
    "history_window",
]

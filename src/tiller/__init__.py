"""tiller: a Python runtime for LLM agents in which every run carries its own world.

The public API is re-exported here; submodules whose names start with `_` are private.
"""

from .cancel import CancellationToken
from .errors import (
    Cancelled,
    HandleClosed,
    InvalidResume,
    InvalidToolArguments,
    ProtocolViolation,
    StateDecodeError,
    StatePatchError,
    SubscriberLagged,
    TillerError,
    UsageError,
)
from .events import (
    AgUiContext,
    Interrupt,
    ResumeEntry,
    RunOutcome,
    run_agent,
)

__version__ = "0.1.0"

__all__ = [
    "AgUiContext",
    "CancellationToken",
    "Cancelled",
    "HandleClosed",
    "Interrupt",
    "InvalidResume",
    "InvalidToolArguments",
    "ProtocolViolation",
    "ResumeEntry",
    "RunOutcome",
    "StateDecodeError",
    "StatePatchError",
    "SubscriberLagged",
    "TillerError",
    "UsageError",
    "__version__",
    "run_agent",
]

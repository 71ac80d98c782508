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
from .loop import ResumeReplayBlocked
from .store import AlreadyResumed, RunStillRunning

__version__ = "0.1.0"

__all__ = [
    "AgUiContext",
    "AlreadyResumed",
    "CancellationToken",
    "Cancelled",
    "HandleClosed",
    "Interrupt",
    "InvalidResume",
    "InvalidToolArguments",
    "ProtocolViolation",
    "ResumeEntry",
    "ResumeReplayBlocked",
    "RunOutcome",
    "RunStillRunning",
    "StateDecodeError",
    "StatePatchError",
    "SubscriberLagged",
    "TillerError",
    "UsageError",
    "__version__",
    "run_agent",
]

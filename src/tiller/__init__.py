"""tiller: a Python runtime for LLM agents in which every run carries its own world.

The public API is re-exported here; submodules whose names start with `_` are private.
The errors a resume raises come from `tiller.loop` and `tiller.store`, imported on first
use so that `import tiller` (and `import tiller.model`) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
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

#: Names imported on first use (PEP 562): their packages pull in the whole loop.
_LAZY = {
    "AlreadyResumed": ".store",
    "ResumeReplayBlocked": ".loop",
    "RunStillRunning": ".store",
}

# Hidden from type checkers, which see these names through the imports above.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

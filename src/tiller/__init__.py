"""tiller: a Python runtime for LLM agents in which every run carries its own world.

The front door: what a user needs daily, re-exported under one name.

```python
from tiller import Agent, tool

@tool(read_only=True)
def add(a: int, b: int) -> int:
    "Add two numbers."
    return a + b

print(Agent("ollama:qwen2.5-coder", [add]).run_sync("2 + 3?").text)
```

The rest lives in the capabilities' namespaces (`tiller.events`, `tiller.loop`,
`tiller.model`, `tiller.policy`, `tiller.store`, `tiller.tools`, `tiller.serve`); modules
whose names start with `_` are private. The names that come from the loop, the tools, the
models and the store are imported on first use, so that `import tiller` stays cheap; every
re-exported name reports `tiller` as its module (`tiller._public`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import _public
from .cancel import CancellationToken
from .errors import (
    Cancelled,
    HandleClosed,
    InvalidResume,
    InvalidToolArguments,
    NewerSchemaError,
    ProtocolViolation,
    StateDecodeError,
    StatePatchError,
    SubscriberLagged,
    TillerError,
    UsageError,
)

if TYPE_CHECKING:
    from .loop import (
        Agent,
        Budget,
        ResumeDecision,
        ResumeReplayBlocked,
        RunContext,
        RunControls,
        RunOptions,
        RunResult,
    )
    from .model import ScriptedModel
    from .policy import AllowAll
    from .state import StopCause
    from .store import AlreadyResumed, RunStillRunning, open_bus
    from .tools import ExecContext, Tool, ToolError, tool

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AllowAll",
    "AlreadyResumed",
    "Budget",
    "CancellationToken",
    "Cancelled",
    "ExecContext",
    "HandleClosed",
    "InvalidResume",
    "InvalidToolArguments",
    "NewerSchemaError",
    "ProtocolViolation",
    "ResumeDecision",
    "ResumeReplayBlocked",
    "RunContext",
    "RunControls",
    "RunOptions",
    "RunResult",
    "RunStillRunning",
    "ScriptedModel",
    "StateDecodeError",
    "StatePatchError",
    "StopCause",
    "SubscriberLagged",
    "TillerError",
    "Tool",
    "ToolError",
    "UsageError",
    "__version__",
    "open_bus",
    "tool",
]

#: The subpackages `tiller.<name>` reaches after a bare `import tiller` (imported then).
_SUBPACKAGES = frozenset({"cli", "events", "loop", "model", "policy", "serve", "store", "tools"})

_public.rehome(__name__ + ".cancel", globals())
_public.rehome(__name__ + ".errors", globals())

# Hidden from type checkers, which see these names through the imports above: a visible
# module `__getattr__` would make every misspelt `tiller.X` type-check.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """Import a front-door name, or a subpackage, the first time it is asked for."""
        home = _public.FRONT.get(name)
        if home is not None:
            value = getattr(importlib.import_module(home), name)
            globals()[name] = value  # later lookups skip this function
            return value
        if name in _SUBPACKAGES:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

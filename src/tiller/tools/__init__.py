"""Tools: what the model may call, what each call receives, and what a run's tools may touch.

- `Tool`, `@tool`, `ToolOutput`, `ToolError`, `Capability`: defining tools.
- `ExecContext`: what one call receives (token, ids, jail, progress, the run's state).
- `ToolCtx`: one run's tool policy (the jail root, spill dir, output budget, shell timeout).
- `OutputBudget`: one turn's shared output byte budget; the overflow is spilled to files.
- `Registry`: tools by name, what a phase shows, and executing one call into one result.
- `tiller.tools.builtin`: the coding tools (`coding_tools()`).

```
TillerError
├── UsageError
│   ├── DuplicateTool
│   └── ToolDefinitionError
├── InvalidToolArguments     (tiller.errors)
└── PathOutsideJail
ToolError (Exception)         raised by tools on purpose; deliberately not a TillerError
```
"""

from ._errors import DuplicateTool, PathOutsideJail, ToolDefinitionError
from ._exec import PROGRESS_EVENT, ExecContext, LocalState, StateAccess
from ._jail import (
    DEFAULT_OUTPUT_BUDGET_BYTES,
    DEFAULT_SHELL_TIMEOUT,
    SPILL_SUBDIR,
    ToolCtx,
    private_copy,
)
from ._output import OutputBudget
from ._registry import Execution, Lookup, Outcome, Refusal, Registry
from ._tool import BaseTool, Capability, FunctionTool, Tool, ToolError, ToolOutput, tool
from .builtin import coding_tools

__all__ = [
    "DEFAULT_OUTPUT_BUDGET_BYTES",
    "DEFAULT_SHELL_TIMEOUT",
    "PROGRESS_EVENT",
    "SPILL_SUBDIR",
    "BaseTool",
    "Capability",
    "DuplicateTool",
    "ExecContext",
    "Execution",
    "FunctionTool",
    "LocalState",
    "Lookup",
    "Outcome",
    "OutputBudget",
    "PathOutsideJail",
    "Refusal",
    "Registry",
    "StateAccess",
    "Tool",
    "ToolCtx",
    "ToolDefinitionError",
    "ToolError",
    "ToolOutput",
    "coding_tools",
    "private_copy",
    "tool",
]

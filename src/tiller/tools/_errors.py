"""Errors of the tools package, under tiller's one root.

```
TillerError
├── UsageError
│   ├── DuplicateTool          a registry already holds a tool of that name
│   └── ToolDefinitionError    a function cannot be turned into a tool (the message says why)
└── PathOutsideJail            a path a tool was given resolves outside the run's jail
```

`ToolError` (in `tiller.tools`) is deliberately *not* here: it is a signal a tool raises on
purpose ("this call failed, tell the model why"), so it is a plain `Exception` and
`except TillerError` never swallows it.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TillerError, UsageError

__all__ = ["DuplicateTool", "PathOutsideJail", "ToolDefinitionError"]


class DuplicateTool(UsageError):
    """Two tools share a name. The model addresses tools by name only, so a registry
    refuses the second one; rename it (`@tool(name=...)`) or drop one of them."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"a tool named {name!r} is already registered; "
            "give one of them another name with @tool(name=...)"
        )
        self.name = name


class ToolDefinitionError(UsageError):
    """A function cannot become a tool: an unannotated or variadic parameter, a type
    pydantic cannot describe as JSON Schema, a name providers reject, no description.

    Raised when the tool is defined (at import time), never while a run is going on.
    """


class PathOutsideJail(TillerError):
    """A path resolves outside the run's workspace jail (`..`, an absolute path elsewhere,
    a symlink that points out), or is not a usable path at all.

    The message is written for the model, which gave the path: it names the path and says
    to stay inside the workspace. `path` is the path as given, `root` the jail.
    """

    def __init__(self, path: str, root: Path, reason: str = "is outside the workspace") -> None:
        super().__init__(
            f"path {path!r} {reason}; tools may only touch files inside the workspace "
            f"({root}). Use a path relative to the workspace root."
        )
        self.path = path
        self.root = root

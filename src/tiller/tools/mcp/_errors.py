"""Errors of the MCP tool source, under tiller's one root.

```
TillerError
├── UsageError
│   └── McpConfigError     an `[mcp]` table of tiller.toml (or a config built in code) is wrong
└── McpStartError          a server could not be started, initialized or listed
```

A failure *during a call* is not here: it is a `ToolError` (the model reads it and the run
goes on), because a server that crashed mid-session is something the model can react to,
not a bug in the program.
"""

from __future__ import annotations

from ...errors import TillerError, UsageError

__all__ = ["McpConfigError", "McpStartError"]


class McpConfigError(UsageError):
    """The MCP configuration is invalid. `key` is the dotted path of the offending entry
    (`mcp.servers.github.args`), and the message says what is allowed there."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


class McpStartError(TillerError):
    """The MCP server `server` could not be used: its command could not be run, it exited
    or stopped answering during the handshake, or it answered with something that is not
    MCP. `stderr` holds the last lines the server wrote to its stderr (often the reason),
    and is part of the message."""

    def __init__(self, server: str, problem: str, stderr: str = "") -> None:
        message = f"MCP server {server!r} could not be started: {problem}"
        if stderr:
            message += f"\nits last stderr lines:\n{stderr}"
        super().__init__(message)
        self.server = server
        self.problem = problem
        self.stderr = stderr

"""MCP servers as tool sources: configuration, the client, and the tools it makes.

Importing this package is cheap; the MCP SDK (heavy: about a second) is imported only
when a client opens.
"""

from __future__ import annotations

from ._client import McpClient, SkippedTool, open_mcp_tools

# For tiller's own packages (not API; not in __all__).
from ._client import McpClientState as McpClientState
from ._config import McpServerConfig, McpServers
from ._errors import McpConfigError, McpStartError

# For tiller's own packages (not API; not in __all__).
from ._naming import mcp_tool_name as mcp_tool_name
from ._tool import McpTool

__all__ = [
    "McpClient",
    "McpConfigError",
    "McpServerConfig",
    "McpServers",
    "McpStartError",
    "McpTool",
    "SkippedTool",
    "open_mcp_tools",
]

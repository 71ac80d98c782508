"""MCP servers as tool sources: configuration, the client, and the tools it makes.

Importing this package is cheap; the MCP SDK (heavy: about a second) is imported only
when a client opens.
"""

from __future__ import annotations

from ._client import McpClient, McpClientState, SkippedTool, open_mcp_tools
from ._config import (
    DEFAULT_MCP_STARTUP_TIMEOUT,
    DEFAULT_MCP_TIMEOUT,
    McpServerConfig,
    McpServers,
)
from ._errors import McpConfigError, McpStartError
from ._naming import mcp_tool_name
from ._tool import MCP_CAPABILITIES, MCP_RISK, McpTool

__all__ = [
    "DEFAULT_MCP_STARTUP_TIMEOUT",
    "DEFAULT_MCP_TIMEOUT",
    "MCP_CAPABILITIES",
    "MCP_RISK",
    "McpClient",
    "McpClientState",
    "McpConfigError",
    "McpServerConfig",
    "McpServers",
    "McpStartError",
    "McpTool",
    "SkippedTool",
    "mcp_tool_name",
    "open_mcp_tools",
]

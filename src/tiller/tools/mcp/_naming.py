"""The name the model sees for an MCP tool: `server__tool`.

Providers accept tool names of 1 to 64 characters from `[A-Za-z0-9_-]`; MCP allows up to
128 characters and also `.` (and servers send worse). So:

1. A name that already fits (`github__create_issue`) is used as is.
2. Otherwise every character outside `[A-Za-z0-9_-]` becomes `_`, the result is cut so
   that `_` and an 8-hex-digit digest of the *original* tool name still fit in 64
   characters, and that suffix is appended: `fs__read_file_3f2a9c01` for `read.file`.

The rule depends only on the server's name and the tool's own name, never on which other
tools the server lists, so a name is stable across sessions and across servers adding
tools; and two different originals never share a rewritten name unless their digests
collide (then the later one in name order is refused, see `McpClient.skipped`). Server
names contain no `__` and do not end in `_`, so `server__` can never be the prefix of
another server's tools, and the split at the first `__` recovers the server.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

__all__ = ["MAX_TOOL_NAME", "SEPARATOR", "mcp_tool_name"]

#: What OpenAI and Anthropic accept as a function name (the same as `@tool`'s check).
_PROVIDER_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")
#: The longest tool name providers accept.
MAX_TOOL_NAME: Final = 64
#: Between the server's name and the tool's.
SEPARATOR: Final = "__"
_DIGEST_CHARS: Final = 8


def mcp_tool_name(server: str, remote: str) -> str:
    """The provider-safe name of the tool `remote` of the server `server` (see the
    module's docstring for the rule)."""
    plain = f"{server}{SEPARATOR}{remote}"
    if remote and _PROVIDER_NAME.match(plain):
        return plain
    digest = hashlib.sha256(remote.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]
    safe = _UNSAFE.sub("_", remote)
    room = MAX_TOOL_NAME - len(server) - len(SEPARATOR) - 1 - _DIGEST_CHARS
    return f"{server}{SEPARATOR}{safe[:room]}_{digest}"

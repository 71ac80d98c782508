"""`ClientTool`: a tool the AG-UI client offers (`RunAgentInput.tools`), run by the client.

The model sees it like any other tool; when it calls one, the call passes the run's gate
like any other (phase, withheld, the interlock, hooks, the policy), and then the server
runs nothing: the run ends with the call left open (`RUN_FINISHED{success,
pendingToolCallIds}`), the page runs it, and the next request carries the result.

Its result comes from the client, which the server cannot check: it is untrusted input
(law 3), and the conversation is tainted so when the call is made. It is read-only for the
policy and the approver: what it does happens in the page, in front of its person, who
would otherwise be asked twice. A tool known to send data out of the machine can be
declared so (`capabilities`), and then the interlock weighs it like any send.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._exec import ExecContext
from ._tool import BaseTool, Capability, ToolError, ToolOutput

__all__ = ["ClientTool"]


class ClientTool(BaseTool):
    """One frontend tool, from its AG-UI definition (`name`, `description`, `parameters`)."""

    read_only = True
    #: Read by the loop: a call to this tool is left for the client, not executed.
    runs_on_client = True

    def __init__(
        self,
        name: str,
        description: str,
        parameters: Mapping[str, Any],
        *,
        capabilities: Capability = Capability.UNTRUSTED_INPUT,
    ) -> None:
        self.name = name
        self.description = description
        self.capabilities = capabilities
        schema = dict(parameters) if parameters else {}
        self.input_schema = schema or {"type": "object", "properties": {}}

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> ClientTool:
        """From an AG-UI tool (`{name, description, parameters}`)."""
        return cls(
            str(wire["name"]),
            str(wire.get("description") or ""),
            wire.get("parameters") or {},
        )

    async def call(self, args: dict[str, Any], ctx: ExecContext) -> ToolOutput:
        # The loop never executes a client tool; reaching this is a wiring mistake.
        raise ToolError(f"{self.name} runs in the client, not on the server")

    def __repr__(self) -> str:
        return f"ClientTool({self.name!r})"

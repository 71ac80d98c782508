"""`message_send`: write to another agent through the run's mailbox.

The model picks the recipient (an agent name) and the text; nothing else. Who sent it
(the run's agent name and thread) and the taint it carries (the step's: what this
conversation has read, with the batch's other calls) are stamped by the runtime through
`ctx.mailbox`, so a model cannot pose as another agent or launder what it read. The tool
declares `EXTERNAL_SEND`: the message leaves this conversation, so the interlock weighs it
like any send, and a run holding private data and untrusted input cannot mail it out.

The recipient reads the message at the top of one of its steps, framed as a message from
this agent, never as its user's words.
"""

from __future__ import annotations

from typing import Annotated, Protocol, runtime_checkable

from pydantic import Field

from ...errors import TillerError
from .._exec import ExecContext
from .._tool import Capability, ToolError, tool

__all__ = ["Mailer", "message_send"]


@runtime_checkable
class Mailer(Protocol):
    """What `ExecContext.mailbox` is: a sender bound to one run, stamping its identity
    and taint."""

    async def send(self, to: str, text: str) -> str:
        """Send `text` to the agent `to`; returns the message's id."""
        ...


@tool(
    capabilities=Capability.EXTERNAL_SEND,
    risk="network",
    denial_remedy="Tell the user what you wanted to send, and to whom, instead.",
)
async def message_send(
    to: Annotated[str, Field(min_length=1, max_length=64)],
    text: Annotated[str, Field(min_length=1)],
    ctx: ExecContext,
) -> str:
    """Send a message to another agent. It reads it at the start of one of its steps, as a
    message from you; the reply, if any, comes to you the same way.

    Args:
        to: The other agent's name.
        text: The message.
    """
    mailer = ctx.mailbox
    if not isinstance(mailer, Mailer):
        raise ToolError("this run has no mailbox: messages cannot be sent from it")
    try:
        message_id = await mailer.send(to, text)
    except TillerError as exc:  # a full mailbox, a bad name, a store failure
        raise ToolError(f"the message was not sent: {exc}") from None
    return f"Message {message_id} sent to {to}."

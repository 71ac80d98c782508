"""`tiller mail list | send`: the inter-agent mailbox, seen and written by a person.

`list` shows the messages waiting (or, with `--all`, every one) with who sent them, to
whom, their taint and status, and says how many records were moved aside as unreadable.
`send` leaves a message for an agent's runs as if from the agent named by `--from`: its
runs read it at the top of a step as a message from that agent, never as their user. The
text's origin is unknown to tiller, so it is stamped untrusted unless `--trusted` says
otherwise (law 3: unknown taint is untrusted).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import typer

from ..errors import UsageError
from ._held import EXIT_OK, age, finish, print_table
from ._options import store_option
from ._runs import _with_store
from ._safe import echo

if TYPE_CHECKING:
    from ..store import Bus, MailMessage

__all__ = ["MAILBOX_BUCKET", "mail_app"]

#: `tiller.store._mailbox.MAILBOX_BUCKET`, written out so that loading the CLI does not
#: import the store (a test checks they agree).
MAILBOX_BUCKET = "tiller-mailbox"

mail_app = typer.Typer(
    name="mail",
    help="Messages between agents: list them, or send one.",
    no_args_is_help=True,
    add_completion=False,
)

_BUCKET_HELP = "The mailbox bucket."
_NAMESPACE_HELP = "The store namespace (buckets are prefixed with it)."


def _taint(message: MailMessage) -> str:
    from ..policy import taint_names

    return ",".join(taint_names(message.taint)) or "none"


def _sender(message: MailMessage) -> str:
    return message.sender if message.sender_session is not None else f"{message.sender} (cli)"


def _short(text: str, limit: int = 48) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


@mail_app.command("list")
def list_mail(
    to: str | None = typer.Option(None, "--to", help="Only the messages to this agent."),
    all_messages: bool = typer.Option(
        False, "--all", help="Every message, not only those waiting to be read."
    ),
    store: str = store_option("The store"),
    bucket: str = typer.Option(MAILBOX_BUCKET, "--bucket", help=_BUCKET_HELP),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
) -> None:
    """List the messages waiting to be read (--all: every message).

    Columns: ID, FROM, TO, TAINT, AGE, STATUS, TEXT."""
    from ..store import MailboxStore, check_mail_name

    async def work(bus: Bus) -> int:
        mailbox = MailboxStore(bus, bucket)
        messages = await mailbox.list(to, None if all_messages else "pending")
        if not messages:
            where = f" for {to}" if to is not None else ""
            echo(f"no messages waiting{where}" if not all_messages else f"no messages{where}")
        else:
            now = bus.clock()
            rows = [
                (
                    m.id,
                    _sender(m),
                    m.to,
                    _taint(m),
                    age(now - m.sent_at),
                    m.status if m.delivered_run is None else f"{m.status} ({m.delivered_run})",
                    _short(m.text),
                )
                for m in messages
            ]
            print_table(("ID", "FROM", "TO", "TAINT", "AGE", "STATUS", "TEXT"), rows)
        bad = await mailbox.quarantined(to)
        if bad:
            echo(
                f"{len(bad)} unreadable record(s) were moved aside and never delivered "
                f"(keys under bad/ in {bucket})"
            )
        return EXIT_OK

    def start() -> Coroutine[Any, Any, int]:
        if to is not None:
            check_mail_name(to, "a recipient")  # a usage error before the store opens
        return _with_store(store, namespace, work)

    finish(start)


@mail_app.command("send")
def send_mail(
    *,
    text: str = typer.Argument(..., help="The message."),
    to: str = typer.Option(..., "--to", help="The agent to write to."),
    sender: str = typer.Option(..., "--from", help="The agent the message is from."),
    trusted: bool = typer.Option(
        False,
        "--trusted",
        help="The text holds nothing untrusted (by default it is stamped untrusted).",
    ),
    store: str = store_option("The store"),
    bucket: str = typer.Option(MAILBOX_BUCKET, "--bucket", help=_BUCKET_HELP),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
) -> None:
    """Leave a message for the agent --to, from the agent --from.

    Its runs read it at the top of a step, as a message from that agent, never as their
    user; it is stamped untrusted unless --trusted."""
    from ..conversation import Taint
    from ..store import MailboxStore, MailIdentity, check_mail_name

    taint = Taint.NONE if trusted else Taint.UNTRUSTED_INPUT

    def start() -> Coroutine[Any, Any, int]:
        # Usage errors before the store opens (exit 2, one line).
        check_mail_name(to, "a recipient")
        identity = MailIdentity(sender)
        if not text.strip():
            raise UsageError("a message needs some text")

        async def work(bus: Bus) -> int:
            mailbox = MailboxStore(bus, bucket)
            message = await mailbox.send(to, text, sender=identity, taint=taint)
            echo(f"sent {message.id} to {to} (from {sender}, taint: {_taint(message)})")
            return EXIT_OK

        return _with_store(store, namespace, work)

    finish(start)

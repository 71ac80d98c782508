"""`tiller mail list | send` on a SQLite file: messages sent by the library show in the
listing, a message sent by the command is the store's like any other (stamped untrusted
unless `--trusted`, no session: a person sent it), usage errors exit 2 in one line, and
one round trip runs as real subprocesses (`python -m tiller`)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from typer.testing import CliRunner, Result

from tiller.cli import app
from tiller.cli._mail import MAILBOX_BUCKET as CLI_MAILBOX_BUCKET
from tiller.conversation import Taint
from tiller.store import MAILBOX_BUCKET, Bus, MailboxStore, MailIdentity, MailMessage, open_bus

T = TypeVar("T")


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def on_store(url: str, work: Callable[[Bus], Coroutine[Any, Any, T]]) -> T:
    async def run() -> T:
        async with await open_bus(url) as bus:
            return await work(bus)

    return asyncio.run(run())


def tiller(*args: str) -> Result:
    assert "--store" in args, "never the default store: it is the user's own"
    return CliRunner().invoke(app, list(args))


def messages(url: str, to: str | None = None) -> list[MailMessage]:
    return on_store(url, lambda bus: MailboxStore(bus).list(to))


def test_the_cli_knows_the_stores_bucket() -> None:
    assert CLI_MAILBOX_BUCKET == MAILBOX_BUCKET


def test_send_stamps_the_sender_and_untrusted_by_default(url: str) -> None:
    result = tiller("mail", "send", "--to", "bob", "--from", "alice", "hi bob", "--store", url)
    assert result.exit_code == 0, result.output
    (sent,) = messages(url)
    assert result.output == f"sent {sent.id} to bob (from alice, taint: untrusted)\n"
    assert (sent.to, sent.sender, sent.text, sent.status) == ("bob", "alice", "hi bob", "pending")
    assert (sent.sender_session, sent.sender_run) == (None, None)
    assert sent.taint == Taint.UNTRUSTED_INPUT

    trusted = tiller(
        "mail", "send", "--to", "bob", "--from", "ops", "--trusted", "deploy", "--store", url
    )
    assert trusted.exit_code == 0, trusted.output
    assert "taint: none" in trusted.output
    assert messages(url)[-1].taint == Taint.NONE


def test_list_shows_waiting_mail_and_all_with_all(url: str) -> None:
    async def setup(bus: Bus) -> None:
        store = MailboxStore(bus)
        sender = MailIdentity("alice", session="thread-a", run_id="run-a")
        await store.send("bob", "first\nline", sender=sender, taint=Taint.PRIVATE_DATA)
        await store.send("carol", "for carol", sender=sender, taint=Taint.NONE)
        await store.claim("carol", run_id="run-c")
        await store.send("bob", "x" * 80, sender=sender, taint=Taint.NONE)

    on_store(url, setup)
    waiting = tiller("mail", "list", "--store", url)
    assert waiting.exit_code == 0, waiting.output
    lines = waiting.output.splitlines()
    assert lines[0].split() == ["ID", "FROM", "TO", "TAINT", "AGE", "STATUS", "TEXT"]
    assert len(lines) == 3
    assert lines[1].split()[1:4] == ["alice", "bob", "private"]
    assert lines[1].endswith("first line")
    assert lines[2].endswith("x" * 47 + "…")
    assert "for carol" not in waiting.output

    every = tiller("mail", "list", "--all", "--store", url)
    assert "delivered (run-c)" in every.output and "for carol" in every.output

    for_carol = tiller("mail", "list", "--to", "carol", "--store", url)
    assert for_carol.output == "no messages waiting for carol\n"


def test_list_says_when_records_were_moved_aside(url: str) -> None:
    async def setup(bus: Bus) -> None:
        kv = await bus.kv(MAILBOX_BUCKET)
        await kv.put("msg/bob/0000000000000001-00000001", b"garbage")
        await MailboxStore(bus).claim("bob")

    on_store(url, setup)
    result = tiller("mail", "list", "--store", url)
    assert result.exit_code == 0
    assert result.output == (
        "no messages waiting\n"
        "1 unreadable record(s) were moved aside and never delivered "
        "(keys under bad/ in tiller-mailbox)\n"
    )


def test_usage_errors_exit_2_in_one_line(url: str) -> None:
    cases = [
        (("mail", "send", "--to", "bob smith", "--from", "alice", "hi"), "cannot be a recipient"),
        (("mail", "send", "--to", "bob", "--from", "al/ice", "hi"), "cannot be an agent name"),
        (("mail", "send", "--to", "bob", "--from", "alice", "  "), "needs some text"),
        (("mail", "list", "--to", "b.o.b"), "cannot be a recipient"),
    ]
    for args, message in cases:
        result = tiller(*args, "--store", url)
        assert result.exit_code == 2, result.output
        assert message in result.output
        assert "Traceback" not in result.output
    assert messages(url) == []


def test_a_full_mailbox_is_refused(url: str) -> None:
    async def fill(bus: Bus) -> None:
        store = MailboxStore(bus)
        for n in range(store.max_pending):
            await store.send("bob", f"m{n}", sender=MailIdentity("alice"), taint=Taint.NONE)

    on_store(url, fill)
    result = tiller("mail", "send", "--to", "bob", "--from", "alice", "one more", "--store", url)
    assert result.exit_code == 2
    assert "the mailbox of 'bob' is full" in result.output


def test_send_and_list_as_real_processes(url: str, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tiller", "mail", *args, "--store", url],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
        )

    sent = run("send", "--to", "bob", "--from", "alice", "across processes")
    assert sent.returncode == 0, sent.stderr
    listed = run("list", "--to", "bob")
    assert listed.returncode == 0, listed.stderr
    assert "across processes" in listed.stdout
    assert "alice (cli)" in listed.stdout

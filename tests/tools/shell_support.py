"""Helpers for the shell tests: running the shell tools through a registry, watching the
processes a command starts (by a unique marker in their command line, since pids inside
the sandbox's pid namespace mean nothing outside it), and collecting progress output."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from tiller.conversation import ToolCall
from tiller.events import CustomEvent, Event
from tiller.tools import DEFAULT_SANDBOX, PROGRESS_EVENT, ExecContext, Execution, Registry, Tool
from tiller.tools.builtin import background_process, execute_command

SANDBOX_MISSING = not DEFAULT_SANDBOX.probe().available
SANDBOX_REASON = DEFAULT_SANDBOX.probe().reason


async def run(
    ctx: ExecContext, name: str = "execute_command", *, tools: Iterable[Tool] = (), **args: Any
) -> Execution:
    """One call through a registry, as the loop makes it (inside the token's scope)."""
    registry = Registry(list(tools) or [execute_command, background_process])
    call = ToolCall(id="call-1", name=name, arguments=orjson.dumps(args).decode())
    return await registry.execute(call, ctx)


def new_mark() -> str:
    return uuid.uuid4().hex[:16]


def sleeper(mark: str) -> str:
    """Bash that starts `sleep 1000` renamed `tiller-mark-<mark>` in the background and
    goes on once it runs. (The grep pattern does not match its own command line.)"""
    return (
        f'(m=tiller-mark; exec -a "$m-{mark}" sleep 1000) & '
        f'until grep -qas "tiller-mark-[{mark[0]}]{mark[1:]}" /proc/[0-9]*/cmdline; '
        "do sleep 0.01; done; "
    )


def marked(mark: str) -> list[int]:
    """Host pids of live processes whose command line carries the marker."""
    needle = f"tiller-mark-{mark}".encode()
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(needle):
            found.append(int(entry.name))
    return found


def zombie_or_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def gone(pid: int) -> bool:
    """Whether `pid` no longer exists at all (exited and reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# Watching another process can only be done by polling; the callers' `asyncio.timeout`
# keeps a wait that never ends from hanging the suite.
async def wait_marked(mark: str) -> int:
    while not (pids := marked(mark)):  # noqa: ASYNC110 - another process starts it
        await asyncio.sleep(0.01)
    return pids[0]


async def wait_gone(pid: int) -> None:
    """Until `pid` is reaped (SIGKILL and the reap are asynchronous)."""
    while not gone(pid):  # noqa: ASYNC110
        await asyncio.sleep(0.01)


async def wait_dead(pid: int) -> None:
    """Until `pid` has exited; a zombie counts, for processes whose reaper is not ours
    (the unsandboxed shell's orphans go to the machine's init)."""
    while not zombie_or_gone(pid):  # noqa: ASYNC110
        await asyncio.sleep(0.01)


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def our_child_above(pid: int) -> int:
    """The ancestor of `pid` that is a child of this test process (bwrap, for a
    sandboxed command)."""
    me = os.getpid()
    while (up := parent(pid)) != me:
        if up <= 1:
            raise AssertionError(f"process {pid} does not descend from this test process")
        pid = up
    return pid


class Output:
    """Collects a call's progress output; `seen(text)` waits until it has arrived."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self._changed = asyncio.Event()

    def __call__(self, event: Event) -> None:
        if isinstance(event, CustomEvent) and event.name == PROGRESS_EVENT:
            value = event.value
            if value.get("kind") == "output":
                self.chunks.append(value["text"])
                self._changed.set()

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    async def seen(self, text: str) -> None:
        while text not in self.text:
            self._changed.clear()
            await self._changed.wait()

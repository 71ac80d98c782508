"""`run_shell`: run a bash command in the workspace.

    !!! NOT SANDBOXED YET !!!
    The command runs as the current user with the current environment, and can read,
    write and send anything that user can. Its working directory is the jail root, but
    nothing keeps it there. The tools issue puts it under `bwrap` (DESIGN §11) and refuses
    it where namespaces are unavailable; until then, give it only to runs you would let
    type into your own terminal, behind an approver.

What it does guarantee: the command runs in its own session and process group, and when
it ends, times out or is cancelled, the whole group is killed with SIGKILL, so a runaway
`sleep`, a forgotten `server &` or a fork bomb's children do not outlive the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from typing import Annotated, Final

from pydantic import Field

from .._exec import ExecContext
from .._tool import Capability, ToolOutput, tool

__all__ = ["run_shell"]

#: Output bytes `run_shell` keeps in memory; the rest is counted and dropped. The turn's
#: output budget caps what the model sees far below this, spilling the rest to a file.
MAX_SHELL_OUTPUT_BYTES: Final = 8 * 1024 * 1024
#: How long cleanup may wait for a killed process to be reaped and its pipe to close.
_CLEANUP_SECONDS: Final = 5.0


class _Output:
    """The combined stdout and stderr, kept up to a cap; the rest is counted."""

    __slots__ = ("chunks", "dropped", "kept")

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.kept = 0
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = MAX_SHELL_OUTPUT_BYTES - self.kept
        if room >= len(data):
            self.chunks.append(data)
            self.kept += len(data)
            return
        if room > 0:
            self.chunks.append(data[:room])
            self.kept += room
        self.dropped += len(data) - max(room, 0)

    def text(self) -> str:
        text = b"".join(self.chunks).decode("utf-8", errors="replace")
        if self.dropped:
            text += f"\n[... {self.dropped} more bytes of output dropped]"
        return text


class _ShellProtocol(asyncio.SubprocessProtocol):
    """Collects the output and reports the two events the call waits for separately:
    the shell exited, and its output pipe closed.

    They are separate because a background child can hold the pipe open long after the
    shell exited (`server &`), and `asyncio.subprocess.Process.wait()` waits for both
    together (up to 3.11 at least), which would hang such a call until its timeout. Never
    pausing the pipe also means EOF always arrives once every writer is gone.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.output = _Output()
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        self.output.add(data.encode() if isinstance(data, str) else data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


def _kill_group(pgid: int) -> None:
    """SIGKILL every process in the command's group; a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _clean_up(transport: asyncio.SubprocessTransport, protocol: _ShellProtocol) -> None:
    """Kill what is left of the command, wait for it to be reaped and its pipe to close,
    then close the transport.

    Runs in a `finally`, possibly while the call is being cancelled, so the waiting is
    shielded and bounded: a cancel must not leave a process or an open pipe behind, and
    cleanup must not hang the cancel either (a process that escaped the group with its
    own `setsid` may hold the pipe; after the grace period the pipe is closed anyway).
    """
    _kill_group(transport.get_pid())
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_CLEANUP_SECONDS):
                await asyncio.shield(asyncio.gather(protocol.exited, protocol.closed))
    finally:
        transport.close()


def _status(returncode: int | None) -> str:
    if returncode is None:
        return "[no exit code]"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"[killed by {name}]"
    return f"[exit code {returncode}]"


@tool(
    capabilities=Capability.PRIVATE_DATA | Capability.UNTRUSTED_INPUT | Capability.EXTERNAL_SEND,
    denial_remedy="Inspect the workspace with read_file, list_dir and search instead, or "
    "say which command you would run and why.",
)
async def run_shell(
    command: str,
    # The model's own limit, part of the schema; cancellation still comes from the token.
    timeout: Annotated[float, Field(gt=0)] | None = None,  # noqa: ASYNC109
    *,
    ctx: ExecContext,
) -> ToolOutput:
    """Run a bash command in the workspace root and return its combined stdout and stderr
    and its exit code. stdin is empty, so the command must not wait for input, and
    background processes are killed when it ends. A non-zero exit code is an error.

    WARNING, for developers: NOT SANDBOXED yet. The command runs as the current user, with
    the current environment and network; the workspace is only its starting directory.
    The tools issue runs it under bwrap. See this module's docstring.

    Args:
        command: The bash command line, e.g. `pytest -q tests/test_app.py`.
        timeout: Seconds before the command is killed (default and maximum: the run's
            shell timeout).
    """
    limit = ctx.tools.shell_timeout if timeout is None else min(timeout, ctx.tools.shell_timeout)
    loop = asyncio.get_running_loop()
    spawn = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: _ShellProtocol(loop),
            "bash",
            "-c",
            command,
            cwd=ctx.tools.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so it can be killed as a whole
            env={**os.environ, "PAGER": "cat", "GIT_PAGER": "cat"},
        )
    )
    try:
        transport, protocol = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        # Cancelled while the process was starting. It may be running already (asyncio
        # would kill only the shell, not its children), so let the start finish, which
        # does not wait for the command, and kill the whole group like any cancelled call.
        with contextlib.suppress(Exception):
            started, started_protocol = await asyncio.shield(spawn)
            await _clean_up(started, started_protocol)
        raise
    timed_out = False
    try:
        try:
            async with asyncio.timeout(limit):
                await asyncio.shield(protocol.exited)
        except TimeoutError:
            timed_out = True
    finally:
        # Also on success: whatever the command left running in the background goes too,
        # which lets its pipe reach EOF.
        await _clean_up(transport, protocol)
    text = protocol.output.text()
    body = text if text.endswith("\n") or not text else text + "\n"
    if timed_out:
        note = f"[timed out after {limit:g}s; the command and its processes were killed]"
        return ToolOutput(f"{body}{note}", is_error=True)
    returncode = transport.get_returncode()
    status = _status(returncode)
    return ToolOutput(
        f"{body}{status}" if text else f"(no output)\n{status}",
        is_error=returncode != 0,
    )

"""`ShellHook`: a hook that is a `bash -c` command.

The command runs in the workspace with the event as JSON on stdin, the environment passed
through plus `TILLER_HOOK=<kind>`, and a time limit (10 s unless set). It runs in a process
group of its own, which is killed once the hook is done, timed out or cancelled: a hook is
a bounded check, not a way to start services (one that must leave something running
detaches it with `setsid`). Exit 0 is a clean run; for `pre_tool`, exit 2 denies with the
hook's output (stderr, else stdout) as the reason, and anything else (another exit code, a
signal, a timeout, a command that cannot start) denies as a failure (law 3).

A hook pinned with the run's policy (`pinned`: the scripts its command names, with their
sha256 then; see `_file_pins`) is refused rather than run once one of them has changed:
the workspace is the model's to write, so a script there is trusted only as it was when
the person started the run (law 11).

Stdout and stderr are read apart and only their heads are kept; the payload is written
through the transport's buffer, so a hook that never reads stdin cannot block the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from ..errors import UsageError
from ._file_pins import FilePin, changed_pins
from ._hook_events import (
    DEFAULT_HOOK_TIMEOUT,
    HookEvent,
    HookVerdict,
    PostToolEvent,
    PreToolEvent,
    SessionEndEvent,
    check_globs,
    check_timeout,
    clip_output,
    watches_tool,
)

__all__ = ["ShellHook"]

#: How long cleanup may wait for a killed hook to be reaped and its pipes to close.
_CLEANUP_SECONDS: Final = 5.0
#: How many bytes of each output stream are kept (the head: that is where messages are).
_OUTPUT_LIMIT: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class ShellHook:
    """A `bash -c` command (see the module docstring). `tools`: tool-name globs it
    watches (None: every tool); `name`: what refusals and logs call it (by default the
    command's first line); `pinned`: the files its command runs, with their hashes when
    the run's policy was pinned (empty: not pinned, as for a hook made in code)."""

    command: str
    timeout: float = DEFAULT_HOOK_TIMEOUT
    tools: tuple[str, ...] | None = None
    name: str = ""
    pinned: tuple[FilePin, ...] = ()

    def __init__(
        self,
        command: str,
        *,
        timeout: float = DEFAULT_HOOK_TIMEOUT,
        tools: Sequence[str] | None = None,
        name: str = "",
        pinned: Sequence[FilePin] = (),
    ) -> None:
        if not isinstance(command, str) or not command.strip():
            raise UsageError("a shell hook needs a non-empty command")
        object.__setattr__(self, "command", command)
        object.__setattr__(self, "timeout", check_timeout(timeout))
        object.__setattr__(self, "tools", check_globs(tools))
        first_line = command.strip().splitlines()[0]
        default = first_line if len(first_line) <= 60 else first_line[:57] + "..."
        object.__setattr__(self, "name", name or default)
        object.__setattr__(self, "pinned", tuple(pinned))

    def with_pins(self, pinned: Sequence[FilePin]) -> ShellHook:
        """This hook, trusting its scripts only with the content `pinned` records."""
        return ShellHook(
            self.command, timeout=self.timeout, tools=self.tools, name=self.name, pinned=pinned
        )

    def watches(self, tool: str | None) -> bool:
        return watches_tool(self.tools, tool)

    async def decide(self, event: PreToolEvent) -> HookVerdict:
        ran = await self._run(event)
        if ran.returncode == 0 and not ran.timed_out:
            return HookVerdict.allow()
        if ran.returncode == 2 and not ran.timed_out:
            said = clip_output(ran.stderr) or clip_output(ran.stdout)
            return HookVerdict.deny(said or "the hook denied the call (exit 2) without a reason")
        return HookVerdict.deny(
            f"hook {self.name} {ran.failure()}; a pre_tool hook that fails denies the call"
            + ran.output_note()
        )

    async def observe(self, event: PostToolEvent | SessionEndEvent) -> str | None:
        ran = await self._run(event)
        if ran.returncode == 0 and not ran.timed_out:
            return None
        return ran.failure() + ran.output_note()

    async def _run(self, event: HookEvent) -> _ShellRun:
        changed = changed_pins(self.pinned)
        if changed:
            return _ShellRun(
                refused=f"{'; '.join(changed)} since the run's policy was pinned at its "
                "start; a person restarts the run to adopt the new script"
            )
        env = {**os.environ, "TILLER_HOOK": event.kind}
        return await _run_shell(
            self.command,
            payload=orjson.dumps(event.payload()),
            cwd=event.workspace,
            env=env,
            limit=self.timeout,
        )


# ── running the command ─────────────────────────────────────────────────────────


@dataclass(slots=True)
class _ShellRun:
    """How a shell hook ended: it could not start (`start_error`), timed out, or exited
    with `returncode` (negative: killed by that signal), and its output."""

    returncode: int | None = None
    timed_out: bool = False
    start_error: str = ""
    #: Why it was not started at all (a pinned script changed).
    refused: str = ""
    stdout: str = ""
    stderr: str = ""

    def failure(self) -> str:
        if self.refused:
            return f"was not run: {self.refused}"
        if self.start_error:
            return f"could not start ({self.start_error})"
        if self.timed_out:
            return "timed out and was killed"
        code = self.returncode
        if code is None:
            return "ended without an exit code"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        if code == 127:
            return "failed with exit code 127 (command not found)"
        if code == 126:
            return "failed with exit code 126 (not executable)"
        return f"failed with exit code {code}"

    def output_note(self) -> str:
        said = clip_output(self.stderr) or clip_output(self.stdout)
        return f". Its output: {said}" if said else ""


class _Capped:
    """The first `_OUTPUT_LIMIT` bytes of one stream; the rest is read and dropped, so
    a chatty hook never blocks on a full pipe."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        room = _OUTPUT_LIMIT - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


class _HookProtocol(asyncio.SubprocessProtocol):
    """Collects stdout and stderr apart, and says when the process exited and when both
    output pipes closed (a child the hook left behind can hold them after it exits)."""

    def __init__(self, event_loop: asyncio.AbstractEventLoop) -> None:
        self.stdout = _Capped()
        self.stderr = _Capped()
        self.exited: asyncio.Future[None] = event_loop.create_future()
        self.closed: asyncio.Future[None] = event_loop.create_future()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        chunk = data.encode() if isinstance(data, str) else data
        (self.stdout if fd == 1 else self.stderr).add(chunk)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open and not self.closed.done():
            self.closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


async def _run_shell(
    command: str, *, payload: bytes, cwd: Path, env: Mapping[str, str], limit: float
) -> _ShellRun:
    """Run `command` with `payload` on stdin until it exits or `limit` seconds pass, then
    kill its process group and collect what it wrote. Cancelled, it kills the group,
    cleans up (shielded, bounded) and lets the cancellation propagate."""
    event_loop = asyncio.get_running_loop()
    start = asyncio.ensure_future(
        event_loop.subprocess_exec(
            lambda: _HookProtocol(event_loop),
            "bash",
            "-c",
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,  # its own process group, so it can be killed as a whole
        )
    )
    try:
        transport, protocol = await asyncio.shield(start)
    except asyncio.CancelledError:
        # Let a start that was under way finish, then kill what it started.
        with contextlib.suppress(Exception):
            started, started_protocol = await asyncio.shield(start)
            await _finish(started, started_protocol)
        raise
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return _ShellRun(start_error=f"{exc.strerror or exc}{where}")
    timed_out = False
    try:
        stdin = transport.get_pipe_transport(0)
        if isinstance(stdin, asyncio.WriteTransport):
            # Buffered by the transport: a hook that never reads stdin cannot block us,
            # and one that exits early only breaks the pipe.
            stdin.write(payload)
            stdin.write_eof()
        try:
            async with asyncio.timeout(limit):
                await asyncio.shield(protocol.exited)
        except TimeoutError:
            timed_out = True
    finally:
        await _finish(transport, protocol)
    return _ShellRun(
        returncode=transport.get_returncode(),
        timed_out=timed_out,
        stdout=protocol.stdout.text(),
        stderr=protocol.stderr.text(),
    )


async def _finish(transport: asyncio.SubprocessTransport, protocol: _HookProtocol) -> None:
    """Kill the hook's process group, wait (shielded, bounded) for the reap and for the
    pipes to close, and close the transport. Safe in a `finally` while being cancelled."""
    pid = transport.get_pid()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_CLEANUP_SECONDS):
                await asyncio.shield(asyncio.gather(protocol.exited, protocol.closed))
    finally:
        transport.close()

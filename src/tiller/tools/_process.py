"""`Command`: one shell command running as a process tree we own, and its output.

The shell tool runs a command in the foreground; a person may send it to the background
mid-run, or the model may start it there. Either way it is the same `Command`: the
process, its output log (the newest bytes up to a limit, addressed by absolute offsets so
readers keep cursors), and the two events that say it is over: the process exited, and
its output pipe closed. Both matter: a background child can hold the pipe long after the
shell exited (`server &`), and asyncio's `Process.wait()` waits for both together, which
would hang such a call until its timeout. The pipe is never paused, so EOF always comes
once every writer is gone.

A command runs in its own session, so its whole process group can be killed. Under bwrap
the command itself sits in a session of its own (`--new-session`) inside a pid namespace,
whose init is bwrap's child; killing that init (and bwrap) makes the kernel kill every
process in the namespace. `kill()` does both, so nothing the command started survives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

__all__ = ["Command", "OutputLog", "decode_output", "describe_exit", "spawn"]

#: How long cleanup may wait for a killed process to be reaped and its pipe to close.
CLEANUP_SECONDS: Final = 5.0

_logger: Final = logging.getLogger(__name__)


class OutputLog:
    """A command's combined stdout and stderr: the newest `limit` bytes are kept.

    Offsets are absolute (byte 0 is the first byte the command ever wrote), so a reader
    keeps a cursor that stays valid while old bytes are dropped; `start` is the offset of
    the oldest byte still kept, `total` how many bytes were written in all.
    """

    __slots__ = ("_chunks", "_size", "limit", "total")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self._size = 0
        self._chunks: deque[bytes] = deque()

    @property
    def start(self) -> int:
        return self.total - self._size

    def add(self, data: bytes) -> None:
        if not data:
            return
        self._chunks.append(data)
        self._size += len(data)
        self.total += len(data)
        self._trim()

    def set_limit(self, limit: int) -> None:
        """Keep at most `limit` bytes from now on (the oldest go first)."""
        self.limit = limit
        self._trim()

    def _trim(self) -> None:
        excess = self._size - self.limit
        while excess > 0:
            head = self._chunks[0]
            if len(head) <= excess:
                self._chunks.popleft()
                self._size -= len(head)
                excess -= len(head)
            else:
                self._chunks[0] = head[excess:]
                self._size -= excess
                excess = 0

    def since(self, offset: int, max_bytes: int | None = None) -> tuple[bytes, int]:
        """The bytes from `offset` to the end, at most the newest `max_bytes` of them,
        and the offset they start at (later than `offset` when bytes were dropped)."""
        begin = max(offset, self.start)
        if max_bytes is not None:
            begin = max(begin, self.total - max_bytes)
        want = self.total - begin
        if want <= 0:
            return b"", self.total
        parts: list[bytes] = []
        got = 0
        for chunk in reversed(self._chunks):  # from the end: cost follows what is asked
            parts.append(chunk)
            got += len(chunk)
            if got >= want:
                break
        data = b"".join(reversed(parts))
        return data[len(data) - want :], begin


def decode_output(data: bytes, *, cut: bool = False) -> str:
    """Output bytes as text; `cut` when `data` starts mid-stream, so a UTF-8 character
    split by the cut is dropped rather than shown as a replacement character."""
    if cut:
        skip = 0
        while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
            skip += 1
        data = data[skip:]
    return data.decode("utf-8", errors="replace")


def describe_exit(returncode: int | None) -> str:
    """`exit code 3`, `killed by SIGKILL`, or `no exit code`."""
    if returncode is None:
        return "no exit code"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exit code {returncode}"


class _Protocol(asyncio.SubprocessProtocol):
    """Collects the output, hands each chunk to the listener, and reports exit and EOF."""

    def __init__(self, event_loop: asyncio.AbstractEventLoop, output_limit: int) -> None:
        self.output = OutputLog(output_limit)
        self.listener: Callable[[bytes], None] | None = None
        self.exited: asyncio.Future[None] = event_loop.create_future()
        self.closed: asyncio.Future[None] = event_loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        chunk = data.encode() if isinstance(data, str) else data
        self.output.add(chunk)
        listener = self.listener
        if listener is None:
            return
        try:
            listener(chunk)
        except Exception:
            # A listener that fails (a UI gone away) must not break the command; the
            # output is still collected, only no longer relayed.
            _logger.exception("an output listener of a shell command failed; dropping it")
            self.listener = None

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


class Command:
    """A running (or finished) shell command we own. Made by `spawn`."""

    __slots__ = ("_closed", "_protocol", "_transport", "pid", "started")

    def __init__(self, transport: asyncio.SubprocessTransport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closed = False
        self.pid: int = transport.get_pid()
        self.started = time.monotonic()

    @property
    def output(self) -> OutputLog:
        return self._protocol.output

    @property
    def exited(self) -> asyncio.Future[None]:
        """Done once the process has exited and been reaped."""
        return self._protocol.exited

    @property
    def closed(self) -> asyncio.Future[None]:
        """Done once the output pipe has closed (every writer is gone)."""
        return self._protocol.closed

    @property
    def returncode(self) -> int | None:
        return self._transport.get_returncode()

    @property
    def listener(self) -> Callable[[bytes], None] | None:
        """Called with each chunk of output as it arrives (on the event loop)."""
        return self._protocol.listener

    @listener.setter
    def listener(self, fn: Callable[[bytes], None] | None) -> None:
        self._protocol.listener = fn

    def kill(self) -> None:
        """SIGKILL the whole tree: bwrap's children (the sandbox's init, whose death
        takes the pid namespace with it) and every process in the command's group.
        Whatever is already gone is fine."""
        if self._transport.get_returncode() is None:
            # Only while the pid is surely still ours: after the reap it may be reused.
            for child in _children(self.pid):
                _kill_group(child)
        _kill_group(self.pid)

    async def aclose(self) -> None:
        """Kill what is left, wait for the reap and the pipe's EOF, close the transport.

        Safe in a `finally` while the caller is being cancelled: the waiting is shielded
        and bounded, so a cancel leaves no process and no open pipe behind, and cleanup
        cannot hang the cancel either (a process that escaped the group with its own
        `setsid` may hold the pipe; after the grace period the pipe is closed anyway).
        Idempotent.
        """
        if self._closed:
            return
        self.kill()
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLEANUP_SECONDS):
                    await asyncio.shield(asyncio.gather(self.exited, self.closed))
        finally:
            self._closed = True
            self._transport.close()

    def runtime(self) -> float:
        """Seconds since the command started."""
        return time.monotonic() - self.started

    def __repr__(self) -> str:
        return f"<Command pid={self.pid} {describe_exit(self.returncode)}>"


async def spawn(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    output_limit: int,
    listener: Callable[[bytes], None] | None = None,
    pass_fds: Sequence[int] = (),
) -> Command:
    """Start `argv` in its own session with stdin on /dev/null and stdout and stderr
    combined into one pipe, keeping the newest `output_limit` bytes of output and handing
    each chunk to `listener` from the first byte on (output can arrive before this
    coroutine resumes, so a listener set afterwards could miss the start). `pass_fds`
    stay open in the child (bwrap binds protected paths by descriptor).

    Cancelled while the process was starting, the start is allowed to finish (it does not
    wait for the command) and the tree is killed, as for any cancelled call: asyncio would
    kill only the first process, not its children.
    """
    event_loop = asyncio.get_running_loop()

    def make_protocol() -> _Protocol:
        made = _Protocol(event_loop, output_limit)
        made.listener = listener
        return made

    start = asyncio.ensure_future(
        event_loop.subprocess_exec(
            make_protocol,
            *argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so it can be killed as a whole
            env=dict(env),
            pass_fds=tuple(pass_fds),
        )
    )
    try:
        transport, protocol = await asyncio.shield(start)
    except asyncio.CancelledError:
        # Cancelled while the process was starting: it may be running already. Its
        # cleanup runs in a task of its own, so a second cancel of this one cannot
        # abandon it halfway and leave the process behind.
        cleanup = event_loop.create_task(_close_when_started(start))
        _CLEANUPS.add(cleanup)
        cleanup.add_done_callback(_CLEANUPS.discard)
        with contextlib.suppress(BaseException):
            await asyncio.shield(cleanup)
        raise
    return Command(transport, protocol)


#: Cleanups of processes whose start was cancelled, kept referenced until they finish.
_CLEANUPS: set[asyncio.Task[None]] = set()


async def _close_when_started(
    start: asyncio.Future[tuple[asyncio.SubprocessTransport, _Protocol]],
) -> None:
    with contextlib.suppress(Exception):
        started, started_protocol = await start
        await Command(started, started_protocol).aclose()


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    """The direct children of `pid`, from /proc (empty if it cannot tell)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return _children_by_scan(pid)
    return [int(each) for each in text.split()]


def _children_by_scan(pid: int) -> list[int]:
    """For kernels without `/proc/PID/task/PID/children`: every process's parent."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[-1].split()
            if len(fields) > 1 and fields[1] == str(pid):
                found.append(int(entry.name))
    return found

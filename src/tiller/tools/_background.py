"""`BackgroundJobs`: one run's registry of detached shell commands.

A command leaves its step in two ways: the model starts it in the background
(`execute_command(..., background=true)`), or a person fires the step's background token
while it runs in the foreground, and the shell tool hands it over here (`adopt`). From then
on it belongs to the run, not to the step: it keeps running and its output keeps being
collected (the newest 1 MiB) while the model does other things, and `background_process`
reaches it by id (`bg-1`, `bg-2`, ...) to read new output, wait for it, or stop it.

Each job is watched by a task this registry owns (never the step's: the step ends long
before the job does). When a job exits on its own, the watcher posts a note through the
run's `Notifier`, so the result reaches the model at its next step even if it never asks;
unless a `wait` is watching the job right then, which hands the model the exit itself.

Each job records whether it holds the network (`network`: the shell granted it, or ran
unsandboxed). A job started while the conversation was clean can wait for a file and send
it once the conversation holds private data and untrusted input; so the interlock stops
such jobs then (`stop_networked`), and each says so in its status and in a note.

The loop makes one per run and calls `await jobs.close()` when the run ends, whatever the
reason: close kills every job's process tree, waits for the processes to be reaped
(bounded), and ends every watcher, so a run leaves no process and no task behind.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import enum
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ..cancel import CancellationToken
from ..errors import TillerError, UsageError
from ._notify import Notifier
from ._process import CLEANUP_SECONDS, Command, decode_output, describe_exit, spawn

if TYPE_CHECKING:  # `regex` loads with the first pattern a `wait` is given
    import regex as re

__all__ = [
    "DEFAULT_WAIT_SECONDS",
    "JOB_OUTPUT_BYTES",
    "MAX_WAIT_SECONDS",
    "PATTERN_SECONDS",
    "READ_BYTES",
    "BackgroundJobs",
    "JobOutput",
    "JobState",
    "JobStatus",
    "PatternTooSlow",
    "UnknownJob",
]

#: Output a background job keeps: its newest bytes.
JOB_OUTPUT_BYTES: Final = 1024 * 1024
#: New output one `read` or `wait` returns at most: the newest bytes.
READ_BYTES: Final = 32 * 1024
#: How long `wait` waits by default, and at most.
DEFAULT_WAIT_SECONDS: Final = 300.0
MAX_WAIT_SECONDS: Final = 3600.0
#: Characters of output an exit note carries (the end of the output).
NOTE_TAIL_CHARS: Final = 1500
#: Characters of a command shown in a listing.
_COMMAND_CHARS: Final = 120

_logger: Final = logging.getLogger(__name__)


class UnknownJob(TillerError):
    """No job of this run has that id. The message lists the ones it has."""

    def __init__(self, job_id: str, known: Sequence[str]) -> None:
        listed = ", ".join(known) if known else "none"
        super().__init__(
            f"no background job {job_id!r} in this run; its jobs are: {listed} "
            "(use action 'list' to see them)"
        )
        self.job_id = job_id


class JobState(enum.Enum):
    """Where a job is in its life."""

    RUNNING = "running"
    #: It ended on its own (whatever its exit code).
    EXITED = "exited"
    #: `stop` killed it.
    STOPPED = "stopped"
    #: The run ended and `close` killed it.
    KILLED = "killed"
    #: The interlock killed it: it held the network when the conversation came to hold
    #: private data and untrusted input.
    INTERLOCKED = "stopped by the interlock"


@dataclass(frozen=True, slots=True)
class JobStatus:
    """One job, as `list` shows it."""

    id: str
    command: str
    state: JobState
    returncode: int | None
    runtime: float
    unread: int
    #: Whether the job can use the network (the shell granted it, or ran unsandboxed).
    network: bool = False

    def describe(self) -> str:
        """`bg-1 running for 2.0s`, `bg-1 exited after 3.2s (exit code 0)`, or
        `bg-1 stopped after 1.0s`."""
        if self.state is JobState.RUNNING:
            return f"{self.id} running for {self.runtime:.1f}s"
        if self.state is JobState.EXITED:
            return f"{self.id} exited after {self.runtime:.1f}s ({describe_exit(self.returncode)})"
        # Killed on purpose: how the sandbox reported the kill tells nothing more.
        return f"{self.id} {self.state.value} after {self.runtime:.1f}s"


@dataclass(frozen=True, slots=True)
class JobOutput:
    """What `read`, `wait` and `stop` return: the job's new output (the newest 32 KiB of
    what arrived since the last read), how many older new bytes were not shown, and why a
    wait returned (`matched`: the text the pattern matched; `timed_out`)."""

    status: JobStatus
    text: str
    skipped: int = 0
    matched: str | None = None
    timed_out: bool = False

    def render(self) -> str:
        """The result as the model reads it: the output, then a status line."""
        lines: list[str] = []
        if self.skipped:
            lines.append(f"[... {self.skipped} earlier bytes of new output not shown]")
        if self.text:
            lines.append(self.text.removesuffix("\n"))
        elif not self.skipped:
            lines.append("(no new output)")
        notes = [self.status.describe()]
        if self.matched is not None:
            notes.append(f"the pattern matched {self.matched[:200]!r}")
        if self.timed_out:
            notes.append("the wait timed out; it is still running")
        lines.append(f"[{'; '.join(notes)}]")
        return "\n".join(lines)


class _Job:
    """A job's bookkeeping; only `BackgroundJobs` touches it."""

    __slots__ = (
        "command",
        "cursor",
        "ended",
        "id",
        "network",
        "on_end",
        "process",
        "state",
        "waiters",
        "wakeups",
        "watcher",
    )

    def __init__(self, job_id: str, command: str, process: Command, network: bool) -> None:
        self.id = job_id
        self.command = command
        self.network = network
        self.process = process
        self.cursor = process.output.start
        self.state = JobState.RUNNING
        self.ended: float | None = None
        self.on_end: Callable[[], str] | None = None
        self.waiters = 0
        self.wakeups: set[asyncio.Future[None]] = set()
        self.watcher: asyncio.Task[None] | None = None

    def wake(self, _chunk: bytes = b"") -> None:
        """New output or an exit: let every `wait` look again."""
        for future in self.wakeups:
            if not future.done():
                future.set_result(None)
        self.wakeups.clear()

    def status(self) -> JobStatus:
        end = self.ended if self.ended is not None else time.monotonic()
        return JobStatus(
            id=self.id,
            command=_shorten(self.command),
            state=self.state,
            returncode=self.process.returncode if self.state is not JobState.RUNNING else None,
            runtime=end - self.process.started,
            unread=self.process.output.total - self.cursor,
            network=self.network,
        )

    def take(self, *, matched: str | None = None, timed_out: bool = False) -> JobOutput:
        """The new output since the last take (the newest `READ_BYTES`); moves the
        cursor to the end."""
        log = self.process.output
        data, begin = log.since(self.cursor, READ_BYTES)
        skipped = begin - self.cursor
        text = decode_output(data, cut=skipped > 0)
        self.cursor = log.total
        return JobOutput(self.status(), text, skipped, matched, timed_out)


class BackgroundJobs:
    """The run's detached commands, by id. Make one per run; `close()` it at the end.

    `notifier` receives a note when a job exits on its own (`None`: no notes).
    """

    __slots__ = ("_closed", "_jobs", "_next", "_notifier")

    def __init__(self, notifier: Notifier | None = None) -> None:
        self._notifier = notifier
        self._jobs: dict[str, _Job] = {}
        self._next = 1
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    # ── starting ─────────────────────────────────────────────────────────────────

    async def start(
        self,
        argv: Sequence[str],
        *,
        command: str,
        cwd: Path,
        env: Mapping[str, str],
        network: bool = False,
        on_end: Callable[[], str] | None = None,
        pass_fds: Sequence[int] = (),
    ) -> str:
        """Start `argv` (the shell command `command`, already wrapped in its sandbox) as
        a new job; returns its id. `network`: whether the command can use the network.
        `on_end` runs once the job's whole process tree is gone (the shell undoes writes
        to protected paths there); the text it returns, if any, ends the job's output.
        `pass_fds` stay open in the process."""
        self._check_open()
        process = await spawn(
            argv, cwd=cwd, env=env, output_limit=JOB_OUTPUT_BYTES, pass_fds=pass_fds
        )
        return self.adopt(process, command=command, network=network, on_end=on_end)

    def adopt(
        self,
        process: Command,
        *,
        command: str,
        network: bool = False,
        on_end: Callable[[], str] | None = None,
    ) -> str:
        """Take over a running command (a foreground command being detached); returns
        its id. From now on this registry kills it, at the latest in `close()`. If the
        registry is closed already, the command is killed and `UsageError` raised (and
        `on_end` runs). `network`: whether the command can use the network."""
        if self._closed:
            process.kill()
            if on_end is not None:
                on_end()
            self._check_open()
        job_id = f"bg-{self._next}"
        self._next += 1
        process.output.set_limit(JOB_OUTPUT_BYTES)
        job = _Job(job_id, command, process, network)
        job.on_end = on_end
        process.listener = job.wake
        self._jobs[job_id] = job
        job.watcher = asyncio.get_running_loop().create_task(
            self._watch(job), name=f"tiller-{job_id}-watcher"
        )
        return job_id

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the run has ended: its background jobs are closed")

    async def _watch(self, job: _Job) -> None:
        """Wait for the job's process to exit; reap it, close its pipe, tell the run."""
        process = job.process
        try:
            await process.exited
        finally:
            # Also after a normal exit: leftovers of the group go too (as in the
            # foreground), which lets the pipe reach EOF. Bounded and shielded.
            await process.aclose()
            if job.on_end is not None:
                try:
                    note = job.on_end()
                except Exception:  # the job must still be marked ended
                    _logger.exception("the end-of-job check of %s failed", job.id)
                    note = ""
                if note:
                    process.output.add(f"\n{note}\n".encode())
            job.ended = time.monotonic()
            if job.state is JobState.RUNNING:
                job.state = JobState.EXITED
            job.wake()
        if job.state is JobState.EXITED and job.waiters == 0:
            self._notify_exit(job)

    def _notify_exit(self, job: _Job) -> None:
        if self._notifier is None:
            return
        status = job.status()
        log = job.process.output
        tail, begin = log.since(log.start, NOTE_TAIL_CHARS * 4)
        text = decode_output(tail, cut=begin > 0).rstrip()
        if len(text) > NOTE_TAIL_CHARS:
            text = "…" + text[-NOTE_TAIL_CHARS:]
        shown = f"; last output:\n{text}" if text else "; no output"
        code = status.returncode
        ended = (
            f"was {describe_exit(code)}" if code is None or code < 0 else f"exited with code {code}"
        )
        self._notifier.send(
            job.id,
            f"{ended} after {status.runtime:.1f}s{shown}\n"
            f"(background_process can read the rest: {job.id})",
        )

    # ── reaching jobs ────────────────────────────────────────────────────────────

    def _job(self, job_id: str) -> _Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise UnknownJob(job_id, list(self._jobs))
        return job

    def list(self) -> list[JobStatus]:
        """Every job of the run, oldest first."""
        return [job.status() for job in self._jobs.values()]

    def status(self, job_id: str) -> JobStatus:
        return self._job(job_id).status()

    def read(self, job_id: str) -> JobOutput:
        """The job's new output since the last read (the newest 32 KiB of it)."""
        return self._job(job_id).take()

    async def wait(
        self,
        job_id: str,
        *,
        pattern: str | re.Pattern[str] | None = None,
        timeout: float = DEFAULT_WAIT_SECONDS,  # noqa: ASYNC109 - the model's own bound
        token: CancellationToken | None = None,
    ) -> JobOutput:
        """Wait until the job exits, `pattern` (a regular expression, searched line by
        line, `re.MULTILINE`) matches its new output, or `timeout` seconds (at most an
        hour) pass; then return the new output. Raced against `token` (raises
        `Cancelled` when it fires); the job keeps running either way."""
        job = self._job(job_id)
        if isinstance(pattern, str):
            import regex

            pattern = regex.compile(pattern, regex.MULTILINE)
        limit = min(max(timeout, 0.0), MAX_WAIT_SECONDS)
        waiting = self._wait(job, pattern, limit)
        if token is not None:
            return await token.race(waiting)
        return await waiting

    async def _wait(self, job: _Job, pattern: re.Pattern[str] | None, limit: float) -> JobOutput:
        log = job.process.output
        scanned = job.cursor  # where the next search starts: the last incomplete line
        job.waiters += 1
        try:
            async with asyncio.timeout(limit):
                while True:
                    if pattern is not None:
                        data, begin = log.since(scanned)
                        found = _search(pattern, decode_output(data, cut=begin > scanned))
                        if found is not None:
                            return job.take(matched=found.group(0))
                        scanned = begin + data.rfind(b"\n") + 1
                    if job.state is not JobState.RUNNING:
                        return job.take()
                    wakeup = asyncio.get_running_loop().create_future()
                    job.wakeups.add(wakeup)
                    await wakeup
        except TimeoutError:
            return job.take(timed_out=True)
        finally:
            job.waiters -= 1

    async def stop(self, job_id: str) -> JobOutput:
        """Kill the job's process tree and wait for it to be gone; returns its last
        output. Stopping a job that already ended just reads it."""
        job = self._job(job_id)
        if job.state is JobState.RUNNING:
            job.state = JobState.STOPPED
            job.process.kill()
            await self._join(job)
        return job.take()

    def networked(self) -> builtins.list[JobStatus]:
        """The jobs that can use the network and still run (or whose process, though
        stopped, has not exited yet), oldest first."""
        return [
            job.status()
            for job in self._jobs.values()
            if job.network and (job.state is JobState.RUNNING or not job.process.exited.done())
        ]

    async def stop_networked(self, reason: str) -> builtins.list[str]:
        """The interlock's stop: kill every running job that holds the network, note
        `reason` for the model (through the notifier), and return their ids."""
        stopped: builtins.list[str] = []
        for job in self._jobs.values():
            if job.network and job.state is JobState.RUNNING:
                job.state = JobState.INTERLOCKED
                job.process.kill()
                stopped.append(job.id)
        for job_id in stopped:
            job = self._jobs[job_id]
            await self._join(job)
            job.wake()
            if self._notifier is not None:
                self._notifier.send(
                    job_id,
                    f"was stopped by the interlock: {reason}. Its output so far stays "
                    f"readable (background_process read {job_id}).",
                )
        return stopped

    async def _join(self, job: _Job) -> None:
        """Wait for the job's watcher to finish: shielded (a cancelled caller must not
        interrupt the reaping) and bounded."""
        watcher = job.watcher
        if watcher is None or watcher.done():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLEANUP_SECONDS * 2):
                await asyncio.shield(watcher)

    # ── the end of the run ───────────────────────────────────────────────────────

    async def close(self) -> None:
        """Kill every running job, wait (bounded) until each is reaped and its watcher
        has finished, and refuse new jobs. Idempotent; safe while being cancelled."""
        self._closed = True
        for job in self._jobs.values():
            if job.state is JobState.RUNNING:
                job.state = JobState.KILLED
                job.process.kill()
        watchers = [job.watcher for job in self._jobs.values() if job.watcher is not None]
        pending = [w for w in watchers if not w.done()]
        if pending:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLEANUP_SECONDS * 2):
                    await asyncio.shield(asyncio.gather(*pending, return_exceptions=True))
        for watcher in pending:
            if not watcher.done():  # stuck past the bound: end it, its `finally` closes
                watcher.cancel()
        if any(not w.done() for w in pending):
            await asyncio.gather(*pending, return_exceptions=True)

    def __repr__(self) -> str:
        running = sum(job.state is JobState.RUNNING for job in self._jobs.values())
        return f"<BackgroundJobs {len(self._jobs)} jobs, {running} running>"


def _shorten(command: str) -> str:
    flat = " ".join(command.split())
    return flat if len(flat) <= _COMMAND_CHARS else flat[: _COMMAND_CHARS - 1] + "…"


#: Seconds the model's `wait` pattern may take over one stretch of new output. The search
#: runs on the event loop, so without a bound a backtracking pattern would freeze the run.
PATTERN_SECONDS: Final = 1.0


class PatternTooSlow(TillerError):
    """A `wait` pattern that took longer than `PATTERN_SECONDS` to search the output."""

    def __init__(self, pattern: str) -> None:
        super().__init__(
            f"the pattern {pattern!r} took more than {PATTERN_SECONDS:g} s to search the "
            "output (it likely backtracks catastrophically, as nested repeats like "
            "`(a|aa)+` do); simplify it"
        )


def _search(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    try:
        return pattern.search(text, timeout=PATTERN_SECONDS)
    except TimeoutError:
        raise PatternTooSlow(pattern.pattern) from None

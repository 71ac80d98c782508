"""Background commands: started with `background=true` or detached by the step's
background token, followed with `background_process`, announced through the Notifier when
they exit, and all killed by `BackgroundJobs.close()`. Real commands under real bwrap."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tiller import CancellationToken, Cancelled, UsageError
from tiller.tools import DEFAULT_SANDBOX, BackgroundJobs, ExecContext, Notifier, Outcome, UnknownJob
from tiller.tools._background import JOB_OUTPUT_BYTES, READ_BYTES, JobState
from tiller.tools._process import OutputLog, decode_output

from .shell_support import (
    SANDBOX_MISSING,
    SANDBOX_REASON,
    Output,
    gone,
    marked,
    new_mark,
    our_child_above,
    run,
    sleeper,
    wait_gone,
    wait_marked,
)

pytestmark = pytest.mark.skipif(SANDBOX_MISSING, reason=f"bwrap unavailable: {SANDBOX_REASON}")


@pytest.fixture
def jail(tmp_path: Path) -> Path:
    root = tmp_path / "jail"
    root.mkdir()
    return root


@pytest.fixture
def notifier() -> Notifier:
    return Notifier()


@pytest.fixture
async def jobs(notifier: Notifier) -> AsyncIterator[BackgroundJobs]:
    registry = BackgroundJobs(notifier)
    try:
        yield registry
    finally:
        await registry.close()


@pytest.fixture
def ctx(jail: Path, jobs: BackgroundJobs) -> ExecContext:
    return ExecContext.for_test(jail, jobs=jobs)


async def call(ctx: ExecContext, **args: object) -> str:
    """One `background_process` call; its result text (an error fails the test)."""
    done = await run(ctx, "background_process", **args)
    assert done.outcome is Outcome.OK, done.result.content
    return str(done.result.content)


async def start(jobs: BackgroundJobs, command: str, jail: Path) -> str:
    """A job started directly, as `execute_command(background=true)` does."""
    argv = DEFAULT_SANDBOX.command(["bash", "-c", command], jail=jail, network=False)
    return await jobs.start(argv, command=command, cwd=jail, env=DEFAULT_SANDBOX.environment())


# ── starting, reading, waiting ───────────────────────────────────────────────────


async def test_background_true_starts_a_job_to_read_and_wait_for(
    ctx: ExecContext, jail: Path
) -> None:
    async with asyncio.timeout(30):  # hang guard
        done = await run(
            ctx,
            command="echo first; until [ -e go ]; do sleep 0.01; done; echo second; exit 4",
            background=True,
        )
        assert done.outcome is Outcome.OK
        assert done.result.content == (
            "[started in the background as bg-1; use background_process to read its output, "
            "wait for it or stop it]"
        )
        first = await call(ctx, action="wait", id="bg-1", pattern="^fir")
        assert first.startswith("first\n[bg-1 running for ")
        assert first.endswith("; the pattern matched 'fir']")
        assert (await call(ctx, action="read", id="bg-1")).startswith(
            "(no new output)\n[bg-1 running for "
        )
        (jail / "go").touch()
        second = await call(ctx, action="wait", id="bg-1")
        assert second.startswith("second\n[bg-1 exited after ")
        assert second.endswith("s (exit code 4)]")
        listing = await call(ctx, action="list")
        assert listing.startswith("bg-1 exited after ") and listing.endswith(
            "(exit code 4): echo first; until [ -e go ]; do sleep 0.01; done; echo second; exit 4"
        )


async def test_read_returns_the_newest_32_kib_of_new_output(
    jobs: BackgroundJobs, jail: Path
) -> None:
    async with asyncio.timeout(30):  # hang guard
        job = await start(jobs, "head -c 100000 /dev/zero | tr '\\0' 'a'; echo; echo end", jail)
        done = await jobs.wait(job)
    assert done.status.state is JobState.EXITED and done.status.returncode == 0
    assert done.text == "a" * (READ_BYTES - 5) + "\nend\n"
    assert done.skipped == 100_005 - READ_BYTES
    assert done.render().startswith(f"[... {100_005 - READ_BYTES} earlier bytes of new output")
    assert jobs.read(job).text == ""


async def test_a_job_keeps_its_newest_mebibyte(
    jobs: BackgroundJobs, notifier: Notifier, jail: Path
) -> None:
    async with asyncio.timeout(30):  # hang guard
        job = await start(jobs, "head -c 3000000 /dev/zero | tr '\\0' 'a'; echo end", jail)
        while not notifier:  # noqa: ASYNC110 - wait for its exit without reading it
            await asyncio.sleep(0.01)
    assert jobs.status(job).unread == 3_000_004
    done = jobs.read(job)
    assert done.skipped == 3_000_004 - READ_BYTES and done.text.endswith("aaaend\n")
    assert jobs.status(job).unread == 0


def test_the_output_log_keeps_the_newest_bytes_at_absolute_offsets() -> None:
    log = OutputLog(10)
    for chunk in (b"0123", b"4567", b"89ab", b"cdef"):
        log.add(chunk)
    assert (log.total, log.start) == (16, 6)
    assert log.since(0) == (b"6789abcdef", 6)  # older bytes are gone
    assert log.since(12) == (b"cdef", 12)
    assert log.since(8, max_bytes=3) == (b"def", 13)
    assert log.since(16) == (b"", 16)
    log.set_limit(JOB_OUTPUT_BYTES)  # what adopting a foreground command does
    log.set_limit(2)
    assert log.since(0) == (b"ef", 14)
    assert decode_output("é".encode()[1:] + b"x", cut=True) == "x"


async def test_wait_times_out_and_leaves_the_job_running(
    ctx: ExecContext, jobs: BackgroundJobs, jail: Path
) -> None:
    mark = new_mark()
    async with asyncio.timeout(30):  # hang guard
        job = await start(jobs, f"{sleeper(mark)} echo up; wait", jail)
        await jobs.wait(job, pattern="^up$")  # the sleeper runs
        done = await jobs.wait(job, pattern="never", timeout=0.2)
    assert done.timed_out and done.status.state is JobState.RUNNING
    assert done.render().endswith("; the wait timed out; it is still running]")
    assert marked(mark)


async def test_wait_is_raced_against_the_cancel_token(jobs: BackgroundJobs, jail: Path) -> None:
    token = CancellationToken()
    async with asyncio.timeout(30):  # hang guard
        job = await start(jobs, "echo up; sleep 1000", jail)
        waiting = asyncio.ensure_future(jobs.wait(job, pattern="never", token=token))
        await jobs.wait(job, pattern="up")
        token.cancel("enough")
        with pytest.raises(Cancelled, match="enough"):
            await waiting
    assert jobs.status(job).state is JobState.RUNNING


async def test_stop_kills_the_tree(ctx: ExecContext, jobs: BackgroundJobs, jail: Path) -> None:
    mark = new_mark()
    async with asyncio.timeout(30):  # hang guard
        job = await start(jobs, f"{sleeper(mark)} echo up; wait", jail)
        await jobs.wait(job, pattern="^up$")  # the sleeper runs
        child = marked(mark)[0]
        bwrap = our_child_above(child)
        stopped = await call(ctx, action="stop", id=job)
        assert stopped.startswith("(no new output)\n[bg-1 stopped after ")
        assert stopped.endswith("s]")
        assert gone(bwrap)
        await wait_gone(child)
        # Stopping it again only reads it.
        assert (await call(ctx, action="stop", id=job)).startswith("(no new output)\n[bg-1 stop")


async def test_unknown_ids_and_bad_requests_are_refused(ctx: ExecContext, jail: Path) -> None:
    done = await run(ctx, "background_process", action="read", id="bg-7")
    assert done.outcome is Outcome.ERROR
    assert done.result.content == (
        "no background job 'bg-7' in this run; its jobs are: none (use action 'list' to see them)"
    )
    done = await run(ctx, "background_process", action="wait")
    assert done.outcome is Outcome.ERROR and "needs the job's id" in done.result.content
    done = await run(ctx, "background_process", action="wait", id="bg-1", pattern="(")
    assert done.outcome is Outcome.ERROR
    done = await run(ctx, "background_process", action="read", id="bg-1", pattern="x")
    assert done.outcome is Outcome.ERROR and "only to action 'wait'" in done.result.content
    done = await run(ctx, "background_process", action="wait", id="bg-1", timeout=3601)
    assert done.outcome is Outcome.INVALID_ARGUMENTS
    assert await call(ctx, action="list") == "(no background jobs in this run)"


async def test_without_a_job_registry_background_requests_are_refused(jail: Path) -> None:
    ctx = ExecContext.for_test(jail)
    done = await run(ctx, command="touch ran", background=True)
    assert done.outcome is Outcome.ERROR and "cannot keep commands in the background" in (
        done.result.content
    )
    assert not (jail / "ran").exists()
    done = await run(ctx, "background_process", action="list")
    assert done.outcome is Outcome.ERROR and "keeps no background jobs" in done.result.content
    # ... and the background token is ignored: the command runs in the foreground.
    ctx.background.cancel()
    assert (await run(ctx, command="echo here")).result.content == "here\n[exit code 0]"


# ── detaching a foreground command ───────────────────────────────────────────────


async def test_the_background_token_detaches_a_running_command(
    jail: Path, jobs: BackgroundJobs
) -> None:
    output = Output()
    ctx = ExecContext.for_test(jail, jobs=jobs, emit=output)
    mark = new_mark()
    async with asyncio.timeout(30):  # hang guard
        call_ = asyncio.ensure_future(
            run(
                ctx,
                command=f"{sleeper(mark)} echo started; "
                "until [ -e go ]; do sleep 0.01; done; echo after; exit 3",
            )
        )
        await output.seen("started")
        child = marked(mark)[0]
        ctx.background.cancel()
        done = await call_
        assert done.outcome is Outcome.OK
        content = done.result.content
        assert content.startswith("started\n[moved to the background as bg-1 after ")
        assert content.endswith(
            "s; it keeps running: use background_process to read its output, wait for it "
            "or stop it]"
        )
        assert not gone(child)  # still running, now as a job
        (jail / "go").touch()
        finished = await jobs.wait("bg-1")
        assert finished.text == "after\n" and finished.status.returncode == 3
        await wait_gone(child)  # the command ended: the sandbox took its children along
    assert output.text == "started\n"  # progress stopped at the detach


async def test_a_fired_background_token_starts_later_commands_in_the_background(
    ctx: ExecContext, jobs: BackgroundJobs
) -> None:
    ctx.background.cancel()
    done = await run(ctx, command="echo hi")
    assert done.result.content.startswith("[started in the background as bg-1;")
    async with asyncio.timeout(30):  # hang guard
        assert (await jobs.wait("bg-1")).text == "hi\n"


# ── notes and the end of the run ─────────────────────────────────────────────────


async def test_a_job_that_exits_posts_a_note(
    ctx: ExecContext, jobs: BackgroundJobs, notifier: Notifier
) -> None:
    done = await run(ctx, command="echo one; echo two; exit 2", background=True)
    assert done.outcome is Outcome.OK
    async with asyncio.timeout(30):  # hang guard: the watcher posts once the job is reaped
        while not notifier:  # noqa: ASYNC110 - the job exits on its own
            await asyncio.sleep(0.01)
    (note,) = notifier.drain()
    assert note.source == "bg-1"
    assert note.text.startswith("exited with code 2 after ")
    assert note.text.endswith(
        "s; last output:\none\ntwo\n(background_process can read the rest: bg-1)"
    )
    assert jobs.status("bg-1").state is JobState.EXITED


async def test_an_exit_someone_waits_for_posts_no_note(
    jobs: BackgroundJobs, notifier: Notifier, jail: Path
) -> None:
    async with asyncio.timeout(30):  # hang guard
        job = await start(jobs, "echo done", jail)
        assert (await jobs.wait(job)).status.state is JobState.EXITED
    assert not notifier  # the wait handed the exit to the model already


async def test_close_kills_every_job_and_leaves_nothing_behind(
    notifier: Notifier, jail: Path
) -> None:
    jobs = BackgroundJobs(notifier)
    marks = [new_mark(), new_mark()]
    async with asyncio.timeout(30):  # hang guard
        for mark in marks:
            await start(jobs, f"{sleeper(mark)} wait", jail)
        children = [await wait_marked(mark) for mark in marks]
        sandboxes = [our_child_above(child) for child in children]
        await jobs.close()
        assert all(gone(pid) for pid in sandboxes)  # killed and reaped by close
        for child in children:
            await wait_gone(child)
    assert [status.state for status in jobs.list()] == [JobState.KILLED, JobState.KILLED]
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
    assert not notifier  # the run is over: no one to tell
    with pytest.raises(UsageError, match="closed"):
        await start(jobs, "true", jail)
    with pytest.raises(UnknownJob):
        jobs.read("bg-3")
    await jobs.close()  # idempotent


async def test_execute_command_refuses_the_background_after_close(
    ctx: ExecContext, jobs: BackgroundJobs
) -> None:
    await jobs.close()
    done = await run(ctx, command="echo hi", background=True)
    assert done.outcome is Outcome.ERROR and "background" in done.result.content


async def test_a_catastrophic_wait_pattern_is_an_error_not_a_frozen_run(
    ctx: ExecContext, jail: Path
) -> None:
    """The search runs on the event loop: an unbounded backtracking pattern would freeze
    the whole run, hang guard included. It is cut off and named instead."""
    async with asyncio.timeout(60):  # hang guard (only works because the search is bounded)
        done = await run(ctx, command="echo " + "a" * 60 + "!; sleep 30", background=True)
        assert done.outcome is Outcome.OK
        waited = await run(ctx, "background_process", action="wait", id="bg-1", pattern="^(a|aa)+$")
        await call(ctx, action="stop", id="bg-1")
    assert waited.is_error
    assert "backtracks catastrophically" in waited.result.content

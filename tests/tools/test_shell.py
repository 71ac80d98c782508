"""`run_shell`: real subprocesses; exit codes, timeouts and cancels kill the process group."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tiller import CancellationToken, Cancelled
from tiller.tools import ExecContext, Outcome, ToolCtx

from .conftest import RunTool

# Writes the pid of a background child (and of the shell), then waits for the child.
SPAWN = "echo $$ > shell.pid; sleep 300 & echo $! > child.pid; wait"


def gone(pid: int) -> bool:
    """Whether process `pid` has exited (a zombie waiting for its reaper counts)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def pid_in(path: Path) -> int | None:
    """The pid a command wrote to `path`, once it has written it."""
    text = path.read_text() if path.exists() else ""
    return int(text) if text.strip() else None


# Polling is the only way to watch another process; the callers' `asyncio.timeout` keeps
# a wait that never ends from hanging the suite.
async def wait_gone(pid: int) -> None:
    while not gone(pid):  # noqa: ASYNC110 - SIGKILL is delivered asynchronously
        await asyncio.sleep(0.01)


async def read_pid(path: Path) -> int:
    while (pid := pid_in(path)) is None:  # noqa: ASYNC110 - the command writes it
        await asyncio.sleep(0.01)
    return pid


async def test_output_and_exit_code(run_tool: RunTool, ctx: ExecContext) -> None:
    (ctx.tools.root / "here.txt").write_text("")
    done = await run_tool("run_shell", command="ls; echo to-stderr >&2")
    assert done.outcome is Outcome.OK
    assert done.result.content == "here.txt\nto-stderr\n[exit code 0]"


async def test_a_failing_command_is_an_error_result(run_tool: RunTool) -> None:
    done = await run_tool("run_shell", command="printf 'partial'; exit 3")
    assert done.outcome is Outcome.ERROR and done.is_error
    assert done.result.content == "partial\n[exit code 3]"


async def test_no_output_and_signals(run_tool: RunTool) -> None:
    assert (
        await run_tool("run_shell", command="true")
    ).result.content == "(no output)\n[exit code 0]"
    done = await run_tool("run_shell", command="kill -9 $$")
    assert done.result.content == "(no output)\n[killed by SIGKILL]" and done.is_error


async def test_stdin_is_empty(run_tool: RunTool) -> None:
    async with asyncio.timeout(30):  # hang guard: a command reading stdin must not wait
        done = await run_tool("run_shell", command="cat; echo done")
    assert done.result.content == "done\n[exit code 0]"


async def test_background_processes_do_not_outlive_the_command(
    run_tool: RunTool, ctx: ExecContext
) -> None:
    async with asyncio.timeout(30):  # hang guard
        done = await run_tool("run_shell", command="sleep 300 & echo $! > child.pid; echo started")
        assert done.result.content == "started\n[exit code 0]"
        await wait_gone(await read_pid(ctx.tools.root / "child.pid"))


async def test_a_timeout_kills_the_process_group(run_tool: RunTool, ctx: ExecContext) -> None:
    async with asyncio.timeout(30):  # hang guard
        done = await run_tool("run_shell", command=f"echo before; {SPAWN}", timeout=0.5)
        assert done.is_error and done.outcome is Outcome.ERROR
        assert done.result.content == (
            "before\n[timed out after 0.5s; the command and its processes were killed]"
        )
        await wait_gone(await read_pid(ctx.tools.root / "shell.pid"))
        await wait_gone(await read_pid(ctx.tools.root / "child.pid"))


async def test_the_run_shell_timeout_is_a_ceiling(run_tool: RunTool, tmp_path: Path) -> None:
    context = ExecContext.for_test(tmp_path, tools=ToolCtx(tmp_path, shell_timeout=0.5))
    async with asyncio.timeout(30):  # hang guard
        done = await run_tool("run_shell", context=context, command="sleep 300", timeout=600)
    assert done.result.content == (
        "[timed out after 0.5s; the command and its processes were killed]"
    )


async def test_invalid_timeout_is_refused(run_tool: RunTool) -> None:
    done = await run_tool("run_shell", command="true", timeout=0)
    assert done.outcome is Outcome.INVALID_ARGUMENTS
    assert "timeout" in done.result.content


async def test_cancelling_the_token_kills_the_process_group(
    run_tool: RunTool, tmp_path: Path
) -> None:
    token = CancellationToken()
    context = ExecContext.for_test(tmp_path, token=token)
    async with asyncio.timeout(30):  # hang guard
        call = asyncio.ensure_future(run_tool("run_shell", context=context, command=SPAWN))
        child = await read_pid(tmp_path / "child.pid")
        shell = await read_pid(tmp_path / "shell.pid")
        assert not gone(child)
        token.cancel("stop")
        with pytest.raises(Cancelled, match="stop"):
            await call
        await wait_gone(shell)
        await wait_gone(child)


async def test_an_outside_cancel_kills_the_process_group_too(
    run_tool: RunTool, tmp_path: Path
) -> None:
    context = ExecContext.for_test(tmp_path)
    async with asyncio.timeout(30):  # hang guard
        call = asyncio.ensure_future(run_tool("run_shell", context=context, command=SPAWN))
        child = await read_pid(tmp_path / "child.pid")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await wait_gone(child)


async def test_large_output_is_kept_whole_for_the_budget(run_tool: RunTool) -> None:
    done = await run_tool("run_shell", command="head -c 300000 /dev/zero | tr '\\0' 'a'")
    assert done.result.content == "a" * 300_000 + "\n[exit code 0]"

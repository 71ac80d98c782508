"""`execute_command`: real commands under real bwrap; exit codes, output streamed as
progress, timeouts and cancels that kill the whole tree; and, with a bwrap that is not
there, the refusal and the explicitly accepted unsandboxed shell."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from tiller import CancellationToken, Cancelled
from tiller.tools import DEFAULT_SANDBOX, ExecContext, Jail, Outcome, Sandbox, SandboxUnavailable
from tiller.tools._capture import HEAD_BYTES, TAIL_BYTES
from tiller.tools.builtin import execute_command, execute_command_tool

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
    wait_dead,
    wait_gone,
    wait_marked,
)

sandboxed = pytest.mark.skipif(SANDBOX_MISSING, reason=f"bwrap unavailable: {SANDBOX_REASON}")


@pytest.fixture
def jail(tmp_path: Path) -> Path:
    root = tmp_path / "jail"
    root.mkdir()
    return root


@pytest.fixture
def ctx(jail: Path) -> ExecContext:
    return ExecContext.for_test(jail)


def test_the_tool_and_its_schema() -> None:
    assert execute_command.name == "execute_command"
    assert not execute_command.read_only and execute_command.denial_remedy
    assert set(execute_command.input_schema["properties"]) == {"command", "timeout", "background"}
    assert execute_command.input_schema["required"] == ["command"]


# ── the sandboxed shell ──────────────────────────────────────────────────────────


@sandboxed
async def test_output_and_exit_code(ctx: ExecContext, jail: Path) -> None:
    (jail / "here.txt").write_text("")
    done = await run(ctx, command="ls; echo to-stderr >&2; pwd")
    assert done.outcome is Outcome.OK
    assert done.result.content == f"here.txt\nto-stderr\n{jail}\n[exit code 0]"


@sandboxed
async def test_a_failing_command_is_an_error_result(ctx: ExecContext) -> None:
    done = await run(ctx, command="printf 'partial'; exit 3")
    assert done.outcome is Outcome.ERROR and done.is_error
    assert done.result.content == "partial\n[exit code 3]"


@sandboxed
async def test_no_output(ctx: ExecContext) -> None:
    assert (await run(ctx, command="true")).result.content == "(no output)\n[exit code 0]"


@sandboxed
async def test_stdin_is_empty(ctx: ExecContext) -> None:
    async with asyncio.timeout(30):  # hang guard: a command reading stdin must not wait
        done = await run(ctx, command="cat; echo done")
    assert done.result.content == "done\n[exit code 0]"


@sandboxed
async def test_the_environment_is_rebuilt(
    ctx: ExecContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TILLER_TEST_SECRET", "hunter2")
    done = await run(ctx, command="env | cut -d= -f1 | sort | tr '\\n' ' '; echo; echo $TERM")
    names = set(done.result.content.splitlines()[0].split())
    # As root the command runs as another uid, so git is told the workspace is safe.
    git_trust = {"GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0"}
    assert names - {"PWD", "SHLVL", "_", "OLDPWD"} == {
        "PATH",
        "HOME",
        "LANG",
        "TERM",
        "PAGER",
        "GIT_PAGER",
        *(git_trust if os.geteuid() == 0 else ()),
    }
    assert done.result.content.splitlines()[1] == "dumb"


@sandboxed
async def test_output_is_streamed_as_progress_and_returned_head_and_tail(jail: Path) -> None:
    output = Output()
    ctx = ExecContext.for_test(jail, emit=output)
    # 200,000 bytes, then an 'é' split across two writes.
    command = "head -c 200000 /dev/zero | tr '\\0' 'a'; printf '\\303'; sleep 0.05; printf '\\251'"
    done = await run(ctx, command=command)
    hidden = 200_002 - HEAD_BYTES - TAIL_BYTES
    assert done.result.content == (
        "a"
        * HEAD_BYTES
        + f"\n[... {hidden} bytes of output not shown (200002 in all); the whole output is in "
        ".tiller/spill/call-test.log (read ranges of it with read_file offset and limit, or "
        "grep) ...]\n" + "a" * (TAIL_BYTES - 2) + "é\n[exit code 0]"
    )
    assert (jail / ".tiller/spill/call-test.log").read_bytes() == b"a" * 200_000 + "é".encode()
    assert output.text == "a" * 200_000 + "é"
    # Coalesced: never more events than reads, never one per byte.
    assert 1 < len(output.chunks) < 300


@sandboxed
async def test_processes_left_running_do_not_outlive_the_command(
    ctx: ExecContext, jail: Path
) -> None:
    mark = new_mark()
    async with asyncio.timeout(30):  # hang guard
        call = asyncio.ensure_future(
            run(ctx, command=f"{sleeper(mark)} until [ -e go ]; do sleep 0.01; done; echo ok")
        )
        child = await wait_marked(mark)
        bwrap = our_child_above(child)
        (jail / "go").touch()
        done = await call
        assert done.result.content == "ok\n[exit code 0]"
        await wait_gone(child)
        assert gone(bwrap)  # reaped by us


@sandboxed
async def test_a_timeout_kills_the_tree(jail: Path) -> None:
    ctx = ExecContext.for_test(jail)
    mark = new_mark()
    async with asyncio.timeout(30):  # hang guard
        done = await run(
            ctx, command=f"echo before; {sleeper(mark)} echo sleeping; wait", timeout=1
        )
    assert done.is_error and done.outcome is Outcome.ERROR
    assert done.result.content == (
        "before\nsleeping\n[timed out after 1s; the command and its processes were killed]"
    )
    assert marked(mark) == []


@sandboxed
async def test_the_runs_shell_timeout_is_a_ceiling(jail: Path) -> None:
    ctx = ExecContext.for_test(jail, jail=Jail(jail, shell_timeout=0.5))
    async with asyncio.timeout(30):  # hang guard
        done = await run(ctx, command="sleep 300", timeout=600)
    assert done.result.content == (
        "(no output)\n[timed out after 0.5s; the command and its processes were killed]"
    )


async def test_invalid_timeout_is_refused(ctx: ExecContext) -> None:
    done = await run(ctx, command="true", timeout=0)
    assert done.outcome is Outcome.INVALID_ARGUMENTS
    assert "timeout" in done.result.content


@sandboxed
async def test_cancelling_the_token_kills_the_tree(jail: Path) -> None:
    token = CancellationToken()
    output = Output()
    ctx = ExecContext.for_test(jail, token=token, emit=output)
    mark = new_mark()
    async with asyncio.timeout(30):  # hang guard
        call = asyncio.ensure_future(run(ctx, command=f"{sleeper(mark)} echo sleeping; wait"))
        await output.seen("sleeping")
        child = marked(mark)[0]
        bwrap = our_child_above(child)
        token.cancel("stop")
        with pytest.raises(Cancelled, match="stop"):
            await call
        assert gone(bwrap)  # killed and reaped before the call returned
        await wait_gone(child)


@sandboxed
async def test_an_outside_cancel_kills_the_tree_too(ctx: ExecContext) -> None:
    mark = new_mark()
    async with asyncio.timeout(30):  # hang guard
        call = asyncio.ensure_future(run(ctx, command=f"{sleeper(mark)} wait"))
        child = await wait_marked(mark)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await wait_gone(child)


# ── without a sandbox ────────────────────────────────────────────────────────────


@pytest.fixture
def no_bwrap(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path / "no-such-bwrap")


async def test_without_bwrap_the_shell_refuses(
    no_bwrap: Sandbox, ctx: ExecContext, jail: Path
) -> None:
    shell = execute_command_tool(no_bwrap)
    done = await run(ctx, tools=[shell], command="touch ran")
    assert done.outcome is Outcome.ERROR
    message = done.result.content
    assert "no-such-bwrap" in message and "not installed" in message
    assert "scripts/setup-system.sh" in message and "apt-get install bubblewrap" in message
    assert "Jail.with_unsandboxed_shell()" in message
    assert not (jail / "ran").exists()
    with pytest.raises(SandboxUnavailable, match="not installed"):
        await no_bwrap.require()


async def test_a_bwrap_that_cannot_make_namespaces_is_refused_with_its_reason(
    tmp_path: Path, ctx: ExecContext
) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    probe = Sandbox(fake).probe()
    assert not probe.available
    assert "cannot create its namespaces" in probe.reason
    assert "No permissions to create new namespace" in probe.reason
    done = await run(ctx, tools=[execute_command_tool(Sandbox(fake))], command="true")
    assert done.outcome is Outcome.ERROR and "No permissions" in done.result.content


async def test_the_probe_runs_once_per_sandbox(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path / "no-such-bwrap")
    first = await sandbox.probe_async()
    assert sandbox.probe() is first and await sandbox.probe_async() is first
    if not SANDBOX_MISSING:
        assert DEFAULT_SANDBOX.probe() is DEFAULT_SANDBOX.probe()
        assert DEFAULT_SANDBOX.probe().available


async def test_an_accepted_unsandboxed_shell_runs_as_the_user(
    no_bwrap: Sandbox, jail: Path
) -> None:
    ctx = ExecContext.for_test(jail, jail=Jail(jail).with_unsandboxed_shell())
    shell = execute_command_tool(no_bwrap)
    done = await run(ctx, tools=[shell], command="echo $HOME; pwd; touch ran")
    assert done.result.content == f"{os.environ['HOME']}\n{jail}\n[exit code 0]"
    assert (jail / "ran").exists()
    done = await run(ctx, tools=[shell], command="kill -9 $$")
    assert done.result.content == "(no output)\n[killed by SIGKILL]" and done.is_error


async def test_an_unsandboxed_cancel_kills_the_process_group(no_bwrap: Sandbox, jail: Path) -> None:
    token = CancellationToken()
    ctx = ExecContext.for_test(jail, token=token, jail=Jail(jail).with_unsandboxed_shell())
    shell = execute_command_tool(no_bwrap)
    mark = new_mark()
    async with asyncio.timeout(30):  # hang guard
        call = asyncio.ensure_future(run(ctx, tools=[shell], command=f"{sleeper(mark)} wait"))
        child = await wait_marked(mark)
        token.cancel()
        with pytest.raises(Cancelled):
            await call
        await wait_dead(child)  # an orphan: the machine's init reaps it


# ── the command line ─────────────────────────────────────────────────────────────


def test_the_bwrap_command_line(tmp_path: Path) -> None:
    jail = tmp_path.resolve()
    argv = Sandbox("/usr/bin/bwrap").command(["bash", "-c", "x"], jail=jail, network=False)
    if os.geteuid() == 0:
        # Root performs the mounts without a user namespace, then setpriv drops to a uid
        # that is not 0 (a user namespace made by root maps the command to host root).
        assert argv[:6] == [
            "/usr/bin/bwrap",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--unshare-net",
        ]
        assert "--unshare-user" not in argv and "--unshare-all" not in argv
        setpriv = argv[argv.index("--") + 1 :]
        assert Path(setpriv[0]).name == "setpriv"
        assert setpriv[3:8] == [
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]
        assert setpriv[1].startswith("--reuid=") and setpriv[1] != "--reuid=0"
        assert setpriv[2].startswith("--regid=") and setpriv[2] != "--regid=0"
    else:
        assert argv[:9] == [
            "/usr/bin/bwrap",
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--cap-drop",
            "ALL",
            "--new-session",
            "--die-with-parent",
            "--ro-bind" if not Path("/usr").is_symlink() else "--symlink",
        ]
    assert "--share-net" not in argv
    joined = " ".join(argv)
    assert "--ro-bind /etc /etc" in joined and "--proc /proc --ro-bind-try /proc/sys" in joined
    assert "--ro-bind-try /proc/sysrq-trigger /proc/sysrq-trigger" in joined
    assert "--dev /dev --perms 1777 --tmpfs /tmp" in joined
    assert "--tmpfs /root" in joined
    # The jail comes after the tmpfs over /tmp, so a jail under /tmp stays visible.
    assert joined.index("--tmpfs /tmp") < joined.index(f"--bind {jail} {jail} --chdir {jail}")
    assert argv[argv.index("--clearenv") :][:3] == ["--clearenv", "--setenv", "PATH"]
    assert argv[-4:] == ["--", "bash", "-c", "x"]
    networked = Sandbox("/usr/bin/bwrap").command(["true"], jail=jail, network=True)
    if os.geteuid() == 0:
        assert "--unshare-net" not in networked
    else:
        assert "--share-net" in networked


@sandboxed
async def test_a_planted_spill_symlink_keeps_the_output_in_the_jail(tmp_path: Path) -> None:
    jail = tmp_path / "jail"
    outside = tmp_path / "outside"
    (jail / ".tiller").mkdir(parents=True)
    outside.mkdir()
    (jail / ".tiller" / "spill").symlink_to(outside)
    ctx = ExecContext.for_test(jail)
    done = await run(ctx, command="head -c 200000 /dev/zero | tr '\\0' a")
    assert "they were not saved (the spill file could not be made" in done.result.content
    assert done.result.content.endswith("a\n[exit code 0]")
    assert list(outside.iterdir()) == []

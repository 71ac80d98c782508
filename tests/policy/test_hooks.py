"""`HookSet`: real `bash -c` hooks (scripts written to tmp_path) and Python callables.

`pre_tool` fails closed: exit 0 allows, exit 2 denies with the hook's output, anything
else (exit 3, command not found, a signal, a timeout, a hook that cannot start) denies
naming the hook; the first denial wins and later hooks do not run. `post_tool` and
`session_end` only observe: their failures are logged and swallowed. A cancelled run
kills the running hook's processes and the cancellation propagates. Processes a hook
starts are watched by a unique marker in their command line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest

from tiller.conversation import Taint
from tiller.errors import UsageError
from tiller.policy import (
    FunctionHook,
    HookConfigError,
    HookOutcome,
    HookSet,
    HookVerdict,
    PostToolEvent,
    PreToolEvent,
    RiskClass,
    SessionEndEvent,
    ShellHook,
)
from tiller.state import StopCause


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def script(tmp_path: Path, body: str) -> str:
    """A command running `body` as a bash script written to tmp_path."""
    path = tmp_path / f"hook-{uuid.uuid4().hex[:8]}.sh"
    path.write_text(body)
    return f"bash {shlex.quote(str(path))}"


async def pre_tool(hooks: HookSet, ws: Path, tool: str = "execute_command") -> HookOutcome:
    return await hooks.pre_tool(
        tool=tool,
        arguments={"command": "ls"},
        call_id="run-1-call-1",
        run_id="run-1",
        thread_id="thread-1",
        workspace=ws,
    )


async def post_tool(hooks: HookSet, ws: Path, tool: str = "execute_command") -> None:
    await hooks.post_tool(
        tool=tool,
        arguments={"command": "ls"},
        call_id="run-1-call-1",
        run_id="run-1",
        thread_id="thread-1",
        workspace=ws,
        result="a.txt",
        is_error=False,
    )


def new_mark() -> str:
    return uuid.uuid4().hex[:16]


def sleeper(mark: str) -> str:
    """Bash starting `sleep 100` renamed `tiller-hookmark-<mark>` in the background (it
    holds the hook's output pipes), then sleeping itself."""
    return f'(exec -a "tiller-hookmark-{mark}" sleep 100) &\nsleep 100\n'


def marked(mark: str) -> list[int]:
    """Live processes whose command line starts with the marker (a zombie's is empty)."""
    needle = f"tiller-hookmark-{mark}".encode()
    found = []
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


async def wait_marked(mark: str) -> None:
    while not marked(mark):  # noqa: ASYNC110 - another process starts it
        await asyncio.sleep(0.01)


# ── pre_tool: shell hooks ────────────────────────────────────────────────────────


async def test_exit_0_allows_and_runs_in_the_workspace_with_its_kind(
    tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TILLER_TEST_PASSED_THROUGH", "yes")
    command = script(
        tmp_path, 'echo "$PWD $TILLER_HOOK $TILLER_TEST_PASSED_THROUGH" > ran.txt\nexit 0\n'
    )
    outcome = await pre_tool(HookSet(pre_tool=[ShellHook(command)]), ws)
    assert outcome == HookOutcome(True, "", "")
    assert (ws / "ran.txt").read_text() == f"{ws} pre_tool yes\n"


async def test_exit_2_denies_with_stderr_over_stdout(tmp_path: Path, ws: Path) -> None:
    command = script(tmp_path, "echo 'on stdout'\necho '  no rm here, use trash  ' >&2\nexit 2\n")
    hook = ShellHook(command, name="guard")
    outcome = await pre_tool(HookSet(pre_tool=[hook]), ws)
    assert outcome == HookOutcome(False, "no rm here, use trash", "guard")


async def test_exit_2_falls_back_to_stdout(tmp_path: Path, ws: Path) -> None:
    command = script(tmp_path, "echo 'not on Fridays'\nexit 2\n")
    outcome = await pre_tool(HookSet(pre_tool=[ShellHook(command, name="friday")]), ws)
    assert outcome == HookOutcome(False, "not on Fridays", "friday")


async def test_exit_2_without_output_still_denies(tmp_path: Path, ws: Path) -> None:
    outcome = await pre_tool(HookSet(pre_tool=[ShellHook("exit 2", name="mute")]), ws)
    assert not outcome.allowed and outcome.hook == "mute"
    assert "without a reason" in outcome.reason


async def test_a_long_message_is_clipped(tmp_path: Path, ws: Path) -> None:
    command = script(tmp_path, "head -c 20000 /dev/zero | tr '\\0' x >&2\nexit 2\n")
    outcome = await pre_tool(HookSet(pre_tool=[ShellHook(command)]), ws)
    assert not outcome.allowed
    assert outcome.reason.startswith("xxxx") and outcome.reason.endswith("(clipped)")
    assert len(outcome.reason) < 2100


async def test_exit_3_denies_naming_the_hook_and_the_exit(tmp_path: Path, ws: Path) -> None:
    command = script(tmp_path, "echo 'db unreachable' >&2\nexit 3\n")
    outcome = await pre_tool(HookSet(pre_tool=[ShellHook(command, name="policy-db")]), ws)
    assert not outcome.allowed and outcome.hook == "policy-db"
    assert "hook policy-db failed with exit code 3" in outcome.reason
    assert "fails denies" in outcome.reason and "db unreachable" in outcome.reason


async def test_command_not_found_denies(ws: Path) -> None:
    hook = ShellHook("tiller-no-such-command-here --check")
    outcome = await pre_tool(HookSet(pre_tool=[hook]), ws)
    assert not outcome.allowed
    assert outcome.hook == "tiller-no-such-command-here --check"
    assert "exit code 127 (command not found)" in outcome.reason
    assert "tiller-no-such-command-here: command not found" in outcome.reason


async def test_a_crash_by_signal_denies(tmp_path: Path, ws: Path) -> None:
    outcome = await pre_tool(HookSet(pre_tool=[ShellHook(script(tmp_path, "kill -SEGV $$\n"))]), ws)
    assert not outcome.allowed
    assert "killed by SIGSEGV" in outcome.reason


async def test_a_hook_that_cannot_start_denies(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-workspace"
    outcome = await pre_tool(HookSet(pre_tool=[ShellHook("exit 0", name="ok")]), missing)
    assert not outcome.allowed and outcome.hook == "ok"
    assert "could not start" in outcome.reason and str(missing) in outcome.reason


async def test_a_timeout_denies_and_leaves_no_process(tmp_path: Path, ws: Path) -> None:
    mark = new_mark()
    hook = ShellHook(script(tmp_path, sleeper(mark)), timeout=0.2, name="slow")
    outcome = await pre_tool(HookSet(pre_tool=[hook]), ws)
    assert not outcome.allowed and outcome.hook == "slow"
    assert "hook slow timed out and was killed" in outcome.reason
    assert marked(mark) == []


async def test_what_a_hook_leaves_running_is_killed(tmp_path: Path, ws: Path) -> None:
    mark = new_mark()
    command = script(
        tmp_path, f'(exec -a "tiller-hookmark-{mark}" sleep 100) &\necho $! > child.pid\nexit 0\n'
    )
    outcome = await pre_tool(HookSet(pre_tool=[ShellHook(command)]), ws)
    assert outcome.allowed
    assert (ws / "child.pid").read_text().strip()
    assert marked(mark) == []


async def test_the_event_on_stdin(tmp_path: Path, ws: Path) -> None:
    hooks = HookSet(pre_tool=[ShellHook(script(tmp_path, "cat > stdin.json\n"))])
    outcome = await hooks.pre_tool(
        tool="write_file",
        arguments={"path": "a.txt", "content": "héllo\n", "mode": None},
        call_id="run-7-call-3",
        run_id="run-7",
        thread_id="thread-9",
        workspace=ws,
        taint=Taint.PRIVATE_DATA | Taint.UNTRUSTED_INPUT,
        risk=RiskClass.FILE_MUTATION,
    )
    assert outcome.allowed
    assert json.loads((ws / "stdin.json").read_text()) == {
        "hook": "pre_tool",
        "tool": "write_file",
        "arguments": {"path": "a.txt", "content": "héllo\n", "mode": None},
        "call_id": "run-7-call-3",
        "run_id": "run-7",
        "thread_id": "thread-9",
        "workspace": str(ws),
        "taint": ["private", "untrusted"],
        "risk": "file_mutation",
    }


async def test_a_hook_that_never_reads_a_large_event_is_not_blocked(ws: Path) -> None:
    hooks = HookSet(pre_tool=[ShellHook("exit 0")])
    outcome = await hooks.pre_tool(
        tool="write_file",
        arguments={"content": "x" * 2_000_000},
        call_id="c",
        run_id="r",
        thread_id="t",
        workspace=ws,
    )
    assert outcome.allowed


async def test_the_first_denial_wins_and_later_hooks_do_not_run(tmp_path: Path, ws: Path) -> None:
    first = ShellHook(script(tmp_path, "touch first.ran\n"), name="first")
    second = ShellHook(script(tmp_path, "echo 'second says no' >&2\nexit 2\n"), name="second")
    third = ShellHook(script(tmp_path, "touch third.ran\nexit 2\n"), name="third")
    later = FunctionHook(lambda event: (ws / "later.ran").touch(), name="later")
    outcome = await pre_tool(HookSet(pre_tool=[first, second, third, later]), ws)
    assert outcome == HookOutcome(False, "second says no", "second")
    assert (ws / "first.ran").exists()
    assert not (ws / "third.ran").exists()
    assert not (ws / "later.ran").exists()


async def test_tool_matchers(tmp_path: Path, ws: Path) -> None:
    shell_only = ShellHook(
        script(tmp_path, 'echo "$(cat)" > seen.json\necho "no shell" >&2\nexit 2\n'),
        tools=["execute_*", "background_process"],
        name="shell-only",
    )
    hooks = HookSet(pre_tool=[shell_only])
    assert (await pre_tool(hooks, ws, tool="read_file")).allowed
    assert not (ws / "seen.json").exists()
    assert await pre_tool(hooks, ws, tool="background_process") == HookOutcome(
        False, "no shell", "shell-only"
    )
    assert json.loads((ws / "seen.json").read_text())["tool"] == "background_process"
    assert hooks.watches("pre_tool", "execute_command")
    assert not hooks.watches("pre_tool", "read_file")
    assert not hooks.watches("post_tool", "execute_command")
    assert not HookSet() and hooks


# ── pre_tool: Python callables ───────────────────────────────────────────────────


async def test_callables_that_allow(ws: Path) -> None:
    seen: list[PreToolEvent] = []

    def returns_none(event: PreToolEvent) -> None:
        seen.append(event)

    async def returns_true(event: PreToolEvent) -> bool:
        return True

    hooks = HookSet(
        pre_tool=[returns_none, returns_true, lambda event: HookVerdict.allow()],
    )
    assert await pre_tool(hooks, ws) == HookOutcome.allow()
    assert seen == [
        PreToolEvent(
            tool="execute_command",
            arguments={"command": "ls"},
            call_id="run-1-call-1",
            run_id="run-1",
            thread_id="thread-1",
            workspace=ws,
        )
    ]


async def test_callables_that_deny(ws: Path) -> None:
    def says_false(event: PreToolEvent) -> bool:
        return False

    async def says_why(event: PreToolEvent) -> HookVerdict:
        return HookVerdict.deny(f"{event.tool} is off limits")

    assert await pre_tool(HookSet(pre_tool=[says_false]), ws) == HookOutcome(
        False, "the hook denied the call", "test_callables_that_deny.<locals>.says_false"
    )
    hook = FunctionHook(says_why, name="limits")
    assert await pre_tool(HookSet(pre_tool=[hook]), ws) == HookOutcome(
        False, "execute_command is off limits", "limits"
    )


async def test_callables_that_fail_deny(ws: Path) -> None:
    def raises(event: PreToolEvent) -> None:
        raise RuntimeError("policy service down")

    async def raises_later(event: PreToolEvent) -> None:
        await asyncio.sleep(0)
        raise KeyError("rules")

    async def hangs(event: PreToolEvent) -> None:
        await asyncio.Event().wait()

    async def cancels_itself(event: PreToolEvent) -> None:
        raise asyncio.CancelledError

    def answers_nonsense(event: PreToolEvent) -> str:
        return "yes"

    cases = [
        (FunctionHook(raises, name="a"), "hook a raised RuntimeError: policy service down"),
        (FunctionHook(raises_later, name="b"), "hook b raised KeyError: 'rules'"),
        (FunctionHook(hangs, timeout=0.05, name="c"), "hook c timed out after 0.05 s"),
        (FunctionHook(cancels_itself, name="d"), "hook d was cancelled from inside"),
        (FunctionHook(answers_nonsense, name="e"), "hook e returned str, which is no answer"),
    ]
    for hook, expected in cases:
        outcome = await pre_tool(HookSet(pre_tool=[hook]), ws)
        assert not outcome.allowed and outcome.hook == hook.name
        assert outcome.reason.startswith(expected), outcome.reason


# ── observers ────────────────────────────────────────────────────────────────────


async def test_post_tool_sees_the_result(tmp_path: Path, ws: Path) -> None:
    hooks = HookSet(
        post_tool=[ShellHook(script(tmp_path, 'cat > post.json\necho "$TILLER_HOOK" > kind.txt\n'))]
    )
    await hooks.post_tool(
        tool="read_file",
        arguments={"path": "a.txt"},
        call_id="run-1-call-2",
        run_id="run-1",
        thread_id="thread-1",
        workspace=ws,
        result="no such file",
        is_error=True,
        taint=["private"],
    )
    assert json.loads((ws / "post.json").read_text()) == {
        "hook": "post_tool",
        "tool": "read_file",
        "arguments": {"path": "a.txt"},
        "call_id": "run-1-call-2",
        "run_id": "run-1",
        "thread_id": "thread-1",
        "workspace": str(ws),
        "taint": ["private"],
        "result": "no such file",
        "is_error": True,
    }
    assert (ws / "kind.txt").read_text() == "post_tool\n"


async def test_post_tool_failures_are_logged_and_swallowed(
    tmp_path: Path, ws: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mark = new_mark()

    def raises(event: PostToolEvent) -> None:
        raise ValueError("notifier gone")

    hooks = HookSet(
        post_tool=[
            ShellHook(script(tmp_path, "echo 'disk full' >&2\nexit 1\n"), name="exit1"),
            ShellHook(script(tmp_path, "exit 2\n"), name="exit2"),
            ShellHook(script(tmp_path, "kill -SEGV $$\n"), name="segv"),
            ShellHook(script(tmp_path, sleeper(mark)), timeout=0.2, name="slow"),
            ShellHook("tiller-no-such-command-here", name="missing"),
            FunctionHook(raises, name="raises"),
            ShellHook(script(tmp_path, "touch last.ran\n"), name="last"),
        ]
    )
    with caplog.at_level(logging.WARNING, logger="tiller.hooks"):
        await post_tool(hooks, ws)
    assert (ws / "last.ran").exists()
    assert marked(mark) == []
    messages = [record.getMessage() for record in caplog.records]
    assert all(record.name == "tiller.hooks" for record in caplog.records)
    assert all(record.levelno == logging.WARNING for record in caplog.records)
    assert messages == [
        "post_tool hook exit1 failed with exit code 1. Its output: disk full (ignored)",
        "post_tool hook exit2 failed with exit code 2 (ignored)",
        "post_tool hook segv was killed by SIGSEGV (ignored)",
        "post_tool hook slow timed out and was killed (ignored)",
        "post_tool hook missing failed with exit code 127 (command not found). Its output: "
        "bash: line 1: tiller-no-such-command-here: command not found (ignored)",
        "post_tool hook raises raised ValueError: notifier gone (ignored)",
    ]


async def test_post_tool_matchers_and_success_are_quiet(
    tmp_path: Path, ws: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []
    hooks = HookSet(
        post_tool=[
            FunctionHook(lambda event: seen.append(event.tool), tools=["web_*"]),
            ShellHook(script(tmp_path, "touch ran\n")),
        ]
    )
    with caplog.at_level(logging.WARNING, logger="tiller.hooks"):
        await post_tool(hooks, ws, tool="execute_command")
        await post_tool(hooks, ws, tool="web_fetch")
    assert seen == ["web_fetch"]
    assert (ws / "ran").exists()
    assert caplog.records == []


async def test_session_end(tmp_path: Path, ws: Path, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[SessionEndEvent] = []

    async def records(event: SessionEndEvent) -> None:
        seen.append(event)

    async def raises(event: SessionEndEvent) -> None:
        raise OSError("webhook unreachable")

    hooks = HookSet(
        session_end=[
            ShellHook(script(tmp_path, "cat > end.json\nexit 5\n"), name="copy"),
            FunctionHook(raises, name="raises"),
            records,
        ]
    )
    with caplog.at_level(logging.WARNING, logger="tiller.hooks"):
        await hooks.session_end(
            run_id="run-1", thread_id="thread-1", workspace=ws, stop_cause=StopCause.MAX_STEPS
        )
    assert json.loads((ws / "end.json").read_text()) == {
        "hook": "session_end",
        "run_id": "run-1",
        "thread_id": "thread-1",
        "workspace": str(ws),
        "stop_cause": "max_steps",
    }
    assert seen == [SessionEndEvent("run-1", "thread-1", ws, "max_steps")]
    assert [record.getMessage() for record in caplog.records] == [
        "session_end hook copy failed with exit code 5 (ignored)",
        "session_end hook raises raised OSError: webhook unreachable (ignored)",
    ]


# ── cancellation ─────────────────────────────────────────────────────────────────


async def test_cancelling_kills_a_running_pre_tool_hook(tmp_path: Path, ws: Path) -> None:
    mark = new_mark()
    later = ShellHook(script(tmp_path, "touch later.ran\n"))
    hooks = HookSet(pre_tool=[ShellHook(script(tmp_path, sleeper(mark))), later])
    task = asyncio.create_task(pre_tool(hooks, ws))
    async with asyncio.timeout(10):  # a hang guard
        await wait_marked(mark)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert marked(mark) == []
    assert not (ws / "later.ran").exists()


async def test_cancelling_an_observer_propagates(tmp_path: Path, ws: Path) -> None:
    mark = new_mark()
    hooks = HookSet(post_tool=[ShellHook(script(tmp_path, sleeper(mark)))])
    task = asyncio.create_task(post_tool(hooks, ws))
    async with asyncio.timeout(10):
        await wait_marked(mark)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert marked(mark) == []


async def test_cancelling_a_python_hook_propagates(ws: Path) -> None:
    started = asyncio.Event()

    async def waits(event: Any) -> None:
        started.set()
        await asyncio.Event().wait()

    for hooks, call in (
        (HookSet(pre_tool=[waits]), pre_tool),
        (HookSet(post_tool=[waits]), post_tool),
    ):
        started.clear()
        task = asyncio.create_task(call(hooks, ws))
        async with asyncio.timeout(10):
            await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


# ── configuration ────────────────────────────────────────────────────────────────


CONFIG = """
[hooks]
pre_tool = [
  { command = "./check.sh", timeout = 5, tools = ["execute_command", "web_*"] },
  { command = "exit 0", name = "always" },
]
post_tool = [{ command = "logger -t tiller", timeout = 0.5 }]
session_end = [{ command = "notify-send done" }]
"""


def test_from_config() -> None:
    hooks = HookSet.from_config(tomllib.loads(CONFIG)["hooks"])
    assert hooks.pre_tool_hooks == (
        ShellHook("./check.sh", timeout=5, tools=["execute_command", "web_*"]),
        ShellHook("exit 0", name="always"),
    )
    assert hooks.pre_tool_hooks[0].name == "./check.sh"
    assert hooks.pre_tool_hooks[1].timeout == 10.0
    assert hooks.post_tool_hooks == (ShellHook("logger -t tiller", timeout=0.5),)
    assert hooks.session_end_hooks == (ShellHook("notify-send done"),)
    assert HookSet.from_config({}) == HookSet()


def test_merge_keeps_the_config_hooks_first() -> None:
    def mine(event: Any) -> None:
        return None

    configured = HookSet.from_config(tomllib.loads(CONFIG)["hooks"])
    merged = configured.merge(HookSet(pre_tool=[mine], session_end=[mine]))
    assert [hook.name for hook in merged.pre_tool_hooks] == [
        "./check.sh",
        "always",
        "test_merge_keeps_the_config_hooks_first.<locals>.mine",
    ]
    assert len(merged.post_tool_hooks) == 1
    assert len(merged.session_end_hooks) == 2


@pytest.mark.parametrize(
    ("section", "key", "says"),
    [
        ({"pre_tools": []}, "hooks.pre_tools", "the kinds are: pre_tool, post_tool, session_end"),
        ({"pre_tool": {"command": "x"}}, "hooks.pre_tool", "must be a list of tables"),
        ({"pre_tool": ["./check.sh"]}, "hooks.pre_tool[0]", "must be a table"),
        ({"post_tool": [{}]}, "hooks.post_tool[0].command", "is required"),
        ({"pre_tool": [{"command": "  "}]}, "hooks.pre_tool[0].command", "is required"),
        ({"pre_tool": [{"command": 3}]}, "hooks.pre_tool[0].command", "is required"),
        (
            {"pre_tool": [{"command": "a"}, {"command": "b", "timout": 3}]},
            "hooks.pre_tool[1].timout",
            "the settings are: command, name, timeout, tools",
        ),
        ({"pre_tool": [{"command": "a", "timeout": 0}]}, "hooks.pre_tool[0].timeout", "positive"),
        ({"pre_tool": [{"command": "a", "timeout": -1}]}, "hooks.pre_tool[0].timeout", "positive"),
        ({"pre_tool": [{"command": "a", "timeout": "5"}]}, "hooks.pre_tool[0].timeout", "'5'"),
        ({"pre_tool": [{"command": "a", "timeout": True}]}, "hooks.pre_tool[0].timeout", "True"),
        (
            {"pre_tool": [{"command": "a", "timeout": float("inf")}]},
            "hooks.pre_tool[0].timeout",
            "positive",
        ),
        ({"pre_tool": [{"command": "a", "tools": []}]}, "hooks.pre_tool[0].tools", "non-empty"),
        (
            {"pre_tool": [{"command": "a", "tools": "execute_command"}]},
            "hooks.pre_tool[0].tools",
            "list of tool-name globs",
        ),
        (
            {"post_tool": [{"command": "a", "tools": ["ok", ""]}]},
            "hooks.post_tool[0].tools[1]",
            "non-empty string",
        ),
        (
            {"session_end": [{"command": "a", "tools": ["x"]}]},
            "hooks.session_end[0].tools",
            "watch no tool",
        ),
        (
            {"session_end": [{"command": "a", "matcher": "x"}]},
            "hooks.session_end[0].matcher",
            "the settings are: command, name, timeout\n",
        ),
        ({"pre_tool": [{"command": "a", "name": 7}]}, "hooks.pre_tool[0].name", "a string"),
    ],
)
def test_config_errors_name_the_bad_entry(section: dict[str, Any], key: str, says: str) -> None:
    with pytest.raises(HookConfigError) as raised:
        HookSet.from_config(section)
    assert raised.value.key == key
    assert isinstance(raised.value, UsageError)
    message = str(raised.value) + "\n"
    assert message.startswith(f"{key}: ")
    assert says in message


def test_a_section_that_is_not_a_table() -> None:
    with pytest.raises(HookConfigError) as raised:
        HookSet.from_config(["pre_tool"])  # type: ignore[arg-type]
    assert raised.value.key == "hooks"


def test_programmatic_construction_is_checked() -> None:
    with pytest.raises(UsageError, match="non-empty command"):
        ShellHook("   ")
    with pytest.raises(UsageError, match="positive"):
        ShellHook("exit 0", timeout=0)
    with pytest.raises(UsageError, match="not a single string"):
        ShellHook("exit 0", tools="execute_command")
    with pytest.raises(UsageError, match="needs a callable"):
        FunctionHook("not callable")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="a ShellHook, a FunctionHook or a callable"):
        HookSet(pre_tool=["exit 0"])  # type: ignore[list-item]
    with pytest.raises(UsageError, match="session_end hooks watch no tool"):
        HookSet(session_end=[FunctionHook(print, tools=["x"])])

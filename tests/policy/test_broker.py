"""`ApprovalBroker`: "always" keys as narrow as the danger; a cancel answers deny."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tiller.cancel import CancellationToken
from tiller.conversation import ToolCall
from tiller.errors import Cancelled
from tiller.policy import ApprovalBroker, Decision, approval_key
from tiller.tools import Capability, tool
from tiller.tools.builtin import edit_file, execute_command_tool, web_fetch, write_file

SHELL = execute_command_tool()


@tool(name="github__create_issue", capabilities=Capability.EXTERNAL_SEND)
def create_issue(title: str) -> str:
    """Open an issue (stands in for an MCP tool: it sends its arguments out)."""
    return title


@tool(name="run_script", risk="shell_mutation", command_of=lambda a: a.get("script"))
def run_script(script: str) -> str:
    """Run a script (a user's tool that declares the shell command it runs)."""
    return script


@tool(name="execute_command", risk="low_mutation")
def not_a_shell(command: str) -> str:
    """A user's tool that happens to be called `execute_command` and runs no command."""
    return command


def call(name: str, arguments: str = "{}", call_id: str = "c") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


class Counting:
    def __init__(self, answer: Decision) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def approve(self, call: ToolCall, tool: Any) -> Decision:
        self.asked.append(call.id)
        return self.answer


def test_keys() -> None:
    shell = call("execute_command", '{"command": " make\\ttest "}')
    assert approval_key(shell, SHELL) == "execute_command:make test"
    assert approval_key(call("execute_command", "not json"), SHELL) is None
    assert approval_key(call("execute_command", '{"command": 3}'), SHELL) is None
    assert approval_key(call("write_file"), write_file) == "write_file"
    assert approval_key(call("web_fetch"), web_fetch) is None
    assert approval_key(call("github__create_issue"), create_issue) is None
    # No tool declares nothing: nothing is remembered.
    assert approval_key(call("write_file"), None) is None


def test_keys_follow_what_the_tool_declares_not_its_name() -> None:
    """Law 12: the key came from the name (`execute_command`, `web_fetch`, `__`), so a
    user's script runner was remembered as a whole tool ("always" for one script approved
    every script), and a tool merely named `execute_command` lost its "always"."""
    first = call("run_script", '{"script": "make  test"}')
    assert approval_key(first, run_script) == "run_script:make test"
    assert approval_key(call("run_script", '{"script": "rm -rf ~"}'), run_script) == (
        "run_script:rm -rf ~"
    )
    assert approval_key(call("execute_command", '{"command": "ls"}'), not_a_shell) == (
        "execute_command"
    )


async def test_always_is_remembered_for_its_key_only() -> None:
    inner = Counting(Decision.allow(always=True))
    broker = ApprovalBroker(inner)
    assert (await broker.approve(call("write_file", call_id="1"), write_file)).allowed
    assert (await broker.approve(call("write_file", call_id="2"), write_file)).allowed
    assert inner.asked == ["1"]
    assert broker.remembered == frozenset({"write_file"})
    assert (await broker.approve(call("edit_file", call_id="3"), edit_file)).allowed
    assert inner.asked == ["1", "3"]


async def test_always_for_the_web_is_an_allow_once() -> None:
    inner = Counting(Decision.allow(always=True))
    broker = ApprovalBroker(inner)
    for n in "12":
        assert (await broker.approve(call("web_fetch", call_id=n), web_fetch)).allowed
    assert inner.asked == ["1", "2"]
    assert broker.remembered == frozenset()


async def test_a_cancel_while_waiting_ends_the_wait_and_the_call_never_runs() -> None:
    class Never:
        async def approve(self, call: ToolCall, tool: Any) -> Decision:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    token = CancellationToken()
    broker = ApprovalBroker(Never(), token)
    waiting = asyncio.ensure_future(broker.approve(call("write_file"), None))
    await asyncio.sleep(0)
    token.cancel("stop")
    with pytest.raises(Cancelled):
        await waiting


class Broken:
    """A person's approver with a bug: it raises, or answers with something of its own."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    async def approve(self, call: ToolCall, tool: Any) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (RuntimeError("the callback's database is down"), "the approver failed (RuntimeError"),
        (True, "the approver returned bool, not a Decision"),
        (None, "the approver returned NoneType, not a Decision"),
    ],
)
async def test_an_approver_that_breaks_says_no_by_the_policy(answer: object, said: str) -> None:
    """Law 3: an approver that raises or answers with no `Decision` is a "no" no person
    gave (blocked, by the policy), not a crash of the run and never an allow."""
    decision = await ApprovalBroker(Broken(answer)).ask(call("write_file"), write_file)
    assert not decision.allowed
    assert decision.blocked_by_policy
    assert said in decision.reason


async def test_a_cancel_while_a_broken_approver_waits_is_still_the_runs_cancel() -> None:
    """The broker's fail-closed path does not swallow the run's own `Cancelled`."""
    token = CancellationToken()

    class Waiting:
        async def approve(self, call: ToolCall, tool: Any) -> Decision:
            await asyncio.sleep(10)
            raise AssertionError("unreachable")

    asking = asyncio.ensure_future(ApprovalBroker(Waiting(), token).ask(call("w"), write_file))
    await asyncio.sleep(0)
    token.cancel("stop")
    with pytest.raises(Cancelled):
        await asking


# ── an approver whose answer is known ──────────────────────────────────────────────


async def test_an_allow_all_is_not_asked_and_a_cancelled_run_still_runs_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`AllowAll` allows every call without looking at it (`--yes`, a batch run): the
    broker answers for it, with no wait or race, but a cancelled run's call never runs."""
    from tiller.policy import AllowAll

    asked: list[str] = []

    async def approve(self: AllowAll, call: ToolCall, tool: Any) -> Decision:
        asked.append(call.id)
        return Decision.allow()

    monkeypatch.setattr(AllowAll, "approve", approve)
    token = CancellationToken()
    broker = ApprovalBroker(AllowAll(), token)
    assert (await broker.ask(call("write_file"), write_file)).allowed
    assert asked == []
    token.cancel("stop")
    with pytest.raises(Cancelled):
        await broker.ask(call("write_file", call_id="c2"), write_file)


async def test_an_approver_built_on_allow_all_that_looks_is_asked() -> None:
    from tiller.policy import AllowAll, AskReason

    explained: list[str] = []

    class Looking(AllowAll):
        async def approve(self, call: ToolCall, tool: Any) -> Decision:
            return Decision.deny("looked, and no")

    class Explaining(AllowAll):
        async def approve_explained(self, call: ToolCall, tool: Any, why: AskReason) -> Decision:
            explained.append(why.reason)
            return Decision.allow()

    assert not (await ApprovalBroker(Looking()).ask(call("write_file"), write_file)).allowed
    why = AskReason("ask mode asks")
    assert (await ApprovalBroker(Explaining()).ask(call("w"), write_file, why=why)).allowed
    assert explained == ["ask mode asks"]


def test_a_key_from_arguments_the_caller_parsed() -> None:
    shell = call("execute_command", '{"command": "make"}')
    assert approval_key(shell, SHELL, {"command": "make  test"}) == "execute_command:make test"
    assert approval_key(shell, SHELL) == "execute_command:make"

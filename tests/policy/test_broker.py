"""`ApprovalBroker`: "always" keys as narrow as the danger; a cancel answers deny."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tiller.cancel import CancellationToken
from tiller.conversation import ToolCall
from tiller.errors import Cancelled
from tiller.policy import ApprovalBroker, Decision, approval_key


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
    assert approval_key(call("execute_command", '{"command": " make\\ttest "}')) == (
        "execute_command:make test"
    )
    assert approval_key(call("execute_command", "not json")) is None
    assert approval_key(call("execute_command", '{"command": 3}')) is None
    assert approval_key(call("write_file")) == "write_file"
    assert approval_key(call("web_fetch")) is None
    assert approval_key(call("github__create_issue")) is None


async def test_always_is_remembered_for_its_key_only() -> None:
    inner = Counting(Decision.allow(always=True))
    broker = ApprovalBroker(inner)
    assert (await broker.approve(call("write_file", call_id="1"), None)).allowed
    assert (await broker.approve(call("write_file", call_id="2"), None)).allowed
    assert inner.asked == ["1"]
    assert broker.remembered == frozenset({"write_file"})
    assert (await broker.approve(call("edit_file", call_id="3"), None)).allowed
    assert inner.asked == ["1", "3"]


async def test_always_for_the_web_is_an_allow_once() -> None:
    inner = Counting(Decision.allow(always=True))
    broker = ApprovalBroker(inner)
    for n in "12":
        assert (await broker.approve(call("web_fetch", call_id=n), None)).allowed
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

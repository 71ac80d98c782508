"""The invoice cases' approver: edits of the copy's code and sandboxed commands are
allowed; edits of the tests, paths outside the workspace and unsandboxed tools are not."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tiller.conversation import ToolCall
from tiller.examples.invoice_eval import InvoiceCaseApprover, invoice_fixer_tools
from tiller.policy import Decision
from tiller.tools import Capability, RiskClass, tool

TOOLS = {tool.name: tool for tool in invoice_fixer_tools()}


async def decide(tool: str, **arguments: Any) -> Decision:
    call = ToolCall(id="c1", name=tool, arguments=orjson.dumps(arguments).decode())
    return await InvoiceCaseApprover().approve(call, TOOLS[tool])


async def test_edits_of_the_code_and_sandboxed_commands_are_allowed() -> None:
    assert (await decide("edit_file", path="invoice.py", old="a", new="b")).allowed
    assert (await decide("write_file", path="notes/plan.md", content="x")).allowed
    assert (await decide("execute_command", command="python -m unittest -q")).allowed


async def test_edits_of_the_tests_are_blocked_saying_why() -> None:
    decision = await decide("edit_file", path="test_invoice.py", old="a", new="b")
    assert decision.blocked_by_policy
    assert "scored by running the tests" in (decision.reason or "")
    assert not (await decide("write_file", path="pkg/test_more.py", content="")).allowed


async def test_paths_outside_the_workspace_are_blocked() -> None:
    for path in ("/etc/passwd", "../invoice.py", "sub/../../x.py"):
        decision = await decide("write_file", path=path, content="x")
        assert decision.blocked_by_policy, path
        assert "not a path inside the case's workspace" in (decision.reason or "")


async def test_a_tool_that_is_neither_sandboxed_nor_an_edit_is_blocked() -> None:
    tools = {tool.name: tool for tool in invoice_fixer_tools()}
    ask = tools["ask_user"]
    call = ToolCall(id="c1", name="ask_user", arguments='{"question": "may I?"}')
    decision = await InvoiceCaseApprover().approve(call, ask)
    assert decision.blocked_by_policy and "neither a sandboxed command" in (decision.reason or "")
    bad = ToolCall(id="c2", name="edit_file", arguments="not json")
    assert (await InvoiceCaseApprover().approve(bad, TOOLS["edit_file"])).blocked_by_policy


@tool(risk=RiskClass.FILE_MUTATION, capabilities=Capability.EXTERNAL_SEND)
def upload_file(path: str) -> str:
    """Uploads a file of the workspace somewhere."""
    return path


@tool(risk="external_access")
def open_in_browser(path: str) -> str:
    """Opens a file of the workspace in whatever the host has."""
    return path


@tool(risk=RiskClass.NETWORK)
def post_file(path: str) -> str:
    """Posts a file of the workspace to a server."""
    return path


@tool
def undeclared(path: str) -> str:
    """Declares no risk: the policy engine treats it as external access."""
    return path


@tool(risk=RiskClass.FILE_MUTATION, command_of=lambda arguments: str(arguments.get("path")))
def run_file(path: str) -> str:
    """Runs a file of the workspace as a command on the host (not sandboxed)."""
    return path


@pytest.mark.parametrize(
    "risky", [upload_file, open_in_browser, post_file, undeclared, run_file], ids=lambda t: t.name
)
async def test_a_tool_declaring_more_than_file_access_is_blocked_whatever_its_paths(
    risky: Any,
) -> None:
    """Relative paths are not enough: what the tool declares it may do decides."""
    call = ToolCall(id="c1", name=risky.name, arguments='{"path": "invoice.py"}')
    assert tuple(risky.paths_of({"path": "invoice.py"})) == ("invoice.py",)
    decision = await InvoiceCaseApprover().approve(call, risky)
    assert decision.blocked_by_policy, risky.name
    assert "an invoice case may only" in (decision.reason or ""), decision.reason

"""`tiller outbox list | show | edit | send | reject`, and `send_outbox_item`, on a SQLite
file, across a process restart.

Items are staged with the library in one store session, as the gate will stage them; the
commands run against the file in fresh sessions, through typer's runner and in one test
as real subprocesses (`python -m tiller`). The outbox tool appends to `sent.txt` in the
workspace, so "sent exactly once, with the edited arguments" is checked on disk.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from typer.testing import CliRunner, Result

from tiller.cli import _outbox, app
from tiller.cli._outbox import OUTBOX_BUCKET as CLI_OUTBOX_BUCKET
from tiller.cli._outbox import send_outbox_item
from tiller.conversation import Taint, ToolCall, UserMessage
from tiller.errors import Cancelled, InvalidToolArguments, UsageError
from tiller.loop import RunContext, record_policy
from tiller.ops import check_arguments
from tiller.state import RunState
from tiller.store import (
    OUTBOX_BUCKET,
    Bus,
    CheckpointStore,
    OutboxItem,
    OutboxStatusError,
    OutboxStore,
    open_bus,
)
from tiller.tools import BaseTool, ExecContext, ToolOutput

T = TypeVar("T")

AGENT_MODULE = '''
from tiller.errors import Cancelled
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import ExecContext, ToolError, tool


@tool
def send_message(to: str, body: str, ctx: ExecContext) -> str:
    """Send a message (here: append it to sent.txt)."""
    with (ctx.workdir / "sent.txt").open("a") as log:
        log.write(f"{to}: {body}\\n")
    return f"sent to {to}"


@tool
def bounce(to: str) -> str:
    """A send the far side refuses."""
    raise ToolError(f"{to} does not accept messages")


@tool
def explode(to: str) -> str:
    """A send that crashes."""
    raise RuntimeError("the socket closed")


@tool
async def interrupted(to: str) -> str:
    """A send that is cancelled while it runs."""
    raise Cancelled("the person pressed Ctrl+C")


def build():
    return Agent(
        ScriptedModel(["nothing to do"]),
        [send_message, bounce, explode, interrupted],
        name="sender",
    )
'''


@pytest.fixture
def agent_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"outbox_agent_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(AGENT_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))  # the commands add the cwd
    return name


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def on_store(url: str, work: Callable[[Bus], Coroutine[Any, Any, T]]) -> T:
    async def run() -> T:
        async with await open_bus(url) as bus:
            return await work(bus)

    return asyncio.run(run())


def tiller(*args: str, input: str | None = None) -> Result:
    assert "--store" in args, "never the default store: it is the user's own"
    return CliRunner().invoke(app, list(args), input=input)


def sent(workspace: Path) -> list[str]:
    path = workspace / "sent.txt"
    return path.read_text().splitlines() if path.exists() else []


def staged(
    url: str,
    workspace: Path,
    agent_ref: str | None,
    *,
    tool: str = "send_message",
    run_id: str = "r-out",
    **arguments: object,
) -> OutboxItem:
    """A run that staged a call: its checkpoint (naming its agent, if `agent_ref`) and the
    item, written in a store session of their own."""

    async def work(bus: Bus) -> OutboxItem:
        state = RunState(run_id=run_id, thread_id=f"t-{run_id}", messages=[UserMessage(text="go")])
        record_policy(state, RunContext.sandboxed(workspace), agent_ref=agent_ref)
        await CheckpointStore(bus).save(state, "finished")
        call = ToolCall(
            id="call-1",
            name=tool,
            arguments=orjson.dumps(arguments or {"to": "ana", "body": "draft"}).decode(),
        )
        return await OutboxStore(bus).stage(
            call,
            run_id=run_id,
            thread_id=f"t-{run_id}",
            taint=Taint.PRIVATE_DATA,
            workspace=str(workspace),
        )

    return on_store(url, work)


def item(url: str, item_id: str) -> OutboxItem:
    return on_store(url, lambda bus: OutboxStore(bus).get(item_id))


def test_the_cli_bucket_name_is_the_stores() -> None:
    assert CLI_OUTBOX_BUCKET == OUTBOX_BUCKET


# ── the round trips ──────────────────────────────────────────────────────────────────


def test_stage_edit_send(url: str, workspace: Path, agent_module: str) -> None:
    draft = staged(url, workspace, f"{agent_module}:build")

    listed = tiller("outbox", "list", "--store", url)
    assert listed.exit_code == 0, listed.output
    header, row = listed.stdout.splitlines()
    assert header.split() == ["ID", "RUN", "TOOL", "ARGS", "AGE", "STATUS"]
    assert row.split()[:4] == [draft.id, "r-out", "send_message", '{"to":"ana","body":"draft"}']
    assert row.split()[-1] == "staged"

    edited = tiller(
        "outbox", "edit", draft.id, "--args", '{"to": "ana", "body": "final"}', "--store", url
    )
    assert edited.exit_code == 0, edited.output
    assert f"tiller outbox send {draft.id}" in edited.stdout

    shown = tiller("outbox", "show", draft.id, "--store", url)
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "status     staged" in out and "taint      private_data" in out
    assert f"workspace  {workspace}" in out
    drafted_part, edited_part = out.split("edited arguments (a send uses these)")
    assert '"body": "draft"' in drafted_part and '"body": "final"' in edited_part

    done = tiller("outbox", "send", draft.id, "--yes", "--store", url)
    assert done.exit_code == 0, done.output
    assert f"sent {draft.id}: send_message → sent to ana" in done.stdout
    assert sent(workspace) == ["ana: final"]  # once, with the edited arguments
    after = item(url, draft.id)
    assert after.status == "sent" and after.result is not None
    assert (after.result.content, after.result.is_error) == ("sent to ana", False)

    again = tiller("outbox", "send", draft.id, "--yes", "--store", url)
    assert again.exit_code == 2
    assert f"{draft.id} is sent: an item is sent at most once" in again.stderr
    assert sent(workspace) == ["ana: final"]
    late_edit = tiller("outbox", "edit", draft.id, "--args", "{}", "--store", url)
    assert late_edit.exit_code == 2 and "only a staged item can be edited" in late_edit.stderr

    shown = tiller("outbox", "show", draft.id, "--store", url)
    assert "status     sent" in shown.stdout and "result\n  sent to ana" in shown.stdout
    assert "no staged items" in tiller("outbox", "list", "--store", url).stdout
    everything = tiller("outbox", "list", "--all", "--store", url)
    assert everything.stdout.splitlines()[1].split()[-1] == "sent"


def test_stage_reject(url: str, workspace: Path, agent_module: str) -> None:
    draft = staged(url, workspace, f"{agent_module}:build")
    no_reason = tiller("outbox", "reject", draft.id, "--store", url)
    assert no_reason.exit_code == 2 and "--reason" in no_reason.output
    done = tiller("outbox", "reject", draft.id, "--reason", "wrong person", "--store", url)
    assert done.exit_code == 0, done.output
    assert f"rejected {draft.id} (send_message): wrong person" in done.stdout
    refused = tiller("outbox", "send", draft.id, "--yes", "--store", url)
    assert refused.exit_code == 2
    assert "rejected" in refused.stderr
    assert sent(workspace) == []
    rejected = item(url, draft.id)
    assert (rejected.status, rejected.reject_reason) == ("rejected", "wrong person")
    assert "rejected   wrong person" in tiller("outbox", "show", draft.id, "--store", url).stdout
    twice = tiller("outbox", "reject", draft.id, "--reason", "again", "--store", url)
    assert twice.exit_code == 2


def test_the_round_trip_as_separate_processes(url: str, workspace: Path, agent_module: str) -> None:
    draft = staged(url, workspace, f"{agent_module}:build")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tiller", "outbox", *args, "--store", url],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            stdin=subprocess.DEVNULL,
            cwd=workspace.parent,  # where the agent module is
        )

    edited = run("edit", draft.id, "--args", '{"to": "bo", "body": "from afar"}')
    assert edited.returncode == 0, edited.stderr
    headless = run("send", draft.id)
    assert headless.returncode == 2 and "--yes" in headless.stderr
    done = run("send", draft.id, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sent(workspace) == ["bo: from afar"]
    again = run("send", draft.id, "--yes")
    assert again.returncode == 2 and "at most once" in again.stderr
    assert sent(workspace) == ["bo: from afar"]


# ── what is refused before anything is sent ──────────────────────────────────────────


def test_headless_without_yes_is_refused(url: str, workspace: Path, agent_module: str) -> None:
    draft = staged(url, workspace, f"{agent_module}:build")
    refused = tiller("outbox", "send", draft.id, "--store", url)
    assert refused.exit_code == 2
    assert "no one is at a terminal" in refused.stderr and "--yes" in refused.stderr
    assert item(url, draft.id).status == "staged"
    assert sent(workspace) == []


def test_at_a_terminal_the_person_confirms(
    url: str, workspace: Path, agent_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_outbox, "_interactive", lambda: True)
    draft = staged(url, workspace, f"{agent_module}:build")
    declined = tiller("outbox", "send", draft.id, "--store", url, input="n\n")
    assert declined.exit_code == 1, declined.output
    assert 'send_message({"to":"ana","body":"draft"})' in declined.stdout
    assert "taint: private_data" in declined.stdout
    assert f"not sent: {draft.id} stays staged" in declined.stdout
    assert item(url, draft.id).status == "staged" and sent(workspace) == []
    confirmed = tiller("outbox", "send", draft.id, "--store", url, input="y\n")
    assert confirmed.exit_code == 0, confirmed.output
    assert sent(workspace) == ["ana: draft"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("[1]", "must be a JSON object"),
        ("nope", "--args is not JSON"),
    ],
)
def test_edit_takes_a_json_object(
    url: str, workspace: Path, agent_module: str, args: str, message: str
) -> None:
    draft = staged(url, workspace, f"{agent_module}:build")
    refused = tiller("outbox", "edit", draft.id, "--args", args, "--store", url)
    assert refused.exit_code == 2 and message in refused.stderr
    assert item(url, draft.id).edited_arguments is None


def test_arguments_that_do_not_fit_the_tool_are_refused_at_send(
    url: str, workspace: Path, agent_module: str
) -> None:
    draft = staged(url, workspace, f"{agent_module}:build")
    edited = tiller("outbox", "edit", draft.id, "--args", '{"to": 3}', "--store", url)
    assert edited.exit_code == 0  # the tool is known only at send
    refused = tiller("outbox", "send", draft.id, "--yes", "--store", url)
    assert refused.exit_code == 2
    assert "invalid arguments for tool 'send_message'" in refused.stderr
    assert "body" in refused.stderr
    assert item(url, draft.id).status == "staged" and sent(workspace) == []
    tiller("outbox", "edit", draft.id, "--args", '{"to": "ana", "body": "fixed"}', "--store", url)
    assert tiller("outbox", "send", draft.id, "--yes", "--store", url).exit_code == 0
    assert sent(workspace) == ["ana: fixed"]


def test_a_run_that_does_not_record_its_agent(url: str, workspace: Path, agent_module: str) -> None:
    draft = staged(url, workspace, None)
    refused = tiller("outbox", "send", draft.id, "--yes", "--store", url)
    assert refused.exit_code == 2 and "pass --agent module:attr" in refused.stderr
    wrong = tiller("outbox", "send", draft.id, "--yes", "--agent", "nowhere:x", "--store", url)
    assert wrong.exit_code == 2 and "cannot import module 'nowhere'" in wrong.stderr
    assert item(url, draft.id).status == "staged"
    done = tiller(
        "outbox", "send", draft.id, "--yes", "--agent", f"{agent_module}:build", "--store", url
    )
    assert done.exit_code == 0, done.output
    assert sent(workspace) == ["ana: draft"]


def test_an_unknown_tool_or_item(url: str, workspace: Path, agent_module: str) -> None:
    draft = staged(url, workspace, f"{agent_module}:build", tool="fax")
    refused = tiller("outbox", "send", draft.id, "--yes", "--store", url)
    assert refused.exit_code == 2 and "has no tool 'fax'" in refused.stderr
    for command in (["show"], ["send", "--yes"], ["reject", "--reason", "x"]):
        done = tiller("outbox", command[0], "ob-nope", *command[1:], "--store", url)
        assert done.exit_code == 2, command
        assert "no outbox item 'ob-nope'" in done.stderr


def test_send_in_another_workspace(url: str, workspace: Path, agent_module: str) -> None:
    draft = staged(url, workspace, f"{agent_module}:build")
    moved = workspace.parent / "moved"
    moved.mkdir()
    done = tiller("outbox", "send", draft.id, "--yes", "-w", str(moved), "--store", url)
    assert done.exit_code == 0, done.output
    assert sent(moved) == ["ana: draft"] and sent(workspace) == []


# ── what a send records ──────────────────────────────────────────────────────────────


def test_a_tool_error_is_sent_with_its_error(url: str, workspace: Path, agent_module: str) -> None:
    draft = staged(url, workspace, f"{agent_module}:build", tool="bounce", to="x")
    done = tiller("outbox", "send", draft.id, "--yes", "--store", url)
    assert done.exit_code == 1
    assert "bounce reported an error: x does not accept messages" in done.stdout
    after = item(url, draft.id)
    assert after.status == "sent"  # the tool ran: it is never run again
    assert after.result is not None and after.result.is_error
    assert tiller("outbox", "send", draft.id, "--yes", "--store", url).exit_code == 2


def test_a_crash_marks_the_item_failed(url: str, workspace: Path, agent_module: str) -> None:
    draft = staged(url, workspace, f"{agent_module}:build", tool="explode", to="x")
    done = tiller("outbox", "send", draft.id, "--yes", "--store", url)
    assert done.exit_code == 1
    assert "failed while sending: tool explode failed: RuntimeError: the socket closed" in (
        done.stderr
    )
    after = item(url, draft.id)
    assert (after.status, after.result) == ("failed", None)
    again = tiller("outbox", "send", draft.id, "--yes", "--store", url)
    assert again.exit_code == 2 and "is failed" in again.stderr


async def test_an_interrupted_send_is_marked_failed(
    tmp_path: Path, workspace: Path, agent_module: str
) -> None:
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        draft = await OutboxStore(bus).stage(
            ToolCall(id="c", name="interrupted", arguments='{"to": "x"}'),
            run_id="r",
            thread_id="t",
            workspace=str(workspace),
        )
        with pytest.raises(Cancelled):
            await send_outbox_item(bus, draft.id, agent=f"{agent_module}:build")
        after = await OutboxStore(bus).get(draft.id)
        assert (after.status, after.failure) == (
            "failed",
            "interrupted while sending (Cancelled)",
        )
        with pytest.raises(OutboxStatusError, match="sent at most once"):
            await send_outbox_item(bus, draft.id, agent=f"{agent_module}:build")


async def test_the_release_check_sees_the_edited_call_and_can_refuse(
    tmp_path: Path, workspace: Path, agent_module: str
) -> None:
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        outbox = OutboxStore(bus)
        draft = await outbox.stage(
            ToolCall(id="c", name="send_message", arguments='{"to": "ana", "body": "draft"}'),
            run_id="r",
            thread_id="t",
            workspace=str(workspace),
        )
        await outbox.edit(draft.id, {"to": "eve", "body": "secrets"})
        seen: list[tuple[str, str, dict[str, Any]]] = []

        async def interlock(found: OutboxItem, tool: Any, arguments: dict[str, Any]) -> str | None:
            seen.append((found.id, tool.name, arguments))
            return (
                "private data would leave to an untrusted recipient"
                if "eve" in str(arguments)
                else None
            )

        with pytest.raises(UsageError, match="was not sent: private data would leave"):
            await send_outbox_item(
                bus, draft.id, agent=f"{agent_module}:build", release_check=interlock
            )
        assert seen == [(draft.id, "send_message", {"to": "eve", "body": "secrets"})]
        assert (await outbox.get(draft.id)).status == "staged"
        assert sent(workspace) == []

        await outbox.edit(draft.id, {"to": "ana", "body": "fine"})
        done = await send_outbox_item(
            bus, draft.id, agent=f"{agent_module}:build", release_check=interlock
        )
        assert done.status == "sent"
        assert sent(workspace) == ["ana: fine"]


# ── schema checks for tools that are not @tool functions ─────────────────────────────


class Fax(BaseTool):
    """A hand-written tool (as MCP proxies are): its schema is JSON Schema, not a signature."""

    name = "fax"
    description = "Send a fax."

    def __init__(self) -> None:
        self.input_schema = {
            "type": "object",
            "properties": {"number": {"type": "string"}, "pages": {"type": "integer"}},
            "required": ["number"],
            "additionalProperties": False,
        }

    async def call(self, args: dict[str, Any], ctx: ExecContext) -> ToolOutput:
        return ToolOutput("faxed")


def test_other_tools_are_checked_against_their_input_schema() -> None:
    check_arguments(Fax(), {"number": "555", "pages": 2})
    with pytest.raises(InvalidToolArguments, match="'number' is a required property"):
        check_arguments(Fax(), {"pages": 2})
    with pytest.raises(InvalidToolArguments, match="pages: 'two' is not of type 'integer'"):
        check_arguments(Fax(), {"number": "555", "pages": "two"})
    broken = Fax()
    broken.input_schema = {"type": "nonsense"}
    with pytest.raises(UsageError, match="invalid input schema"):
        check_arguments(broken, {})

"""A run's mailbox route is part of its recorded policy (run state version 6), so every
process that continues the run attaches the same route (review of issue 18: `tiller run
--mailbox` lost its mailbox when approved elsewhere)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from tiller.errors import UsageError
from tiller.loop import (
    Agent,
    FromCheckpoint,
    MailboxRoute,
    RunContext,
    record_policy,
    run_context_from,
)
from tiller.model import ScriptedModel, TurnInfo
from tiller.state import SCHEMA_VERSION, RunState
from tiller.store import Bus, MailboxStore, open_bus
from tiller.tools import Jail


@pytest.fixture
async def bus() -> AsyncIterator[Bus]:
    async with await open_bus("memory://") as opened:
        yield opened


def _recorded(tmp_path: Path, route: MailboxRoute | None) -> RunState:
    run_ctx = RunContext(jail=Jail(tmp_path)).with_mailbox(route)
    state = RunState(run_id="r", thread_id="t")
    # Through JSON, as another process reads it.
    return RunState.from_json(record_policy(state, run_ctx).to_json())


async def test_the_route_is_recorded_and_rebuilt_on_the_store(tmp_path: Path, bus: Bus) -> None:
    store = MailboxStore(bus, "my-mail", max_bytes=100, max_pending=3)
    route = MailboxRoute(store, False, name="ops", max_per_turn=2, send_tool=True)
    state = _recorded(tmp_path, route)
    rebuilt = run_context_from(state, store=bus).mailbox
    assert rebuilt is not None
    assert (rebuilt.name, rebuilt.deliver, rebuilt.max_per_turn, rebuilt.send_tool) == (
        "ops", False, 2, True,
    )  # fmt: skip
    assert rebuilt.store.bus is bus
    assert (rebuilt.store.bucket, rebuilt.store.max_bytes, rebuilt.store.max_pending) == (
        "my-mail", 100, 3,
    )  # fmt: skip


async def test_a_run_without_a_mailbox_continues_without_one(tmp_path: Path, bus: Bus) -> None:
    state = _recorded(tmp_path, None)
    assert "mailbox" not in (state.policy or {})
    assert run_context_from(state, store=bus).mailbox is None


async def test_a_version_5_state_reads_with_no_mailbox(tmp_path: Path, bus: Bus) -> None:
    raw = orjson.loads(_recorded(tmp_path, None).to_json())
    raw["schema_version"] = 5
    loaded = RunState.from_json(orjson.dumps(raw))
    assert loaded.schema_version == SCHEMA_VERSION
    assert run_context_from(loaded, store=bus).mailbox is None


async def test_a_recorded_mailbox_needs_the_store_to_resume(tmp_path: Path, bus: Bus) -> None:
    state = _recorded(tmp_path, MailboxRoute(bus, name="ops"))
    assert run_context_from(state, store=None).mailbox is None  # its budget, say
    agent = Agent(ScriptedModel(["done"]), [], name="ops")
    with pytest.raises(UsageError, match="had a mailbox"):
        await agent.resume(state, {}, ctx=FromCheckpoint())


def _offering(offered: list[list[str]]) -> ScriptedModel:
    """A model that notes the tools each of its turns is offered, and answers "done"."""

    def turn(messages: object, info: TurnInfo) -> str:
        offered.append([spec.name for spec in info.tools])
        return "done"

    return ScriptedModel(turn, per_run=False)


async def test_a_route_that_gives_message_send_gives_it_to_the_run(
    tmp_path: Path, bus: Bus
) -> None:
    offered: list[list[str]] = []
    agent = Agent(_offering(offered), [], name="ops")
    run_ctx = RunContext(jail=Jail(tmp_path)).with_mailbox(
        MailboxRoute(bus, name="ops", send_tool=True)
    )
    assert (await agent.run_in(run_ctx, "hi")).completed
    plain = RunContext(jail=Jail(tmp_path)).with_mailbox(MailboxRoute(bus))
    assert (await agent.run_in(plain, "hi")).completed
    assert offered == [["message_send"], []]  # a route gives it only when it says so


async def test_the_send_tool_is_the_runs_not_the_shared_agents(tmp_path: Path, bus: Bus) -> None:
    # One agent, served: a run under a route that gives `message_send` (say, a resumed one
    # that recorded it) must not leave the tool to the agent's next runs, which have no
    # mailbox to send from.
    offered: list[list[str]] = []
    agent = Agent(_offering(offered), [], name="ops")
    with_route = RunContext(jail=Jail(tmp_path)).with_mailbox(
        MailboxRoute(bus, name="ops", send_tool=True)
    )
    assert (await agent.run_in(with_route, "hi")).completed
    assert (await agent.run_in(RunContext(jail=Jail(tmp_path)), "hi")).completed
    assert offered == [["message_send"], []]
    assert "message_send" not in agent.registry

"""Mail reaches a run exactly once across a crash and a takeover (issue 16).

Mail is claimed irreversibly at the top of a step, and the step's checkpoint comes after
the model call. Worker A runs R durably on a real SQLite file: it claims a message, then
its model call hangs (its process is as good as dead) before any checkpoint holds the
message. A's lease lapses (the fake clock) and R is recovered: the message is delivered
by the recovery, once. A message that A's checkpoint did hold is not delivered again; and
a process whose run was taken over claims nothing more.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tiller.conversation import Taint, UserMessage
from tiller.loop import Agent, MailboxRoute, RunContext, RunOptions, recover
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.state import RunState, StopCause
from tiller.store import (
    Bus,
    CheckpointStore,
    LeaseLost,
    MailboxStore,
    MailClaim,
    MailIdentity,
    StoreDurability,
    open_bus,
)
from tiller.tools import ExecContext, tool

TTL = 30.0
ALICE = MailIdentity("alice", session="thread-a", run_id="run-a")
TEXT = "the meeting moved to noon"


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def bus(tmp_path: Path) -> AsyncIterator[tuple[Bus, _Clock]]:
    clock = _Clock()
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}", clock=clock) as opened:
        yield opened, clock


def _times_folded(state: RunState, text: str = TEXT) -> int:
    return sum(
        message.text.count(text) for message in state.messages if isinstance(message, UserMessage)
    )


def _ctx(tmp_path: Path, bus: Bus) -> RunContext:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    route = MailboxRoute(bus)
    return RunContext.sandboxed(workspace, AllowAll()).with_store(bus).with_mailbox(route)


OPTIONS = RunOptions(checkpoint_bucket="cp", lease_ttl=TTL)


async def test_mail_claimed_by_a_process_that_died_before_its_checkpoint_is_delivered_once(
    bus: tuple[Bus, _Clock], tmp_path: Path
) -> None:
    store, clock = bus
    mailbox, checkpoints = MailboxStore(store), CheckpointStore(store, "cp")
    message = await mailbox.send("bob", TEXT, sender=ALICE, taint=Taint.NONE)
    claimed, release = asyncio.Event(), asyncio.Event()

    async def hangs(messages: list[Any], info: Any) -> str:
        claimed.set()  # the mail is claimed and folded, no checkpoint holds it yet
        await release.wait()
        return "a done"

    ctx = _ctx(tmp_path, store)
    worker_a = Agent(ScriptedModel(hangs), [], name="bob")
    running = asyncio.create_task(worker_a.run_in(ctx, "go", OPTIONS, run_id="R"))
    try:
        async with asyncio.timeout(10):
            await claimed.wait()
        (taken,) = await mailbox.list("bob")
        assert (taken.status, taken.delivered_run) == ("delivered", "R")
        assert _times_folded((await checkpoints.load("R")).state) == 0

        clock.now += TTL + 1  # A's lease lapses: as if its process had died
        worker_b = Agent(ScriptedModel(["b done"], per_run=False), [], name="bob")
        recovered = await recover("R", store, agent=worker_b, ctx=ctx, bucket="cp")
        assert recovered.completed
        assert _times_folded(recovered.state) == 1
        assert recovered.state.folded_mail == [message.id]
        final = await checkpoints.load("R")
        assert _times_folded(final.state) == 1 and final.state.folded_mail == [message.id]
    finally:
        release.set()
        async with asyncio.timeout(10):
            stale = await running
    assert stale.stop_cause is StopCause.ERROR and "LeaseLost" in (stale.error or "")
    # Nothing of A's reached the store: the checkpoint is B's, with the message once.
    assert _times_folded((await checkpoints.load("R")).state) == 1


async def test_mail_a_checkpoint_holds_is_not_delivered_again_by_the_recovery(
    bus: tuple[Bus, _Clock], tmp_path: Path
) -> None:
    store, clock = bus
    mailbox, checkpoints = MailboxStore(store), CheckpointStore(store, "cp")
    message = await mailbox.send("bob", TEXT, sender=ALICE, taint=Taint.NONE)
    entered, release = asyncio.Event(), asyncio.Event()

    @tool
    async def stuck(ctx: ExecContext) -> str:
        """Hang until released (the worker is paused, as good as dead)."""
        entered.set()
        await release.wait()
        return "stuck done"

    ctx = _ctx(tmp_path, store)
    call = {"tool_calls": [{"name": "stuck", "arguments": {}}]}
    worker_a = Agent(ScriptedModel([call, "a done"]), [stuck], name="bob")
    running = asyncio.create_task(worker_a.run_in(ctx, "go", OPTIONS, run_id="R"))
    try:
        async with asyncio.timeout(10):
            await entered.wait()
        held = (await checkpoints.load("R")).state
        assert _times_folded(held) == 1 and held.folded_mail == [message.id]

        clock.now += TTL + 1
        (stuck_call,) = (await checkpoints.calls("R")).keys()
        await checkpoints.mark_call("R", stuck_call, content="done", is_error=False)
        worker_b = Agent(ScriptedModel(["b done"], per_run=False), [stuck], name="bob")
        recovered = await recover("R", store, agent=worker_b, ctx=ctx, bucket="cp")
        assert recovered.completed
        assert _times_folded(recovered.state) == 1
        assert recovered.state.folded_mail == [message.id]
        assert len(recovered.state.messages) == len(held.messages) + 2  # a result, an answer
    finally:
        release.set()
        async with asyncio.timeout(10):
            await running


async def test_a_run_taken_over_before_its_claim_claims_nothing(
    bus: tuple[Bus, _Clock], tmp_path: Path
) -> None:
    """The takeover lands between A's last checkpoint and its claim (here: as the claim
    starts): A's claim is refused by its lease check, A stops with `LeaseLost`, and the
    message waits, pending, for the run's holder."""
    store, _ = bus
    checkpoints = CheckpointStore(store, "cp")

    class TakenOverMeanwhile(MailboxStore):
        async def claim(self, to: str, **kw: Any) -> MailClaim:
            await checkpoints.take_epoch("R", "the recovering process")
            return await super().claim(to, **kw)

    mailbox = TakenOverMeanwhile(store)
    await mailbox.send("bob", TEXT, sender=ALICE, taint=Taint.NONE)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ctx = RunContext.sandboxed(workspace, AllowAll()).with_store(store)
    worker_a = Agent(ScriptedModel(["a done"]), [], name="bob")
    stale = await worker_a.run_in(
        ctx.with_mailbox(MailboxRoute(mailbox)), "go", OPTIONS, run_id="R"
    )
    assert stale.stop_cause is StopCause.ERROR and "LeaseLost" in (stale.error or "")
    assert _times_folded(stale.state) == 0
    (waiting,) = await MailboxStore(store).list("bob")
    assert (waiting.status, waiting.delivered_run) == ("pending", None)


async def test_a_stale_holders_claim_is_refused_and_the_holders_claim_hands_its_own_again(
    bus: tuple[Bus, _Clock],
) -> None:
    """At the store: a claim fenced by a stale epoch takes nothing; a claim for the run
    hands again what was delivered to it and is not among the ids its state folded, and
    never what is."""
    store, clock = bus
    mailbox = MailboxStore(store)
    first = await mailbox.send("bob", "one", sender=ALICE, taint=Taint.NONE)
    stale, holder = StoreDurability(store, "cp"), StoreDurability(store, "cp")
    await stale.take_lease("R", "a", TTL)
    clock.now += TTL + 1
    await holder.take_lease("R", "b", TTL)

    async def fence_stale() -> None:
        await stale.check_lease("R")

    with pytest.raises(LeaseLost):
        await mailbox.claim("bob", run_id="R", folded=[], fence=fence_stale)
    assert [m.status for m in await mailbox.list("bob")] == ["pending"]

    async def fence_holder() -> None:
        await holder.check_lease("R")

    got: list[str] = []
    claim = await mailbox.claim(
        "bob", run_id="R", folded=[], fence=fence_holder, on_claimed=lambda m: got.append(m.id)
    )
    assert [m.id for m in claim.messages] == got == [first.id]
    second = await mailbox.send("bob", "two", sender=ALICE, taint=Taint.NONE)
    # A continuation whose state never folded `first` is handed it again, with `second`.
    again = await mailbox.claim("bob", run_id="R", folded=[], fence=fence_holder)
    assert [m.id for m in again.messages] == [first.id, second.id]
    # One whose state folded both: nothing; another run: nothing of R's.
    assert (await mailbox.claim("bob", run_id="R", folded=[first.id, second.id])).messages == []
    assert (await mailbox.claim("bob", run_id="S", folded=[])).messages == []
    # Unknown (a state from before the ids were recorded): nothing is handed again.
    assert (await mailbox.claim("bob", run_id="R", folded=None)).messages == []

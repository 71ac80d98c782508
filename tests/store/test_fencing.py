"""Fencing (issue 16): a worker whose run was taken over can write nothing more of it.

Worker A holds run R; its lease lapses (the fake clock moves past it: A was paused, or cut
off from the store), worker B takes it over and checkpoints. Every write A then tries —
checkpoint, call started, call completed, held calls, an event log batch, a lease renewal —
raises `LeaseLost` naming the run and both epochs, and the records read back are B's.
On memory, SQLite and the real NATS (the `bus` fixture).
"""

from __future__ import annotations

import orjson
import pytest

from tiller.conversation import AssistantMessage, ToolCall, UserMessage
from tiller.events import RunStartedEvent
from tiller.state import RunState
from tiller.store import (
    AlreadyResumed,
    ApprovalStore,
    Bus,
    CheckpointStore,
    EventLog,
    LeaseLost,
    StoreDurability,
)

from .conftest import FakeClock

BUCKET = "cp"
TTL = 30.0


def _state(text: str, *, held: bool = False) -> RunState:
    call = ToolCall(id="R-call-1", name="append", arguments="{}")
    return RunState(
        run_id="R",
        thread_id="R",
        agent_name="worker",
        messages=[UserMessage(text=text), AssistantMessage(tool_calls=(call,))],
        interrupts=[{"id": "i-1", "reason": "tool_call", "toolCallId": call.id}] if held else [],
    )


async def _taken_over(bus: Bus, clock: FakeClock) -> tuple[StoreDurability, StoreDurability]:
    """A took R and wrote; its lease lapsed; B took R over and checkpointed."""
    a = StoreDurability(bus, BUCKET)
    lease_a = await a.take_lease("R", "worker-a", TTL)
    assert lease_a.epoch == 1
    await a.save(_state("by a"), "running")
    await a.call_started("R", "R-call-0")
    await a.call_completed("R", "R-call-0", "done by a", is_error=False)
    clock.advance(TTL + 1)  # A is paused past its lease
    b = StoreDurability(bus, BUCKET)
    lease_b = await b.take_lease("R", "worker-b", TTL)
    assert lease_b.epoch == 2  # a new holder: the epoch went up
    await b.save(_state("by b"), "running")
    await b.call_started("R", "R-call-1")
    return a, b


async def test_a_renewed_lease_keeps_its_epoch_and_a_new_holder_gets_the_next(
    bus: Bus, clock: FakeClock
) -> None:
    a = StoreDurability(bus, BUCKET)
    lease = await a.take_lease("R", "worker-a", TTL)
    renewed = await a.renew_lease(lease, TTL)
    assert (lease.epoch, renewed.epoch) == (1, 1)
    await a.release_lease(renewed)
    # Released, the lease record is gone, but the epoch is not: the next holder counts on.
    again = await StoreDurability(bus, BUCKET).take_lease("R", "worker-b", TTL)
    assert again.epoch == 2
    assert await CheckpointStore(bus, BUCKET).epoch("R") == 2
    assert await CheckpointStore(bus, BUCKET).run_ids() == []  # the epoch is not a run


async def test_a_stale_worker_writes_no_checkpoint_and_no_call_record(
    bus: Bus, clock: FakeClock
) -> None:
    a, _ = await _taken_over(bus, clock)
    store = CheckpointStore(bus, BUCKET)
    with pytest.raises(LeaseLost) as lost:
        await a.save(_state("stale a"), "running")
    assert (lost.value.run_id, lost.value.epoch, lost.value.current) == ("R", 1, 2)
    message = str(lost.value)
    assert "run 'R' was taken over by another process" in message
    assert "epoch is now 2" in message and "holds epoch 1" in message
    assert "tiller runs resume R" in message
    with pytest.raises(LeaseLost):
        await a.call_started("R", "R-call-2")
    with pytest.raises(LeaseLost):  # B's call: A must not complete it with its result
        await a.call_completed("R", "R-call-1", "done by a", is_error=False)
    checkpoint = await store.load("R")
    assert checkpoint.state.messages[0] == UserMessage(text="by b")
    assert checkpoint.epoch == 2
    calls = await store.calls("R")
    assert sorted(calls) == ["R-call-0", "R-call-1"]  # no R-call-2
    assert calls["R-call-1"].status == "started"  # B's record, untouched
    assert calls["R-call-0"].content == "done by a"  # what A wrote before stays


async def test_a_stale_worker_holds_no_call_and_renews_nothing(bus: Bus, clock: FakeClock) -> None:
    a, b = await _taken_over(bus, clock)
    with pytest.raises(LeaseLost):  # its first write after the takeover
        await a.hold_calls(_state("stale a", held=True), reason="ask", risks={}, reasons={})
    assert await ApprovalStore(bus).list() == []
    # B, the holder, can hold the same call: the store works, A was refused.
    await b.hold_calls(_state("by b", held=True), reason="ask", risks={}, reasons={})
    assert [held.call_id for held in await ApprovalStore(bus).list()] == ["R-call-1"]


async def test_a_stale_lease_is_not_renewed_nor_released(bus: Bus, clock: FakeClock) -> None:
    a = StoreDurability(bus, BUCKET)
    lease_a = await a.take_lease("R", "worker-a", TTL)
    clock.advance(TTL + 1)
    await StoreDurability(bus, BUCKET).take_lease("R", "worker-b", TTL)
    with pytest.raises(LeaseLost, match="holds epoch 1"):
        await a.renew_lease(lease_a, TTL)
    await a.release_lease(lease_a)
    holder = await CheckpointStore(bus, BUCKET).holder("R")
    assert holder is not None and holder[0] == "worker-b"


async def test_a_stale_worker_writes_no_event_log_batch(bus: Bus, clock: FakeClock) -> None:
    a, b = await _taken_over(bus, clock)
    log = EventLog(bus)
    stale = log.writer("R", batch_size=1)
    stale.fence = lambda: a.check_lease("R")
    current = log.writer("R", batch_size=1)
    current.fence = lambda: b.check_lease("R")
    current(RunStartedEvent(thread_id="R", run_id="by-b"))
    await current.wait()
    stale(RunStartedEvent(thread_id="R", run_id="by-a"))
    stale(RunStartedEvent(thread_id="R", run_id="by-a-2"))
    await stale.wait()
    assert (stale.written, stale.failed) == (0, 2)
    assert isinstance(stale.lost, LeaseLost)
    assert [event["runId"] for event in await log.read("R")] == ["by-b"]


async def test_a_takeover_between_the_check_and_the_write_still_stops_the_call(
    bus: Bus, clock: FakeClock
) -> None:
    """Nothing is atomic across two keys: B may take over after A checked the epoch and
    before A's started record lands. A reads the epoch again after writing, so it never
    runs the call; its record stays, as an uncertain call (law 5)."""
    a = StoreDurability(bus, BUCKET)
    await a.take_lease("R", "worker-a", TTL)
    store = CheckpointStore(bus, BUCKET)
    real_check = store.check_epoch
    checks = 0

    async def check_then_taken_over(run_id: str, epoch: int) -> None:
        nonlocal checks
        await real_check(run_id, epoch)
        checks += 1
        if checks == 1:  # right after A's check passed: B takes the run
            await store.take_epoch(run_id, "worker-b")

    a._checkpoints.check_epoch = check_then_taken_over  # type: ignore[method-assign]
    with pytest.raises(LeaseLost, match="epoch is now 2"):
        await a.call_started("R", "R-call-1")
    assert (await store.calls("R"))["R-call-1"].status == "started"


async def test_a_record_written_under_a_newer_epoch_is_not_overwritten(
    bus: Bus, clock: FakeClock
) -> None:
    """The record's own compare-and-set: B takes over and checkpoints just after A's
    epoch check passed; A's write, carrying epoch 1, finds B's record of epoch 2 and is
    refused instead of overwriting it."""
    stale = CheckpointStore(bus, BUCKET)
    assert await stale.take_epoch("R", "worker-a") == 1
    await stale.save(_state("a"), "running", epoch=1)
    other = CheckpointStore(bus, BUCKET)
    real_check = stale.check_epoch

    async def check_then_taken_over(run_id: str, epoch: int) -> None:
        await real_check(run_id, epoch)
        assert await other.take_epoch(run_id, "worker-b") == 2
        await other.save(_state("b"), "running", epoch=2)

    stale.check_epoch = check_then_taken_over  # type: ignore[method-assign]
    with pytest.raises(LeaseLost, match="epoch is now 2"):
        await stale.save(_state("stale"), "running", epoch=1)
    loaded = await other.load("R")
    assert (loaded.epoch, loaded.state.messages[0]) == (2, UserMessage(text="b"))


async def test_a_checkpoint_written_before_epochs_loads_and_is_taken_over(
    bus: Bus, clock: FakeClock
) -> None:
    kv = await bus.kv(BUCKET)
    state = orjson.loads(_state("old").to_json())
    record = {"schema_version": 1, "status": "running", "state": state}
    await kv.put("R", orjson.dumps(record))
    await kv.put("R/calls/R-call-0", orjson.dumps({"status": "started"}))
    store = CheckpointStore(bus, BUCKET)
    old = await store.load("R")
    assert (old.epoch, old.status) == (0, "running")
    worker = StoreDurability(bus, BUCKET)
    await worker.take_lease("R", "worker", TTL)
    await worker.save(_state("new"), "running")
    await worker.call_completed("R", "R-call-0", "done", is_error=False)
    new = await store.load("R")
    assert (new.epoch, new.state.messages[0]) == (1, UserMessage(text="new"))
    assert (await store.calls("R"))["R-call-0"].status == "completed"


async def test_a_recovering_claim_fences_the_process_it_recovers_from(
    bus: Bus, clock: FakeClock
) -> None:
    """A recovery claims the checkpoint before its run takes the lease: the claim itself
    fences the lapsed holder (alive after all), and of two racing claims only the winner
    takes an epoch."""
    a = StoreDurability(bus, BUCKET)
    await a.take_lease("R", "worker-a", TTL)
    await a.save(_state("by a"), "running")
    clock.advance(TTL + 1)
    store = CheckpointStore(bus, BUCKET)
    loaded = await store.load("R")
    await store.claim(loaded, recovering=True)
    with pytest.raises(AlreadyResumed):  # the racing recovery loses, and takes nothing
        await CheckpointStore(bus, BUCKET).claim(loaded, recovering=True)
    assert await store.epoch("R") == 2
    claimed = await store.load("R")
    assert (claimed.status, claimed.epoch) == ("resumed", 2)
    with pytest.raises(LeaseLost, match="epoch is now 2"):
        await a.save(_state("stale a"), "running")
    with pytest.raises(LeaseLost):
        await a.call_started("R", "R-call-1")
    assert await store.calls("R") == {}
    assert (await store.load("R")).revision == claimed.revision


async def test_a_claim_fences_even_a_write_that_passed_the_epoch_check(
    bus: Bus, clock: FakeClock
) -> None:
    """A's checkpoint write checked the epoch just before the claim landed: the claimed
    record's epoch is above A's, so A's write is refused by the record's compare-and-set
    and the claim stands."""
    a = StoreDurability(bus, BUCKET)
    await a.take_lease("R", "worker-a", TTL)
    await a.save(_state("by a"), "running")
    store = CheckpointStore(bus, BUCKET)
    loaded = await store.load("R")
    stale = CheckpointStore(bus, BUCKET)
    real_check = stale.check_epoch

    async def check_then_claimed(run_id: str, epoch: int) -> None:
        await real_check(run_id, epoch)
        await store.claim(loaded, recovering=True)

    stale.check_epoch = check_then_claimed  # type: ignore[method-assign]
    with pytest.raises(LeaseLost):
        await stale.save(_state("stale a"), "running", epoch=1)
    assert (await store.load("R")).status == "resumed"

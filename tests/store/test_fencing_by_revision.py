"""Fencing by revision (issue 16): a durable step's checkpoint and call completion are one
compare-and-set each, on the revision the holder kept from its last write, with no read of
the run's epoch; a takeover stamps those records as it takes the epoch, so the stale
holder's compare-and-set fails and it reads the newer epoch in the record.

The takeovers here fall between two writes of one step (the stale holder wrote, and writes
again without reading the epoch in between). On memory, SQLite and the real NATS.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from tiller.conversation import AssistantMessage, ToolCall, UserMessage
from tiller.state import RunState
from tiller.store import Bus, CheckpointStore, KeyValue, LeaseLost, StoreDurability

from .conftest import FakeClock

BUCKET = "cp"
TTL = 30.0


def _state(text: str) -> RunState:
    call = ToolCall(id="R-call-1", name="append", arguments="{}")
    return RunState(
        run_id="R",
        thread_id="R",
        agent_name="worker",
        messages=[UserMessage(text=text), AssistantMessage(tool_calls=(call,))],
    )


class _Counting:
    """A bus whose buckets count their operations (and may run a hook before one)."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self.ops: list[tuple[str, str]] = []
        #: (operation, key) -> awaited before that operation runs, once.
        self.before: dict[tuple[str, str], Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bus, name)

    async def kv(self, bucket: str) -> KeyValue:
        kv = await self._bus.kv(bucket)
        outer = self

        class Counted:
            def __getattr__(self, name: str) -> Any:
                attribute = getattr(kv, name)
                if name not in ("get", "put", "create", "update", "delete", "keys"):
                    return attribute

                async def counted(*args: Any, **kwargs: Any) -> Any:
                    key = str(args[0]) if args else ""
                    hook = outer.before.pop((name, key), None)
                    if hook is not None:
                        await hook()
                    outer.ops.append((name, key))
                    return await attribute(*args, **kwargs)

                return counted

        return cast(KeyValue, Counted())


async def test_a_durable_step_reads_no_epoch_for_its_checkpoint_or_completion(
    bus: Bus, clock: FakeClock
) -> None:
    counting = _Counting(bus)
    worker = StoreDurability(cast(Bus, counting), BUCKET)
    await worker.take_lease("R", "worker", TTL)
    await worker.save(_state("first"), "running")  # the run's first: no revision known yet
    counting.ops.clear()
    await worker.save(_state("second"), "running")
    assert counting.ops == [("update", "R")]
    counting.ops.clear()
    await worker.call_started("R", "R-call-1")
    # The epoch is read before (nothing lands once taken over) and after (never run).
    assert counting.ops == [("get", "R/epoch"), ("create", "R/calls/R-call-1"), ("get", "R/epoch")]
    counting.ops.clear()
    await worker.call_completed("R", "R-call-1", "done", is_error=False)
    assert counting.ops == [("update", "R/calls/R-call-1")]
    calls = await CheckpointStore(bus, BUCKET).calls("R")
    assert (calls["R-call-1"].status, calls["R-call-1"].content) == ("completed", "done")


async def test_a_takeover_between_two_writes_of_a_step_refuses_the_second(
    bus: Bus, clock: FakeClock
) -> None:
    """A checkpointed and started a call; B takes the run over and writes nothing yet. A's
    next checkpoint and its call's completion — compare-and-sets on revisions A kept —
    find the records stamped with B's epoch and are refused; nothing of A's lands."""
    a = StoreDurability(bus, BUCKET)
    await a.take_lease("R", "worker-a", TTL)
    await a.save(_state("by a"), "running")
    await a.save(_state("by a, again"), "running")
    await a.call_started("R", "R-call-1")
    clock.advance(TTL + 1)
    b = await StoreDurability(bus, BUCKET).take_lease("R", "worker-b", TTL)
    assert b.epoch == 2
    with pytest.raises(LeaseLost, match="epoch is now 2") as lost:
        await a.save(_state("stale a"), "running")
    assert (lost.value.epoch, lost.value.current) == (1, 2)
    with pytest.raises(LeaseLost):
        await a.call_completed("R", "R-call-1", "done by a", is_error=False)
    store = CheckpointStore(bus, BUCKET)
    checkpoint = await store.load("R")
    assert checkpoint.state.messages[0] == UserMessage(text="by a, again")
    assert checkpoint.epoch == 2  # stamped by the takeover, its state A's last before it
    call = (await store.calls("R"))["R-call-1"]
    assert (call.status, call.content) == ("started", None)  # uncertain, for B to settle


async def test_a_takeover_stamps_a_completion_racing_it_out(bus: Bus, clock: FakeClock) -> None:
    """B's takeover stamps A's started call just after B took the epoch; A's completion,
    arriving after the stamp, is refused, while B — which kept the stamp's revision —
    completes the call in one compare-and-set."""
    a = StoreDurability(bus, BUCKET)
    await a.take_lease("R", "worker-a", TTL)
    await a.call_started("R", "R-call-1")
    clock.advance(TTL + 1)
    counting = _Counting(bus)
    b = StoreDurability(cast(Bus, counting), BUCKET)
    await b.take_lease("R", "worker-b", TTL)
    with pytest.raises(LeaseLost):
        await a.call_completed("R", "R-call-1", "done by a", is_error=False)
    counting.ops.clear()
    await b.call_completed("R", "R-call-1", "settled by b", is_error=True)
    assert counting.ops == [("update", "R/calls/R-call-1")]
    call = (await CheckpointStore(bus, BUCKET).calls("R"))["R-call-1"]
    assert (call.status, call.content, call.is_error) == ("completed", "settled by b", True)


async def test_the_checkpoint_is_stamped_before_the_epoch_moves(bus: Bus, clock: FakeClock) -> None:
    """A checkpoint A writes while B is taking the epoch — after B's stamp, before B's
    epoch record — is refused already: the record carries B's epoch."""
    a = StoreDurability(bus, BUCKET)
    await a.take_lease("R", "worker-a", TTL)
    await a.save(_state("by a"), "running")
    counting = _Counting(bus)
    outcome: list[BaseException] = []

    async def a_writes() -> None:
        try:
            await a.save(_state("stale a"), "running")
        except LeaseLost as exc:
            outcome.append(exc)

    counting.before[("update", "R/epoch")] = a_writes
    clock.advance(TTL + 1)
    await StoreDurability(cast(Bus, counting), BUCKET).take_lease("R", "worker-b", TTL)
    assert len(outcome) == 1 and isinstance(outcome[0], LeaseLost)
    checkpoint = await CheckpointStore(bus, BUCKET).load("R")
    assert (checkpoint.epoch, checkpoint.state.messages[0]) == (2, UserMessage(text="by a"))


async def test_a_checkpoint_changed_by_an_unfenced_writer_is_written_after_an_epoch_read(
    bus: Bus, clock: FakeClock
) -> None:
    """Someone without the lease rewrote the checkpoint (an operator's tool, keeping its
    epoch): the holder's compare-and-set fails, the record has no newer epoch, so the
    holder reads the run's epoch, finds it still its own, and writes."""
    counting = _Counting(bus)
    worker = StoreDurability(cast(Bus, counting), BUCKET)
    await worker.take_lease("R", "worker", TTL)
    await worker.save(_state("by the worker"), "running")
    await CheckpointStore(bus, BUCKET).save(_state("by an operator"), "running", keep_epoch=1)
    counting.ops.clear()
    await worker.save(_state("by the worker, again"), "running")
    assert ("get", "R/epoch") in counting.ops
    checkpoint = await CheckpointStore(bus, BUCKET).load("R")
    assert checkpoint.state.messages[0] == UserMessage(text="by the worker, again")
    counting.ops.clear()
    await worker.save(_state("and again"), "running")
    assert counting.ops == [("update", "R")]  # its revision known again


async def test_a_call_record_deleted_under_the_holder_is_written_only_after_an_epoch_read(
    bus: Bus, clock: FakeClock
) -> None:
    """A person said an uncertain call is to run again (its record deleted) while A, whose
    run was taken over, still holds its started record's revision: A's completion finds no
    record to compare, and reads the epoch before creating one — refused."""
    a = StoreDurability(bus, BUCKET)
    await a.take_lease("R", "worker-a", TTL)
    await a.call_started("R", "R-call-1")
    store = CheckpointStore(bus, BUCKET)
    await store.take_epoch("R", "worker-b")
    await store.forget_call("R", "R-call-1")
    with pytest.raises(LeaseLost, match="epoch is now 2"):
        await a.call_completed("R", "R-call-1", "done by a", is_error=False)
    assert await store.calls("R") == {}

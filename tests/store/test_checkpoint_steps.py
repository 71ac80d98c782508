"""A durable run's checkpoint as a base and step deltas (issue 19): a step writes what it
changed, not the whole state; base + deltas load the identical `RunState`, across a crash
between two writes, a takeover, racing resumes, another process and older records. On
memory, SQLite and the real NATS."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import orjson
import pytest

from tiller.conversation import AssistantMessage, ToolCall, ToolResult, Usage, UserMessage
from tiller.state import CallRecord, RunState
from tiller.store import (
    AlreadyResumed,
    Bus,
    CheckpointStore,
    KeyValue,
    LeaseLost,
    StoreDurability,
    StoreError,
)
from tiller.store._checkpoint_steps import SEGMENT_DELTAS

from .conftest import FakeClock

BUCKET = "cp"
TTL = 30.0


class _Recording:
    """A bus whose buckets record each write's key and size, and may fail one write (a
    process killed before that write landed)."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self.writes: list[tuple[str, str, int]] = []
        #: Raise before this many more writes have run (None: never).
        self.fail_after: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bus, name)

    async def kv(self, bucket: str) -> KeyValue:
        kv = await self._bus.kv(bucket)
        outer = self

        class Recorded:
            def __getattr__(self, name: str) -> Any:
                attribute = getattr(kv, name)
                if name not in ("put", "create", "update"):
                    return attribute

                async def recorded(key: str, value: bytes, **kwargs: Any) -> Any:
                    if outer.fail_after is not None:
                        if outer.fail_after == 0:
                            raise StoreError("the process died before this write")
                        outer.fail_after -= 1
                    outer.writes.append((name, key, len(value)))
                    return await attribute(key, value, **kwargs)

                return recorded

        return cast(KeyValue, Recorded())


def _step(state: RunState, n: int, *, result: str = "done") -> None:
    """Step `n` of a run, as the loop leaves it at its step boundary: the model's call,
    its record (started, then completed), its result, the counters."""
    call_id = f"R-call-{n}"
    state.step = n
    state.count_model_call()  # as the loop counts it: at the conversation it answers
    state.messages.append(
        AssistantMessage(
            text=f"step {n}", tool_calls=(ToolCall(id=call_id, name="noop", arguments="{}"),)
        )
    )
    state.calls[call_id] = CallRecord(call_id=call_id, name="noop", step=n)
    state.calls[call_id].status = "completed"
    state.messages.append(
        UserMessage(tool_results=(ToolResult(call_id=call_id, name="noop", content=result),))
    )
    state.result_ids[call_id] = f"R-msg-{2 * n}"
    state.usage = state.usage + Usage(input_tokens=10, output_tokens=5, requests=1)
    state.id_counters = {"msg": 2 * n, "call": n}


def _fresh() -> RunState:
    return RunState(
        run_id="R",
        thread_id="T",
        agent_name="worker",
        messages=[UserMessage(text="go")],
        policy={"jail": "/w", "phase": "execute"},
    )


def _as_written(state: RunState) -> dict[str, Any]:
    """The state a whole write stores, read back: what a load must equal."""
    return RunState.from_json(state.to_json()).model_dump()


def _assert_same(loaded: RunState, state: RunState) -> None:
    expected, got = _as_written(state), loaded.model_dump()
    for name in RunState.model_fields:
        assert got[name] == expected[name], name


async def test_a_running_step_writes_its_delta_not_the_history(bus: Bus, clock: FakeClock) -> None:
    """What a step writes does not grow with the run: the steps 101 to 200 write about as
    many bytes as the steps 1 to 100 (a whole write now and then included, once the
    deltas outweigh it), and a step between two whole writes a segment of a few deltas at most."""
    recording = _Recording(bus)
    port = StoreDurability(cast(Bus, recording), BUCKET)
    await port.take_lease("R", "worker", TTL)
    state = _fresh()
    await port.save(state, "running")
    sizes: dict[int, int] = {}
    whole: list[int] = []
    for n in range(1, 201):
        _step(state, n)
        recording.writes.clear()
        await port.save(state, "running")
        sizes[n] = sum(size for _, _, size in recording.writes)
        if any(key == "R" for _, key, _ in recording.writes):
            whole.append(n)
        else:
            assert sizes[n] < 8 * 1024, n
    early = sum(sizes[n] for n in range(1, 101))
    late = sum(sizes[n] for n in range(101, 201))
    assert late < 1.5 * early, (early, late, whole)
    assert len(whole) <= 3, whole
    # ... though the run's model-call history (one entry a step, for a rewind) grew.
    assert len(state.model_calls_history) == 200
    _assert_same((await CheckpointStore(bus, BUCKET).load("R")).state, state)


async def test_base_and_deltas_load_the_state_field_by_field(bus: Bus, clock: FakeClock) -> None:
    """After every save, a load in a store of its own equals the state written whole:
    appended messages, a replaced last message, a call record changed after the
    checkpoint that made it, new result ids, and every other field."""
    port = StoreDurability(bus, BUCKET)
    await port.take_lease("R", "worker", TTL)
    reader = CheckpointStore(bus, BUCKET)
    state = _fresh()
    await port.save(state, "running")

    async def saved() -> None:
        await port.save(state, "running")
        _assert_same((await CheckpointStore(bus, BUCKET).load("R")).state, state)

    for n in range(1, 30):
        _step(state, n)
        await saved()
    # Before a dispatch: the call is recorded pending, then started, then completed.
    state.messages.append(
        AssistantMessage(tool_calls=(ToolCall(id="R-call-30", name="noop", arguments="{}"),))
    )
    state.step = 30
    state.calls["R-call-30"] = CallRecord(call_id="R-call-30", name="noop", step=30)
    await saved()
    state.calls["R-call-30"].status = "started"
    state.calls["R-call-30"].staged = True
    state.calls["R-call-30"].outbox_item = "item-1"
    await saved()
    state.calls["R-call-30"].status = "failed"
    state.calls["R-call-30"].is_error = True
    state.messages.append(
        UserMessage(
            tool_results=(
                ToolResult(call_id="R-call-30", name="noop", content="no", is_error=True),
            )
        )
    )
    await saved()
    # Steering folded into the user turn that ends the transcript: the last one replaced.
    state.append_user_text("also look at the tests")
    state.folded_steers.append("steer-1")
    await saved()
    # Other fields, each changed on its own.
    state.taint = 3
    await saved()
    state.record_checklist([{"id": "1", "subject": "tests", "status": "open"}])
    state.compaction.guard_count = 2
    state.always_approved.append("shell:ls")
    state.not_from_person.append("mail from another agent")
    state.agent_state = {"notes": ["a", "b"]}
    state.cost_usd = 0.25
    await saved()
    state.agent_state = None
    state.pending_input = ["later"]
    await saved()
    store_checkpoint = await reader.load("R")
    assert store_checkpoint.status == "running"


async def test_a_rewritten_history_a_suspension_and_the_end_write_the_state_whole(
    bus: Bus, clock: FakeClock
) -> None:
    recording = _Recording(bus)
    port = StoreDurability(cast(Bus, recording), BUCKET)
    await port.take_lease("R", "worker", TTL)
    state = _fresh()
    await port.save(state, "running")
    for n in range(1, 3 * SEGMENT_DELTAS):  # three segments
        _step(state, n)
        await port.save(state, "running")

    async def wrote_whole(status: Any) -> bool:
        recording.writes.clear()
        await port.save(state, status)
        return any(key == "R" for _, key, _ in recording.writes)

    state.messages[1:5] = [UserMessage(text="summary of steps 1 and 2")]  # compaction
    assert await wrote_whole("running")
    _step(state, 3 * SEGMENT_DELTAS)
    assert not await wrote_whole("running")
    # Segment 0 is the new checkpoint's now; 1 and 2, an older one's, are not read.
    _assert_same((await CheckpointStore(bus, BUCKET).load("R")).state, state)
    assert await wrote_whole("suspended")
    _assert_same((await CheckpointStore(bus, BUCKET).load("R")).state, state)
    _step(state, 5)
    assert not await wrote_whole("running")
    assert await wrote_whole("finished")
    store = CheckpointStore(bus, BUCKET)
    assert await (await bus.kv(BUCKET)).keys("R/steps/") == ["R/steps/0", "R/steps/1", "R/steps/2"]
    assert await store.run_ids() == ["R"]
    loaded = await store.load("R")
    assert loaded.status == "finished"
    _assert_same(loaded.state, state)


@pytest.mark.parametrize("writes_before_the_crash", [0, 1])
async def test_a_crash_between_two_delta_writes_loads_the_last_written_step(
    bus: Bus, clock: FakeClock, writes_before_the_crash: int
) -> None:
    """The process dies as it writes a step (within a segment, or starting the next):
    a load has every step written before, and the step that never landed is not half
    there."""
    recording = _Recording(bus)
    port = StoreDurability(cast(Bus, recording), BUCKET)
    await port.take_lease("R", "worker", TTL)
    state = _fresh()
    await port.save(state, "running")
    crash_at = SEGMENT_DELTAS if writes_before_the_crash else SEGMENT_DELTAS - 3
    for n in range(1, crash_at):
        _step(state, n)
        await port.save(state, "running")
    last_written = state.model_copy(deep=True)
    _step(state, crash_at)
    recording.fail_after = 0
    with pytest.raises(StoreError, match="died"):
        await port.save(state, "running")
    checkpoint = await CheckpointStore(bus, BUCKET).load("R")
    _assert_same(checkpoint.state, last_written)
    assert checkpoint.status == "running"


async def test_a_crashed_run_recovered_by_two_racing_resumes_lets_exactly_one_proceed(
    bus: Bus, clock: FakeClock
) -> None:
    """A run died with steps after its checkpoint; two recoveries load it and claim it at
    once: one wins (law 5), the other is told it was resumed already; the claimed
    checkpoint holds every step, applied once."""
    port = StoreDurability(bus, BUCKET)
    await port.take_lease("R", "worker", TTL)
    state = _fresh()
    await port.save(state, "running")
    for n in range(1, 12):
        _step(state, n)
        await port.save(state, "running")
    clock.advance(TTL + 1)  # the worker died: its lease lapsed
    one, two = CheckpointStore(bus, BUCKET), CheckpointStore(bus, BUCKET)
    first, second = await asyncio.gather(one.load("R"), two.load("R"))
    _assert_same(first.state, state)
    outcomes = await asyncio.gather(
        one.claim(first, recovering=True),
        two.claim(second, recovering=True),
        return_exceptions=True,
    )
    assert sorted(type(o).__name__ for o in outcomes) == ["AlreadyResumed", "int"]
    claimed = await CheckpointStore(bus, BUCKET).load("R")
    assert claimed.status == "resumed"
    _assert_same(claimed.state, state)  # the steps are in it once, not twice
    # The recovered run goes on, steps after the claimed checkpoint.
    resumed = StoreDurability(bus, BUCKET)
    await resumed.take_lease("R", "recovery", TTL)
    await resumed.save(claimed.state, "running")
    _step(claimed.state, 12)
    await resumed.save(claimed.state, "running")
    _assert_same((await CheckpointStore(bus, BUCKET).load("R")).state, claimed.state)


async def test_a_suspended_run_claimed_twice_proceeds_once(bus: Bus, clock: FakeClock) -> None:
    port = StoreDurability(bus, BUCKET)
    await port.take_lease("R", "worker", TTL)
    state = _fresh()
    await port.save(state, "running")
    for n in range(1, 5):
        _step(state, n)
        await port.save(state, "running")
    await port.save(state, "suspended")
    one, two = CheckpointStore(bus, BUCKET), CheckpointStore(bus, BUCKET)
    first, second = await asyncio.gather(one.load("R"), two.load("R"))
    await one.claim(first)
    with pytest.raises(AlreadyResumed):
        await two.claim(second)
    _assert_same((await CheckpointStore(bus, BUCKET).load("R")).state, state)


async def test_a_stale_holder_writes_no_step_after_a_takeover(bus: Bus, clock: FakeClock) -> None:
    """A writes steps; B takes the run over. A's next step — into the segment it wrote
    (a compare-and-set on a stamped record) or into a new one — is refused, and nothing
    of it loads."""
    a = StoreDurability(bus, BUCKET)
    await a.take_lease("R", "worker-a", TTL)
    state = _fresh()
    await a.save(state, "running")
    for n in range(1, SEGMENT_DELTAS + 1):  # the segment is full: the next starts one
        _step(state, n)
        await a.save(state, "running")
    before = state.model_copy(deep=True)
    clock.advance(TTL + 1)
    await StoreDurability(bus, BUCKET).take_lease("R", "worker-b", TTL)
    _step(state, SEGMENT_DELTAS + 1)
    with pytest.raises(LeaseLost, match="epoch is now 2"):
        await a.save(state, "running")
    loaded = await CheckpointStore(bus, BUCKET).load("R")
    _assert_same(loaded.state, before)
    assert loaded.epoch == 2

    # Within a segment: the stamp makes A's compare-and-set fail.
    c = StoreDurability(bus, BUCKET)
    await c.take_lease("S", "worker-c", TTL)
    other = _fresh().model_copy(update={"run_id": "S", "thread_id": "S"})
    await c.save(other, "running")
    _step(other, 1)
    await c.save(other, "running")
    clock.advance(TTL + 1)
    await StoreDurability(bus, BUCKET).take_lease("S", "worker-d", TTL)
    _step(other, 2)
    with pytest.raises(LeaseLost):
        await c.save(other, "running")
    assert (await CheckpointStore(bus, BUCKET).load("S")).state.step == 1


async def test_a_suspended_run_resumes_in_another_process(bus: Bus, tmp_path: Any) -> None:
    """Written by one store connection, loaded by another (SQLite: a second connection to
    the file; NATS: a second client; memory: the same bus, one process)."""
    port = StoreDurability(bus, BUCKET)
    await port.take_lease("R", "worker", TTL)
    state = _fresh()
    await port.save(state, "running")
    for n in range(1, 6):
        _step(state, n)
        await port.save(state, "running")
    await port.save(state, "suspended")
    _step(state, 6)  # never written: the process stops here
    written = state.model_copy(deep=True)
    written.messages, written.step = written.messages[:-2], 5
    url = getattr(bus, "url", "memory://")
    if url.startswith("memory"):
        other = bus
    else:
        from tiller.store import open_bus

        namespace = getattr(bus, "_namespace", None)
        other = await (
            open_bus(url, namespace=namespace) if namespace is not None else open_bus(url)
        )
    try:
        loaded = await CheckpointStore(other, BUCKET).load("R")
    finally:
        if other is not bus:
            await other.aclose()
    assert loaded.status == "suspended"
    assert loaded.state.step == 5 and len(loaded.state.messages) == 11


async def test_a_checkpoint_in_the_previous_format_still_loads(bus: Bus, clock: FakeClock) -> None:
    """A version 2 record (no `gen`) loads as written, even beside stray steps; a
    running step after it writes the state whole first, then deltas."""
    state = _fresh()
    _step(state, 1)
    record = {
        "schema_version": 2,
        "written_by": "0.1.0",
        "status": "running",
        "epoch": 0,
        "state": orjson.Fragment(state.to_json()),
    }
    kv = await bus.kv(BUCKET)
    await kv.put("R", orjson.dumps(record))
    stray = {"schema_version": 1, "gen": "x", "deltas": [{"at": 0}]}
    await kv.put("R/steps/0", orjson.dumps(stray))
    loaded = await CheckpointStore(bus, BUCKET).load("R")
    _assert_same(loaded.state, state)
    port = StoreDurability(bus, BUCKET)
    await port.take_lease("R", "worker", TTL)
    await port.save(loaded.state, "running")
    _step(loaded.state, 2)
    await port.save(loaded.state, "running")
    _assert_same((await CheckpointStore(bus, BUCKET).load("R")).state, loaded.state)


async def test_steps_of_a_newer_schema_are_refused_naming_their_writer(
    bus: Bus, clock: FakeClock
) -> None:
    store = CheckpointStore(bus, BUCKET)
    await store.save(_fresh(), "running")
    newer = {"schema_version": 99, "written_by": "9.0.0", "gen": store.last_gen, "deltas": []}
    kv = await bus.kv(BUCKET)
    await kv.put("R/steps/0", orjson.dumps(newer))
    with pytest.raises(StoreError, match=r"9\.0\.0"):
        await store.load("R")


class _Interleaved:
    """A bus whose buckets run `before_get[key]` (once) just before `key` is read: a
    writer in another process acting while a reader is half way through a load."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self.before_get: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bus, name)

    async def kv(self, bucket: str) -> KeyValue:
        kv = await self._bus.kv(bucket)
        outer = self

        class Interleaved:
            def __getattr__(self, name: str) -> Any:
                return getattr(kv, name)

            async def get(self, key: str) -> Any:
                hook = outer.before_get.pop(key, None)
                if hook is not None:
                    await hook()
                return await kv.get(key)

        return cast(KeyValue, Interleaved())


async def test_a_load_racing_the_writer_into_the_next_segment_loads_a_written_state(
    bus: Bus, clock: FakeClock
) -> None:
    """A reader has read segment 0 with a few deltas; before it reads segment 1 the
    writer fills segment 0 and starts segment 1. The state loaded is one the writer
    wrote (the deltas in between are not skipped: that would drop steps' messages and
    call records from the middle of the transcript)."""
    writer = StoreDurability(bus, BUCKET)
    await writer.take_lease("R", "worker", TTL)
    state = _fresh()
    await writer.save(state, "running")
    for n in range(1, 4):
        _step(state, n)
        await writer.save(state, "running")
    written = [state.model_copy(deep=True)]

    async def the_writer_goes_on() -> None:
        for n in range(4, SEGMENT_DELTAS + 2):
            _step(state, n)
            await writer.save(state, "running")
        written.append(state.model_copy(deep=True))

    reading = _Interleaved(bus)
    reading.before_get["R/steps/1"] = the_writer_goes_on
    loaded = await CheckpointStore(cast(Bus, reading), BUCKET).load("R")
    assert not reading.before_get  # the writer did write in the middle of the load
    got = loaded.state.model_dump()
    assert got in [_as_written(s) for s in written], [m.text for m in loaded.state.messages]


async def test_a_recovery_loses_to_a_step_its_live_writer_wrote_after_the_load(
    bus: Bus, clock: FakeClock
) -> None:
    """The worker's lease lapsed but it is alive (paused, then back). A recovery loads the
    run; the worker writes its next step (a delta); then the recovery claims. As with a
    whole checkpoint, the claim of what it loaded must not win over a newer step (law 5:
    the step's calls ran; a recovery from before it would make them again): it is told
    the run moved on, and nothing of the worker's step is lost."""
    worker = StoreDurability(bus, BUCKET)
    await worker.take_lease("R", "worker", TTL)
    state = _fresh()
    await worker.save(state, "running")
    for n in range(1, 4):
        _step(state, n)
        await worker.save(state, "running")
    clock.advance(TTL + 1)
    recovery = CheckpointStore(bus, BUCKET)
    loaded = await recovery.load("R")
    _step(state, 4)
    await worker.save(state, "running")  # back from its pause: one more step
    with pytest.raises(AlreadyResumed):
        await recovery.claim(loaded, recovering=True)
    after = await CheckpointStore(bus, BUCKET).load("R")
    _assert_same(after.state, state)
    # Loaded again, the run is recovered with the worker's step in it.
    again = await recovery.load("R")
    await recovery.claim(again, recovering=True)
    claimed = await CheckpointStore(bus, BUCKET).load("R")
    assert claimed.status == "resumed"
    _assert_same(claimed.state, state)
    _step(state, 5)
    with pytest.raises(LeaseLost):
        await worker.save(state, "running")


async def test_a_step_writes_the_model_calls_it_made_not_the_runs_whole_count_history(
    bus: Bus, clock: FakeClock
) -> None:
    """Each model call appends to `model_calls_history` (for a rewind), as the loop counts
    it. A step's delta carries what was appended, not the whole list: else the delta grows
    with the run again, and steps 301 to 400 write far more than steps 1 to 100."""
    recording = _Recording(bus)
    port = StoreDurability(cast(Bus, recording), BUCKET)
    await port.take_lease("R", "worker", TTL)
    state = _fresh()
    await port.save(state, "running")
    sizes: dict[int, int] = {}
    for n in range(1, 401):
        state.count_model_call()
        _step(state, n)
        state.model_calls -= 1  # `_step` counts the call by hand; it was counted above
        recording.writes.clear()
        await port.save(state, "running")
        sizes[n] = sum(size for _, _, size in recording.writes)
    assert len(state.model_calls_history) == 400
    early = sum(sizes[n] for n in range(1, 101))
    late = sum(sizes[n] for n in range(301, 401))
    assert late < 1.5 * early, (early, late)
    _assert_same((await CheckpointStore(bus, BUCKET).load("R")).state, state)


async def test_segments_that_do_not_follow_each_other_are_refused_not_read_forever(
    bus: Bus, clock: FakeClock
) -> None:
    """Segment 1 says its first delta is one segment 0 never reaches (a damaged store: a
    writer only starts a segment once the one before holds every delta up to it). The
    load says so, instead of reading segment 0 again and again for it to grow."""
    port = StoreDurability(bus, BUCKET)
    await port.take_lease("R", "worker", TTL)
    state = _fresh()
    await port.save(state, "running")
    for n in range(1, SEGMENT_DELTAS + 2):
        _step(state, n)
        await port.save(state, "running")
    kv = await bus.kv(BUCKET)
    entry = await kv.get("R/steps/1")
    assert entry is not None
    record = orjson.loads(entry.value)
    record["first"] = SEGMENT_DELTAS + 5
    await kv.put("R/steps/1", orjson.dumps(record))
    async with asyncio.timeout(5):
        with pytest.raises(StoreError, match="steps of checkpoint 'R'"):
            await CheckpointStore(bus, BUCKET).load("R")

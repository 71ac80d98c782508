"""Fleet-wide flow control (issue 16): run and model-call slots, requests per minute and
429 pauses, shared through the store's KV by several workers, on memory, SQLite and the
real NATS server.

A "worker" is a `FleetLimits` on its own connection to the store (the memory store cannot
be shared between connections, so its workers share the one bus). Time is a fake clock
that the tests move; `asyncio.timeout` is a hang guard only. "Still waiting" is checked
after a few of the waiter's polls: a waiter that is right keeps waiting however long it is
given, so the check does not depend on timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tiller import Agent
from tiller.cancel import CancellationToken
from tiller.errors import Cancelled, UsageError
from tiller.fleet import FleetLimits, LimitedModel, MalformedLimitRecord, ModelLimit, provider_of
from tiller.model import ModelHTTPError, ModelRequest, ScriptedModel, Turn, TurnError
from tiller.store import Bus, open_bus

NATS_URL = "nats://127.0.0.1:4222"
BUCKET = "tiller-fleet-limits"
FAST = (0.001, 0.005)  # poll quickly: the tests wait on a fake clock


class FakeClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


Connect = Callable[[], Awaitable[Bus]]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["memory", "sqlite", "nats"])
async def connect(
    request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path
) -> AsyncIterator[Connect]:
    """Opens another connection to one store (memory: the same bus again)."""
    kind: str = request.param
    namespace = f"fl{uuid.uuid4().hex[:12]}"
    opened: list[Bus] = []
    shared: list[Bus] = []

    async def open_one() -> Bus:
        if kind == "memory":
            if not shared:
                shared.append(await open_bus("memory://", clock=clock))
                opened.append(shared[0])
            return shared[0]
        url = f"sqlite:///{tmp_path / 'bus.db'}" if kind == "sqlite" else NATS_URL
        try:
            async with asyncio.timeout(10):
                bus = await open_bus(url, clock=clock, namespace=namespace)
        except OSError as exc:
            pytest.fail(f"NATS is not reachable at {NATS_URL} ({exc!r}): run `.ci/run`")
        opened.append(bus)
        return bus

    yield open_one
    for bus in opened:
        await bus.aclose()
    if kind == "nats":
        async with asyncio.timeout(30):
            cleaner = await open_bus(NATS_URL, namespace=namespace)
            try:
                await cleaner.delete_namespace()  # type: ignore[attr-defined]
            finally:
                await cleaner.aclose()


async def workers(connect: Connect, count: int, **options: Any) -> list[FleetLimits]:
    options.setdefault("poll", FAST)
    return [FleetLimits(await connect(), holder=f"w{index}", **options) for index in range(count)]


async def still_waiting(task: asyncio.Task[Any], polls: int = 20) -> bool:
    for _ in range(polls):
        await asyncio.sleep(FAST[1])
    return not task.done()


async def holders_record(bus: Bus, key: str) -> dict[str, Any]:
    entry = await (await bus.kv(BUCKET)).get(key)
    assert entry is not None
    holders: dict[str, Any] = json.loads(entry.value)["holders"]
    return holders


# ── concurrency ──────────────────────────────────────────────────────────────────────


async def test_concurrent_runs_across_workers_never_exceed_max_runs(connect: Connect) -> None:
    fleet = await workers(connect, 3, max_runs=3)
    inside = 0
    most = 0

    async def run(index: int) -> None:
        nonlocal inside, most
        async with fleet[index % 3].run_slot(f"run-{index}"):
            inside += 1
            most = max(most, inside)
            for _ in range(3):
                await asyncio.sleep(0)
            inside -= 1

    async with asyncio.timeout(60):
        async with asyncio.TaskGroup() as group:
            for index in range(24):
                group.create_task(run(index))
    assert 1 <= most <= 3
    assert await fleet[0].runs_held() == 0
    for limits in fleet:
        await limits.aclose()


async def test_concurrent_model_calls_never_exceed_the_models_limit(connect: Connect) -> None:
    limit = {"openai:gpt-4o": ModelLimit(max_concurrent=2)}
    fleet = await workers(connect, 3, per_model=limit)
    inside = 0
    most = 0

    async def call(index: int) -> None:
        nonlocal inside, most
        async with fleet[index % 3].model_call("openai:gpt-4o"):
            inside += 1
            most = max(most, inside)
            for _ in range(3):
                await asyncio.sleep(0)
            inside -= 1

    async with asyncio.timeout(60):
        async with asyncio.TaskGroup() as group:
            for index in range(18):
                group.create_task(call(index))
    assert 1 <= most <= 2
    assert await fleet[1].calls_held("openai:gpt-4o") == 0
    for limits in fleet:
        await limits.aclose()


async def test_a_full_limit_makes_the_next_acquirer_wait_until_a_slot_is_given_back(
    connect: Connect,
) -> None:
    first, second = await workers(connect, 2, max_runs=1)
    entered = asyncio.Event()

    async def wait_for_slot() -> None:
        async with second.run_slot("run-b"):
            entered.set()

    async with asyncio.timeout(30):
        async with first.run_slot("run-a"):
            waiter = asyncio.create_task(wait_for_slot())
            assert await still_waiting(waiter)
            assert await second.runs_held() == 1
        await waiter
    assert entered.is_set()
    assert await first.runs_held() == 0


async def test_unlimited_models_and_other_models_do_not_share_a_slot(connect: Connect) -> None:
    (limits,) = await workers(connect, 1, per_model={"a:x": ModelLimit(max_concurrent=1)})
    async with asyncio.timeout(30):
        async with limits.model_call("a:x"), limits.model_call("a:y"), limits.model_call("b:x"):
            assert await limits.calls_held("a:x") == 1
    await limits.aclose()


# ── leases ───────────────────────────────────────────────────────────────────────────


async def test_a_dead_workers_slot_comes_back_when_its_lease_lapses(
    connect: Connect, clock: FakeClock
) -> None:
    dead, alive = await workers(connect, 2, max_runs=1, lease=30.0)
    slot = dead.run_slot("run-dead")
    await slot.__aenter__()
    await dead.aclose()  # the worker dies: nothing renews or releases its slot

    async def take() -> None:
        async with alive.run_slot("run-alive"):
            assert await alive.runs_held() == 1
            # The dead worker's belated exit cannot give away the new holder's slot.
            await slot.__aexit__(None, None, None)
            assert await alive.runs_held() == 1

    async with asyncio.timeout(30):
        waiter = asyncio.create_task(take())
        assert await still_waiting(waiter)
        clock.advance(31)
        await waiter
    assert await alive.runs_held() == 0


async def test_a_holder_that_renews_keeps_its_slot_past_the_first_lease(
    connect: Connect, clock: FakeClock
) -> None:
    (holder,) = await workers(connect, 1, max_runs=1, lease=30.0, renew_every=0.002)
    (other,) = await workers(connect, 1, max_runs=1, lease=30.0)
    bus = await connect()
    async with asyncio.timeout(30):
        async with holder.run_slot("run-long"):
            start = clock()
            for _ in range(3):
                clock.advance(20)  # 60 s in all: twice the lease
                moved = clock() + 30.0
                for _ in range(10_000):  # until the renewer has pushed the expiry
                    if (await holders_record(bus, "runs"))["run-long"][1] >= moved:
                        break
                    await asyncio.sleep(0.001)
                else:
                    pytest.fail("the holder never renewed its slot")
            assert clock() - start > 30.0
            waiter = asyncio.create_task(other.run_slot("run-other").__aenter__())
            assert await still_waiting(waiter)
            assert await other.runs_held() == 1
        await waiter  # given back on exit, so the other worker gets it
    assert await other.runs_held() == 1
    await holder.aclose()
    await other.aclose()


async def test_a_run_taken_over_by_another_worker_counts_once(connect: Connect) -> None:
    stale, recovering = await workers(connect, 2, max_runs=2)
    old = stale.run_slot("run-1")
    async with asyncio.timeout(30):
        await old.__aenter__()
        async with recovering.run_slot("run-1"):
            assert await stale.runs_held() == 1
            await old.__aexit__(None, None, None)  # the stale worker's exit: not its slot now
            assert await stale.runs_held() == 1
    assert await stale.runs_held() == 0
    await stale.aclose()
    await recovering.aclose()


# ── cancellation ─────────────────────────────────────────────────────────────────────


async def test_a_cancelled_token_while_waiting_leaves_no_slot_taken(connect: Connect) -> None:
    holder, waiting = await workers(connect, 2, max_runs=1)
    bus = await connect()
    token = CancellationToken()
    async with asyncio.timeout(30):
        async with holder.run_slot("run-held"):
            waiter = asyncio.create_task(waiting.run_slot("run-w", cancel=token).__aenter__())
            assert await still_waiting(waiter)
            token.cancel("operator")
            with pytest.raises(Cancelled):
                async with asyncio.timeout(10):  # a hang is a TimeoutError, not a pass
                    await waiter
            assert list(await holders_record(bus, "runs")) == ["run-held"]
        async with waiting.run_slot("run-next"):
            assert await waiting.runs_held() == 1
        with pytest.raises(Cancelled):  # a token that already fired never starts waiting
            async with waiting.run_slot("run-late", cancel=token):
                pass
    assert await waiting.runs_held() == 0


async def test_a_cancelled_task_while_waiting_leaves_no_slot_taken(connect: Connect) -> None:
    limit = {"m:x": ModelLimit(max_concurrent=1)}
    holder, waiting = await workers(connect, 2, per_model=limit)
    async with asyncio.timeout(30):
        async with holder.model_call("m:x"):
            waiter = asyncio.create_task(waiting.model_call("m:x").__aenter__())
            assert await still_waiting(waiter)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                async with asyncio.timeout(10):  # a hang is a TimeoutError, not a pass
                    await waiter
            assert await waiting.calls_held("m:x") == 1
        assert await waiting.calls_held("m:x") == 0


class _CancelledAfterWrite:
    """A bucket whose first slot write lands and then cancels its caller, as a task cancel
    arriving just after the compare-and-set did would."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def _then_cancel(self, write: Awaitable[int]) -> int:
        revision = await write
        if not self.fired:
            self.fired = True
            raise asyncio.CancelledError
        return revision

    async def create(self, key: str, value: bytes) -> int:
        return await self._then_cancel(self._inner.create(key, value))

    async def update(self, key: str, value: bytes, *, expected: int) -> int:
        return await self._then_cancel(self._inner.update(key, value, expected=expected))


class _Bus:
    def __init__(self, inner: Bus, bucket: object) -> None:
        self._inner = inner
        self._bucket = bucket

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def kv(self, bucket: str) -> Any:
        return self._bucket


async def test_a_cancel_that_lands_just_after_the_slot_was_written_gives_it_back() -> None:
    inner = await open_bus("memory://")
    bucket = _CancelledAfterWrite(await inner.kv(BUCKET))
    limits = FleetLimits(_Bus(inner, bucket), max_runs=1, poll=FAST)
    with pytest.raises(asyncio.CancelledError):
        async with limits.run_slot("run-1"):
            pass
    assert bucket.fired
    assert await FleetLimits(inner, max_runs=1).runs_held() == 0


class _SwallowsCancel:
    """A bucket whose reads swallow a cancellation that arrives with the answer, as Python
    3.11's `asyncio.wait_for` (under nats-py's requests) can."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.swallowed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def get(self, key: str) -> Any:
        if not self.swallowed:  # wait for the cancel, then answer as if it never came
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.swallowed = True
        return await self._inner.get(key)


@pytest.mark.parametrize("how", ["token", "task"])
async def test_a_cancel_swallowed_below_still_ends_the_wait(how: str) -> None:
    inner = await open_bus("memory://")
    holder = FleetLimits(inner, max_runs=1, poll=FAST)
    bucket = _SwallowsCancel(await inner.kv(BUCKET))
    waiting = FleetLimits(_Bus(inner, bucket), max_runs=1, poll=FAST)
    token = CancellationToken()
    async with asyncio.timeout(30), holder.run_slot("run-held"):
        waiter = asyncio.create_task(waiting.run_slot("run-w", cancel=token).__aenter__())
        assert await still_waiting(waiter)
        if how == "token":
            token.cancel()
        else:
            waiter.cancel()
        with pytest.raises(Cancelled if how == "token" else asyncio.CancelledError):
            async with asyncio.timeout(10):  # a hang is a TimeoutError, not a pass
                await waiter
        assert bucket.swallowed
        assert await holder.runs_held() == 1


# ── requests per minute ──────────────────────────────────────────────────────────────


async def test_the_minutes_requests_are_shared_by_the_fleet(
    connect: Connect, clock: FakeClock
) -> None:
    limit = {"openai:gpt-4o": ModelLimit(rpm=3)}
    first, second = await workers(connect, 2, per_model=limit)
    clock.now = 1_700_000_080.0  # the minute window (from ..._040) has 20 seconds left
    async with asyncio.timeout(30):
        for limits in (first, second, first):
            async with limits.model_call("openai:gpt-4o"):
                pass
        waiter = asyncio.create_task(second.model_call("openai:gpt-4o").__aenter__())
        assert await still_waiting(waiter)
        clock.advance(19)  # same minute: still spent
        assert await still_waiting(waiter)
        clock.advance(2)  # the next minute
        await waiter
    await second.aclose()


# ── 429 pauses ───────────────────────────────────────────────────────────────────────


async def test_a_429_with_retry_after_pauses_the_provider_on_every_worker(
    connect: Connect, clock: FakeClock
) -> None:
    told, other = await workers(connect, 2)
    refused = ScriptedModel([Turn(error=TurnError(status=429, retry_after=30.0))])
    answering = ScriptedModel(["hello"])
    first = LimitedModel(refused, told, "scripted:a")
    second = LimitedModel(answering, other, "scripted:b")
    request = ModelRequest(system=None, messages=[])

    async def drain(model: LimitedModel) -> list[object]:
        return [event async for event in model.stream(request)]

    async with asyncio.timeout(30):
        with pytest.raises(ModelHTTPError) as raised:
            await drain(first)
        assert raised.value.status == 429
        assert await other.paused_until("scripted") == clock() + 30.0
        waiter = asyncio.create_task(drain(second))
        assert await still_waiting(waiter)
        assert answering.requests == []  # the paused call never reached the provider
        clock.advance(31)
        events = await waiter
    assert len(answering.requests) == 1
    assert events
    assert await other.paused_until("scripted") is None


async def test_a_shorter_pause_never_cuts_a_longer_one_short(
    connect: Connect, clock: FakeClock
) -> None:
    first, second = await workers(connect, 2)
    until = await first.pause_provider("openai:gpt-4o", 60)
    assert await second.pause_provider("openai", 5) == until
    assert await second.paused_until("openai:gpt-4o-mini") == clock() + 60
    assert await second.paused_until("anthropic") is None


async def test_an_agent_runs_through_a_limited_model_with_its_usage_labelled(
    connect: Connect,
) -> None:
    (limits,) = await workers(
        connect, 1, per_model={"scripted:x": ModelLimit(max_concurrent=1, rpm=10)}
    )
    scripted = ScriptedModel(["fine"], name="x", context_window=1234)
    model = LimitedModel(scripted, limits, "scripted:x")
    assert (model.provider, model.name, model.context_window) == ("scripted", "x", 1234)
    async with asyncio.timeout(30):
        result = await Agent(model, []).run("hi")
    assert result.text == "fine"
    assert result.usage.requests == 1
    assert await limits.calls_held("scripted:x") == 0
    await limits.aclose()


# ── bad input, bad records ───────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "options",
    [
        {"max_runs": -1},
        {"max_runs": 0},
        {"max_runs": True},
        {"max_runs": 2.5},
        {"per_model": {"m:x": {"rpm": 10}}},
        {"per_model": {"": ModelLimit()}},
        {"lease": 0},
        {"lease": 10, "renew_every": 10},
        {"poll": (1.0, 0.1)},
        {"holder": 3},
    ],
)
async def test_bad_options_are_a_usage_error(options: dict[str, Any]) -> None:
    bus = await open_bus("memory://")
    with pytest.raises(UsageError):
        FleetLimits(bus, **options)


@pytest.mark.parametrize("limit", [{"rpm": 0}, {"max_concurrent": -2}, {"rpm": "10"}])
def test_bad_model_limits_are_a_usage_error(limit: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        ModelLimit(**limit)


async def test_a_limits_object_needs_a_bus() -> None:
    with pytest.raises(UsageError, match="Bus"):
        FleetLimits("memory://")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b"[]",
        b'{"holders": {}}',
        b'{"schema_version": 1, "holders": {"r": ["w", "soon", "t"]}}',
        b'{"schema_version": 1000000, "holders": {}}',
    ],
)
async def test_a_malformed_record_is_a_typed_error_naming_its_key(
    connect: Connect, value: bytes
) -> None:
    bus = await connect()
    await (await bus.kv(BUCKET)).put("runs", value)
    (limits,) = await workers(connect, 1, max_runs=2)
    with pytest.raises(MalformedLimitRecord, match=f"{BUCKET}/runs"):
        async with limits.run_slot("run-1"):
            pass


async def test_a_malformed_pause_is_a_typed_error_naming_its_key(connect: Connect) -> None:
    bus = await connect()
    await (await bus.kv(BUCKET)).put("pause/openai", b'{"schema_version": 1, "until": "x"}')
    (limits,) = await workers(connect, 1)
    with pytest.raises(MalformedLimitRecord, match="pause/openai"):
        await limits.paused_until("openai:gpt-4o")


@pytest.mark.parametrize(
    ("spec", "provider"),
    [
        ("openai:gpt-4o", "openai"),
        ("Anthropic:claude-sonnet-4-5", "anthropic"),
        ("ollama:llama3.1:8b", "ollama"),
        ("openai-compat:http://gpu:8000/v1#qwen", "openai-compat:http://gpu:8000/v1"),
        ("openai", "openai"),
    ],
)
def test_the_provider_a_pause_covers(spec: str, provider: str) -> None:
    assert provider_of(spec) == provider


def test_a_model_string_without_a_provider_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        provider_of(":gpt-4o")


@pytest.mark.parametrize("seconds", [-1, float("inf"), float("nan"), True])
async def test_a_pause_must_be_finite_non_negative_seconds(seconds: float) -> None:
    limits = FleetLimits(await open_bus("memory://"))
    with pytest.raises(UsageError, match="pause"):
        await limits.pause_provider("openai", seconds)


async def test_a_limited_model_keys_its_limits_by_provider_and_name_by_default() -> None:
    limits = FleetLimits(await open_bus("memory://"), poll=FAST)
    model = LimitedModel(ScriptedModel(["hi"], name="m1"), limits)
    assert model.model_string == "scripted:m1"
    with pytest.raises(UsageError):
        LimitedModel("openai:gpt-4o", limits)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        LimitedModel(ScriptedModel(["hi"]), "limits")  # type: ignore[arg-type]


async def test_a_hundred_holders_keep_one_small_record() -> None:
    """The design's claim: one record per limit, holding its live holders, stays cheap to
    compare-and-set at 100 holders (well under NATS's 1 MiB payload limit)."""
    bus = await open_bus("memory://")
    limits = FleetLimits(bus, max_runs=100, poll=FAST)
    async with contextlib.AsyncExitStack() as stack:
        for index in range(100):
            await stack.enter_async_context(limits.run_slot(f"run-{index:03}"))
        entry = await (await bus.kv(BUCKET)).get("runs")
        assert entry is not None
        assert len(json.loads(entry.value)["holders"]) == 100
        assert len(entry.value) < 16 * 1024
        assert await (await bus.kv(BUCKET)).keys() == ["runs"]
    assert await limits.runs_held() == 0


async def test_a_store_gone_at_release_does_not_hide_the_blocks_own_error() -> None:
    bus = await open_bus("memory://")
    limits = FleetLimits(bus, max_runs=1, poll=FAST)
    with pytest.raises(ValueError, match="the run's own"):
        async with limits.run_slot("run-1"):
            await bus.aclose()  # the slot now lapses with its lease
            raise ValueError("the run's own error")


async def test_a_stream_closed_early_gives_its_call_slot_back() -> None:
    limits = FleetLimits(
        await open_bus("memory://"), per_model={"scripted:x": ModelLimit(max_concurrent=1)}
    )
    model = LimitedModel(ScriptedModel(["one two three"], name="x"), limits)
    request = ModelRequest(system=None, messages=[])
    async with contextlib.aclosing(model.stream(request)) as stream:
        async for _ in stream:
            assert await limits.calls_held("scripted:x") == 1
            break
    assert await limits.calls_held("scripted:x") == 0

"""A worker with the fleet's limits (`Worker(limits=FleetLimits(...))`): each run holds a
run slot while it runs, its model's calls go through `LimitedModel` (fresh, recovered or
continued), and a 429 one worker's model gets pauses every worker's calls. On memory,
SQLite and NATS; plus `tiller worker --max-runs/--model-limit` parsing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from tiller.cancel import CancellationToken
from tiller.cli import app
from tiller.errors import UsageError
from tiller.fleet import Fleet, FleetLimits, ModelLimit, parse_model_limit
from tiller.store import Bus, CheckpointStore

from .conftest import Store, ref, running_worker, until

pytestmark = pytest.mark.filterwarnings("error")

FAST = (0.01, 0.05)


class CountingLimits(FleetLimits):
    """The fleet's limits, noting the model string of every call that goes through them."""

    def __init__(self, bus: Bus, **options: object) -> None:
        super().__init__(bus, **options)  # type: ignore[arg-type]
        self.calls: list[str] = []

    @contextlib.asynccontextmanager
    async def model_call(
        self, model_string: str, *, cancel: CancellationToken | None = None
    ) -> AsyncIterator[None]:
        self.calls.append(model_string)
        async with super().model_call(model_string, cancel=cancel):
            yield


def peak(occupancy: Path) -> tuple[int, int]:
    """The most runs in at once, and how many came in, from `occupy`'s lines."""
    inside: set[str] = set()
    most = entered = 0
    for line in occupancy.read_text().splitlines():
        if line.startswith("+"):
            inside.add(line[1:])
            entered += 1
            most = max(most, len(inside))
        else:
            inside.discard(line[1:])
    return most, entered


async def test_max_runs_one_over_two_workers_never_runs_two_at_once(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    run_ids = [(await fleet.submit(ref(agents, "occupier"), f"r{n}")).run_id for n in range(4)]
    async with await store.open() as bus_a, await store.open() as bus_b:
        limits_a = FleetLimits(bus_a, max_runs=1, holder="A", poll=FAST)
        limits_b = FleetLimits(bus_b, max_runs=1, holder="B", poll=FAST)
        try:
            async with (
                running_worker(store, name="A", concurrency=2, limits=limits_a),
                running_worker(store, name="B", concurrency=2, limits=limits_b),
            ):
                async with asyncio.timeout(60):
                    records = [await fleet.handle(r).result() for r in run_ids]
            assert await limits_a.runs_held() == 0  # every slot given back
        finally:
            await limits_a.aclose()
            await limits_b.aclose()
    assert {r.status for r in records} == {"completed"}
    assert peak(Path(agents.OCCUPANCY)) == (1, 4)


@pytest.mark.parametrize("store", ["memory"], indirect=True)  # one backend shows it
async def test_without_a_run_limit_the_runs_do_overlap(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    """The check above can fail: with no limit, the same runs are in at once."""
    fleet = Fleet(bus)
    run_ids = [(await fleet.submit(ref(agents, "occupier"), f"r{n}")).run_id for n in range(4)]
    async with running_worker(store, name="A", concurrency=4):
        async with asyncio.timeout(60):
            [await fleet.handle(r).result() for r in run_ids]
    assert peak(Path(agents.OCCUPANCY))[0] > 1


async def test_every_model_call_goes_through_the_limits_under_the_runs_model_string(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    handle = await fleet.submit(ref(agents, "factory"), "which?", model="scripted-b")
    async with await store.open() as limits_bus:
        limits = CountingLimits(limits_bus, per_model={"scripted-b": ModelLimit(max_concurrent=1)})
        async with running_worker(store, limits=limits):
            record = await handle.result(30)
        await limits.aclose()
    assert (record.status, record.text) == ("completed", "scripted-b after 1 notes")
    assert limits.calls == ["scripted-b", "scripted-b"]  # the tool call's step, the answer
    # The wrapper kept the model's spec: the checkpoint names the real model.
    assert (await CheckpointStore(bus).load(handle.run_id)).state.model_spec == "scripted-b"


async def test_a_recovered_run_calls_its_model_through_the_limits_too(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    agents.GATES[2], agents.ENTERED[2] = asyncio.Event(), asyncio.Event()
    fleet = Fleet(bus)
    handle = await fleet.submit(ref(agents, "three"), "go", run_id="limited")
    async with await store.open() as limits_bus:
        first = CountingLimits(limits_bus, max_runs=5, poll=FAST)
        second = CountingLimits(limits_bus, max_runs=5, poll=FAST)
        async with running_worker(store, name="A", limits=first) as worker:
            async with asyncio.timeout(30):
                await agents.ENTERED[2].wait()
            worker.drain()  # step 2 ends, then B recovers the run
            agents.GATES[2].set()
        async with running_worker(store, name="B", limits=second):
            record = await handle.result(30)
        await first.aclose()
        await second.aclose()
    assert (record.status, record.worker, record.steps) == ("completed", "B", 4)
    assert first.calls == ["scripted:scripted"] * 2  # steps 1 and 2 on A
    assert second.calls == ["scripted:scripted"] * 2  # steps 3 and 4 on B


async def test_a_429_on_one_worker_pauses_the_other_workers_calls(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    # Two queues, so each run goes to the worker the test means.
    fleet_a, fleet_b = Fleet(bus, queue="qa"), Fleet(bus, queue="qb")
    async with await store.open() as bus_a, await store.open() as bus_b:
        limits_a = FleetLimits(bus_a, holder="A", poll=FAST)
        limits_b = FleetLimits(bus_b, holder="B", poll=FAST)
        async with (
            running_worker(store, name="A", queue="qa", limits=limits_a),
            running_worker(store, name="B", queue="qb", limits=limits_b),
        ):
            throttled = await fleet_a.submit(ref(agents, "throttled"), "go")

            async def paused() -> bool:
                return await limits_b.paused_until("scripted") is not None

            await until(paused)  # A's model got the 429; B sees the pause in the store
            pause_ends = await limits_b.paused_until("scripted")
            timed = await fleet_b.submit(ref(agents, "timed"), "go")
            done_b, done_a = await timed.result(30), await throttled.result(30)
        await limits_a.aclose()
        await limits_b.aclose()
    assert pause_ends is not None
    assert (done_a.status, done_b.status) == ("completed", "completed")
    times = dict(agents.CALL_TIMES)
    # B's call went out only once A's provider pause had ended (so did A's retry).
    assert times["timed"] >= pause_ends
    assert times["throttled"] >= pause_ends


def test_model_limits_parse_from_the_command_line_or_say_what_is_wrong() -> None:
    assert parse_model_limit("openai:gpt-4o=8/500") == ("openai:gpt-4o", ModelLimit(8, 500))
    assert parse_model_limit("scripted-b=2") == ("scripted-b", ModelLimit(max_concurrent=2))
    url = "openai-compat:http://gpu:8000/v1#qwen=4"
    assert parse_model_limit(url) == (url[:-2], ModelLimit(max_concurrent=4))
    for bad, said in [
        ("openai:gpt-4o", "MODEL=CONCURRENT"),
        ("=3", "MODEL=CONCURRENT"),
        ("openai:gpt-4o=0", "CONCURRENT must be a whole number of at least 1"),
        ("openai:gpt-4o=many", "not 'many'"),
        ("openai:gpt-4o=8/", "RPM must be"),
        ("openai:gpt-4o=8/-1", "RPM must be"),
    ]:
        with pytest.raises(UsageError, match=said):
            parse_model_limit(bad)


def test_tiller_worker_refuses_a_bad_model_limit_before_it_starts(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'never.db'}"
    result = CliRunner().invoke(
        app, ["worker", "--store", store, "--model-limit", "openai:gpt-4o=lots"]
    )
    assert result.exit_code == 2
    assert "--model-limit" in result.output and "not 'lots'" in result.output
    assert not (tmp_path / "never.db").exists()  # it never opened the store


async def test_a_drain_while_waiting_for_a_run_slot_hands_the_job_back(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    agents.GATES[2], agents.ENTERED[2] = asyncio.Event(), asyncio.Event()
    fleet = Fleet(bus)
    first = await fleet.submit(ref(agents, "three"), "holds the slot", run_id="first")
    told: list[tuple[str, str]] = []
    async with await store.open() as limits_bus:
        limits_a = FleetLimits(limits_bus, max_runs=1, holder="A", poll=FAST)
        limits_b = FleetLimits(limits_bus, max_runs=1, holder="B", poll=FAST)
        async with running_worker(store, name="A", concurrency=1, limits=limits_a):
            async with asyncio.timeout(30):
                await agents.ENTERED[2].wait()  # A's run holds the fleet's one slot
            second = await fleet.submit(ref(agents, "three"), "waits", run_id="second")
            async with running_worker(
                store, name="B", limits=limits_b, on_job=lambda r, w: told.append((r, w))
            ):

                async def waiting() -> bool:
                    return ("second", "started") in told

                await until(waiting)  # B took it and waits for the slot
            # B drained while waiting: the job went back, the run never started there.
            assert ("second", "released") in told
            agents.GATES[2].set()
            done_first, done_second = await first.result(30), await second.result(30)
        await limits_a.aclose()
        await limits_b.aclose()
    assert (done_first.worker, done_second.worker) == ("A", "A")
    assert (done_first.status, done_second.status) == ("completed", "completed")


async def test_a_run_waiting_for_a_model_call_slot_can_be_cancelled(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    per_model = {"scripted:scripted": ModelLimit(max_concurrent=1)}
    fleet = Fleet(bus)
    told: list[tuple[str, str]] = []
    async with await store.open() as limits_bus:
        elsewhere = FleetLimits(limits_bus, per_model=per_model, holder="elsewhere", poll=FAST)
        limits = FleetLimits(limits_bus, per_model=per_model, holder="W", poll=FAST)
        async with elsewhere.model_call("scripted:scripted"):  # the fleet's one call slot
            handle = await fleet.submit(ref(agents, "three"), "waits", run_id="waiting")
            async with running_worker(
                store, limits=limits, on_job=lambda r, w: told.append((r, w))
            ):

                async def started() -> bool:
                    return ("waiting", "started") in told

                await until(started)
                await handle.cancel("not needed after all")
                record = await handle.result(30)  # while the slot is still taken
        await limits.aclose()
        await elsewhere.aclose()
    assert record.status == "cancelled"  # in its first step, before any model call
    assert agents.ledger_lines() == []

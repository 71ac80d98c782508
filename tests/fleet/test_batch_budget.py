"""A batch's shared budget (issue 16): runs reserve before they start and settle when they
end, on memory, a SQLite file and the real NATS server, over several connections; the
batch never gives out more than it has, even with fifty reservers at once, and a run given
its reservation as its `Budget` stops at it with a budget stop cause."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from tiller.conversation import Usage
from tiller.errors import NewerSchemaError, UsageError
from tiller.fleet import (
    BATCH_BUDGET_BUCKET,
    BatchAmounts,
    BatchBudget,
    BatchBudgetFromNewerTiller,
    BatchLimitsDiffer,
    MalformedBatchBudget,
    UnknownBatch,
    UnknownReservation,
)
from tiller.loop import Agent, Budget, Pricing, RunContext
from tiller.model import TurnInfo
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.store import Bus
from tiller.testing import run_scripted
from tiller.tools import tool

pytestmark = pytest.mark.filterwarnings("error")

NANO = 1e-9


@tool(read_only=True)
def look() -> str:
    """Look around."""
    return "seen"


def tool_turn(output_tokens: int = 5) -> dict[str, Any]:
    return {
        "tool_calls": [{"name": "look"}],
        "usage": {"input_tokens": 10, "output_tokens": output_tokens},
    }


def endless(output_tokens: int = 5) -> Any:
    """A model that never stops calling tools: only a budget ends its run. It writes at
    most the request's `max_tokens`, as a provider does."""

    def turn(messages: Any, info: TurnInfo) -> dict[str, Any]:
        cap = info.max_tokens
        return tool_turn(output_tokens if cap is None else min(output_tokens, cap))

    return turn


def agent(model: Any) -> Agent:
    return Agent(model, [look])


def spent(steps: int = 0, output_tokens: int = 0, cost_usd: float = 0.0) -> Budget:
    return Budget(steps=steps, usage=Usage(output_tokens=output_tokens), cost_usd=cost_usd)


def ceilings(budget: Budget | None) -> tuple[int | None, int | None, float | None]:
    assert budget is not None
    return budget.max_steps, budget.max_output_tokens, budget.max_cost_usd


# ── creating ─────────────────────────────────────────────────────────────────────────


async def test_create_is_idempotent_and_other_limits_are_refused(buses: list[Bus]) -> None:
    await BatchBudget.create(buses[0], "b", max_steps=10, max_cost_usd=1.5)
    again = await BatchBudget.create(buses[1], "b", max_steps=10, max_cost_usd=1.5)
    assert (await again.status()).limits == BatchAmounts(10, None, 1.5)
    with pytest.raises(BatchLimitsDiffer, match="already has the budget max_steps=10"):
        await BatchBudget.create(buses[2], "b", max_steps=11, max_cost_usd=1.5)
    with pytest.raises(BatchLimitsDiffer):
        await BatchBudget.create(buses[2], "b", max_steps=10)  # a limit dropped is a change


@pytest.mark.parametrize(
    "limits",
    [{"max_steps": -1}, {"max_steps": True}, {"max_output_tokens": 1.5}, {"max_cost_usd": -0.1}],
)
async def test_bad_limits_are_usage_errors(bus: Bus, limits: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match="must be"):
        await BatchBudget.create(bus, "b", **limits)


async def test_bad_options_and_wants_are_usage_errors(bus: Bus) -> None:
    with pytest.raises(UsageError, match="chunk_runs must be a positive int"):
        BatchBudget(bus, "b", chunk_runs=0)
    with pytest.raises(UsageError, match="batch id must be a non-empty string"):
        BatchBudget(bus, "")
    budget = await BatchBudget.create(bus, "b", max_steps=3)
    with pytest.raises(UsageError, match="want must be a Budget"):
        await budget.reserve("r1", 3)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="run id must be a non-empty string"):
        await budget.reserve("")


async def test_a_batch_never_created_is_unknown(bus: Bus) -> None:
    budget = BatchBudget(bus, "nope")
    with pytest.raises(UnknownBatch, match=r"BatchBudget\.create"):
        await budget.reserve("r1")
    with pytest.raises(UnknownBatch):
        await budget.status()


# ── reserving ────────────────────────────────────────────────────────────────────────


async def test_a_run_gets_its_ceilings_capped_at_what_the_batch_has_left(bus: Bus) -> None:
    budget = await BatchBudget.create(bus, "b", max_steps=10, max_output_tokens=1000)
    want = Budget(max_steps=6, max_output_tokens=800, max_cost_usd=2.0)
    assert ceilings(await budget.reserve("r1", want)) == (6, 800, 2.0)  # cost: not limited
    assert ceilings(await budget.reserve("r2", want)) == (4, 200, 2.0)
    assert await budget.reserve("r3", want) is None  # nothing left: nothing taken
    status = await budget.status()
    assert status.reserved == BatchAmounts(10, 1000, None)
    assert status.left == BatchAmounts(0, 0, None)
    assert (status.runs_reserved, status.runs_settled) == (2, 0)


async def test_a_run_without_ceilings_gets_a_chunk_of_what_is_left(bus: Bus) -> None:
    await BatchBudget.create(bus, "b", max_steps=100, max_cost_usd=1.0)
    budget = BatchBudget(bus, "b", chunk_runs=4)
    assert ceilings(await budget.reserve("r1")) == (25, None, 0.25)
    assert ceilings(await budget.reserve("r2", Budget())) == (18, None, 0.1875)  # 75 // 4
    # However little is left, a chunk is at least one step.
    small = await BatchBudget.create(bus, "small", max_steps=2)
    assert ceilings(await small.reserve("r1")) == (1, None, None)
    assert ceilings(await small.reserve("r2")) == (1, None, None)
    assert await small.reserve("r3") is None


async def test_the_final_answer_reserve_is_capped_at_the_tokens_reserved(bus: Bus) -> None:
    budget = await BatchBudget.create(bus, "b", max_output_tokens=50)
    got = await budget.reserve("r1", Budget(max_output_tokens=500, final_answer_reserve=200))
    assert got is not None
    assert (got.max_output_tokens, got.final_answer_reserve) == (50, 50)


async def test_reserving_twice_for_one_run_returns_the_same_reservation(
    buses: list[Bus],
) -> None:
    """A run recovered on another worker (another connection) reuses its reservation."""
    await BatchBudget.create(buses[0], "b", max_steps=10, max_output_tokens=100)
    first = await BatchBudget(buses[0], "b").reserve("r1", Budget(max_steps=3))
    again = await BatchBudget(buses[3], "b").reserve("r1", Budget(max_steps=9))
    assert ceilings(first) == ceilings(again) == (3, 10, None)
    status = await BatchBudget(buses[1], "b").status()
    assert (status.reserved, status.runs_reserved) == (BatchAmounts(3, 10, None), 1)


# ── settling ─────────────────────────────────────────────────────────────────────────


async def test_settle_gives_back_the_unspent_once(buses: list[Bus]) -> None:
    budget = await BatchBudget.create(buses[0], "b", max_steps=10, max_cost_usd=1.0)
    await budget.reserve("r1", Budget(max_steps=6, max_cost_usd=0.5))
    back = await BatchBudget(buses[1], "b").settle("r1", spent(2, 40, 0.125))
    assert back == BatchAmounts(4, None, 0.375)  # tokens: not the batch's to limit
    status = await budget.status()
    assert status.spent == BatchAmounts(2, 40, 0.125)
    assert status.left == BatchAmounts(8, None, 0.875)
    # Settling again (a retried job, another worker) changes nothing.
    assert await BatchBudget(buses[2], "b").settle("r1", spent(6, 99, 0.5)) == BatchAmounts(
        0, None, 0.0
    )
    assert await budget.status() == status
    # The run's reservation is not taken again by a second reserve either.
    assert ceilings(await budget.reserve("r1")) == (6, None, 0.5)
    assert (await budget.status()).left == status.left


async def test_settling_a_run_that_never_reserved_is_refused(bus: Bus) -> None:
    budget = await BatchBudget.create(bus, "b", max_steps=1)
    with pytest.raises(UnknownReservation, match="reserve before settling"):
        await budget.settle("ghost", spent(1))
    with pytest.raises(UsageError, match="the run's Budget"):
        await budget.settle("ghost", 3)  # type: ignore[arg-type]


async def test_a_dead_runs_reservation_counts_until_it_is_reclaimed(buses: list[Bus]) -> None:
    budget = await BatchBudget.create(buses[0], "b", max_steps=10)
    await budget.reserve("dead", Budget(max_steps=10))
    # Its worker died: nobody settles it, and no other run can take its share.
    assert await BatchBudget(buses[1], "b").reserve("next") is None
    other = BatchBudget(buses[2], "b")
    assert await other.reclaim("dead", spent(3)) == BatchAmounts(7, None, None)
    assert await other.reclaim("dead") == BatchAmounts(0, None, None)  # once
    assert (await other.status()).left == BatchAmounts(7, None, None)
    # Its share may be another run's now: the dead run gets no second one.
    assert await budget.reserve("dead") is None
    assert ceilings(await budget.reserve("next", Budget(max_steps=7))) == (7, None, None)
    # It was alive after all: what it truly spent is counted, over the reclaimer's word.
    assert await budget.settle("dead", spent(5)) == BatchAmounts(-2, None, None)
    status = await budget.status()
    assert (status.spent, status.runs_settled, status.runs_reclaimed) == (
        BatchAmounts(5, 0, 0.0),
        1,
        0,
    )


# ── records ──────────────────────────────────────────────────────────────────────────


async def test_malformed_records_are_typed_errors_naming_the_key(bus: Bus) -> None:
    budget = await BatchBudget.create(bus, "b", max_steps=4)
    await budget.reserve("r1")
    kv = await bus.kv(BATCH_BUDGET_BUCKET)
    entry = await kv.get("b")
    assert entry is not None
    good = orjson.loads(entry.value)
    damaged: list[tuple[Any, str]] = [
        (b"not json", "not JSON"),
        ([1], "not a JSON object"),
        ({**good, "schema_version": 0}, "schema version 0"),
        ({**good, "limits": {"steps": "4"}}, "field 'limits.steps'"),
        ({**good, "batch_id": "other"}, "budget of batch 'other'"),
    ]
    for value, problem in damaged:
        raw = value if isinstance(value, bytes) else orjson.dumps(value)
        await kv.put("b", raw)
        with pytest.raises(MalformedBatchBudget, match=problem) as caught:
            await budget.reserve("r2")
        assert (caught.value.bucket, caught.value.key) == (BATCH_BUDGET_BUCKET, "b")
    await kv.put("b", orjson.dumps(good))
    run = await kv.get("b/runs/r1")
    assert run is not None
    good_run = orjson.loads(run.value)
    damaged_runs: list[tuple[Any, str]] = [
        (b"[", "not JSON"),
        ({**good_run, "ceilings": {}}, "holds no steps"),
        ({**good_run, "status": "settled"}, "spending"),
        ({**good_run, "run_id": "r9"}, "it is run 'r9'"),
    ]
    for value, problem in damaged_runs:
        raw = value if isinstance(value, bytes) else orjson.dumps(value)
        await kv.put("b/runs/r1", raw)
        with pytest.raises(MalformedBatchBudget, match=problem) as caught:
            await budget.settle("r1", spent(1))
        assert caught.value.key == "b/runs/r1"
    await kv.put("b", orjson.dumps({**good, "schema_version": 99, "written_by": "9.0.0"}))
    with pytest.raises(BatchBudgetFromNewerTiller, match=r"tiller 9\.0\.0") as newer:
        await budget.status()
    assert isinstance(newer.value, NewerSchemaError)


async def test_the_batch_record_does_not_grow_with_its_runs(bus: Bus) -> None:
    """Each run has its own record; the one every reserve and settle rewrites stays small."""
    budget = await BatchBudget.create(bus, "b", max_steps=10_000)
    kv = await bus.kv(BATCH_BUDGET_BUCKET)

    async def size() -> int:
        entry = await kv.get("b")
        assert entry is not None
        return len(entry.value)

    await budget.reserve("run-0", Budget(max_steps=1))
    small = await size()
    for n in range(1, 200):
        await budget.reserve(f"run-{n}", Budget(max_steps=1))
        if n % 2:
            await budget.settle(f"run-{n}", spent(1))
    assert await size() <= small + 16  # the counts' digits, not 200 entries
    status = await budget.status()
    assert (status.runs_reserved, status.runs_settled) == (100, 100)
    assert (status.reserved.steps, status.spent.steps, status.left.steps) == (100, 100, 9_800)


async def test_a_change_left_half_done_is_finished_by_the_next_one(bus: Bus) -> None:
    """A worker that died between the batch record's write and the run's leaves the change
    pending; the next reserve of that run finishes it and takes nothing more."""
    budget = await BatchBudget.create(bus, "b", max_steps=10)
    await budget.reserve("r1", Budget(max_steps=4))
    kv = await bus.kv(BATCH_BUDGET_BUCKET)
    entry, run = await kv.get("b"), await kv.get("b/runs/r1")
    assert entry is not None and run is not None
    # As if the worker died right after its first write: pending named, no run record.
    record = orjson.loads(entry.value)
    record["pending"] = {
        "r1": {
            k: v
            for k, v in orjson.loads(run.value).items()
            if k in ("status", "ceilings", "final_answer_reserve", "spent", "seq")
        }
    }
    await kv.put("b", orjson.dumps(record))
    await kv.delete("b/runs/r1")
    again = await budget.reserve("r1", Budget(max_steps=9))
    assert ceilings(again) == (4, None, None)
    status = await budget.status()
    assert (status.reserved.steps, status.runs_reserved, status.left.steps) == (4, 1, 6)
    finished = await kv.get("b")
    assert finished is not None and orjson.loads(finished.value)["pending"] == {}
    assert await kv.get("b/runs/r1") is not None
    # Settling it twice counts it once.
    await budget.settle("r1", spent(3))
    assert (await budget.status()).left.steps == 7
    assert await budget.settle("r1", spent(3)) == BatchAmounts(0, None, None)
    assert (await budget.status()).left.steps == 7


# ── concurrency: never more than the batch has ───────────────────────────────────────


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_fifty_concurrent_reservers_never_take_more_than_the_batch_has(
    buses: list[Bus], seed: int
) -> None:
    """Fifty runs on four connections reserve at once, some settling as they go (each
    spending at most its ceilings, as a run's budget makes it); at the end, what open
    reservations hold plus what settled runs spent is within every limit, and the
    store's totals are exactly that."""
    rng = random.Random(seed)
    limits = {"max_steps": 120, "max_output_tokens": 4000, "max_cost_usd": 2.5}
    await BatchBudget.create(buses[0], "b", max_steps=120, max_output_tokens=4000, max_cost_usd=2.5)
    plans = []
    for index in range(50):
        want = (
            None
            if rng.random() < 0.3
            else Budget(
                max_steps=rng.randint(1, 12),
                max_output_tokens=rng.randint(1, 400),
                max_cost_usd=rng.uniform(0.01, 0.3),
            )
        )
        plans.append((f"run-{index}", want, rng.random() < 0.5, rng.random()))
    held: dict[str, tuple[int, int, float]] = {}
    used: dict[str, tuple[int, int, float]] = {}

    async def one(index: int) -> None:
        run_id, want, settles, fraction = plans[index]
        budget = BatchBudget(buses[index % len(buses)], "b", chunk_runs=8)
        await asyncio.sleep(0)  # let the others start: the reservations interleave
        got = await budget.reserve(run_id, want)
        if got is None:
            return
        steps, tokens, cost = ceilings(got)
        assert steps is not None and tokens is not None and cost is not None
        if not settles:
            held[run_id] = (steps, tokens, cost)
            return
        bill = (int(steps * fraction), int(tokens * fraction), cost * fraction)
        await budget.settle(run_id, spent(*bill))
        used[run_id] = bill

    async with asyncio.timeout(120):  # a hang guard, not a timing test
        await asyncio.gather(*(one(index) for index in range(50)))
    assert held or used
    total = [sum(part) for part in zip(*held.values(), *used.values(), strict=True)]
    assert total[0] <= limits["max_steps"]
    assert total[1] <= limits["max_output_tokens"]
    assert total[2] <= limits["max_cost_usd"] + NANO * 50
    status = await BatchBudget(buses[1], "b").status()
    assert (status.runs_reserved, status.runs_settled) == (len(held), len(used))
    assert (status.reserved.steps or 0) + (status.spent.steps or 0) == total[0]
    assert (status.reserved.output_tokens or 0) + (status.spent.output_tokens or 0) == total[1]
    assert status.left.steps is not None and status.left.steps >= 0
    assert status.left.cost_usd is not None and status.left.cost_usd >= 0


# ── a run spends its reservation and stops there ─────────────────────────────────────


async def test_a_run_stops_at_its_reserved_steps_with_a_budget_stop_cause(
    bus: Bus, tmp_path: Path
) -> None:
    budget = await BatchBudget.create(bus, "b", max_steps=5)
    got = await budget.reserve("r1", Budget(max_steps=3))
    assert got is not None
    ctx = RunContext.sandboxed(tmp_path, AllowAll()).with_budget(got)
    result, _ = await run_scripted(agent, endless(), context=ctx, run_id="r1")
    assert (result.stop_cause, result.steps) == (StopCause.STEP_BUDGET, 3)
    assert await budget.settle("r1", got) == BatchAmounts(0, None, None)
    assert (await budget.status()).left == BatchAmounts(2, None, None)


async def test_a_run_stops_at_its_reserved_tokens(bus: Bus, tmp_path: Path) -> None:
    budget = await BatchBudget.create(bus, "b", max_output_tokens=100)
    got = await BatchBudget(bus, "b", chunk_runs=4).reserve("r1")  # a chunk: 25 tokens
    assert got is not None and got.max_output_tokens == 25
    ctx = RunContext.sandboxed(tmp_path, AllowAll()).with_budget(got)
    result, _ = await run_scripted(agent, endless(10), context=ctx)
    assert result.stop_cause is StopCause.TOKEN_BUDGET
    assert got.usage.output_tokens <= 25
    await budget.settle("r1", got)
    assert (await budget.status()).spent.output_tokens == got.usage.output_tokens


async def test_a_runs_dollars_overshoot_by_at_most_its_last_prompt_and_stop_the_batch(
    bus: Bus, tmp_path: Path
) -> None:
    """The bound the module states: each call's output is capped at what the dollars left
    buy, but its prompt is priced after the call, so a run may pass its dollar reservation
    by its last prompt's cost; the batch counts the overshoot and gives no one else
    anything."""
    # $1 an output token, $0.10 an input token: each call's 10-token prompt costs $1.
    prices = {"scripted": Pricing(input=100_000.0, output=1_000_000.0)}
    budget = await BatchBudget.create(bus, "b", max_cost_usd=13.0, pricing=prices)
    got = await BatchBudget(bus, "b", chunk_runs=1, pricing=prices).reserve("r1")
    assert got is not None and got.max_cost_usd == 13.0
    ctx = RunContext.sandboxed(tmp_path, AllowAll()).with_budget(got)
    result, _ = await run_scripted(agent, endless(5), context=ctx)
    assert result.stop_cause is StopCause.COST_BUDGET
    # $1 + $5, $1 + $5, then $1 left buys one output token: $1 + $1 → $14.
    assert got.usage.output_tokens == 11
    assert got.cost_usd == pytest.approx(14.0)  # past $13 by the last prompt's $1
    await budget.settle("r1", got)
    status = await budget.status()
    assert status.left.cost_usd == pytest.approx(-1.0)
    assert await budget.reserve("r2") is None


async def test_concurrent_runs_on_a_batch_never_spend_more_steps_than_it_has(
    buses: list[Bus], tmp_path: Path
) -> None:
    """Eight endless runs on four connections share twenty steps: each reserves, runs to
    its reservation and settles; together they make at most twenty model calls."""
    await BatchBudget.create(buses[0], "b", max_steps=20, max_output_tokens=1000)
    results: dict[str, tuple[Budget, int]] = {}

    async def run(index: int) -> None:
        run_id = f"run-{index}"
        budget = BatchBudget(buses[index % len(buses)], "b", chunk_runs=3)
        got = await budget.reserve(run_id)
        if got is None:
            return  # stopped by the batch budget before it started
        workspace = tmp_path / run_id
        workspace.mkdir()
        ctx = RunContext.sandboxed(workspace, AllowAll()).with_budget(got)
        result, _ = await run_scripted(agent, endless(7), context=ctx)
        assert result.exhausted
        await budget.settle(run_id, got)
        results[run_id] = (got, result.steps)

    async with asyncio.timeout(120):  # a hang guard, not a timing test
        await asyncio.gather(*(run(index) for index in range(8)))
    assert sum(steps for _, steps in results.values()) <= 20
    assert sum(got.usage.output_tokens for got, _ in results.values()) <= 1000
    for got, steps in results.values():
        assert got.max_steps is not None and steps <= got.max_steps
    status = await BatchBudget(buses[1], "b").status()
    assert status.spent.steps == sum(steps for _, steps in results.values())
    assert status.reserved == BatchAmounts(0, 0, None)

"""A job carries its budget's prices (run_job version 2), so the worker counts the run's
dollars; a version 1 job (no prices) still reads, as version 2 without them."""

from __future__ import annotations

import uuid
from types import ModuleType

import orjson
import pytest

from tiller.fleet import Fleet, JobBudget, JobPrice, MalformedJob, RunJob
from tiller.loop import Budget, Pricing

from .conftest import Store, ref, running_worker

pytestmark = pytest.mark.filterwarnings("error")


def test_a_budget_s_prices_go_into_its_job_and_a_version_1_job_still_reads() -> None:
    budget = Budget(max_steps=3, pricing={"scripted": Pricing(input=1.0, output=2.0)})
    spec = JobBudget.of(budget)
    assert spec.pricing == {"scripted": JobPrice(input=1.0, output=2.0)}
    job = RunJob(run_id="r", agent="a:b", prompt="p", budget=spec)
    assert RunJob.decode("r", job.encode()) == job
    old = {**orjson.loads(job.encode()), "schema_version": 1, "budget": {"max_steps": 3}}
    read = RunJob.decode("r", orjson.dumps(old))
    assert read.budget == JobBudget(max_steps=3)
    assert read.schema_version == job.schema_version == 3
    with pytest.raises(MalformedJob, match="schema version True"):
        RunJob.decode("r", orjson.dumps({**old, "schema_version": True}))


async def test_a_priced_job_s_run_counts_its_dollars_on_the_worker(
    store: Store, agents: ModuleType
) -> None:
    prices = {"scripted": Pricing(input=1.0, output=2.0)}
    async with await store.open() as bus, running_worker(store):
        fleet = Fleet(bus)
        free = await fleet.submit(ref(agents, "three"), "go", run_id=f"free-{uuid.uuid4().hex}")
        paid = await fleet.submit(
            ref(agents, "three"),
            "go",
            run_id=f"paid-{uuid.uuid4().hex}",
            budget=JobBudget.of(Budget(pricing=prices)),
        )
        unpriced, priced = await free.result(timeout=30), await paid.result(timeout=30)
    assert unpriced.cost_usd == 0.0
    usage = priced.usage
    expected = (usage["input_tokens"] * 1.0 + usage["output_tokens"] * 2.0) / 1e6
    assert priced.cost_usd == pytest.approx(expected) and expected > 0

"""The results bucket: the first record of a run stands, except a held one, which the
record of the continuation that ends it replaces (once)."""

from __future__ import annotations

import pytest

from tiller.fleet import ResultStore, RunOutcomeRecord
from tiller.store import Bus

pytestmark = pytest.mark.filterwarnings("error")


async def test_the_first_final_record_stands(bus: Bus) -> None:
    results = ResultStore(bus)
    first = RunOutcomeRecord(run_id="r", status="completed", text="first", worker="a")
    assert await results.record(first) == first
    stale = RunOutcomeRecord(run_id="r", status="error", error="stale worker", worker="b")
    assert await results.record(stale) == first  # a second writer never overwrites
    assert await results.get("r") == first


async def test_a_held_record_is_replaced_by_its_continuations(bus: Bus) -> None:
    results = ResultStore(bus)
    held = RunOutcomeRecord(run_id="r", status="suspended", worker="a")
    await results.record(held)
    again = RunOutcomeRecord(run_id="r", status="suspended", worker="b")
    assert await results.record(again) == again  # suspended again after a continuation
    done = RunOutcomeRecord(run_id="r", status="completed", text="done", worker="c")
    assert await results.record(done) == done
    late = RunOutcomeRecord(run_id="r", status="completed", text="late", worker="d")
    assert await results.record(late) == done
    assert await results.get("r") == done
    assert await results.get("other") is None


async def test_a_record_that_does_not_end_a_hold_leaves_the_held_one(bus: Bus) -> None:
    """A dead-lettered start job's `failed` record must not replace the held record of
    a run that waits for a person (its continuation is another job)."""
    results = ResultStore(bus)
    held = RunOutcomeRecord(run_id="r", status="suspended", worker="a")
    await results.record(held)
    failed = RunOutcomeRecord(run_id="r", status="failed", error="dead-lettered", worker="b")
    assert await results.record(failed, replace_held=False) == held
    assert await results.get("r") == held
    assert await results.record(failed, replace_held=False) == held
    fresh = RunOutcomeRecord(run_id="s", status="failed", error="dead-lettered", worker="b")
    assert await results.record(fresh, replace_held=False) == fresh

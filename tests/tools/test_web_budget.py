"""`WebBudget` charges atomically and saturates; `BodyMeter` cuts a body at its cap and
charges only what it keeps."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiller.tools._web_budget import (
    BODY_LIMIT_BYTES,
    TURN_LIMIT_BYTES,
    BodyMeter,
    WebBudget,
    WebBudgetExceeded,
)


def test_defaults() -> None:
    budget = WebBudget()
    assert (budget.limit, budget.body_limit) == (TURN_LIMIT_BYTES, BODY_LIMIT_BYTES)
    assert (budget.used, budget.remaining, budget.exhausted) == (0, TURN_LIMIT_BYTES, False)


def test_charge_up_to_the_limit_then_saturate() -> None:
    budget = WebBudget(100)
    assert budget.charge(60) == 60
    assert budget.charge(40) == 100  # exactly the limit is allowed
    assert budget.exhausted and budget.remaining == 0
    assert budget.charge(0) == 100  # nothing more is still nothing
    with pytest.raises(WebBudgetExceeded) as caught:
        budget.charge(1)
    assert caught.value.limit == 100
    assert "100 bytes" in str(caught.value)


def test_an_overflowing_charge_saturates_the_counter() -> None:
    budget = WebBudget(100)
    budget.charge(30)
    with pytest.raises(WebBudgetExceeded):
        budget.charge(71)
    # The failed charge left the budget full, so even a charge that would have fit fails.
    assert budget.used == 100
    with pytest.raises(WebBudgetExceeded):
        budget.charge(1)


def test_invalid_amounts() -> None:
    with pytest.raises(ValueError):
        WebBudget(-1)
    with pytest.raises(ValueError):
        WebBudget(10, body_limit=-1)
    with pytest.raises(ValueError):
        WebBudget(10).charge(-5)


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(0, 4000),
    charges=st.lists(st.integers(0, 300), max_size=120),
    threads=st.integers(1, 8),
)
def test_concurrent_charges_never_exceed_the_limit(
    limit: int, charges: list[int], threads: int
) -> None:
    budget = WebBudget(limit)
    start = threading.Barrier(threads)
    # Per thread, in its order: (bytes, the new total or None if the charge failed).
    outcomes: list[list[tuple[int, int | None]]] = [[] for _ in range(threads)]

    def work(index: int) -> None:
        start.wait()
        for n in charges[index::threads]:
            try:
                outcomes[index].append((n, budget.charge(n)))
            except WebBudgetExceeded:
                outcomes[index].append((n, None))

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    paid = [n for each in outcomes for n, total in each if total is not None]
    refused = [n for each in outcomes for n, total in each if total is None]
    assert budget.used <= limit
    assert sum(paid) <= budget.used
    if refused:
        # Saturation: the first refusal filled the counter, and it stays full.
        assert budget.used == limit and budget.exhausted
        with pytest.raises(WebBudgetExceeded):
            budget.charge(1)
    else:
        assert budget.used == sum(paid) == sum(charges)
    for each in outcomes:
        # Within one thread, after a refusal only empty charges can succeed.
        after_refusal = False
        for n, total in each:
            if total is None:
                after_refusal = True
            elif after_refusal:
                assert n == 0
    # Every successful non-empty charge saw its own distinct total.
    totals = [total for each in outcomes for n, total in each if total is not None and n > 0]
    assert len(totals) == len(set(totals))
    assert all(total <= limit for total in totals)


# ── BodyMeter ────────────────────────────────────────────────────────────────────


def test_meter_keeps_and_charges_what_fits() -> None:
    budget = WebBudget(1000, body_limit=500)
    meter = BodyMeter(budget, 10)
    assert meter.cap == 10
    assert meter.accept(b"abcdef") == b"abcdef"
    assert meter.accept(b"ghijkl") == b"ghij"
    assert meter.truncated and meter.received == 10
    assert budget.used == 10  # the dropped bytes cost nothing
    assert meter.accept(b"more") == b""
    assert budget.used == 10


def test_meter_cap_is_the_smaller_of_the_call_and_the_budget() -> None:
    budget = WebBudget(1000, body_limit=50)
    assert BodyMeter(budget).cap == 50
    assert BodyMeter(budget, 5000).cap == 50
    assert BodyMeter(budget, 20).cap == 20
    with pytest.raises(ValueError):
        BodyMeter(budget, -1)


def test_meter_exactly_at_the_cap_is_not_truncated() -> None:
    meter = BodyMeter(WebBudget(100), 4)
    assert meter.accept(b"abcd") == b"abcd"
    assert not meter.truncated
    assert meter.accept(b"") == b""
    assert not meter.truncated


def test_meter_propagates_the_turn_limit_and_keeps_nothing_of_that_chunk() -> None:
    budget = WebBudget(8)
    meter = BodyMeter(budget, 100)
    assert meter.accept(b"12345") == b"12345"
    with pytest.raises(WebBudgetExceeded):
        meter.accept(b"6789")
    assert meter.received == 5
    assert budget.used == 8 and budget.exhausted

"""`WebBudget` charges atomically and refuses what does not fit without saturating;
reservations hold an announced body's size; `BodyMeter` cuts a body at its cap, charges
only what it keeps (from its reservation first) and gives back what it did not read."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiller.tools import WebBudget, WebBudgetExceeded
from tiller.tools._web_budget import BODY_LIMIT_BYTES, TURN_LIMIT_BYTES, BodyMeter


def test_defaults() -> None:
    budget = WebBudget()
    assert (budget.limit, budget.body_limit) == (TURN_LIMIT_BYTES, BODY_LIMIT_BYTES)
    assert (budget.used, budget.remaining, budget.exhausted) == (0, TURN_LIMIT_BYTES, False)


def test_charge_up_to_the_limit_then_refuse() -> None:
    budget = WebBudget(100)
    assert budget.charge(60) == 60
    assert budget.charge(40) == 100  # exactly the limit is allowed
    assert budget.exhausted and budget.remaining == 0
    assert budget.charge(0) == 100  # nothing more is still nothing
    with pytest.raises(WebBudgetExceeded) as caught:
        budget.charge(1)
    assert caught.value.limit == 100 and caught.value.remaining == 0
    assert "100 bytes" in str(caught.value)


def test_an_overflowing_charge_fails_alone() -> None:
    """Pins the break where one call's overflowing charge saturated the counter, so every
    sibling call of the step failed too, even those that fitted."""
    budget = WebBudget(100)
    budget.charge(30)
    with pytest.raises(WebBudgetExceeded) as caught:
        budget.charge(71)
    assert caught.value.remaining == 70
    assert budget.used == 30  # the refused charge changed nothing
    assert budget.charge(70) == 100  # a charge that fits still does


def test_a_reservation_holds_the_budget_for_its_body() -> None:
    budget = WebBudget(100)
    budget.reserve(60)
    assert (budget.used, budget.reserved, budget.remaining) == (0, 60, 40)
    with pytest.raises(WebBudgetExceeded) as caught:
        budget.reserve(41)  # would cross: refused whole, nothing held
    assert caught.value.remaining == 40 and budget.reserved == 60
    with pytest.raises(WebBudgetExceeded):
        budget.charge(41)  # unreserved bytes cannot spend another body's reservation
    assert budget.charge(60, held=60) == 60
    assert (budget.used, budget.reserved) == (60, 0)
    budget.reserve(40)
    budget.release(15)
    assert (budget.used, budget.reserved, budget.remaining) == (60, 25, 15)
    with pytest.raises(ValueError):
        budget.release(26)
    with pytest.raises(ValueError):
        budget.charge(30, held=26)  # more than was reserved
    with pytest.raises(ValueError):
        budget.charge(10, held=11)  # held cannot exceed the charge


def test_invalid_amounts() -> None:
    with pytest.raises(ValueError):
        WebBudget(-1)
    with pytest.raises(ValueError):
        WebBudget(10, body_limit=-1)
    with pytest.raises(ValueError):
        WebBudget(10).charge(-5)
    with pytest.raises(ValueError):
        WebBudget(10).reserve(-1)


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
    # A refused charge changes nothing: the counter is exactly what was paid.
    assert budget.used == sum(paid)
    if not refused:
        assert budget.used == sum(charges)
    for n in refused:
        assert n > limit - budget.used  # it could not have fit even at the end
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
    assert budget.used == 5 and budget.remaining == 3  # the refused chunk cost nothing


def test_meter_reserves_an_announced_body_and_gives_back_the_rest() -> None:
    budget = WebBudget(100, body_limit=50)
    with BodyMeter(budget, expected=30) as meter:
        assert meter.reserved == 30 and budget.remaining == 70
        assert meter.accept(b"x" * 20) == b"x" * 20
        assert (budget.used, budget.reserved, meter.reserved) == (20, 10, 10)
    assert (budget.used, budget.reserved) == (20, 0)  # the 10 never read came back
    with BodyMeter(budget, expected=10) as meter:  # a body longer than announced
        assert meter.accept(b"y" * 15) == b"y" * 15
    assert (budget.used, budget.reserved) == (35, 0)
    with BodyMeter(budget, 40, expected=10_000) as meter:  # held only up to the cap
        assert meter.reserved == 40


def test_a_body_that_would_cross_is_refused_before_reading() -> None:
    budget = WebBudget(100)
    first = BodyMeter(budget, expected=70)
    with pytest.raises(WebBudgetExceeded) as caught:
        BodyMeter(budget, expected=31)
    assert caught.value.remaining == 30
    assert (budget.used, budget.reserved) == (0, 70)  # the refused one held nothing
    second = BodyMeter(budget, expected=30)  # the one that fits is served
    assert first.accept(b"a" * 70) == b"a" * 70 and second.accept(b"b" * 30) == b"b" * 30
    first.close()
    second.close()
    second.close()  # idempotent
    assert (budget.used, budget.reserved, budget.remaining) == (100, 0, 0)

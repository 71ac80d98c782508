"""Tests for `tiller.cancel`: tokens, scopes, races, threads and memory.

No timing assertions: every test orders its tasks with events, and `asyncio.timeout(5)`
only turns a hang into a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import logging
import threading
import weakref
from collections.abc import Awaitable
from typing import TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiller.cancel import CancellationToken, CancelScope, TokenStatistics
from tiller.errors import Cancelled, UsageError

T = TypeVar("T")


async def guarded(awaitable: Awaitable[T]) -> T:
    """Await with a hang guard; the deadline is never what a test asserts."""
    async with asyncio.timeout(5):
        return await awaitable


class Blocked:
    """A task that enters `token.scope()` and blocks until it is interrupted."""

    def __init__(self, token: CancellationToken, *, wait_on: asyncio.Event | None = None) -> None:
        self.token = token
        self.entered = asyncio.Event()
        self.wait_on = wait_on
        self.scope: CancelScope | None = None
        self.cancelling_after: int | None = None
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> str:
        task = asyncio.current_task()
        assert task is not None
        try:
            with self.token.scope() as scope:
                self.scope = scope
                self.entered.set()
                if self.wait_on is not None:
                    await self.wait_on.wait()
                else:
                    await asyncio.sleep(3600)
        finally:
            self.cancelling_after = task.cancelling()
        return "finished"

    async def started(self) -> Blocked:
        await guarded(self.entered.wait())
        return self


# --- the token on its own ----------------------------------------------------------------


def test_fresh_token_is_not_cancelled() -> None:
    token = CancellationToken()
    assert not token.is_cancelled
    assert token.reason is None
    token.check()
    assert token.statistics() == TokenStatistics(
        cancelled=False, live_children=0, pending_callbacks=0
    )
    assert "active" in repr(token)


def test_cancel_is_idempotent_and_the_first_reason_wins() -> None:
    token = CancellationToken()
    calls: list[str] = []
    token.add_callback(calls.append, "fired")
    token.cancel("user pressed stop")
    token.cancel("second thoughts")
    token.cancel()
    assert token.is_cancelled
    assert token.reason == "user pressed stop"
    assert calls == ["fired"]
    assert "user pressed stop" in repr(token)


def test_check_raises_cancelled_with_the_reason() -> None:
    token = CancellationToken()
    token.cancel("budget spent")
    with pytest.raises(Cancelled, match="budget spent"):
        token.check()


def test_check_without_a_reason_uses_the_default_message() -> None:
    token = CancellationToken()
    token.cancel()
    with pytest.raises(Cancelled, match=r"^the run was cancelled$"):
        token.check()


# --- waiting -----------------------------------------------------------------------------


async def test_waiters_registered_before_the_cancel_wake() -> None:
    token = CancellationToken()
    waiters = [asyncio.create_task(token.cancelled()) for _ in range(3)]
    await asyncio.sleep(0)  # let every waiter register
    assert not any(w.done() for w in waiters)
    assert token.statistics().pending_callbacks == 3
    token.cancel()
    await guarded(asyncio.gather(*waiters))
    assert token.statistics().pending_callbacks == 0


async def test_waiting_on_a_cancelled_token_returns_at_once() -> None:
    token = CancellationToken()
    token.cancel()
    await guarded(token.cancelled())


async def test_an_interrupted_waiter_leaves_no_registration() -> None:
    token = CancellationToken()
    waiter = asyncio.create_task(token.cancelled())
    await asyncio.sleep(0)
    assert token.statistics().pending_callbacks == 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await guarded(waiter)
    assert token.statistics().pending_callbacks == 0
    assert not token.is_cancelled


async def test_a_child_waiter_wakes_when_the_parent_fires() -> None:
    parent = CancellationToken()
    child = parent.child()
    waiter = asyncio.create_task(child.cancelled())
    await asyncio.sleep(0)
    parent.cancel("batch stopped")
    await guarded(waiter)
    assert child.reason == "batch stopped"


# --- children ----------------------------------------------------------------------------


def test_cancelling_the_parent_cancels_the_child() -> None:
    parent = CancellationToken()
    child = parent.child()
    parent.cancel("stop all")
    assert child.is_cancelled
    assert child.reason == "stop all"


def test_cancelling_the_child_leaves_the_parent_and_siblings_alone() -> None:
    parent = CancellationToken()
    child, sibling = parent.child(), parent.child()
    child.cancel("just this one")
    assert child.is_cancelled
    assert not parent.is_cancelled
    assert not sibling.is_cancelled
    assert parent.statistics().live_children == 1  # the cancelled child is dropped


def test_a_child_of_a_cancelled_parent_starts_cancelled() -> None:
    parent = CancellationToken()
    parent.cancel("too late")
    child = parent.child()
    assert child.is_cancelled
    assert child.reason == "too late"
    assert child.child().is_cancelled


def test_grandchildren_follow_the_root_but_not_the_other_way() -> None:
    root = CancellationToken()
    child = root.child()
    grandchild = child.child()
    other = root.child().child()
    grandchild.cancel()
    assert not child.is_cancelled
    assert not root.is_cancelled
    root.cancel("root")
    assert child.is_cancelled
    assert other.is_cancelled
    assert grandchild.reason is None  # it fired before the root did, without a reason
    assert other.reason == "root"


def test_a_deep_chain_is_cancelled_without_recursion() -> None:
    root = CancellationToken()
    tokens = [root]
    for _ in range(5000):
        tokens.append(tokens[-1].child())
    root.cancel()
    assert all(t.is_cancelled for t in tokens)


def test_children_are_held_weakly() -> None:
    parent = CancellationToken()
    probes = [weakref.ref(parent.child()) for _ in range(10_000)]
    gc.collect()
    assert all(p() is None for p in probes)
    assert parent.statistics().live_children == 0
    parent.cancel()  # nothing to reach, nothing to fail


def test_a_child_kept_alive_by_an_unremoved_callback_handle_is_still_freed() -> None:
    parent = CancellationToken()
    child = parent.child()
    child.add_callback(lambda: None)  # the handle is dropped, never removed
    probe = weakref.ref(child)
    del child
    gc.collect()
    assert probe() is None
    assert parent.statistics().live_children == 0


@st.composite
def token_programs(draw: st.DrawFn) -> list[tuple[str, int]]:
    """Random interleavings of "make a child of node i" and "cancel node i"; node 0 is the
    root, and each child op adds the next node."""
    ops: list[tuple[str, int]] = []
    nodes = 1
    for _ in range(draw(st.integers(0, 40))):
        if draw(st.booleans()):
            ops.append(("child", draw(st.integers(0, nodes - 1))))
            nodes += 1
        else:
            ops.append(("cancel", draw(st.integers(0, nodes - 1))))
    return ops


@given(token_programs())
def test_a_node_is_cancelled_exactly_when_it_or_an_ancestor_was(
    program: list[tuple[str, int]],
) -> None:
    tokens = [CancellationToken()]
    parents: list[int | None] = [None]
    cancel_calls: set[int] = set()
    fired: list[int] = []
    tokens[0].add_callback(fired.append, 0)
    for op, node in program:
        if op == "child":
            tokens.append(tokens[node].child())
            parents.append(node)
            tokens[-1].add_callback(fired.append, len(tokens) - 1)
        else:
            tokens[node].cancel(f"cancel {node}")
            cancel_calls.add(node)

    def ancestry(node: int | None) -> list[int]:
        path = []
        while node is not None:
            path.append(node)
            node = parents[node]
        return path

    expected = {n for n in range(len(tokens)) if cancel_calls & set(ancestry(n))}
    assert {n for n, t in enumerate(tokens) if t.is_cancelled} == expected
    assert sorted(fired) == sorted(expected)  # every callback ran exactly once
    for n in expected:
        # The reason comes from whichever cancel on its path reached it first; it is always
        # one of them.
        reason = tokens[n].reason
        assert reason is not None
        assert int(reason.removeprefix("cancel ")) in ancestry(n)


# --- callbacks ---------------------------------------------------------------------------


def test_callbacks_run_once_in_order_with_their_arguments() -> None:
    token = CancellationToken()
    calls: list[tuple[str, int]] = []
    token.add_callback(lambda name, n: calls.append((name, n)), "a", 1)
    token.add_callback(lambda name, n: calls.append((name, n)), "b", 2)
    token.cancel()
    token.cancel()
    assert calls == [("a", 1), ("b", 2)]


def test_a_removed_callback_is_not_called() -> None:
    token = CancellationToken()
    calls: list[str] = []
    handle = token.add_callback(calls.append, "removed")
    token.add_callback(calls.append, "kept")
    assert handle.remove() is True
    assert handle.remove() is False
    token.cancel()
    assert calls == ["kept"]


def test_remove_after_firing_reports_false() -> None:
    token = CancellationToken()
    handle = token.add_callback(lambda: None)
    token.cancel()
    assert handle.remove() is False
    assert token.statistics().pending_callbacks == 0


def test_a_callback_added_after_firing_runs_at_once() -> None:
    token = CancellationToken()
    token.cancel()
    calls: list[str] = []
    handle = token.add_callback(calls.append, "late")
    assert calls == ["late"]
    assert handle.remove() is False


def test_parent_callbacks_run_before_child_callbacks() -> None:
    parent = CancellationToken()
    child = parent.child()
    calls: list[str] = []
    child.add_callback(calls.append, "child")
    parent.add_callback(calls.append, "parent")
    parent.cancel()
    assert calls == ["parent", "child"]


def test_a_callback_may_use_the_token_it_runs_for() -> None:
    token = CancellationToken()
    seen: list[bool] = []
    token.add_callback(lambda: seen.append(token.is_cancelled))
    token.add_callback(token.cancel, "again")  # re-entrant cancel is a no-op
    token.cancel("first")
    assert seen == [True]
    assert token.reason == "first"


async def test_a_raising_callback_is_logged_and_stops_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = CancellationToken()
    calls: list[str] = []

    def broken() -> None:
        raise RuntimeError("callback bug")

    token.add_callback(calls.append, "before")
    token.add_callback(broken)
    token.add_callback(calls.append, "after")
    child = token.child()
    child.add_callback(calls.append, "child")
    run = await Blocked(token).started()
    with caplog.at_level(logging.ERROR, logger="tiller.cancel"):
        token.cancel()
    assert calls == ["before", "after", "child"]
    assert child.is_cancelled
    with pytest.raises(Cancelled):
        await guarded(run.task)
    [record] = caplog.records
    assert "cancellation callback" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], RuntimeError)


# --- scopes ------------------------------------------------------------------------------


async def test_a_blocked_sleep_is_interrupted_and_becomes_cancelled() -> None:
    token = CancellationToken()
    run = await Blocked(token).started()
    assert run.scope is not None
    assert not run.scope.cancel_called
    token.cancel("stop button")
    with pytest.raises(Cancelled, match="stop button") as info:
        await guarded(run.task)
    assert isinstance(info.value.__cause__, asyncio.CancelledError)
    assert run.scope.cancel_called
    assert run.scope.cancelled_caught
    assert run.cancelling_after == 0
    assert token.statistics().pending_callbacks == 0


async def test_a_blocked_event_wait_is_interrupted() -> None:
    token = CancellationToken()
    run = await Blocked(token, wait_on=asyncio.Event()).started()
    token.cancel()
    with pytest.raises(Cancelled):
        await guarded(run.task)
    assert run.scope is not None
    assert run.scope.cancelled_caught


async def test_a_scope_that_finishes_first_is_not_cancelled() -> None:
    token = CancellationToken()
    with token.scope() as scope:
        await asyncio.sleep(0)
    assert not scope.cancel_called
    assert not scope.cancelled_caught
    assert token.statistics().pending_callbacks == 0
    token.cancel()
    assert scope.cancel_called
    assert not scope.cancelled_caught


async def test_an_outside_cancel_propagates_as_cancelled_error() -> None:
    token = CancellationToken()
    run = await Blocked(token).started()
    run.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await guarded(run.task)
    assert not token.is_cancelled
    assert run.scope is not None
    assert not run.scope.cancelled_caught
    assert run.cancelling_after == 1  # the outside cancellation is still counted


@pytest.mark.parametrize("token_first", [True, False])
async def test_token_and_outside_cancel_together_propagate_cancelled_error(
    token_first: bool,
) -> None:
    token = CancellationToken()
    run = await Blocked(token).started()
    if token_first:
        token.cancel()
        run.task.cancel()
    else:
        run.task.cancel()
        token.cancel()
    with pytest.raises(asyncio.CancelledError):
        await guarded(run.task)
    assert run.scope is not None
    assert run.scope.cancel_called
    assert not run.scope.cancelled_caught
    assert run.cancelling_after == 1  # ours taken back, theirs left in place


async def test_an_outside_cancel_during_cleanup_after_the_token_wins() -> None:
    token = CancellationToken()
    in_cleanup = asyncio.Event()

    async def run() -> None:
        with token.scope():
            try:
                await asyncio.sleep(3600)
            finally:
                in_cleanup.set()
                await asyncio.sleep(3600)  # a cleanup that blocks until cancelled itself

    task = asyncio.create_task(run())
    await asyncio.sleep(0)
    token.cancel()
    await guarded(in_cleanup.wait())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await guarded(task)


async def test_cancelling_is_restored_to_its_entry_value() -> None:
    token = CancellationToken()
    entered = asyncio.Event()
    first_sleep = asyncio.Event()

    async def run() -> tuple[int, int]:
        task = asyncio.current_task()
        assert task is not None
        try:
            first_sleep.set()
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass  # swallowed without uncancel(), so the task keeps counting it
        entry = task.cancelling()
        try:
            with token.scope():
                entered.set()
                await asyncio.sleep(3600)
        except Cancelled:
            return entry, task.cancelling()
        raise AssertionError("the scope did not raise")

    task = asyncio.create_task(run())
    await guarded(first_sleep.wait())
    task.cancel()
    await guarded(entered.wait())
    token.cancel()
    assert await guarded(task) == (1, 1)


async def test_a_swallowed_token_cancel_is_still_taken_back() -> None:
    token = CancellationToken()
    entered = asyncio.Event()

    async def run() -> tuple[bool, int]:
        task = asyncio.current_task()
        assert task is not None
        with token.scope() as scope:
            entered.set()
            # Bad manners, but the scope must not leave the task's count raised.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)
        await asyncio.sleep(0)  # no cancellation is left pending for later awaits
        return scope.cancelled_caught, task.cancelling()

    task = asyncio.create_task(run())
    await guarded(entered.wait())
    token.cancel()
    assert await guarded(task) == (False, 0)


async def test_entering_a_scope_of_a_cancelled_token_raises_at_once() -> None:
    token = CancellationToken()
    token.cancel("already gone")
    reached = False
    with pytest.raises(Cancelled, match="already gone"), token.scope():
        reached = True
    assert not reached
    assert token.statistics().pending_callbacks == 0


async def test_a_scope_is_single_use() -> None:
    token = CancellationToken()
    scope = token.scope()
    with scope:
        pass
    with pytest.raises(UsageError, match="only once"), scope:
        pass


def test_a_scope_needs_a_task() -> None:
    scope = CancellationToken().scope()
    with pytest.raises(UsageError, match="inside a coroutine running in a task"), scope:
        pass


async def test_the_task_may_cancel_its_own_token() -> None:
    token = CancellationToken()
    with pytest.raises(Cancelled), token.scope() as scope:
        token.cancel("changed my mind")
        await asyncio.sleep(3600)
    assert scope.cancelled_caught
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_a_self_cancel_without_a_later_await_leaves_nothing_pending() -> None:
    token = CancellationToken()
    task = asyncio.current_task()
    assert task is not None
    with token.scope() as scope:
        token.cancel()
    # trio's rule: no checkpoint inside the block, no Cancelled; and the cancellation does
    # not go off at some unrelated await later on.
    assert scope.cancel_called
    assert not scope.cancelled_caught
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert task.cancelling() == 0
    with pytest.raises(Cancelled):
        token.check()


async def test_a_child_scope_inside_a_parent_scope_catches_the_child_cancel() -> None:
    parent = CancellationToken()
    child = parent.child()
    entered = asyncio.Event()

    async def run() -> tuple[CancelScope, CancelScope, str]:
        with parent.scope() as outer:
            try:
                with child.scope() as inner:
                    entered.set()
                    await asyncio.sleep(3600)
            except Cancelled:
                pass
            await asyncio.sleep(0)  # the outer scope is still live and uncancelled
            return outer, inner, "went on"

    task = asyncio.create_task(run())
    await guarded(entered.wait())
    child.cancel()
    outer, inner, result = await guarded(task)
    assert result == "went on"
    assert inner.cancelled_caught
    assert not outer.cancel_called
    assert not outer.cancelled_caught


async def test_when_the_parent_fires_the_outer_scope_catches() -> None:
    parent = CancellationToken()
    child = parent.child()
    entered = asyncio.Event()
    scopes: list[CancelScope] = []
    passed_through: list[type[BaseException]] = []

    async def run() -> None:
        with parent.scope() as outer:
            scopes.append(outer)
            try:
                with child.scope() as inner:
                    scopes.append(inner)
                    entered.set()
                    await asyncio.sleep(3600)
            except BaseException as exc:
                passed_through.append(type(exc))
                raise

    task = asyncio.create_task(run())
    await guarded(entered.wait())
    parent.cancel()
    with pytest.raises(Cancelled):
        await guarded(task)
    outer, inner = scopes
    assert passed_through == [asyncio.CancelledError]
    assert outer.cancelled_caught
    assert not inner.cancelled_caught
    assert inner.cancel_called
    assert task.cancelling() == 0


async def test_two_scopes_of_one_token_nest() -> None:
    token = CancellationToken()
    entered = asyncio.Event()
    scopes: list[CancelScope] = []

    async def run() -> None:
        with token.scope() as outer:
            scopes.append(outer)
            with token.scope() as inner:
                scopes.append(inner)
                entered.set()
                await asyncio.sleep(3600)

    task = asyncio.create_task(run())
    await guarded(entered.wait())
    token.cancel()
    with pytest.raises(Cancelled):
        await guarded(task)
    outer, inner = scopes
    assert outer.cancelled_caught
    assert not inner.cancelled_caught


async def test_an_asyncio_timeout_inside_a_scope_keeps_its_own_meaning() -> None:
    token = CancellationToken()
    with token.scope() as scope, pytest.raises(TimeoutError):
        async with asyncio.timeout(0):
            await asyncio.sleep(3600)
    assert not scope.cancelled_caught

    run_entered = asyncio.Event()

    async def run() -> None:
        with token.scope():
            async with asyncio.timeout(3600):
                run_entered.set()
                await asyncio.sleep(3600)

    task = asyncio.create_task(run())
    await guarded(run_entered.wait())
    token.cancel()
    with pytest.raises(Cancelled):  # not TimeoutError: the timeout did not expire
        await guarded(task)


async def test_one_batch_token_cancels_fifty_runs_each_under_its_own_child() -> None:
    batch = CancellationToken()
    tokens = [batch.child() for _ in range(50)]
    runs = [await Blocked(t).started() for t in tokens]

    tokens[7].cancel("just run 7")
    with pytest.raises(Cancelled, match="just run 7"):
        await guarded(runs[7].task)
    assert not any(r.task.done() for i, r in enumerate(runs) if i != 7)

    batch.cancel("batch aborted")
    results = await guarded(asyncio.gather(*(r.task for r in runs), return_exceptions=True))
    assert all(isinstance(r, Cancelled) for r in results)
    assert all("batch aborted" in str(r) for i, r in enumerate(results) if i != 7)
    assert all(r.cancelling_after == 0 for r in runs)
    assert batch.statistics() == TokenStatistics(
        cancelled=True, live_children=0, pending_callbacks=0
    )


# --- cancellations consumed before the token fired (BUG-7) -------------------------------
#
# Python 3.11's TaskGroup (and 3.12's before gh-116720) cancels its parent task when a child
# fails while the parent waits in `__aexit__`, and never calls `uncancel()` for it: after the
# agent caught the ExceptionGroup, `cancelling()` stays at 1 though nothing is pending. Code
# that swallows a CancelledError without `uncancel()` leaves the same trace on every Python,
# so "swallowed" runs the same checks where the TaskGroup no longer leaks.


async def _taskgroup_leaks_a_cancel() -> bool:
    async def crash() -> None:
        raise ValueError

    with contextlib.suppress(ExceptionGroup):
        async with asyncio.TaskGroup() as group:
            group.create_task(crash())
    task = asyncio.current_task()
    assert task is not None
    return task.cancelling() > 0


TASKGROUP_LEAKS_A_CANCEL = asyncio.run(_taskgroup_leaks_a_cancel())


async def consume_a_cancel(how: str) -> None:
    """Leave the current task's `cancelling()` raised by a cancellation that was already
    delivered and caught ("none": leave it alone)."""
    if how == "task group":

        async def tool() -> None:
            raise ValueError("the tool failed")

        with contextlib.suppress(ExceptionGroup):
            async with asyncio.TaskGroup() as group:
                group.create_task(tool())
    elif how == "swallowed":
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)


class AfterAConsumedCancel(Blocked):
    """A task that enters `token.scope()`, consumes a cancellation inside it (`how`), then
    blocks: suspended on a sleep, or always ready to run (a loop of `sleep(0)`)."""

    def __init__(self, token: CancellationToken, *, how: str, ready: bool) -> None:
        self.how = how
        self.ready = ready
        self.consumed: int | None = None
        super().__init__(token)

    async def _run(self) -> str:
        task = asyncio.current_task()
        assert task is not None
        try:
            with self.token.scope() as scope:
                self.scope = scope
                await consume_a_cancel(self.how)
                self.consumed = task.cancelling()
                self.entered.set()
                if self.ready:
                    # On purpose: between its steps the task is always ready to run, never
                    # suspended on a future.
                    while True:  # noqa: ASYNC110
                        await asyncio.sleep(0)
                await asyncio.sleep(3600)
        finally:
            self.cancelling_after = task.cancelling()
        return "finished"


CONSUMED = pytest.mark.parametrize("how", ["task group", "swallowed"])
WAITING = pytest.mark.parametrize("ready", [False, True], ids=["suspended", "ready"])


@CONSUMED
@WAITING
async def test_a_token_cancel_after_a_consumed_cancel_becomes_cancelled(
    how: str, ready: bool
) -> None:
    token = CancellationToken()
    run = await AfterAConsumedCancel(token, how=how, ready=ready).started()
    assert run.consumed == (1 if how == "swallowed" or TASKGROUP_LEAKS_A_CANCEL else 0)
    token.cancel("stop button")
    with pytest.raises(Cancelled, match="stop button") as info:
        await guarded(run.task)
    assert isinstance(info.value.__cause__, asyncio.CancelledError)
    assert run.scope is not None
    assert run.scope.cancelled_caught
    assert run.cancelling_after == run.consumed  # ours taken back, the consumed one left


@CONSUMED
@WAITING
@pytest.mark.parametrize("token_first", [True, False], ids=["token-first", "outside-first"])
async def test_a_token_and_an_outside_cancel_after_a_consumed_cancel_propagate(
    how: str, ready: bool, token_first: bool
) -> None:
    token = CancellationToken()
    run = await AfterAConsumedCancel(token, how=how, ready=ready).started()
    if token_first:
        token.cancel()
        run.task.cancel()
    else:
        run.task.cancel()
        token.cancel()
    with pytest.raises(asyncio.CancelledError) as info:
        await guarded(run.task)
    if ready and not token_first:
        # The task was ready to run, so the token's cancel(msg) overwrote the outside one's
        # message: the message alone would have passed this off as the token's own.
        assert "cancellation token fired" in str(info.value)
    assert run.scope is not None
    assert run.scope.cancel_called
    assert not run.scope.cancelled_caught
    assert run.consumed is not None
    assert run.cancelling_after == run.consumed + 1  # ours taken back, theirs left in place


@WAITING
async def test_an_outside_cancel_then_the_token_propagate_with_nothing_consumed(
    ready: bool,
) -> None:
    # The count alone decides here, as it did before BUG-7's fix.
    token = CancellationToken()
    run = await AfterAConsumedCancel(token, how="none", ready=ready).started()
    run.task.cancel()
    token.cancel()
    with pytest.raises(asyncio.CancelledError):
        await guarded(run.task)
    assert run.scope is not None
    assert not run.scope.cancelled_caught
    assert run.cancelling_after == 1


async def test_after_a_consumed_cancel_the_outer_scope_catches_its_tokens_cancel() -> None:
    parent = CancellationToken()
    child = parent.child()
    entered = asyncio.Event()
    scopes: list[CancelScope] = []
    passed_through: list[type[BaseException]] = []

    async def run() -> None:
        with parent.scope() as outer:
            scopes.append(outer)
            try:
                with child.scope() as inner:
                    scopes.append(inner)
                    await consume_a_cancel("task group")
                    entered.set()
                    await asyncio.sleep(3600)
            except BaseException as exc:
                passed_through.append(type(exc))
                raise

    task = asyncio.create_task(run())
    await guarded(entered.wait())
    parent.cancel()
    with pytest.raises(Cancelled):
        await guarded(task)
    outer, inner = scopes
    assert passed_through == [asyncio.CancelledError]
    assert outer.cancelled_caught
    assert not inner.cancelled_caught


async def test_a_foreign_cancelled_error_after_a_consumed_cancel_is_not_taken_for_ours() -> None:
    token = CancellationToken()
    entered = asyncio.Event()

    async def run() -> None:
        with token.scope():
            await consume_a_cancel("swallowed")
            entered.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                raise asyncio.CancelledError("something else") from None

    task = asyncio.create_task(run())
    await guarded(entered.wait())
    token.cancel()
    with pytest.raises(asyncio.CancelledError, match="something else"):
        await guarded(task)


# --- threads -----------------------------------------------------------------------------


async def test_a_cancel_from_a_worker_thread_interrupts_the_task() -> None:
    token = CancellationToken()
    run = await Blocked(token).started()
    await guarded(asyncio.to_thread(token.cancel, "from a thread"))
    with pytest.raises(Cancelled, match="from a thread"):
        await guarded(run.task)
    assert run.scope is not None
    assert run.scope.cancelled_caught


async def test_a_cancel_from_a_worker_thread_wakes_waiters() -> None:
    token = CancellationToken()
    waiter = asyncio.create_task(token.cancelled())
    await asyncio.sleep(0)
    thread = threading.Thread(target=token.cancel)
    thread.start()
    await guarded(waiter)
    thread.join()


async def test_a_thread_cancel_reaching_an_exited_scope_does_nothing() -> None:
    token = CancellationToken()
    task = asyncio.current_task()
    assert task is not None
    with token.scope() as scope:
        # The loop's thread is busy here, so the delivery can only be queued; it arrives
        # after the block has ended and must not cancel whatever the task does next.
        thread = threading.Thread(target=token.cancel)
        thread.start()
        thread.join()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert scope.cancel_called
    assert not scope.cancelled_caught
    assert task.cancelling() == 0


async def test_a_thread_cancel_reaching_a_live_scope_interrupts_its_next_await() -> None:
    token = CancellationToken()
    with pytest.raises(Cancelled), token.scope() as scope:
        thread = threading.Thread(target=token.cancel)
        thread.start()
        thread.join()
        await asyncio.sleep(3600)
    assert scope.cancelled_caught


def test_a_token_reaches_a_task_on_another_threads_loop() -> None:
    token = CancellationToken()
    entered = threading.Event()
    outcome: list[BaseException] = []

    async def run() -> None:
        with token.scope():
            entered.set()
            await asyncio.sleep(3600)

    def thread_main() -> None:
        try:
            asyncio.run(run())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=thread_main)
    thread.start()
    assert entered.wait(5)
    token.cancel()
    thread.join(5)
    assert not thread.is_alive()
    assert len(outcome) == 1
    assert isinstance(outcome[0], Cancelled)


# --- race --------------------------------------------------------------------------------


async def test_race_returns_the_result() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    token = CancellationToken()
    assert await guarded(token.race(answer())) == 42
    assert await guarded(token.until_cancelled(answer())) == 42
    assert token.statistics().pending_callbacks == 0


async def test_race_lets_the_awaitables_own_error_through() -> None:
    async def fail() -> None:
        raise ValueError("tool broke")

    with pytest.raises(ValueError, match="tool broke"):
        await guarded(CancellationToken().race(fail()))


async def test_race_lost_to_the_token_raises_and_unwinds_the_coroutine() -> None:
    token = CancellationToken()
    started = asyncio.Event()
    unwound: list[str] = []

    async def model_stream() -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            unwound.append("finally ran")
        return "never"

    racer = asyncio.create_task(token.race(model_stream()))
    await guarded(started.wait())
    token.cancel("user stop")
    with pytest.raises(Cancelled, match="user stop"):
        await guarded(racer)
    assert unwound == ["finally ran"]


async def test_race_on_a_cancelled_token_closes_the_coroutine_unstarted() -> None:
    token = CancellationToken()
    token.cancel()
    ran: list[str] = []

    async def work() -> None:
        ran.append("ran")

    coro = work()
    with pytest.raises(Cancelled):
        await token.race(coro)
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED
    assert ran == []
    gc.collect()  # a "never awaited" RuntimeWarning would fail the suite here


async def test_race_cancels_a_task_it_was_given() -> None:
    token = CancellationToken()
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.sleep(3600)

    work_task = asyncio.create_task(work())
    racer = asyncio.create_task(token.race(work_task))
    await guarded(started.wait())
    token.cancel()
    with pytest.raises(Cancelled):
        await guarded(racer)
    assert work_task.cancelled()


async def test_race_on_a_cancelled_token_cancels_a_future_it_was_given() -> None:
    token = CancellationToken()
    token.cancel()
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    with pytest.raises(Cancelled):
        await token.race(future)
    assert future.cancelled()


async def test_race_keeps_a_result_that_arrives_despite_the_cancel() -> None:
    token = CancellationToken()
    started = asyncio.Event()

    async def stubborn() -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return "partial step"  # law 8: what was produced is kept
        return "whole turn"

    racer = asyncio.create_task(token.race(asyncio.ensure_future(stubborn())))
    await guarded(started.wait())
    token.cancel()
    assert await guarded(racer) == "partial step"
    assert racer.cancelling() == 0


async def test_until_cancelled_returns_none_when_the_token_wins() -> None:
    token = CancellationToken()
    started = asyncio.Event()

    async def slow() -> int:
        started.set()
        await asyncio.sleep(3600)
        return 1

    racer = asyncio.create_task(token.until_cancelled(slow()))
    await guarded(started.wait())
    token.cancel()
    assert await guarded(racer) is None

    closed = slow()
    assert await token.until_cancelled(closed) is None
    assert inspect.getcoroutinestate(closed) == inspect.CORO_CLOSED


async def test_until_cancelled_lets_an_unrelated_cancelled_through() -> None:
    token = CancellationToken()
    other = CancellationToken()
    other.cancel()

    async def checks_another_token() -> None:
        other.check()

    with pytest.raises(Cancelled):
        await token.until_cancelled(checks_another_token())


async def test_race_under_an_outside_cancel_propagates_cancelled_error() -> None:
    token = CancellationToken()
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await asyncio.sleep(3600)

    racer = asyncio.create_task(token.until_cancelled(slow()))
    await guarded(started.wait())
    racer.cancel()
    token.cancel()
    with pytest.raises(asyncio.CancelledError):
        await guarded(racer)

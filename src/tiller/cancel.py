"""Cancellation tokens: trio's cancel scopes, rebuilt on asyncio tasks.

A `CancellationToken` is the one place a run learns that it should stop. It is shared on
purpose: an operator cancels a whole batch with one token, while every run of the batch
works under its own `child()`, so stopping one run never stops its siblings.

Cancelling a token is not a flag that code has to poll. Every task that entered
`with token.scope():` gets `task.cancel()`, so whatever it is blocked on (a model stream, a
subprocess, a queue) is interrupted. When the resulting `asyncio.CancelledError` reaches the
scope's exit, the scope takes back exactly the cancellation it issued (`task.uncancel()`, as
`asyncio.timeout` does) and raises `tiller.errors.Cancelled` instead. A cancellation that
came from outside (the task's owner, a `TaskGroup`, `asyncio.timeout`) and was still pending
when the token fired, or came after it, makes the `CancelledError` propagate untouched: a
token never swallows a cancellation it did not cause (DESIGN.md, law 8). See `CancelScope`
for how the two are told apart, also on Pythons whose `TaskGroup` leaves `cancelling()`
raised (3.11, early 3.12).

Tokens are thread-safe: `cancel()` may come from a signal handler's thread, a worker thread
or another event loop. Whatever must happen on a task's loop (cancelling the task, waking a
waiter) is handed to that loop with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Literal, TypeVar, TypeVarTuple

from tiller.errors import Cancelled, UsageError

__all__ = ["CallbackHandle", "CancelScope", "CancellationToken", "TokenStatistics"]

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

_logger: Final = logging.getLogger(__name__)

# The message carried by the `CancelledError` a token injects, made unique per scope (see
# `CancelScope._deliver`). If one ever escapes a scope (because an outside cancellation raced
# in), it tells whoever reads the traceback why.
_CANCEL_MSG: Final = "tiller: the cancellation token fired"

_ABSENT: Final = object()


class CallbackHandle:
    """A registration made by `CancellationToken.add_callback`; `remove()` takes it back.

    The handle refers to the token's registry, not to the token, so a token that is only
    reachable through a forgotten handle can still be freed (and leave its parent's set of
    weak children).
    """

    __slots__ = ("_args", "_fn", "_lock", "_registry")

    def __init__(
        self,
        fn: Callable[..., object],
        args: tuple[object, ...],
        registry: dict[CallbackHandle, None],
        lock: threading.Lock,
    ) -> None:
        self._fn = fn
        self._args = args
        self._registry = registry
        self._lock = lock

    def remove(self) -> bool:
        """Unregister the callback, so the token will not call it.

        Returns `True` if the callback was still waiting, `False` if the token has already
        fired (the callback has run, or is running in another thread right now) or the
        handle was removed before. Safe to call any number of times, from any thread.
        """
        with self._lock:
            return self._registry.pop(self, _ABSENT) is not _ABSENT

    def _run(self) -> None:
        try:
            self._fn(*self._args)
        except Exception:
            # A broken callback must not stop the others, nor the cancel that is running it:
            # the caller of `cancel()` (a server noticing a disconnect) cannot handle it.
            _logger.exception("cancellation callback %r raised", self._fn)


@dataclass(frozen=True, slots=True)
class TokenStatistics:
    """What a token holds right now, for tests and leak hunting (trio's `statistics()`)."""

    cancelled: bool
    """Whether the token has fired."""
    live_children: int
    """Children still alive and still waiting for this token (cancelled ones are dropped)."""
    pending_callbacks: int
    """Registrations still waiting: callbacks, active scopes and `cancelled()` waiters."""


class CancellationToken:
    """A cancellation request that can be shared, nested and waited for.

    A fresh token is not cancelled. `cancel()` fires it once and for all: it and all its
    descendants become cancelled, the tasks inside their scopes are interrupted, their
    `cancelled()` waiters wake and their callbacks run. A token never un-fires; use a new
    `child()` for work that must be cancellable on its own.

    A parent holds its children only weakly, so a long-lived batch token can hand out any
    number of short-lived children without growing. The flip side: keep a reference to a
    child for as long as you rely on it (a scope, a waiter or a run context does that).
    """

    __slots__ = (
        "__weakref__",
        "_callbacks",
        "_cancelled",
        "_children",
        "_lock",
        "_parent",
        "_reason",
    )

    _cancelled: bool
    _reason: str | None
    _lock: threading.Lock
    _parent: CancellationToken | None
    _children: weakref.WeakSet[CancellationToken] | None
    _callbacks: dict[CallbackHandle, None] | None

    def __init__(self) -> None:
        self._setup(threading.Lock(), None)

    def _setup(self, lock: threading.Lock, parent: CancellationToken | None) -> None:
        # One lock per tree of tokens: cancelling a subtree is then one atomic step, and no
        # code path ever holds two locks, so there is no lock order to get wrong.
        self._cancelled = False
        self._reason = None
        self._lock = lock
        self._parent = parent
        self._children = None  # created on first child(): most tokens never have one
        self._callbacks = None

    # --- state --------------------------------------------------------------------------

    @property
    def is_cancelled(self) -> bool:
        """Whether the token has fired (a plain attribute read, cheap enough for hot loops)."""
        return self._cancelled

    @property
    def reason(self) -> str | None:
        """Why the token fired: the reason given to the first `cancel()` that fired it, or
        to an ancestor's. `None` while not cancelled, or if no reason was given."""
        return self._reason

    def statistics(self) -> TokenStatistics:
        """Count what the token holds, to check that nothing leaks."""
        with self._lock:
            return TokenStatistics(
                cancelled=self._cancelled,
                live_children=len(self._children) if self._children is not None else 0,
                pending_callbacks=len(self._callbacks) if self._callbacks is not None else 0,
            )

    def __repr__(self) -> str:
        if not self._cancelled:
            return "<CancellationToken active>"
        return f"<CancellationToken cancelled reason={self._reason!r}>"

    # --- firing -------------------------------------------------------------------------

    def cancel(self, reason: str | None = None) -> None:
        """Fire the token and all its descendants. Idempotent; callable from any thread.

        Later calls change nothing, not even the reason. Callbacks run in the calling
        thread before this returns, parents' before their descendants'; tasks and waiters
        that live on another thread's loop are reached through that loop.
        """
        fired: list[list[CallbackHandle]] = []
        with self._lock:
            if self._cancelled:
                return
            parent = self._parent
            if parent is not None and parent._children is not None:
                # The parent no longer has to reach us; a cancelled child needs nothing more.
                parent._children.discard(self)
            # Depth-first, iterative: a chain of thousands of nested children must not hit
            # the recursion limit.
            stack = [self]
            while stack:
                token = stack.pop()
                if token._cancelled:
                    continue
                token._cancelled = True
                token._reason = reason
                token._parent = None
                callbacks, token._callbacks = token._callbacks, None
                if callbacks:
                    fired.append(list(callbacks))
                    # Emptying the registry under the lock makes every handle's `remove()`
                    # answer False from now on: each callback is claimed exactly once.
                    callbacks.clear()
                children, token._children = token._children, None
                if children:
                    stack.extend(children)
        for handles in fired:
            for handle in handles:
                handle._run()

    def _error(self) -> Cancelled:
        if self._reason is None:
            return Cancelled()
        return Cancelled(f"the run was cancelled: {self._reason}")

    def check(self) -> None:
        """Raise `Cancelled` if the token has fired.

        For long synchronous stretches (a CPU-bound loop) that never reach an `await` a
        scope could interrupt.
        """
        if self._cancelled:
            raise self._error()

    # --- children -----------------------------------------------------------------------

    def child(self) -> CancellationToken:
        """A new token that fires when this one does, and can also fire on its own.

        A child of a cancelled token starts cancelled, with the same reason. Cancelling the
        child never touches its parent or siblings.
        """
        token = CancellationToken.__new__(CancellationToken)
        with self._lock:
            if self._cancelled:
                token._setup(self._lock, None)
                token._cancelled = True
                token._reason = self._reason
                return token
            token._setup(self._lock, self)
            if self._children is None:
                self._children = weakref.WeakSet()
            self._children.add(token)
        return token

    # --- callbacks ----------------------------------------------------------------------

    def _register(
        self, fn: Callable[..., object], args: tuple[object, ...]
    ) -> CallbackHandle | None:
        """Register `fn(*args)` for the firing, or return `None` if the token already fired.

        Check and registration happen under one lock, so a concurrent `cancel()` either
        sees the registration or happens before it; it can never slip in between.
        """
        with self._lock:
            if self._cancelled:
                return None
            if self._callbacks is None:
                self._callbacks = {}
            handle = CallbackHandle(fn, args, self._callbacks, self._lock)
            self._callbacks[handle] = None
            return handle

    def add_callback(self, fn: Callable[[*_Ts], object], *args: *_Ts) -> CallbackHandle:
        """Call `fn(*args)` once when the token fires; at once if it already has.

        The callback runs synchronously in the thread that calls `cancel()`, so keep it
        short and thread-safe (to touch an event loop, use its `call_soon_threadsafe`). An
        exception it raises is logged, and does not stop other callbacks or the cancel.
        """
        handle = self._register(fn, args)
        if handle is None:
            handle = CallbackHandle(fn, args, {}, self._lock)
            handle._run()
        return handle

    # --- waiting ------------------------------------------------------------------------

    async def cancelled(self) -> None:
        """Wait until the token fires; return at once if it already has."""
        if self._cancelled:
            return
        event_loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = event_loop.create_future()
        handle = self._register(_call_in_loop, (event_loop, _resolve, waiter))
        if handle is None:
            return
        try:
            await waiter
        finally:
            handle.remove()

    def scope(self) -> CancelScope:
        """A `with` block whose task is cancelled when this token fires.

        ```python
        with token.scope():
            reply = await model.complete(request)  # interrupted if the token fires
        ```

        Inside the block, a firing becomes `Cancelled` at the block's end; entering it
        after the token fired raises `Cancelled` at once. See `CancelScope`.
        """
        return CancelScope(self)

    async def race(self, awaitable: Awaitable[_T]) -> _T:
        """Await `awaitable` in the current task until it finishes or the token fires.

        Returns its result, or raises `Cancelled` if the token fired first. A coroutine is
        run in the current task (no new task, so no ownerless work); if the token has
        already fired it is closed without running. A task or future passed in is cancelled
        when the token wins, and awaited until it has unwound. If the awaitable still
        finishes with a result after the token fired, that result is returned: the work is
        kept, not thrown away.
        """
        scope = CancelScope(self)
        try:
            scope.__enter__()
        except BaseException:
            _discard(awaitable)  # the token already fired, or there is no task to run it in
            raise
        # The rest is `with scope: return await awaitable`, spelled out because entering
        # the scope had to be guarded above.
        try:
            result = await awaitable
        except BaseException as exc:
            scope.__exit__(type(exc), exc, exc.__traceback__)  # may raise `Cancelled`
            raise
        scope.__exit__(None, None, None)
        return result

    async def until_cancelled(self, awaitable: Awaitable[_T]) -> _T | None:
        """Like `race`, but return `None` instead of raising when the token fires first.

        trio's `move_on` to `race`'s `fail`: for work whose absence is a normal outcome.
        A `Cancelled` is turned into `None` only if this token has fired; one raised for an
        unrelated token inside the awaitable propagates.
        """
        try:
            return await self.race(awaitable)
        except Cancelled:
            if self._cancelled:
                return None
            raise


_UNUSED: Final = 0
_ACTIVE: Final = 1
_EXITED: Final = 2


class CancelScope:
    """The part of a task that a token may interrupt. Made by `CancellationToken.scope()`.

    Entering registers the current task with the token; if the token fires while the block
    runs, the task gets `task.cancel()` with a message unique to this scope. At the block's
    exit the scope undoes exactly that one cancellation with `task.uncancel()`, then raises
    `Cancelled` from the `CancelledError` if the cancellation unwinding the block is its own
    and no one else's is still pending:

    - `task.cancelling()` back at its value at entry: nobody else asked (as in
      `asyncio.timeout`, which compares the same count);
    - above its value when the token fired: someone cancelled the task after the token did,
      and their `CancelledError` propagates;
    - in between: the count rose inside the block before the token fired. That is either an
      outside cancellation still pending when the token fired (it propagates), or one that
      was already delivered and consumed without `uncancel()`: Python 3.11's `TaskGroup`
      (and 3.12's before gh-116720) cancels its parent task when a child fails while it
      waits in `__aexit__`, and never takes that back. The scope told the two apart when it
      fired, by asking the task whether a cancellation was already on its way; a consumed
      one does not stop the scope from turning its own `CancelledError`, recognised by its
      message, into `Cancelled`.

    Scopes nest, and a task may be in the scopes of several tokens at once. When both an
    outer and an inner scope are cancelled, the inner one lets the `CancelledError` through
    and the outer one catches it, as in trio.

    A scope is single-use and belongs to the task that entered it. It is a plain `with`
    (not `async with`): entering and leaving never block.
    """

    __slots__ = (
        "_entry_cancelling",
        "_event_loop",
        "_fired_cancelling",
        "_handle",
        "_issued",
        "_message",
        "_other_pending",
        "_state",
        "_task",
        "_token",
        "cancelled_caught",
    )

    _task: asyncio.Task[object]
    _event_loop: asyncio.AbstractEventLoop
    _entry_cancelling: int
    _handle: CallbackHandle | None
    # Set when the scope cancels the task (`_deliver`):
    _fired_cancelling: int  # `task.cancelling()` just before
    _other_pending: bool | None  # another cancellation was on its way (None: unknowable)
    _message: str  # the message of our `CancelledError`

    def __init__(self, token: CancellationToken) -> None:
        self._token = token
        self._state: int = _UNUSED
        self._issued = False
        self._handle = None
        self.cancelled_caught = False
        """Whether the token's cancellation actually unwound this block (trio's meaning):
        the scope turned its own `CancelledError` into `Cancelled`. False if the block
        finished first, or if an outside cancellation won."""

    @property
    def token(self) -> CancellationToken:
        """The token this scope listens to."""
        return self._token

    @property
    def cancel_called(self) -> bool:
        """Whether cancellation was requested (the token fired), whether or not it took
        effect here; compare `cancelled_caught`."""
        return self._token._cancelled

    def __enter__(self) -> CancelScope:
        if self._state != _UNUSED:
            raise UsageError("a cancel scope can be entered only once; call token.scope() again")
        try:
            event_loop = asyncio.get_running_loop()
        except RuntimeError:
            event_loop = None
        task = asyncio.current_task(event_loop) if event_loop is not None else None
        if event_loop is None or task is None:
            raise UsageError(
                "token.scope() interrupts an asyncio task, so enter it inside a coroutine "
                "running in a task; in plain synchronous code, call token.check() instead"
            )
        self._task = task
        self._event_loop = event_loop
        self._entry_cancelling = task.cancelling()
        self._handle = self._token._register(self._on_fire, ())
        if self._handle is None:
            self._state = _EXITED
            raise self._token._error()
        self._state = _ACTIVE
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if self._state != _ACTIVE:
            raise UsageError("this cancel scope is not active; it was never entered or left twice")
        self._state = _EXITED
        handle, self._handle = self._handle, None  # (it holds `_on_fire`: no cycle left)
        if handle is not None:
            handle.remove()
        if not self._issued:
            return False
        # Take back our own cancellation whatever happened, so the task's count stays right
        # for the `asyncio.timeout`s and task groups further out.
        remaining = self._task.uncancel()
        if remaining > self._fired_cancelling:
            return False  # cancelled again after the token fired: that cancellation wins
        if not isinstance(exc, asyncio.CancelledError):
            return False  # the block swallowed our cancellation, or finished anyway
        if remaining > self._entry_cancelling and not self._unwound_by_us_alone(exc):
            return False  # an outside cancellation was pending when the token fired: it wins
        self.cancelled_caught = True
        raise self._token._error() from exc

    def _unwound_by_us_alone(self, exc: asyncio.CancelledError) -> bool:
        """With `cancelling()` raised since entry by cancellations made before the token
        fired: whether they were all delivered already (consumed without `uncancel()`, as
        3.11's `TaskGroup` does), so that `exc` is our own cancellation and nothing else.

        The message alone cannot tell: if the task was ready to run when both cancels came,
        the later `cancel(msg)` overwrites the earlier one's message, so ours can be the one
        carried even though an outside cancellation came first. What the task said when the
        token fired decides; the message rules out a `CancelledError` not caused by us.
        """
        return self._other_pending is not True and exc.args[:1] == (self._message,)

    def _on_fire(self) -> None:
        """Token callback: get `task.cancel()` to the task, on the task's own loop."""
        event_loop = self._event_loop
        if _running_loop() is not event_loop:
            _call_soon_threadsafe(event_loop, self._deliver)
        elif asyncio.current_task(event_loop) is self._task:
            # The task cancelled its own token. Cancelling a running task would leave a
            # pending cancel that might go off after the block (Python < 3.13 cannot rescind
            # it); deliver it once the task next suspends, which is inside the block if the
            # block awaits again at all.
            event_loop.call_soon(self._deliver)
        else:
            # The task is suspended, necessarily inside the block: cancel it right away.
            self._deliver()

    def _deliver(self) -> None:
        # Runs on the task's loop, where the scope's state changes, so no lock is needed;
        # and never inside the task itself, so the task is suspended or ready to run.
        if self._state != _ACTIVE or self._issued:
            return
        task = self._task
        self._issued = True
        self._fired_cancelling = task.cancelling()
        self._other_pending = _cancel_pending(task)
        # Unique among live scopes, so nested scopes (and a scope of the same token) each
        # recognise only their own.
        self._message = f"{_CANCEL_MSG} (scope {id(self):#x})"
        task.cancel(msg=self._message)

    def __repr__(self) -> str:
        state = {_UNUSED: "unused", _ACTIVE: "active", _EXITED: "exited"}[self._state]
        return (
            f"<CancelScope {state} cancel_called={self.cancel_called} "
            f"cancelled_caught={self.cancelled_caught}>"
        )


def _cancel_pending(task: asyncio.Task[object]) -> bool | None:
    """Whether a cancellation of `task`, which is not running, was requested and not yet
    thrown into it; `None` if this task type does not say.

    No public API tells, so this reads the two private attributes both asyncio `Task`
    implementations (C and pure Python) keep for it, as anyio's cancel scopes do:
    `_must_cancel` (the task was ready to run) or an awaited future already cancelled (the
    task was suspended on it).
    """
    try:
        must_cancel = task._must_cancel  # type: ignore[attr-defined]
        waiter = task._fut_waiter  # type: ignore[attr-defined]
    except AttributeError:
        return None
    if must_cancel:
        return True
    return isinstance(waiter, asyncio.Future) and waiter.cancelled()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _call_soon_threadsafe(
    event_loop: asyncio.AbstractEventLoop, fn: Callable[[*_Ts], object], *args: *_Ts
) -> None:
    # A closed loop raises RuntimeError: nothing on it is waiting any more.
    with contextlib.suppress(RuntimeError):
        event_loop.call_soon_threadsafe(fn, *args)


def _call_in_loop(
    event_loop: asyncio.AbstractEventLoop, fn: Callable[[*_Ts], object], *args: *_Ts
) -> None:
    """Call `fn(*args)` now if we are on `loop`'s thread, else hand it to that loop."""
    if _running_loop() is event_loop:
        fn(*args)
    else:
        _call_soon_threadsafe(event_loop, fn, *args)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _discard(awaitable: Awaitable[object]) -> None:
    """Dispose of an awaitable that will never be awaited, without a "never awaited"
    warning or an orphaned task."""
    if inspect.iscoroutine(awaitable):
        awaitable.close()
    elif isinstance(awaitable, asyncio.Future):
        awaitable.cancel()

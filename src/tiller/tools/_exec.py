"""`ExecContext`: what one tool call receives.

A tool gets everything it may use through this one object (law 9: no globals): the call's
cancellation and background tokens, its id and turn, the jail, progress, the channel
detached work reports through, the run's safety mode and the user's goal, the brokers that
reach a person (questions, the task checklist), the step's shared web byte budget, file
snapshots before writes, and the run's typed state. The loop builds one per call with
`ExecContext.assemble(...)`; a test builds one with `ExecContext.for_test(workdir=tmp_path)`
and needs nothing else: every service that is absent degrades gracefully (no question
broker means "no one is available", no task broker means the task tools say so, no
snapshotter means no file checkpoints).

Tools do not depend on the loop or on the AG-UI machinery. Events go out through an
injected `emit` callable (the run's `AgUiContext.emit`), and state through an injected
`StateAccess`, a two-member protocol that `AgUiContext` satisfies.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import warnings
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from .. import _public
from ..cancel import CancellationToken
from ..errors import UsageError
from ..events import Event
from ..phase import Phase
from ._errors import PathOutsideJail, ProtectedPathRefused
from ._file_snapshots import CheckpointOrigin, FileSnapshotter
from ._goal import UserGoal
from ._jail import Jail
from ._notify import Notifier
from ._progress import PROGRESS_EVENT, Progress
from ._questions import QuestionBroker
from ._safety import SafetyMode
from ._web_budget import WebBudget

if TYPE_CHECKING:
    from ._background import BackgroundJobs
    from ._tasks import TaskBroker

__all__ = [
    "PROGRESS_EVENT",
    "CallSite",
    "ExecContext",
    "LocalState",
    "PendingContext",
    "StateAccess",
    "ToolServices",
    "StepSignals",
    "resolve_context",
]

S = TypeVar("S")
T = TypeVar("T")

_EMPTY_CONFIG: Mapping[str, Any] = MappingProxyType({})


@runtime_checkable
class StateAccess(Protocol[S]):
    """Read and change a run's typed state. `AgUiContext` is one.

    `update_state(fn)` applies `fn` (which may change the state in place and return
    `None`, or return a new state) and publishes the change to the run's observers.
    """

    @property
    def state(self) -> S: ...

    def update_state(self, fn: Callable[[S], S | None]) -> None: ...


class LocalState(Generic[S]):
    """A `StateAccess` that only holds the state: for tests and runs without a UI.

    `updates` counts calls to `update_state`, so a test can check a tool published.
    """

    __slots__ = ("_state", "updates")

    def __init__(self, state: S) -> None:
        self._state = state
        self.updates = 0

    @property
    def state(self) -> S:
        return self._state

    def update_state(self, fn: Callable[[S], S | None]) -> None:
        result = fn(self._state)
        if result is not None:
            self._state = result
        self.updates += 1

    def __repr__(self) -> str:
        return f"LocalState({self._state!r})"


def _drop_event(event: Event) -> None:
    """The default emitter: a context built without a run has no one to tell."""


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


# ── the three bundles `assemble` takes ──────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class StepSignals:
    """What one step's calls share: the cancel token, the background token (fired
    to detach long work from the step), and the step's web byte budget."""

    token: CancellationToken
    background: CancellationToken = field(default_factory=CancellationToken)
    web_bytes: WebBudget = field(default_factory=WebBudget)


@dataclass(frozen=True, slots=True)
class CallSite:
    """Where the call was dispatched: the run's tool policy and phase, the live safety
    mode read at dispatch, and the transcript's length then (the file checkpoints'
    anchor)."""

    jail: Jail
    phase: Phase = Phase.EXECUTE
    safety_mode: SafetyMode = SafetyMode.ASK
    message_index: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolServices:
    """What lives as long as the run: its emitter and state, the notify channel, config
    and identity, the scratchpad, the user's goal, and the brokers. Every member has a
    safe default."""

    emit: Callable[[Event], object] = _drop_event
    state_access: StateAccess[Any] = field(default_factory=lambda: LocalState({}))
    notify: Notifier | None = None
    config: Mapping[str, Any] = field(default_factory=lambda: _EMPTY_CONFIG)
    model_id: str | None = None
    task_id: str | None = None
    session_id: str | None = None
    scratchpad: Path | None = None
    goal: UserGoal = field(default_factory=UserGoal)
    classifier: Any = None
    approval: Any = None
    questions: QuestionBroker | None = None
    tasks: TaskBroker | None = None
    jobs: BackgroundJobs | None = None
    snapshots: FileSnapshotter | None = None
    mailbox: Any = None
    subagents: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecContext:
    """What one tool call receives. Declare a parameter of this type (any name) in a
    `@tool` function to get it; it is not part of the tool's schema.

    - `token`: the call's cancellation token. Async tools are interrupted through it
      (the registry runs each call inside `token.scope()`); a sync tool, which runs in a
      worker thread and cannot be interrupted, should call `token.check()` in long loops.
    - `background`: a second signal, fired when a person asks to detach long work from the
      turn (a command keeps running; `background_process` reaches it later). It never
      fires in a test unless the test fires it.
    - `notify`: the channel that outlives the step: detached work posts its result there
      and the run reads it at its next step (`None`: nothing can be detached).
    - `progress`: this call's progress channel (`ctx.progress("msg")`, `.output(...)`, ...).
    - `call_id`, `step`: which call this is, made in which step of its run.
    - `workdir`: the jail root (`jail.root`), where relative paths start.
    - `jail`: the run's `Jail`; file tools open every path through it.
    - `phase`: the run's phase (in Plan, file writes are allowed only in the scratchpad).
    - `config`, `model_id`: what a subagent inherits.
    - `task_id`, `session_id`, `message_index`: where this call sits (under a worker task,
      in a thread, at a transcript length).
    - `scratchpad`: the session's scratch directory inside the jail, once it exists.
    - `safety_mode`: the run's live safety mode, read when this call was dispatched.
    - `goal`: the user's requests, bounded (`UserGoal`), for judging actions.
    - `classifier`, `approval`: the run's auto classifier (`AutoClassifier.vet`) and its
      approval broker (`ApprovalBroker.ask`; `None` when the run has no approver), for a
      tool that must vet or ask about something itself; `None` in `for_test`.
    - `questions`, `tasks`, `jobs`: the question broker, the task checklist, the run's
      background jobs (`None` when the run has none).
    - `web_bytes`: the step's shared web byte budget (`charge_web_bytes`, `web_budget()`).
    - `mailbox`: the run's mail sender (`await ctx.mailbox.send(to, text)`), which stamps
      the run's identity and the step's taint itself; `None` when the run has no mailbox.
    - `subagents`: what starts the run's subagents (`await ctx.subagents.run(...)`, the
      `agent` tool's); `None` in a subagent (no recursion) and outside a run.
    - `emit`, `state_access`: the run's event stream and typed state.
    """

    token: CancellationToken
    call_id: str
    step: int
    workdir: Path
    jail: Jail
    emit: Callable[[Event], object] = _drop_event
    state_access: StateAccess[Any] = field(default_factory=lambda: LocalState({}))
    background: CancellationToken = field(default_factory=CancellationToken)
    notify: Notifier | None = None
    progress: Progress = field(default=None)  # type: ignore[assignment]  # set in post_init
    phase: Phase = Phase.EXECUTE
    config: Mapping[str, Any] = field(default_factory=lambda: _EMPTY_CONFIG)
    model_id: str | None = None
    task_id: str | None = None
    session_id: str | None = None
    message_index: int | None = None
    scratchpad: Path | None = None
    safety_mode: SafetyMode = SafetyMode.ASK
    goal: UserGoal = field(default_factory=UserGoal)
    classifier: Any = None
    approval: Any = None
    questions: QuestionBroker | None = None
    tasks: TaskBroker | None = None
    jobs: BackgroundJobs | None = None
    snapshots: FileSnapshotter | None = None
    web_bytes: WebBudget = field(default_factory=WebBudget)
    mailbox: Any = None
    subagents: Any = None
    # The loop this context was built on, so a sync tool in a worker thread can hand
    # work (state changes, snapshots) back to it.
    _event_loop: asyncio.AbstractEventLoop | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "_event_loop", _running_loop())
        if self.progress is None:
            object.__setattr__(self, "progress", Progress(self.call_id, self.emit))

    @classmethod
    def assemble(
        cls,
        *,
        step: int,
        call_id: str,
        signals: StepSignals,
        dispatch: CallSite,
        services: ToolServices,
        progress: Progress | None = None,
    ) -> ExecContext:
        """The context the loop gives one call: the step's signals, where the call was
        dispatched, and the run's services. `progress` defaults to a channel into
        `services.emit`."""
        return cls(
            token=signals.token,
            call_id=call_id,
            step=step,
            workdir=dispatch.jail.root,
            jail=dispatch.jail,
            emit=services.emit,
            state_access=services.state_access,
            background=signals.background,
            notify=services.notify,
            progress=progress if progress is not None else Progress(call_id, services.emit),
            phase=dispatch.phase,
            config=services.config,
            model_id=services.model_id,
            task_id=services.task_id,
            session_id=services.session_id,
            message_index=dispatch.message_index,
            scratchpad=services.scratchpad,
            safety_mode=dispatch.safety_mode,
            goal=services.goal,
            classifier=services.classifier,
            approval=services.approval,
            questions=services.questions,
            tasks=services.tasks,
            jobs=services.jobs,
            snapshots=services.snapshots,
            web_bytes=signals.web_bytes,
            mailbox=services.mailbox,
            subagents=services.subagents,
        )

    @classmethod
    def for_test(
        cls,
        workdir: str | os.PathLike[str],
        *,
        call_id: str = "call-test",
        step: int = 1,
        token: CancellationToken | None = None,
        jail: Jail | None = None,
        emit: Callable[[Event], object] | None = None,
        state: Any = None,
        state_access: StateAccess[Any] | None = None,
        **services: Any,
    ) -> ExecContext:
        """A context with safe defaults: a fresh token, a `Jail` over `workdir` with
        default limits, events dropped, a `LocalState` holding `state` (default `{}`),
        and the safety mode pinned to `full_access` so a tool test exercises the tool,
        not the gate. Any other field (`notify=`, `tasks=`, `phase=`, ...) may be given.
        """
        if jail is None:
            jail = Jail(workdir)
        if state_access is None:
            state_access = LocalState({} if state is None else state)
        services.setdefault("safety_mode", SafetyMode.FULL_ACCESS)
        return cls(
            token=token if token is not None else CancellationToken(),
            call_id=call_id,
            step=step,
            workdir=jail.root,
            jail=jail,
            emit=emit if emit is not None else _drop_event,
            state_access=state_access,
            **services,
        )

    @property
    def tools(self) -> Jail:
        """Deprecated: the run's jail is `jail`; `tools` goes in the next release."""
        warnings.warn(
            "ExecContext.tools is now ExecContext.jail; tools goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.jail

    # ── the web byte budget ──────────────────────────────────────────────────────

    def charge_web_bytes(self, n: int) -> int:
        """Count `n` downloaded bytes against the step's shared budget; returns the new
        total, or raises `WebBudgetExceeded` (changing nothing) if they do not fit: the
        call that charged them fails, sibling calls that fit go on."""
        return self.web_bytes.charge(n)

    def web_budget(self) -> WebBudget:
        """The step's budget, for transport code that charges each chunk it accepts."""
        return self.web_bytes

    # ── file checkpoints ─────────────────────────────────────────────────────────

    def checkpoint_origin(self) -> CheckpointOrigin:
        """Where a snapshot taken now is anchored (unanchored outside a session)."""
        return CheckpointOrigin(self.task_id, self.session_id, self.message_index)

    def require_writable(self, path: Path) -> None:
        """Refuse a write the policy never allows, in any mode (a protected path:
        `ProtectedPathRefused`, law 11), or that the phase does not allow: in Plan,
        writing tools stay visible but may write only inside the scratchpad. Call it with
        a resolved path, for every target before anything is written."""
        covering = self.jail.protects(path)
        if covering is not None:
            raise ProtectedPathRefused(self.jail.relative(path), self.jail.root, covering)
        if self.phase is not Phase.PLAN:
            return
        pad = self.scratchpad
        if pad is not None and path.is_relative_to(pad):
            return
        where = (
            f"the scratchpad {self.jail.relative(pad)}/"
            if pad is not None
            else "the scratchpad (this run has none)"
        )
        raise PathOutsideJail(
            str(path), self.jail.root, f"is a write outside {where} while planning"
        )

    async def snapshot_before_write_async(
        self, paths: Sequence[Path], *, reason: str = "write"
    ) -> str | None:
        """Snapshot `paths` before an async tool changes them; returns the checkpoint id,
        or None when the run keeps no file checkpoints."""
        if self.snapshots is None:
            return None
        return await self.snapshots.snapshot(
            self.checkpoint_origin(), self.jail.root, list(paths), reason=reason
        )

    def snapshot_before_write(self, paths: Sequence[Path], *, reason: str = "write") -> str | None:
        """Snapshot `paths` before a sync tool (in a worker thread) changes them.

        The snapshot runs on the run's event loop and this call waits for it; if it
        fails, the error propagates and the tool must not write. From async code use
        `snapshot_before_write_async`.
        """
        if self.snapshots is None:
            return None
        return self._run_on_loop(self.snapshot_before_write_async(paths, reason=reason))

    def _run_on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        event_loop = self._event_loop
        if event_loop is None or not event_loop.is_running():
            return asyncio.run(coro)
        if _running_loop() is event_loop:
            coro.close()
            raise UsageError(
                "this call blocks; from async code on the run's loop use the _async variant"
            )
        return asyncio.run_coroutine_threadsafe(coro, event_loop).result()

    # ── state ────────────────────────────────────────────────────────────────────

    @property
    def state(self) -> Any:
        """The run's typed state, to read. Change it only through `update_state`, so
        observers see the change."""
        return self.state_access.state

    def update_state(self, fn: Callable[[Any], Any]) -> None:
        """Apply `fn` to the run's state and publish the change.

        `fn` may change the state in place and return `None`, or return a new state.
        From a sync tool's worker thread, `fn` runs on the run's event loop and this call
        waits for it, so the state is never changed from two threads at once.
        """
        self.call_on_loop(lambda: self.state_access.update_state(fn))

    def call_on_loop(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the run's event loop and return its result: for a sync tool (in a
        worker thread) touching something that belongs to the loop (state, a broker).
        From the loop itself, or with no loop, `fn` simply runs."""
        event_loop = self._event_loop
        if event_loop is None or _running_loop() is event_loop or not event_loop.is_running():
            return fn()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def apply() -> None:
            try:
                result = fn()
            except BaseException as exc:  # handed back to the calling thread
                done.set_exception(exc)
            else:
                done.set_result(result)

        try:
            event_loop.call_soon_threadsafe(apply)
        except RuntimeError:  # the loop closed meanwhile: no one else touches it
            return fn()
        return done.result()


class PendingContext:
    """A call's `ExecContext`, built the first time a tool asks for it (`get`).

    Most calls never read one: a `@tool` function without an `ExecContext` parameter
    takes none, and building one (its progress channel, the step's signals, the run's
    services, the session's scratchpad) costs more than the rest of such a call. The loop
    hands the registry this instead; `token` (the call's cancellation token) is there
    without building anything, and `built` says whether a context was made (its progress
    channel is closed when the call ends)."""

    __slots__ = ("_build", "_built", "token")

    def __init__(self, token: CancellationToken, build: Callable[[], ExecContext]) -> None:
        self.token = token
        self._build = build
        self._built: ExecContext | None = None

    def get(self) -> ExecContext:
        """The call's context, built now if this is the first time it is asked for."""
        built = self._built
        if built is None:
            built = self._built = self._build()
        return built

    @property
    def built(self) -> ExecContext | None:
        """The context, if something asked for it; else None (none was built)."""
        return self._built

    def __repr__(self) -> str:
        return f"<PendingContext built={self._built is not None}>"


def resolve_context(ctx: ExecContext | PendingContext) -> ExecContext:
    """`ctx` as an `ExecContext`, built now if it is still pending."""
    return ctx.get() if isinstance(ctx, PendingContext) else ctx


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())

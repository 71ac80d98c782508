"""`Worker`: claims run jobs from a fleet's queue and runs each as a durable run.

```python
async with await open_bus("nats://127.0.0.1:4222") as bus:
    worker = Worker(bus, concurrency=8)
    await worker.run()          # until worker.drain() (SIGTERM in `tiller worker`)
```

Per job (`RunJob`), in order:

- a payload that is not a run job is termed with the reason (a dead letter; the queue
  goes on);
- a run that already has a final result is acked without running anything;
- a run whose batch was cancelled gets a `cancelled` result, and is acked;
- a continuation (`kind="continue"`) resumes the suspended run with its decided held
  calls (`tiller.ops.resume_run`);
- a run with a checkpoint (a previous worker died or drained) is recovered from it
  (`tiller.ops.recover_run`: completed calls are not run again); while its run lease is
  live (`RunStillRunning`) the job is nakked until the lease would lapse; uncertain calls
  (`ResumeReplayBlocked`) hold the run for a person (a `blocked` result), and it is acked;
- otherwise a fresh durable run under the job's run id.

A run goes inside a `ControlWatcher` (its handle's cancel and steer reach it from any
process) with the job's lease extended every third of the queue's lease. When it ends or
suspends, its result is written and the job acked; a suspended run frees the worker (its
continuation is another job). An agent reference that does not load, or a workspace this
worker cannot provide, fails the run with a `failed` result and terms the job. A delivery
that lost its job (`JobLeaseLost`: another worker may have it) writes no result and
settles nothing. A job out of deliveries gets a `failed` result when it is a start job:
written by the worker whose last attempt failed or handed the job back (drained, stopped,
deferred: that nak dead-letters it), or, when that worker died on it (its lease lapsed),
by the worker whose claim dead-letters it (`JobQueue.claim`'s `on_dead_letter`, told
before the dead letter is written).

Each run works in the workspace its job names (`workspaces=`, by default
`LocalWorkspaces(bus)`: a private temporary directory, a shared path, or a fixture
snapshot materialized privately for the run; a snapshot run's diff is stored and its
`diff_ref` goes into the result). A run of a batch with a budget (`Fleet.create_batch`)
reserves its share before it starts (nothing left: a `stopped` result with the budget
stop cause, the job acked, the run never started), runs with it as its budget, keeps it
when recovered or continued, and settles it when it ends (`_batch_share`). With
`limits=` (a `FleetLimits`), each run holds one of the fleet's run slots while it runs
here, and every model call of its run tree (the agent's, its subagents', the
classifier's, compaction summaries') goes through `LimitedModel` under the string of the
model called (the fleet's per-model calls, requests a minute and 429 pauses). `guard=`
(a `RunGuard`) is entered around every run for anything else that limits it: what it
yields configures the run's context, and `Deferred` naks the job for later.

A worker claims one job at first and one more each time its runs make progress, up to
`concurrency` (`ClaimRamp`): a worker that dies at once costs one job a delivery, not
`concurrency` of them.

`drain()` stops claiming and lets every run reach its next step boundary (`StepBoundary`),
checkpointed `running` with its lease released; its job is nakked with no delay, so
another worker continues it at once (a recovery still waiting for its run's lease to lapse
hands its job back so at once). `stop()` does the same without waiting for the step
to end (the step's model call is lost; a tool call in flight is uncertain afterwards).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pydantic

from .._task_stop import stop_task
from ..cancel import CancellationToken
from ..errors import Cancelled, UsageError
from ..loop import (
    Budget,
    ResumeReplayBlocked,
    RunContext,
    RunResult,
    SteeringQueue,
)
from ..ops import (
    close_cancelled,
    decided_records,
    folded_steers,
)
from ..state import RunState, StopCause
from ..store import (
    DEFAULT_BUCKET,
    DEFAULT_LEASE,
    Bus,
    Checkpoint,
    CheckpointStore,
    ControlStore,
    DeadLetter,
    Job,
    JobLeaseLost,
    JobQueue,
    NotFound,
    RunStillRunning,
    StoreError,
    StoreUnavailable,
)
from ._batch_share import BatchShare, reclaim_share, reserve_share, settle_from_state
from ._batches import BatchStore
from ._claim_ramp import ClaimRamp
from ._drain import StepBoundary
from ._guard import Configure, Deferred, RunGuard
from ._job import JobBudget, MalformedJob, RunJob
from ._job_lease import JobLeaseKeeper
from ._limited_model import limited_models
from ._limits import FleetLimits
from ._outcomes import outcome, outcome_of_result, outcome_of_state
from ._queue import RUN_QUEUE
from ._results import ResultStore, RunOutcomeRecord
from ._run_start import How, RunStarter, budget_of, load_run_agent
from ._worker_registry import WorkerInfo, WorkerRegistry
from ._workspace import WorkspaceError
from ._workspace_seam import LocalWorkspaces, WorkspaceProvider

if TYPE_CHECKING:
    from ..telemetry import Telemetry

__all__ = ["Worker"]

_logger = logging.getLogger(__name__)

#: What a job came to, for the worker's log line (`on_job`).
JobEnd = Literal[
    "finished",
    "stopped",
    "suspended",
    "blocked",
    "failed",
    "cancelled",
    "skipped",
    "released",
    "lost",
]


class Worker:
    """Runs the jobs of one queue, `concurrency` at a time (see the module docstring).

    `agent` (a `"module:attr"` reference) runs every job with that agent instead of the
    one the job names. `lease` is the queue's job lease and the runs' lease (seconds): a
    worker killed mid-run has its job and run taken over by another that long after.
    `lease` and `max_deliver` (deliveries a job gets before it is dead-lettered) are the
    queue's, for every process: a value sets them for the queue when the worker starts;
    None (the default) keeps what the queue has (`Bus.queue`). The runs' lease is the
    queue's lease as the worker read it when it started.
    `event_log_batch` is how many events a run buffers before writing them to its event
    log (fewer: a live `RunHandle.events()` sees them sooner). `on_job(run_id, what)` is
    told when a job starts (`"started"`) and how it ended. `telemetry`: the runs'
    OpenTelemetry spans and metrics, each run under its job's `traceparent`.
    """

    def __init__(  # noqa: PLR0913 (the worker's options, keyword-only: each is API)
        self,
        bus: Bus,
        *,
        queue: str = RUN_QUEUE,
        concurrency: int = 4,
        agent: str | None = None,
        name: str | None = None,
        lease: float | None = None,
        max_deliver: int | None = None,
        poll_interval: float = 0.2,
        control_poll: float = 0.5,
        heartbeat: float = 5.0,
        event_log_batch: int = 32,
        workspaces: WorkspaceProvider | None = None,
        guard: RunGuard | None = None,
        limits: FleetLimits | None = None,
        on_job: Callable[[str, str], None] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise UsageError(f"a worker's concurrency must be a positive int, not {concurrency!r}")
        if (lease is not None and not lease > 0) or not poll_interval > 0 or not heartbeat > 0:
            raise UsageError(
                "lease (or None: the queue's own), poll_interval and heartbeat must be "
                "positive seconds"
            )
        self.bus = bus
        self.queue_name = queue
        self.concurrency = concurrency
        self.agent = agent
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        #: The lease to set for the queue when the worker starts (None: keep the queue's).
        self.lease = lease
        #: Deliveries a job gets before it is dead-lettered, to set for the queue when the
        #: worker starts (None: keep the queue's).
        self.max_deliver = max_deliver
        # The queue's lease as read when the worker started (what it was given, or the
        # default, until then): its runs' lease and its naks' delays.
        self._lease = lease if lease is not None else DEFAULT_LEASE
        self.poll_interval = poll_interval
        self.control_poll = control_poll
        self.heartbeat = heartbeat
        self.event_log_batch = event_log_batch
        self.workspaces: WorkspaceProvider = workspaces or LocalWorkspaces(bus)
        self.guard = guard
        self.limits = limits
        self.on_job = on_job
        self.results = ResultStore(bus)
        self.batches = BatchStore(bus)
        self.control = ControlStore(bus)
        self.checkpoints = CheckpointStore(bus, DEFAULT_BUCKET)
        self._starter = RunStarter(
            bus,
            self.checkpoints,
            agent,
            lease=self._lease,
            event_log_batch=event_log_batch,
            telemetry=telemetry,
        )
        self._registry = WorkerRegistry(bus)
        self._draining = asyncio.Event()
        self._boundaries: dict[str, StepBoundary] = {}
        self._queue: JobQueue | None = None
        self._started_at = 0.0
        self._running = False
        self._ramp = ClaimRamp(concurrency)

    @property
    def in_flight(self) -> int:
        """Jobs this worker holds now."""
        return len(self._boundaries)

    # ── the claim loop ───────────────────────────────────────────────────────────

    async def run(self) -> None:
        """Claim and run jobs until `drain()` or `stop()`; returns once every job this
        worker took is settled (or handed back)."""
        if self._running:
            raise UsageError("this worker is already running")
        self._running = True
        self._queue = queue = await self.bus.queue(
            self.queue_name, lease=self.lease, max_deliver=self.max_deliver
        )
        self._lease = self._starter.lease = queue.lease
        self._started_at = self.bus.clock()
        self._ramp = slots = ClaimRamp(self.concurrency)
        beating = asyncio.get_running_loop().create_task(self._beat(), name="tiller-worker-beat")
        try:
            async with asyncio.TaskGroup() as jobs:
                while not self._draining.is_set():
                    await slots.acquire()
                    job = None if self._draining.is_set() else await self._claim(queue)
                    if job is None:
                        slots.release()
                        await self._pause()
                        continue
                    if self._draining.is_set():
                        # Claimed while the drain began (a claim waits on NATS): hand it
                        # straight back rather than start a run that would stop at once.
                        slots.release()
                        with contextlib.suppress(StoreError):
                            await self._hand_back(
                                queue, job, delay=0.0, error="the worker is draining"
                            )
                        break
                    jobs.create_task(self._take(queue, job, slots), name=f"tiller-job {job.id}")
        finally:
            try:
                await stop_task(beating)
            finally:
                # Cancelled meanwhile: the worker still says it left, so it is not listed
                # as live until its heartbeat expires.
                with contextlib.suppress(StoreError):
                    await self._registry.leave(self.name)

    def drain(self) -> None:
        """Stop claiming; each run stops at its next step boundary and its job goes back
        to the queue for another worker (see the module docstring)."""
        self._draining.set()
        for boundary in list(self._boundaries.values()):
            boundary.drain()

    def stop(self) -> None:
        """`drain`, without waiting for the steps in flight to end."""
        self.drain()
        for boundary in list(self._boundaries.values()):
            if not boundary.cancel.is_cancelled:
                boundary.drained = True
                boundary.cancel.cancel("the worker is stopping")

    async def _claim(self, queue: JobQueue) -> Job | None:
        try:
            return await queue.claim(self.name, on_dead_letter=self._dead_lettered)
        except StoreError as exc:  # the store is away: claim nothing until it is back
            _logger.warning("worker %s: cannot claim from %s: %s", self.name, queue.name, exc)
            return None

    async def _dead_lettered(self, dead: DeadLetter) -> None:
        """The claim is about to dead-letter a job whose last delivery's lease lapsed
        (its worker was killed or hung on its last attempt): no worker will write its
        run's result, so a start job's run gets one here (`_close_dead_run`), else
        `RunHandle.result()` would wait for ever. Before the dead letter is written: a
        store that is away (`StoreUnavailable`) propagates and leaves the job for the
        next claim to try again; any other failure is logged, and the run gets no result.
        A payload that is no run job has no run to tell."""
        try:
            run_job = RunJob.decode(dead.id, dead.payload)
        except MalformedJob:
            return
        if run_job.kind != "start":
            return  # a continuation's run keeps its held record, for a person
        try:
            await self._close_dead_run(run_job, dead.attempt, dead.reason)
        except StoreUnavailable:
            raise  # the store is away: the job stays, the next claim tries again
        except StoreError as exc:
            # A record of the run is damaged, or this tiller cannot read it (a newer
            # one's): no retry mends it, and the job must not stay at the queue's head
            # for every claim to meet again (on SQLite and memory none would get past it).
            _logger.error("worker %s: run %s: no result: %s", self.name, run_job.run_id, exc)
        except Exception:  # one job's failure never stops the worker (as in `_take`)
            _logger.exception("worker %s: run %s: no result", self.name, run_job.run_id)

    async def _close_dead_run(self, run_job: RunJob, attempt: int, reason: str) -> None:
        """The result of a run whose job is being dead-lettered: from its checkpoint if
        that says it ended (its worker died before writing the result, as a delivery
        would have written it, its batch share settled), else `failed` with the dead
        letter's reason and its batch share given back (`reclaim_share`: nobody will go
        on with it). A record already written stands, a held one too (its continuation
        is another job)."""
        checkpoint = await self._checkpoint_of(run_job.run_id)
        status = None if checkpoint is None else checkpoint.status
        if status == "continued":
            return  # it goes on under another run id
        if checkpoint is not None and status in ("finished", "suspended"):
            output = await self._output_of(run_job, checkpoint.state)
            record = outcome_of_state(run_job, checkpoint.state, output=output)
            if status == "finished":
                await settle_from_state(self.bus, run_job, checkpoint.state)
        else:
            error = f"its job was dead-lettered after {attempt} deliveries: {reason}"
            record = outcome(run_job, "failed", error=error)
            await reclaim_share(self.bus, run_job, None if checkpoint is None else checkpoint.state)
        record = record.model_copy(
            update={
                "worker": self.name,
                "queue": self.queue_name,
                "attempt": attempt,
                "finished_at": self.bus.clock(),
            }
        )
        await self.results.record(record, replace_held=False)

    async def _hand_back(self, queue: JobQueue, job: Job, *, delay: float, error: str) -> None:
        """Give the job back for another delivery (`nak`). On its last delivery the nak
        dead-letters it, and no claim will ever see it again to close its run
        (`_dead_lettered`), so a start job's run gets its result here first, as a dead
        letter's: else `RunHandle.result()` would wait for ever. A result that cannot be
        written is logged; the job is handed back all the same."""
        if job.attempt >= queue.max_deliver:
            try:
                run_job = RunJob.decode(job.id, job.payload)
                if run_job.kind == "start":
                    await self._close_dead_run(run_job, job.attempt, error or "handed back")
            except MalformedJob:
                pass  # no run to tell
            except StoreError as exc:
                _logger.error("worker %s: run %s: no result: %s", self.name, job.id, exc)
        await queue.nak(job, delay=delay, error=error)

    async def _output_of(self, run_job: RunJob, state: RunState) -> object:
        """The structured output of a run that finished before its worker wrote its
        result: its last answer parsed again with its agent's output type. None when it
        did not complete, its agent has no output type, or cannot be loaded here (said in
        the log: the result matters more than its output)."""
        last = state.last_assistant()
        ref = self.agent or run_job.agent or state.agent_ref
        if state.stop_cause is not StopCause.COMPLETED or last is None or ref is None:
            return None
        try:
            agent = load_run_agent(ref, run_job.model)
        except UsageError as exc:
            _logger.warning("worker %s: run %s: no output: %s", self.name, run_job.run_id, exc)
            return None
        try:
            return agent.parse_output(last.text)
        except pydantic.ValidationError:
            return None  # the run completed all the same: its answer was taken as text
        finally:
            with contextlib.suppress(Exception):
                await agent.model.aclose()

    async def _checkpoint_of(self, run_id: str) -> Checkpoint | None:
        try:
            return await self.checkpoints.load(run_id)
        except NotFound:
            return None

    async def _pause(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.poll_interval):
                await self._draining.wait()

    async def _beat(self) -> None:
        host, pid = socket.gethostname(), os.getpid()
        while True:
            info = WorkerInfo(
                name=self.name,
                host=host,
                pid=pid,
                queue=self.queue_name,
                concurrency=self.concurrency,
                in_flight=self.in_flight,
                started_at=self._started_at,
                beat_at=self.bus.clock(),
                lease=self._lease,
                expires_at=self.bus.clock() + 3 * self.heartbeat,
            )
            try:
                await self._registry.beat(info)
            except StoreError as exc:
                _logger.warning("worker %s: heartbeat failed: %s", self.name, exc)
            await asyncio.sleep(self.heartbeat)

    # ── one job ──────────────────────────────────────────────────────────────────

    async def _take(self, queue: JobQueue, job: Job, slots: ClaimRamp) -> None:
        keeper = JobLeaseKeeper(queue, job, on_lost=lambda: self._job_lost(job.id)).start()
        end: JobEnd = "lost"
        try:
            end = await self._job(queue, job, keeper)
        except JobLeaseLost as exc:
            _logger.warning("worker %s: %s", self.name, exc)
        except Exception as exc:  # one job's failure never stops the worker
            _logger.exception("worker %s: job %s failed", self.name, job.id)
            with contextlib.suppress(StoreError):
                if keeper.job.attempt >= queue.max_deliver:
                    await self._give_up(keeper, job, exc)
                await queue.nak(
                    keeper.job, delay=self._lease, error="the worker failed; see its log"
                )
            end = "released"
        finally:
            try:
                await keeper.stop()
            finally:  # cancelled while the keeper stopped: the slot is free all the same
                self._boundaries.pop(job.id, None)
                slots.release()
                if end != "lost":  # this worker works: it may take on one more job
                    slots.progressed()
                self._tell(job.id, end)

    def _job_lost(self, job_id: str) -> None:
        """This delivery lost the job (its lease lapsed: the worker stalled, or the store
        was away): its run stops at its next step boundary, for the job's new delivery
        to recover (this worker would otherwise go on renewing the run's lease, and the
        new delivery could only wait, spending its attempts)."""
        boundary = self._boundaries.get(job_id)
        if boundary is not None:
            boundary.drain()

    async def _give_up(self, keeper: JobLeaseKeeper, job: Job, exc: Exception) -> None:
        """The job's last attempt failed the worker: the nak sends it to the dead letters,
        so the run gets a `failed` record (else `RunHandle.result()` waits for ever)."""
        try:
            run_job = RunJob.decode(job.id, job.payload)
        except MalformedJob:
            return
        if run_job.kind != "start":
            return  # a continuation's run keeps its held record, for a person
        error = (
            f"the worker failed on each of its {keeper.job.attempt} attempts "
            f"(the last: {type(exc).__name__}: {exc}); see the workers' logs"
        )
        await self._write(keeper, outcome(run_job, "failed", error=error, job=keeper.job))
        checkpoint = await self._checkpoint_of(run_job.run_id)
        await reclaim_share(self.bus, run_job, None if checkpoint is None else checkpoint.state)

    def _tell(self, run_id: str, what: str) -> None:
        """Tell `on_job`; its failure is the caller's bug, logged: it neither fails the
        job (which would be released and run again) nor stops the claim loop."""
        if self.on_job is None:
            return
        try:
            self.on_job(run_id, what)
        except Exception:
            _logger.exception("worker %s: on_job(%r, %r) failed", self.name, run_id, what)

    async def _job(self, queue: JobQueue, job: Job, keeper: JobLeaseKeeper) -> JobEnd:
        try:
            run_job = RunJob.decode(job.id, job.payload)
        except MalformedJob as exc:
            await queue.term(job, str(exc))
            return "failed"
        run_id = run_job.run_id
        existing = await self.results.get(run_id)
        if existing is not None and (not existing.held or run_job.kind == "start"):
            # Finished (or waiting for a person, whose decision enqueues a continuation).
            await queue.ack(await keeper.check())
            return "skipped"
        try:
            checkpoint = await self.checkpoints.load(run_id)
        except NotFound:
            checkpoint = None
        if run_job.batch is not None and await self.batches.cancelled(run_job.batch):
            await self._batch_cancelled(queue, keeper, run_job, checkpoint)
            return "cancelled"
        if checkpoint is not None and checkpoint.status == "finished":
            # A previous worker finished it and died before writing its result.
            await settle_from_state(self.bus, run_job, checkpoint.state)
            output = await self._output_of(run_job, checkpoint.state)
            record = outcome_of_state(run_job, checkpoint.state, output=output)
            await self._settle(queue, keeper, run_job, record)
            return "finished"
        if checkpoint is not None and checkpoint.status == "suspended" and run_job.kind == "start":
            await self._settle(queue, keeper, run_job, outcome_of_state(run_job, checkpoint.state))
            return "suspended"
        if checkpoint is not None and checkpoint.status == "continued":
            await queue.ack(await keeper.check())  # it goes on under another run id
            return "skipped"
        how: How
        if checkpoint is None:
            if run_job.kind == "continue":
                await queue.term(job, f"run {run_id} has no checkpoint to continue")
                return "failed"
            how = "fresh"
        elif checkpoint.status == "suspended":
            how = "continue"
        else:
            how = "recover"  # running, or resumed by a process that died
        if how == "continue":
            try:
                await decided_records(self.bus, run_id)
            except UsageError as exc:
                # Not every held call is decided (or the run moved on): the run waits as
                # it is, and its held record stands; a later continuation runs it.
                await queue.term(job, f"cannot continue run {run_id} now: {exc}")
                return "failed"
        share = await reserve_share(self.bus, run_job, _want(run_job.budget))
        if share is not None and share.budget is None:
            # The batch's budget is spent: the run never starts.
            record = outcome(run_job, "stopped", error=share.reason).model_copy(
                update={"stop_cause": share.exhausted.value if share.exhausted else None}
            )
            await self._settle(queue, keeper, run_job, record)
            return "stopped"
        self._tell(job.id, "started")
        if how == "recover" and not await self._await_lapse(run_id):
            # Drained before the recovery began: the job goes back as a drain's does.
            await self._hand_back(
                queue, await keeper.check(), delay=0.0, error="the worker is draining"
            )
            return "released"
        return await self._run(queue, keeper, run_job, how, share)

    async def _await_lapse(self, run_id: str) -> bool:
        """A run to recover whose lease is about to lapse: wait for it here, holding the
        job, rather than handing the job back. Its previous worker most likely died
        (the job was delivered again because its lease lapsed, and the run's lease,
        taken just after the claim, lapses a moment later); every hand-back spends one
        of the job's deliveries, and a few kills in a row would dead-letter it. Once,
        and no longer than a lease: a holder that renews meanwhile is alive, and the
        recovery says so (`RunStillRunning`). A drain ends the wait at once: False when
        the worker is draining (the recovery must not begin)."""
        held = await self.checkpoints.holder(run_id)
        if held is not None and held[1] <= self._lease:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(held[1] + self.poll_interval):
                    await self._draining.wait()
        return not self._draining.is_set()

    async def _batch_cancelled(
        self,
        queue: JobQueue,
        keeper: JobLeaseKeeper,
        run_job: RunJob,
        checkpoint: Checkpoint | None,
    ) -> None:
        """A run of a cancelled batch: closed if it had begun, its batch share settled at
        what its checkpoint says it spent, and a `cancelled` result."""
        if checkpoint is not None:
            if checkpoint.status in ("running", "suspended"):
                await close_cancelled(self.checkpoints, checkpoint.state)
            await settle_from_state(self.bus, run_job, checkpoint.state)
        record = outcome(run_job, "cancelled", error="its batch was cancelled")
        await self._settle(queue, keeper, run_job, record)

    async def _run(
        self,
        queue: JobQueue,
        keeper: JobLeaseKeeper,
        run_job: RunJob,
        how: How,
        share: BatchShare | None,
    ) -> JobEnd:
        cancel = CancellationToken()
        steering = SteeringQueue()
        boundary = StepBoundary(cancel, resuming=how != "fresh", on_step=self._ramp.progressed)
        self._boundaries[keeper.job.id] = boundary
        if self._draining.is_set() or keeper.lost is not None:
            boundary.drain()

        def own(run_ctx: RunContext) -> RunContext:
            run_ctx = run_ctx.with_cancel(cancel).with_queued_input(steering)
            if self.limits is None:
                return run_ctx
            # Every model call of the run tree under the fleet's limits (a subagent's,
            # the classifier's and a summary's too), keyed by the model called.
            return run_ctx.with_model_wrapper(limited_models(self.limits, cancel=cancel))

        #: The run's budget as it runs (what it spent, for its batch's settle).
        spending: list[Budget] = []
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self.limits is not None:
                    # One of the fleet's run slots, held while the run goes on here.
                    slot = self.limits.run_slot(run_job.run_id, cancel=cancel)
                    await stack.enter_async_context(slot)
                workspace = await stack.enter_async_context(self.workspaces.open(run_job))
                configure = await stack.enter_async_context(self._admit(run_job))
                # A continued run's steers that its checkpoint folded are not pushed again.
                folded = [] if how == "fresh" else await folded_steers(self.bus, run_job.run_id)
                watcher = self.control.watch(
                    run_job.run_id,
                    cancel=cancel,
                    steering=steering,
                    poll_interval=self.control_poll,
                    skip=folded,
                )
                await stack.enter_async_context(watcher)

                def configured(run_ctx: RunContext) -> RunContext:
                    run_ctx = configure(own(run_ctx))
                    spending.append(run_ctx.budget)
                    return run_ctx

                reserved = share.budget if share is not None else None
                result = await self._starter.start(
                    run_job,
                    how,
                    workspace,
                    configured,
                    boundary,
                    reserved=reserved,
                    before_call_recorded=self._files_keeper(keeper, run_job, workspace),
                )
                drained = boundary.drained and result.stop_cause is StopCause.CANCELLED
                diff_ref = await self._files_after(run_job, workspace, result, drained=drained)
        except Deferred as exc:
            await self._hand_back(queue, await keeper.check(), delay=exc.delay, error=str(exc))
            return "released"
        except Cancelled:
            # Drained (or stopped) while waiting for a run slot: it never started.
            await self._hand_back(
                queue, await keeper.check(), delay=0.0, error="the worker is draining"
            )
            return "released"
        except RunStillRunning as exc:
            # Its previous worker may still be alive: ask again once its lease would lapse,
            # and not sooner than half a lease: a lease about to lapse is often renewed
            # (its holder is alive after all), and each delivery spends an attempt.
            delay = max(exc.seconds_left, self._lease / 2)
            await self._hand_back(queue, await keeper.check(), delay=delay, error=str(exc))
            return "released"
        except ResumeReplayBlocked as exc:
            calls = [f"{c.name} ({c.id})" for c in exc.calls]
            record = outcome(run_job, "blocked", error=str(exc), blocked_calls=calls)
            await self._settle(queue, keeper, run_job, record)
            return "blocked"
        except (UsageError, MalformedJob, WorkspaceError) as exc:
            # The agent does not load, the workspace is not here: it can never start.
            if share is not None and how == "fresh" and not spending:
                await share.settle(Budget())  # nothing was spent: its share goes back
            job = await keeper.check()
            await self._write(keeper, outcome(run_job, "failed", error=str(exc), job=job))
            await queue.term(job, str(exc))
            return "failed"
        return await self._ended(
            queue,
            keeper,
            run_job,
            result,
            share=share,
            spending=spending,
            diff_ref=diff_ref,
            drained=drained,
        )

    async def _ended(
        self,
        queue: JobQueue,
        keeper: JobLeaseKeeper,
        run_job: RunJob,
        result: RunResult,
        *,
        share: BatchShare | None,
        spending: list[Budget],
        diff_ref: str | None,
        drained: bool,
    ) -> JobEnd:
        """Settle the job of a run that returned: hand it back (drained, or a durable
        write failed), or write its result (and its batch's settle) and ack it."""
        if drained:
            # Stopped at a step boundary by the drain: checkpoint `running`, lease
            # released; another worker continues it now.
            await self._hand_back(queue, await keeper.check(), delay=0.0, error="drained")
            return "released"
        if result.store_failed:
            # A durable write was refused (another process took the run over) or failed
            # (the store went away): the run did not end. No result (the first one would
            # stand for good); the job goes back, for whoever holds the run, or for a
            # recovery from its checkpoint once the store is back. Not before a lease would
            # lapse: at once, it would only meet the live lease again (and burn attempts).
            await self._hand_back(
                queue, await keeper.check(), delay=self._lease, error=result.error or ""
            )
            return "released"
        if result.stop_cause is StopCause.CANCELLED:
            await close_cancelled(self.checkpoints, result.state)
        record = outcome_of_result(run_job, result, keeper.job)
        record = record.model_copy(update={"diff_ref": diff_ref})
        if share is not None and not record.held and spending:
            # It ended (a suspended run's continuation spends from the same share).
            await keeper.check()
            await share.settle(spending[-1])
        await self._settle(queue, keeper, run_job, record)
        if not record.held:
            with contextlib.suppress(StoreError):
                await self.control.clear(run_job.run_id)
        return (
            "suspended"
            if record.held
            else "cancelled"
            if record.status == "cancelled"
            else "finished"
        )

    async def _diff(self, run_job: RunJob, workspace: Path) -> str | None:
        """The stored diff of the run's workspace; None when its kind keeps none, or when
        it cannot be taken (said in the log: the run's result matters more)."""
        try:
            return await self.workspaces.diff(run_job, workspace)
        except WorkspaceError as exc:
            _logger.warning(
                "worker %s: run %s: no workspace diff: %s", self.name, run_job.run_id, exc
            )
            return None

    async def _files_after(
        self, run_job: RunJob, workspace: Path, result: RunResult, *, drained: bool
    ) -> str | None:
        """While the run's private copy is still here: kept for the worker that goes on
        with an unfinished run, and what the run changed (its diff's reference) unless it
        was drained (it has no result yet)."""
        if drained or result.stop_cause is StopCause.SUSPENDED:
            await self._keep(run_job, workspace)
        if drained:
            return None
        diff_ref = await self._diff(run_job, workspace)
        if result.stop_cause is not StopCause.SUSPENDED and not result.store_failed:
            with contextlib.suppress(StoreError):  # a stale kept copy is only unused
                await self.workspaces.forget(run_job)
        return diff_ref

    def _files_keeper(
        self, keeper: JobLeaseKeeper, run_job: RunJob, workspace: Path
    ) -> Callable[[str], Awaitable[None]]:
        """What the run awaits after each call, before its completion is journaled: its
        files kept for whoever recovers it (see `LocalWorkspaces`)."""

        async def keep_files(call_id: str) -> None:
            if keeper.lost is not None:
                # This delivery lost the job: another worker may already work from the
                # kept copy, which this one must not overwrite. (The run's own fence
                # refuses the completion too, once the run was taken over.)
                _logger.warning(
                    "worker %s: run %s: files after %s not kept: the job was lost",
                    self.name,
                    run_job.run_id,
                    call_id,
                )
                return
            await self._keep(run_job, workspace)

        return keep_files

    async def _keep(self, run_job: RunJob, workspace: Path) -> None:
        """Keep an unfinished run's files for the worker that continues it; one that
        cannot be kept (past a snapshot's caps) is said in the log, and the continuation
        gets the copy kept before, or the fixture."""
        try:
            await self.workspaces.keep(run_job, workspace)
        except WorkspaceError as exc:
            _logger.warning(
                "worker %s: run %s: its workspace was not kept: %s", self.name, run_job.run_id, exc
            )

    def _admit(self, run_job: RunJob) -> AbstractAsyncContextManager[Configure]:
        if self.guard is not None:
            return self.guard.admit(run_job)
        return contextlib.nullcontext(_unchanged)

    # ── results ──────────────────────────────────────────────────────────────────

    async def _settle(
        self, queue: JobQueue, keeper: JobLeaseKeeper, run_job: RunJob, record: RunOutcomeRecord
    ) -> None:
        """Write the result, then ack: only while this delivery still holds the job."""
        await self._write(keeper, record)
        await queue.ack(await keeper.check())

    async def _write(self, keeper: JobLeaseKeeper, record: RunOutcomeRecord) -> None:
        job = await keeper.check()
        await self.results.record(
            record.model_copy(
                update={
                    "worker": self.name,
                    "queue": self.queue_name,
                    "attempt": job.attempt,
                    "finished_at": self.bus.clock(),
                }
            )
        )


def _unchanged(run_ctx: RunContext) -> RunContext:
    return run_ctx


def _want(spec: JobBudget | None) -> Budget | None:
    """What the run asks of its batch's budget: its own ceilings (None: a chunk)."""
    return None if spec is None else budget_of(spec)

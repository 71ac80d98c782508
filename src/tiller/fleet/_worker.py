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
settles nothing.

Seams: `workspaces=` (a `WorkspaceProvider`; `LocalWorkspaces` serves no workspace and
a shared path) gives each run its directory, and `guard=` (a `RunGuard`) is entered around
every run, fresh or continued, for a batch's budget or the fleet's limits: what it yields
configures the run's context, and `Deferred` naks the job for later.

`drain()` stops claiming and lets every run reach its next step boundary (`StepBoundary`),
checkpointed `running` with its lease released; its job is nakked with no delay, so
another worker continues it at once. `stop()` does the same without waiting for the step
to end (the step's model call is lost; a tool call in flight is uncertain afterwards).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Literal

from ..cancel import CancellationToken
from ..conversation import AssistantMessage, UserMessage
from ..errors import UsageError
from ..events import Event
from ..loop import (
    Agent,
    Budget,
    FromCheckpoint,
    ResumeReplayBlocked,
    RunContext,
    RunOptions,
    RunResult,
    SteeringQueue,
    load_agent,
    options_from,
    record_policy,
)
from ..ops import (
    close_cancelled,
    decided_records,
    decision_of,
    folded_steers,
    recover_run,
    resume_run,
)
from ..pinned_policy import with_store_protected
from ..state import RunState, StopCause
from ..store import (
    DEFAULT_BUCKET,
    Bus,
    CheckpointStore,
    ControlStore,
    Job,
    JobLeaseLost,
    JobQueue,
    NotFound,
    RunStillRunning,
    StoreError,
)
from ..tools import Jail
from ._batches import BatchStore
from ._drain import StepBoundary
from ._guard import Configure, Deferred, RunGuard
from ._job import JobBudget, MalformedJob, RunJob
from ._job_lease import JobLeaseKeeper
from ._queue import RUN_QUEUE
from ._results import ResultStatus, ResultStore, RunOutcomeRecord
from ._worker_registry import WorkerInfo, WorkerRegistry
from ._workspace_seam import LocalWorkspaces, WorkspaceProvider

__all__ = ["Worker"]

_logger = logging.getLogger(__name__)

#: What a job came to, for the worker's log line (`on_job`).
JobEnd = Literal[
    "finished", "suspended", "blocked", "failed", "cancelled", "skipped", "released", "lost"
]


class Worker:
    """Runs the jobs of one queue, `concurrency` at a time (see the module docstring).

    `agent` (a `"module:attr"` reference) runs every job with that agent instead of the
    one the job names. `lease` is the queue's job lease and the runs' lease (seconds): a
    worker killed mid-run has its job and run taken over by another that long after.
    `event_log_batch` is how many events a run buffers before writing them to its event
    log (fewer: a live `RunHandle.events()` sees them sooner). `on_job(run_id, what)` is
    told when a job starts (`"started"`) and how it ended.
    """

    def __init__(  # noqa: PLR0913 (the worker's options, keyword-only: each is API)
        self,
        bus: Bus,
        *,
        queue: str = RUN_QUEUE,
        concurrency: int = 4,
        agent: str | None = None,
        name: str | None = None,
        lease: float = 30.0,
        poll_interval: float = 0.2,
        control_poll: float = 0.5,
        heartbeat: float = 5.0,
        event_log_batch: int = 32,
        workspaces: WorkspaceProvider | None = None,
        guard: RunGuard | None = None,
        on_job: Callable[[str, str], None] | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise UsageError(f"a worker's concurrency must be a positive int, not {concurrency!r}")
        if not lease > 0 or not poll_interval > 0 or not heartbeat > 0:
            raise UsageError("lease, poll_interval and heartbeat must be positive seconds")
        self.bus = bus
        self.queue_name = queue
        self.concurrency = concurrency
        self.agent = agent
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease = lease
        self.poll_interval = poll_interval
        self.control_poll = control_poll
        self.heartbeat = heartbeat
        self.event_log_batch = event_log_batch
        self.workspaces: WorkspaceProvider = workspaces or LocalWorkspaces()
        self.guard = guard
        self.on_job = on_job
        self.results = ResultStore(bus)
        self.batches = BatchStore(bus)
        self.control = ControlStore(bus)
        self.checkpoints = CheckpointStore(bus, DEFAULT_BUCKET)
        self._registry = WorkerRegistry(bus)
        self._draining = asyncio.Event()
        self._boundaries: dict[str, StepBoundary] = {}
        self._queue: JobQueue | None = None
        self._started_at = 0.0
        self._running = False

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
        self._queue = queue = await self.bus.queue(self.queue_name, lease=self.lease)
        self._started_at = self.bus.clock()
        slots = asyncio.Semaphore(self.concurrency)
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
                            await queue.nak(job, delay=0.0, error="the worker is draining")
                        break
                    jobs.create_task(self._take(queue, job, slots), name=f"tiller-job {job.id}")
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([beating])
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
            return await queue.claim(self.name)
        except StoreError as exc:  # the store is away: claim nothing until it is back
            _logger.warning("worker %s: cannot claim from %s: %s", self.name, queue.name, exc)
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
                expires_at=self.bus.clock() + 3 * self.heartbeat,
            )
            try:
                await self._registry.beat(info)
            except StoreError as exc:
                _logger.warning("worker %s: heartbeat failed: %s", self.name, exc)
            await asyncio.sleep(self.heartbeat)

    # ── one job ──────────────────────────────────────────────────────────────────

    async def _take(self, queue: JobQueue, job: Job, slots: asyncio.Semaphore) -> None:
        keeper = JobLeaseKeeper(queue, job).start()
        end: JobEnd = "lost"
        try:
            end = await self._job(queue, job, keeper)
        except JobLeaseLost as exc:
            _logger.warning("worker %s: %s", self.name, exc)
        except Exception:  # one job's failure never stops the worker
            _logger.exception("worker %s: job %s failed", self.name, job.id)
            with contextlib.suppress(StoreError):
                await queue.nak(
                    keeper.job, delay=self.lease, error="the worker failed; see its log"
                )
            end = "released"
        finally:
            await keeper.stop()
            self._boundaries.pop(job.id, None)
            slots.release()
            self._tell(job.id, end)

    def _tell(self, run_id: str, what: str) -> None:
        if self.on_job is not None:
            self.on_job(run_id, what)

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
            if checkpoint is not None and checkpoint.status in ("running", "suspended"):
                await close_cancelled(self.checkpoints, checkpoint.state)
            await self._settle(
                queue,
                keeper,
                run_job,
                _record(run_job, "cancelled", error="its batch was cancelled"),
            )
            return "cancelled"
        if checkpoint is not None and checkpoint.status == "finished":
            # A previous worker finished it and died before writing its result.
            await self._settle(queue, keeper, run_job, self._from_state(run_job, checkpoint.state))
            return "finished"
        if checkpoint is not None and checkpoint.status == "suspended" and run_job.kind == "start":
            await self._settle(queue, keeper, run_job, self._from_state(run_job, checkpoint.state))
            return "suspended"
        if checkpoint is not None and checkpoint.status == "continued":
            await queue.ack(await keeper.check())  # it goes on under another run id
            return "skipped"
        how: _How
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
        self._tell(job.id, "started")
        return await self._run(queue, keeper, run_job, how)

    async def _run(
        self, queue: JobQueue, keeper: JobLeaseKeeper, run_job: RunJob, how: _How
    ) -> JobEnd:
        cancel = CancellationToken()
        steering = SteeringQueue()
        boundary = StepBoundary(cancel, resuming=how != "fresh")
        self._boundaries[keeper.job.id] = boundary
        if self._draining.is_set():
            boundary.drain()

        def own(run_ctx: RunContext) -> RunContext:
            return run_ctx.with_cancel(cancel).with_queued_input(steering)

        try:
            async with contextlib.AsyncExitStack() as stack:
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
                    return configure(own(run_ctx))

                result = await self._start(run_job, how, workspace, configured, boundary)
        except Deferred as exc:
            await queue.nak(await keeper.check(), delay=exc.delay, error=str(exc))
            return "released"
        except RunStillRunning as exc:
            # Its previous worker may still be alive: ask again once its lease would lapse.
            delay = max(0.0, exc.seconds_left)
            await queue.nak(await keeper.check(), delay=delay, error=str(exc))
            return "released"
        except ResumeReplayBlocked as exc:
            calls = [f"{c.name} ({c.id})" for c in exc.calls]
            record = _record(run_job, "blocked", error=str(exc), blocked_calls=calls)
            await self._settle(queue, keeper, run_job, record)
            return "blocked"
        except (UsageError, MalformedJob) as exc:
            # The agent does not load, the workspace is not here: it can never start.
            job = await keeper.check()
            await self._write(keeper, _record(run_job, "failed", error=str(exc), job=job))
            await queue.term(job, str(exc))
            return "failed"
        if result.stop_cause is StopCause.ERROR and _lease_refused(result):
            # The run's own lease take found it held after recovery saw it lapsed: the
            # previous worker is alive after all (its job lease lapsed while it ran, then
            # it renewed the run's). Not this run's end: ask again once that would lapse.
            await queue.nak(await keeper.check(), delay=self.lease, error=result.error or "")
            return "released"
        if boundary.drained and result.stop_cause is StopCause.CANCELLED:
            # Stopped at a step boundary by the drain: checkpoint `running`, lease
            # released; another worker continues it now.
            await queue.nak(await keeper.check(), delay=0.0, error="drained")
            return "released"
        if result.stop_cause is StopCause.CANCELLED:
            await close_cancelled(self.checkpoints, result.state)
        record = self._from_result(run_job, result, keeper.job)
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

    def _admit(self, run_job: RunJob) -> AbstractAsyncContextManager[Configure]:
        if self.guard is not None:
            return self.guard.admit(run_job)
        return contextlib.nullcontext(_unchanged)

    async def _start(
        self,
        run_job: RunJob,
        how: _How,
        workspace: Path,
        configure: Configure,
        boundary: StepBoundary,
    ) -> RunResult:
        """The run itself: fresh, recovered from its checkpoint, or continued."""
        on_event: Callable[[Event], None] = boundary
        if how == "fresh":
            return await self._fresh(run_job, workspace, configure, on_event)
        state = (await self.checkpoints.load(run_job.run_id)).state
        options = self._options(state)
        if how == "recover":
            return await recover_run(
                self.bus,
                run_job.run_id,
                agent=self.agent,
                workspace=workspace,
                on_event=on_event,
                configure=configure,
                options=options,
                watch_control=False,  # the worker's own watcher applies them
            )
        records = await decided_records(self.bus, run_job.run_id)
        decisions = {call_id: decision_of(record) for call_id, record in records.items()}
        return await resume_run(
            self.bus,
            run_job.run_id,
            decisions,
            agent=self.agent,
            ctx=FromCheckpoint(workspace=workspace, configure=configure),
            on_event=on_event,
            options=options,
        )

    def _options(self, state: RunState) -> RunOptions:
        return dataclasses.replace(
            options_from(state, RunOptions(checkpoint_bucket=DEFAULT_BUCKET)),
            lease_ttl=self.lease,
            event_log_batch=self.event_log_batch,
        )

    async def _fresh(
        self,
        run_job: RunJob,
        workspace: Path,
        configure: Configure,
        on_event: Callable[[Event], None],
    ) -> RunResult:
        ref = self.agent or run_job.agent
        if ref is None:
            raise UsageError(f"run {run_job.run_id}: the job names no agent")
        agent = _load(ref, run_job.model)
        budget = _budget(run_job.budget)
        run_ctx = RunContext(jail=Jail(workspace)).with_budget(budget).with_store(self.bus)
        run_ctx = configure(with_store_protected(run_ctx))
        options = RunOptions(
            checkpoint_bucket=DEFAULT_BUCKET,
            lease_ttl=self.lease,
            event_log_batch=self.event_log_batch,
        )
        state = RunState(
            run_id=run_job.run_id,
            thread_id=run_job.run_id,
            messages=[UserMessage(text=run_job.prompt)],
        )
        state.model_spec = run_job.model
        record_policy(state, run_ctx, options, agent_ref=ref)
        try:
            return await agent.run_in(run_ctx, state, options, on_event=on_event)
        finally:
            with contextlib.suppress(Exception):
                await agent.model.aclose()

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
                    "attempt": job.attempt,
                    "finished_at": self.bus.clock(),
                }
            )
        )

    def _from_result(self, run_job: RunJob, result: RunResult, job: Job) -> RunOutcomeRecord:
        return RunOutcomeRecord(
            run_id=run_job.run_id,
            status=_status(result.stop_cause),
            stop_cause=result.stop_cause.value,
            text=result.text,
            output=_jsonable(result.output),
            usage=result.usage.model_dump(),
            cost_usd=result.cost_usd,
            steps=result.steps,
            error=result.error,
            batch=run_job.batch,
            attempt=job.attempt,
        )

    def _from_state(self, run_job: RunJob, state: RunState) -> RunOutcomeRecord:
        """A result from a checkpoint alone (its worker died before writing one)."""
        cause = state.stop_cause or StopCause.ERROR
        texts = [m.text for m in state.messages if isinstance(m, AssistantMessage) and m.text]
        return RunOutcomeRecord(
            run_id=run_job.run_id,
            status=_status(cause),
            stop_cause=cause.value,
            text=texts[-1] if texts else "",
            usage=state.usage.model_dump(),
            cost_usd=state.cost_usd,
            steps=state.step,
            error=state.error,
            batch=run_job.batch,
        )


_How = Literal["fresh", "recover", "continue"]


def _load(ref: str, model: str | None) -> Agent:
    """The job's agent; a factory that raises fails the run like a reference that does
    not resolve (`UsageError`), saying so: it would fail on every worker."""
    try:
        return load_agent(ref, model=model)
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"the agent {ref!r} failed to load: {type(exc).__name__}: {exc}") from exc


def _lease_refused(result: RunResult) -> bool:
    """Whether the run ended because its lease was held by another process when it
    started (the loop records that `RunStillRunning` as the run's error)."""
    return (result.error or "").startswith(f"{RunStillRunning.__name__}:")


def _unchanged(run_ctx: RunContext) -> RunContext:
    return run_ctx


def _budget(spec: JobBudget | None) -> Budget:
    if spec is None:
        return Budget()
    return Budget(
        max_steps=spec.max_steps,
        max_output_tokens=spec.max_output_tokens,
        max_cost_usd=spec.max_cost_usd,
    )


def _status(cause: StopCause) -> ResultStatus:
    if cause is StopCause.COMPLETED:
        return "completed"
    if cause is StopCause.CANCELLED:
        return "cancelled"
    if cause is StopCause.SUSPENDED:
        return "suspended"
    if cause is StopCause.ERROR:
        return "error"
    return "stopped"


def _jsonable(value: object) -> object:
    """Structured output as JSON (a pydantic model's dump)."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value


def _record(
    run_job: RunJob,
    status: ResultStatus,
    *,
    error: str | None = None,
    blocked_calls: list[str] | None = None,
    job: Job | None = None,
) -> RunOutcomeRecord:
    return RunOutcomeRecord(
        run_id=run_job.run_id,
        status=status,
        error=error,
        blocked_calls=blocked_calls or [],
        batch=run_job.batch,
        attempt=job.attempt if job is not None else 0,
    )

"""`RunStarter`: how a worker starts the run of a job it holds — fresh from the job, recovered
from its checkpoint (its worker died or drained), or continued once a person decided its
held calls — as a durable run of the agent the job names. The fleet's limits reach every
model call of the run tree through the run's context (`Worker` sets its `model_wrapper`),
not through the agent: a subagent's, the classifier's and a summary's calls included."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..conversation import Taint, UserMessage
from ..errors import UsageError
from ..events import Event
from ..loop import (
    Agent,
    Budget,
    FromCheckpoint,
    Pricing,
    RunContext,
    RunOptions,
    RunResult,
    load_agent,
    options_from,
    record_policy,
)
from ..ops import decided_records, decision_of, recover_run, resume_run
from ..pinned_policy import with_store_protected
from ..state import RunState
from ..store import DEFAULT_BUCKET, Bus, CheckpointStore
from ..tools import Jail
from ._drain import StepBoundary
from ._guard import Configure
from ._job import JobBudget, RunJob

if TYPE_CHECKING:
    from ..telemetry import Telemetry

__all__ = ["How", "RunStarter", "budget_of", "load_run_agent"]

#: How a job's run starts: from its prompt, from a checkpoint left running, or after a
#: person decided its held calls.
How = Literal["fresh", "recover", "continue"]


@dataclasses.dataclass(slots=True)
class RunStarter:
    """The worker's settings a run starts with (see the module docstring)."""

    bus: Bus
    checkpoints: CheckpointStore
    #: The agent reference every run uses instead of its job's (`Worker(agent=)`).
    agent: str | None
    lease: float
    event_log_batch: int
    #: Where the runs' spans and metrics go (`Worker(telemetry=)`); None: not traced.
    telemetry: Telemetry | None = None

    async def start(
        self,
        run_job: RunJob,
        how: How,
        workspace: Path,
        configure: Configure,
        boundary: StepBoundary,
        *,
        reserved: Budget | None,
        before_call_recorded: Callable[[str], Awaitable[None]] | None = None,
    ) -> RunResult:
        """The run itself: fresh, recovered from its checkpoint, or continued. A run of
        a budgeted batch starts with its reservation (`reserved`) as its budget; a
        continued one has it from its checkpoint, with what it spent so far.
        `before_call_recorded`: see `RunOptions` (the worker keeps the run's files)."""
        on_event: Callable[[Event], None] = boundary
        if how == "fresh":
            return await self._fresh(
                run_job,
                workspace,
                configure,
                on_event,
                reserved,
                before_call_recorded=before_call_recorded,
            )
        state = (await self.checkpoints.load(run_job.run_id)).state
        options = self._traced(self._options(state, before_call_recorded), run_job)

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

    async def _thread_taint(self, thread_id: str | None) -> int:
        """What the job's thread has read so far: its latest run's taint (law 6: taint
        only grows within a conversation, and the runs of a thread are one, as a served
        thread's runs are in the server's own process); none for a new thread."""
        if thread_id is None:
            return Taint.NONE.value
        latest = await self.checkpoints.for_thread(thread_id)
        return latest.state.taint if latest is not None else Taint.NONE.value

    def _traced(self, options: RunOptions, run_job: RunJob) -> RunOptions:
        """`options` with the worker's telemetry, under the job's trace context."""
        if self.telemetry is None:
            return options
        return options.with_telemetry(self.telemetry.with_parent(run_job.traceparent))

    def _options(
        self, state: RunState, before_call_recorded: Callable[[str], Awaitable[None]] | None
    ) -> RunOptions:
        base = RunOptions(
            checkpoint_bucket=DEFAULT_BUCKET, before_call_recorded=before_call_recorded
        )
        return dataclasses.replace(
            options_from(state, base),
            lease_ttl=self.lease,
            event_log_batch=self.event_log_batch,
        )

    async def _fresh(
        self,
        run_job: RunJob,
        workspace: Path,
        configure: Configure,
        on_event: Callable[[Event], None],
        reserved: Budget | None,
        *,
        before_call_recorded: Callable[[str], Awaitable[None]] | None,
    ) -> RunResult:
        ref = self.agent or run_job.agent
        if ref is None:
            raise UsageError(f"run {run_job.run_id}: the job names no agent")
        agent = load_run_agent(ref, run_job.model, outside=workspace)
        budget = reserved if reserved is not None else budget_of(run_job.budget)
        run_ctx = RunContext(jail=Jail(workspace)).with_budget(budget).with_store(self.bus)
        run_ctx = configure(with_store_protected(run_ctx))
        options = RunOptions(
            checkpoint_bucket=DEFAULT_BUCKET,
            lease_ttl=self.lease,
            event_log_batch=self.event_log_batch,
            before_call_recorded=before_call_recorded,
        )
        options = self._traced(options, run_job)
        state = RunState(
            run_id=run_job.run_id,
            thread_id=run_job.thread_id or run_job.run_id,
            messages=[UserMessage(text=run_job.prompt)],
            taint=await self._thread_taint(run_job.thread_id),
        )
        state.model_spec = run_job.model
        record_policy(state, run_ctx, options, agent_ref=ref)
        try:
            return await agent.run_in(run_ctx, state, options, on_event=on_event)
        finally:
            with contextlib.suppress(Exception):
                await agent.model.aclose()


def load_run_agent(ref: str, model: str | None, *, outside: Path | None = None) -> Agent:
    """The job's agent; a factory that raises fails the run like a reference that does
    not resolve (`UsageError`), saying so: it would fail on every worker. `outside`: the
    run's workspace, where its code must not be (law 11: see `load_agent`)."""
    try:
        return load_agent(ref, model=model, outside=outside)
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"the agent {ref!r} failed to load: {type(exc).__name__}: {exc}") from exc


def budget_of(spec: JobBudget | None) -> Budget:
    if spec is None:
        return Budget()
    return Budget(
        max_steps=spec.max_steps,
        max_output_tokens=spec.max_output_tokens,
        max_cost_usd=spec.max_cost_usd,
        pricing={
            model: Pricing(input=p.input, output=p.output, cached_input=p.cached_input)
            for model, p in spec.pricing.items()
        },
    )

"""What a fleet run's result record says, built from how the run ended: its `RunResult`,
its checkpoint alone (its worker died before writing one), or a status with no run (it
never started: a cancelled batch, an agent that does not load, uncertain calls)."""

from __future__ import annotations

from ..conversation import AssistantMessage
from ..loop import RunResult
from ..state import RunState, StopCause
from ..store import Job
from ._job import RunJob
from ._results import ResultStatus, RunOutcomeRecord

__all__ = ["outcome", "outcome_of_result", "outcome_of_state"]


def outcome_of_result(run_job: RunJob, result: RunResult, job: Job) -> RunOutcomeRecord:
    """The record of a run that ended (or suspended) here."""
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
        workspace=run_job.workspace,
        attempt=job.attempt,
    )


def outcome_of_state(
    run_job: RunJob, state: RunState, *, output: object = None
) -> RunOutcomeRecord:
    """The record of a run from its checkpoint alone (its worker died before writing one);
    `output` is its structured output, parsed again from its last answer (the checkpoint
    keeps the answer's text, not the value)."""
    cause = state.stop_cause or StopCause.ERROR
    texts = [m.text for m in state.messages if isinstance(m, AssistantMessage) and m.text]
    return RunOutcomeRecord(
        run_id=run_job.run_id,
        status=_status(cause),
        stop_cause=cause.value,
        text=texts[-1] if texts else "",
        output=_jsonable(output),
        usage=state.usage.model_dump(),
        cost_usd=state.cost_usd,
        steps=state.step,
        error=state.error,
        batch=run_job.batch,
        workspace=run_job.workspace,
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


def outcome(
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
        workspace=run_job.workspace,
        attempt=job.attempt if job is not None else 0,
    )

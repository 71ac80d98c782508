"""`RunJob`: the payload of one job on a fleet's run queue (versioned JSON).

A job says everything a worker that never saw the submitter needs to start the run: the
agent (a `"module:attr"` reference, loaded with `tiller.loop.load_agent`), the model
string for an agent factory, the prompt, the workspace, the budget, the batch. The queue's
job id is the run id (submitting a run id twice is one job); a continuation after a person
decided the run's held calls is `kind="continue"` under `<run_id>.continue.<n>`.

A run id is a short name (`RUN_ID_PATTERN`: letters, digits, `_ . : = -`, at most
`MAX_RUN_ID` characters, no `.continue.`): it becomes store keys (`<run_id>/lease`,
`<run_id>/calls/<call_id>`), a queue job id and NATS subjects, so a `/` would let one
run's checkpoint land on another run's lease or call record, a huge one overflows a NATS
control line (the server drops the connection), and `.continue.` is the continuation
job ids' own namespace.

Bytes that are not such a job (another program's message, a newer tiller's) raise
`MalformedJob` saying what is wrong: the worker terms the job with that reason, so it goes
to the dead letters and never blocks the queue.
"""

from __future__ import annotations

import re
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .._schema_ledger import LEDGER
from ..errors import TillerError, UsageError
from ..loop import Budget
from ._workspace import NoWorkspace, SharedWorkspace, SnapshotWorkspace, WorkspaceSpec

__all__ = [
    "JobBudget",
    "JobPrice",
    "MalformedJob",
    "NoWorkspace",
    "RunJob",
    "SharedWorkspace",
    "SnapshotWorkspace",
    "WorkspaceSpec",
]

SCHEMA_VERSION = LEDGER["run_job"].current
#: The versions read: version 1 is version 2 without `budget.pricing`.
_READABLE = LEDGER["run_job"].readable
#: The longest run id a fleet takes.
MAX_RUN_ID = 200
#: What a fleet run id is made of (see the module docstring).
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:=-]*")
_CONTINUE = ".continue."


def check_run_id(run_id: object) -> str:
    """`run_id` if a fleet may use it, else `UsageError` saying what a run id is."""
    if not isinstance(run_id, str) or not run_id:
        raise UsageError(f"a run id must be a non-empty string, not {run_id!r}")
    problem = run_id_problem(run_id)
    if problem is not None:
        raise UsageError(f"run id {run_id[:60]!r}: {problem}")
    return run_id


def run_id_problem(run_id: str) -> str | None:
    """What is wrong with `run_id` as a fleet run id, or None."""
    if len(run_id) > MAX_RUN_ID:
        return f"{len(run_id)} characters; a run id has at most {MAX_RUN_ID}"
    if RUN_ID_PATTERN.fullmatch(run_id) is None:
        return (
            "a run id is letters, digits and '_ . : = -' (no '/', spaces or other "
            "characters), starting with a letter, digit or '_'"
        )
    if _CONTINUE in run_id:
        return f"{_CONTINUE!r} is kept for the job ids of continuations"
    return None


class MalformedJob(TillerError):
    """A run queue's job payload is not a run job this tiller can read; `problem` says
    what is wrong. Enqueue jobs with `tiller.fleet.Fleet.submit`."""

    def __init__(self, job_id: str, problem: str) -> None:
        super().__init__(f"job {job_id!r} is not a run job: {problem}")
        self.job_id = job_id
        self.problem = problem


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class JobPrice(_Strict):
    """One model's prices (`tiller.loop.Pricing`): USD per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)


class JobBudget(_Strict):
    """The run's budget (`tiller.loop.Budget`); None fields are unlimited. `pricing`
    prices its models (`"provider:model"` or `"model"`, as `Budget.pricing`): a worker
    knows no prices of its own, so without them a run's dollars count as nothing and
    `max_cost_usd` cannot stop it."""

    max_steps: int | None = Field(default=None, ge=1)
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, ge=0)
    pricing: dict[str, JobPrice] = Field(default_factory=dict)

    @classmethod
    def of(cls, budget: Budget) -> JobBudget:
        """A `Budget`'s ceilings and prices, as a job carries them (what it has spent
        stays behind: a job starts a run)."""
        return cls(
            max_steps=budget.max_steps,
            max_output_tokens=budget.max_output_tokens,
            max_cost_usd=budget.max_cost_usd,
            pricing={
                model: JobPrice(input=p.input, output=p.output, cached_input=p.cached_input)
                for model, p in budget.pricing.items()
            },
        )


class RunJob(_Strict):
    """One run job (see the module docstring)."""

    schema_version: int = SCHEMA_VERSION
    #: "start": a fresh run (or one a previous worker left running: it is recovered);
    #: "continue": a suspended run whose held calls a person decided.
    kind: Literal["start", "continue"] = "start"
    run_id: str = Field(min_length=1)
    #: The agent, `"module:attr"`; a continuation may leave it to the checkpoint's.
    agent: str | None = None
    #: The model string an agent factory is called with (`load_agent(ref, model=...)`).
    model: str | None = None
    prompt: str = ""
    #: The thread the run belongs to (a served request's `threadId`); None: its run id.
    thread_id: str | None = None
    workspace: WorkspaceSpec = Field(default_factory=NoWorkspace)
    budget: JobBudget | None = None
    batch: str | None = None
    #: The submitter's clock (seconds since the epoch).
    submitted_at: float = 0.0
    #: The submitter's W3C `traceparent` (a served request's, a traced caller's): a
    #: worker with telemetry runs the job under it. None: a trace of its own.
    traceparent: str | None = None

    @model_validator(mode="after")
    def _start_names_its_agent(self) -> RunJob:
        problem = run_id_problem(self.run_id)
        if problem is not None:
            raise ValueError(f"run_id: {problem}")
        if self.kind == "start" and not self.agent:
            raise ValueError("a start job needs its agent ('module:attr')")
        if self.kind == "start" and not self.prompt:
            raise ValueError("a start job needs a prompt")
        return self

    def encode(self) -> bytes:
        return self.model_dump_json().encode()

    @classmethod
    def decode(cls, job_id: str, data: bytes) -> RunJob:
        """The job `data` holds (`MalformedJob` saying what is wrong if it is not one)."""
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise MalformedJob(job_id, f"not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise MalformedJob(job_id, "not a JSON object")
        version = raw.get("schema_version")
        if version not in _READABLE or isinstance(version, bool):
            newer = isinstance(version, int) and version > SCHEMA_VERSION
            raise MalformedJob(
                job_id,
                f"schema version {version!r}; this tiller reads "
                + " and ".join(str(number) for number in _READABLE)
                + (" (a newer tiller wrote it: upgrade the workers)" if newer else ""),
            )
        if version != SCHEMA_VERSION:
            data = orjson.dumps(
                {**raw, "schema_version": SCHEMA_VERSION}
            )  # 1: no prices, 2: no trace
        try:
            return cls.model_validate_json(data, strict=True)
        except ValidationError as exc:
            raise MalformedJob(job_id, problems(exc)) from None


def problems(exc: ValidationError) -> str:
    """What a run job's validation found wrong, one clause per field."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'the job'}: {e['msg']}"
        for e in exc.errors(include_url=False)
    )

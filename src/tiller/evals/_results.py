"""An eval's results as records in the run store: one per case and epoch, and one that
describes the eval, in the `tiller-eval-results` bucket.

- `<eval_id>/eval`: an `EvalRecord` (its agent, epochs, scorers, case count, budget
  limits, when it was started and last run), for `tiller eval show` and a report;
- `<eval_id>/cases/<case_id>/e<epoch>`: a `CaseResultRecord`, everything one run of the
  case produced, as data: its status, the case itself (so a rescore needs neither the
  dataset nor the agent), the outcome (text, structured output, stop cause, tool trace,
  transcript, usage, cost, steps, duration, error), its scores by scorer name, what
  scoring spent (an LLM judge's calls: `scoring_usage`, `scoring_cost_usd`, apart from
  the agent's own `usage` and `cost_usd`, so that each says whose it is), and where
  the rest is: the run's capture (`tiller-captures`, keyed by the run id: replay it with
  `tiller.model.replay.ReplayModel`), the case's workspace as the run left it (a snapshot
  manifest in `tiller-workspaces`, materialized for a rescore), and its diff against the
  fixture (`tiller.fleet.load_diff`).

A status says what a resumed eval does with the record: `scored` (the run ended, however
it ended, and was scored: skipped), `cancelled` (the eval's token stopped it: its partial
outcome is kept, unscored, and the run is made again) and `not_run` (the eval's budget was
spent before it could start: tried again). Records are written whole (`put`): each
attempt's record replaces the one before it, and only this eval's runner writes them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

from ..conversation import Message, Usage
from ..loop import ToolTraceEntry
from ..state import StopCause
from ..store import Bus, KeyValue, MalformedRecord, Record, decode_record, encode_record
from ._case import Case, CaseBudget
from ._outcome import CaseOutcome
from ._score import Score

__all__ = [
    "EVAL_RESULTS_BUCKET",
    "CaseResultRecord",
    "CaseStatus",
    "EvalRecord",
    "EvalResultStore",
    "StoredCase",
    "StoredScore",
    "StoredToolCall",
]

#: The bucket eval results live in.
EVAL_RESULTS_BUCKET = "tiller-eval-results"

#: What a resumed eval does with a record: see the module docstring.
CaseStatus = Literal["scored", "cancelled", "not_run"]


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def as_json_data(value: Any) -> Any:
    """A value as JSON data: a pydantic model as its dump, a path as its text; what JSON
    cannot carry as its `repr` (a report shows it; nothing is lost silently)."""
    return to_jsonable_python(value, fallback=repr)


class StoredCase(_Value):
    """A `Case` as data. A typed input or expected value is stored as its JSON: read back,
    it is that JSON (a rescore given the dataset's cases uses their typed values)."""

    id: str
    input: Any
    expected: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    fixture: str | None = None
    budget: dict[str, int | float | None] | None = None
    tags: tuple[str, ...] = ()

    @classmethod
    def of(cls, case: Case) -> StoredCase:
        budget = case.budget
        return cls(
            id=case.id,
            input=as_json_data(case.input),
            expected=as_json_data(case.expected),
            metadata=as_json_data(dict(case.metadata)),
            fixture=None if case.fixture is None else str(case.fixture),
            budget=None
            if budget is None
            else {
                "max_steps": budget.max_steps,
                "max_output_tokens": budget.max_output_tokens,
                "max_cost_usd": budget.max_cost_usd,
            },
            tags=case.tags,
        )

    def case(self) -> Case:
        budget = None
        if self.budget is not None:
            steps, tokens = self.budget.get("max_steps"), self.budget.get("max_output_tokens")
            budget = CaseBudget(
                max_steps=None if steps is None else int(steps),
                max_output_tokens=None if tokens is None else int(tokens),
                max_cost_usd=self.budget.get("max_cost_usd"),
            )
        return Case(
            id=self.id,
            input=self.input,
            expected=self.expected,
            metadata=dict(self.metadata),
            fixture=None if self.fixture is None else Path(self.fixture),
            budget=budget,
            tags=self.tags,
        )


class StoredScore(_Value):
    value: float
    explanation: str = ""
    passed: bool = False
    error: str | None = None

    @classmethod
    def of(cls, score: Score) -> StoredScore:
        return cls(
            value=score.value,
            explanation=score.explanation,
            passed=bool(score.passed),
            error=score.error,
        )

    def score(self) -> Score:
        return Score(self.value, self.explanation, passed=self.passed, error=self.error)


class StoredToolCall(_Value):
    """One `tiller.loop.ToolTraceEntry`."""

    call_id: str
    name: str
    arguments: str
    step: int
    is_error: bool = False
    refused_by: str | None = None
    unknown: bool = False
    malformed_arguments: bool = False
    staged: bool = False
    rerun: bool = False

    @classmethod
    def of(cls, entry: ToolTraceEntry) -> StoredToolCall:
        return cls(
            call_id=entry.call_id,
            name=entry.name,
            arguments=entry.arguments,
            step=entry.step,
            is_error=entry.is_error,
            refused_by=entry.refused_by,
            unknown=entry.unknown,
            malformed_arguments=entry.malformed_arguments,
            staged=entry.staged,
            rerun=entry.rerun,
        )

    def entry(self) -> ToolTraceEntry:
        return ToolTraceEntry(**self.model_dump())


class CaseResultRecord(Record):
    """One run of one case in one epoch (see the module docstring)."""

    ledger_kind: ClassVar[str] = "eval_case_result"

    eval_id: str
    case_id: str
    epoch: int = Field(ge=0)
    run_id: str
    #: How many times this case and epoch were started before this one (cancelled, or
    #: refused by the budget): each attempt reserves from the eval's budget under its own
    #: name, so a retried run never spends a share that was already settled.
    attempt: int = Field(default=0, ge=0)
    status: CaseStatus
    case: StoredCase
    text: str = ""
    output: Any = None
    #: `tiller.StopCause`'s value.
    stop_cause: str
    tool_trace: tuple[StoredToolCall, ...] = ()
    messages: tuple[Message, ...] = ()
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    #: What scoring the run spent (a scorer that calls a model, the LLM judge), paid from
    #: the run's share of the eval's budget like the agent's calls; `usage` and
    #: `cost_usd` are the agent's alone. A rescore calls no model: it leaves these as
    #: they are.
    scoring_usage: Usage = Field(default_factory=Usage)
    scoring_cost_usd: float = 0.0
    steps: int = 0
    duration_s: float = 0.0
    error: str | None = None
    scores: dict[str, StoredScore] = Field(default_factory=dict)
    #: The run's capture: its key in `tiller-captures` (None: the run never started).
    capture: str | None = None
    #: The workspace as the run left it: a snapshot manifest in `tiller-workspaces`.
    workspace: str | None = None
    #: What the run changed in its copy of the fixture (`tiller.fleet.load_diff`).
    diff_ref: str | None = None
    #: Why the workspace (or its diff) was not kept, when it was not.
    workspace_note: str | None = None
    finished_at: float = Field(default_factory=time.time)

    def outcome(self, *, case: Case | None = None, workspace: Path | None = None) -> CaseOutcome:
        """The `CaseOutcome` scorers see, read back (`case`: the dataset's own, with its
        typed values; by default the stored one)."""
        return CaseOutcome(
            case=case if case is not None else self.case.case(),
            epoch=self.epoch,
            text=self.text,
            stop_cause=StopCause(self.stop_cause),
            output=self.output,
            tool_trace=tuple(call.entry() for call in self.tool_trace),
            messages=self.messages,
            workspace=workspace,
            usage=self.usage,
            cost_usd=self.cost_usd,
            duration_s=self.duration_s,
            error=self.error,
            run_id=self.run_id,
        )

    def score_values(self) -> dict[str, Score]:
        return {name: stored.score() for name, stored in self.scores.items()}


class EvalRecord(Record):
    """What an eval is (see the module docstring)."""

    ledger_kind: ClassVar[str] = "eval_run"

    eval_id: str
    #: The agent reference (`module:attr`), or a description of the object given.
    agent: str
    epochs: int = Field(ge=1)
    scorers: tuple[str, ...]
    cases: int = Field(ge=0)
    #: The eval's budget limits: `max_steps`, `max_output_tokens`, `max_cost_usd`.
    budget: dict[str, int | float | None] | None = None
    started_at: float
    last_run_at: float


def case_key(eval_id: str, case_id: str, epoch: int) -> str:
    return f"{eval_id}/cases/{case_id}/e{epoch}"


class EvalResultStore:
    """The eval results of a `Bus` (see the module docstring)."""

    def __init__(self, bus: Bus, bucket: str = EVAL_RESULTS_BUCKET) -> None:
        self.bus = bus
        self.bucket = bucket
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self.bus.kv(self.bucket)
        return self._kv

    async def put(self, record: CaseResultRecord) -> None:
        key = case_key(record.eval_id, record.case_id, record.epoch)
        await (await self._bucket()).put(key, encode_record(record))

    async def get(self, eval_id: str, case_id: str, epoch: int) -> CaseResultRecord | None:
        key = case_key(eval_id, case_id, epoch)
        entry = await (await self._bucket()).get(key)
        return None if entry is None else self._read_case(key, entry.value)

    async def results(self, eval_id: str) -> list[CaseResultRecord]:
        """Every case record of `eval_id`, by case id, then epoch."""
        kv = await self._bucket()
        records = []
        for key in await kv.keys(f"{eval_id}/cases/"):
            entry = await kv.get(key)
            if entry is not None:
                records.append(self._read_case(key, entry.value))
        return sorted(records, key=lambda r: (r.case_id, r.epoch))

    async def put_eval(self, record: EvalRecord) -> None:
        await (await self._bucket()).put(f"{record.eval_id}/eval", encode_record(record))

    async def get_eval(self, eval_id: str) -> EvalRecord | None:
        key = f"{eval_id}/eval"
        entry = await (await self._bucket()).get(key)
        if entry is None:
            return None
        record = decode_record(EvalRecord, self.bucket, key, entry.value)
        if record.eval_id != eval_id:
            raise MalformedRecord(self.bucket, key, f"it describes eval {record.eval_id!r}")
        return record

    async def evals(self) -> list[EvalRecord]:
        """Every eval's own record (one per eval, however many cases it has)."""
        kv = await self._bucket()
        records = []
        for key in await kv.keys(""):
            eval_id, sep, rest = key.partition("/")
            if sep and rest == "eval":
                found = await self.get_eval(eval_id)
                if found is not None:
                    records.append(found)
        return records

    def _read_case(self, key: str, value: bytes) -> CaseResultRecord:
        record = decode_record(CaseResultRecord, self.bucket, key, value)
        if case_key(record.eval_id, record.case_id, record.epoch) != key:
            raise MalformedRecord(
                self.bucket, key, f"it is case {record.case_id!r} epoch {record.epoch}"
            )
        return record


def scores_of(scores: Mapping[str, Score]) -> dict[str, StoredScore]:
    return {name: StoredScore.of(score) for name, score in scores.items()}

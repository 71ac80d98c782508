"""A batch's shared budget: steps, output tokens and dollars that the runs of one batch
spend together, reserved by each run before it starts and settled when it ends, so that
runs on many workers, all at once, never spend more than the batch was given.

Why reserve-then-settle. A run's spending is only known as it goes, and the runs of a
batch go side by side on workers that share nothing but the store. Checking "is anything
left?" before a run starts is not enough (fifty runs would all see the same remainder),
so a run *takes* its share before it starts: `reserve` moves the run's ceilings out of
what the batch has left, in one compare-and-set, and gives the run a `tiller.loop.Budget`
with exactly those ceilings; the run's own budget then stops it at them (law 7). When it
ends, `settle` swaps the reservation for what it really spent, and the rest goes back.

**The records.** Per batch, in `tiller-batch-budgets`: an aggregate under `<batch_id>`,
`{schema_version, written_by, batch_id, limits, held, spent, runs_reserved, runs_settled,
runs_reclaimed, pending}`, and one record per run that reserved under
`<batch_id>/runs/<run_id>`, `{schema_version, written_by, batch_id, run_id, seq, status,
ceilings, final_answer_reserve, spent}`. Dollars are whole nano-dollars (`cost_nanousd`)
so that sums are exact. What is counted against a limit is the aggregate's:

- `held` sums the ceilings of the runs `reserved` (the share each may still spend);
- `spent` sums what `settled` runs spent (which may exceed a ceiling: see dollars) and
  what the reclaimer said `reclaimed` runs spent (nothing, by default).

**Why two kinds of record, and how they stay in step.** Every decision is a
compare-and-set of the small aggregate (`KeyValue.update(expected=)`, retried from the
read when another worker wrote first), so the batch can never give out more than it has;
its size does not grow with the batch (the run entries are their own records, written
once or twice each), so a reserve or a settle in a 1,000-run batch rewrites a few hundred
bytes, not one entry per run. A change of one run is three writes: (1) the aggregate's
compare-and-set applies the change to the totals and names the run's new entry in
`pending`; (2) the run's record is written (compare-and-set, never to an older `seq`, so
a slow writer cannot undo a later change); (3) the aggregate drops it from `pending`. A
worker that dies between them leaves the change pending: the next reserve, settle or
reclaim of that run finishes it first, and decides from the finished record. Deciding
only while the run has nothing pending, at the aggregate revision it read, makes the
changes of one run happen one at a time, in order. `pending` holds the changes in flight
(about one per worker), and one per change a dead worker left half done, until the next
change of that run (its recovery's reserve, its settle or reclaim) finishes it.

`left = limit - counted`; it can go below zero only through a dollar overshoot.

**Idempotent by run id.** A run recovered on another worker, or a job delivered twice,
calls `reserve` again with the same run id and gets the same ceilings back; nothing more
is taken. Settling twice changes nothing. A run whose worker died holding a reservation
keeps counting it, so the batch can never overspend because of a crash; `reclaim` (for
a run known dead, that nobody will recover) gives it back. A reserve for a reclaimed run
returns None (its share may already be another run's). A settle after a reclaim (the run
was not dead after all) records what it really spent: the truth beats the reclaimer's word.
A suspended run (awaiting a person) keeps its reservation: its continuation spends from
the same ceilings, which its checkpoint carries; settle it when the run has finished.

**Sizing.** For each dimension the batch limits, a run that asks for a ceiling gets it,
capped at what the batch has left; a run that asks for none (or `want=None`) gets a chunk:
what is left divided by `chunk_runs` (default 10), at least 1 (step, token, nano-dollar).
A dimension the batch does not limit passes the run's own ceiling through unchanged (and
counts nothing). When any limited dimension has nothing left, `reserve` returns None and
takes nothing: the worker does not start the run and records it as stopped by the batch
budget. The final-answer reserve (`Budget.final_answer_reserve`) is capped at the tokens
reserved, because the tool-less final call is paid out of the run's token ceiling.

**What bound holds.**

- *Steps* are strict: a run's budget reserves a step before each call (`reserve_call`),
  so the batch's steps never exceed `max_steps`.
- *Output tokens* are strict as long as the provider honours `max_tokens`: each call's
  `max_tokens` is capped at what the run's reservation has left, minus its final-answer
  reserve, and the final answer is capped at that reserve.
- *Dollars* are reserved too (the run's `max_cost_usd` is its reservation), but a call's
  price is only known after the call. The run checks `cost_usd >= max_cost_usd` before
  each call, and caps the call's `max_tokens` at the output tokens the dollars left can
  buy at the model's output price (`Budget.cap_max_tokens(price=)`, at least one token),
  so a call's *output* cannot pass the run's ceiling (if the provider honours
  `max_tokens`); its *prompt* is priced only afterwards. So a run overshoots its dollar
  reservation by at most the input cost of the calls in flight when it crossed it (for a
  run without parallel subagents: its last call's prompt tokens x input price, plus at
  most one output token's price), and the batch spends at most `max_cost_usd` plus that,
  for each run that crossed its ceiling. A settle that reports an overshoot is counted
  as spent, so `left` drops below zero and no further run gets a reservation. Refusing a
  call whose prompt alone costs more than what is left would need the prompt's size
  before the call (only an estimate is known then); it is not done. A classifier's or a
  summary's call is capped by its own `max_tokens` and the token ceiling, not by price.
- Dollars are only as good as the pricing the run's budget carries: a model without a
  price costs nothing in `Budget` (its result lists it as unpriced), and then no dollar
  limit can stop it. `reserve` keeps `want.pricing`, or the `pricing` given to
  `BatchBudget`.

**Size.** The aggregate is a few hundred bytes plus the changes in flight; a run's record
is about 300 bytes, written when it reserves and when it is settled or reclaimed. No
operation reads or writes more than the aggregate and the one run's record.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._schema_ledger import LEDGER, newer_problem, tiller_version, written_by_of
from ..errors import UsageError
from ..loop import Budget, Pricing
from ..store import (
    Bus,
    KeyValue,
    MalformedRecord,
    NotFound,
    RecordFromNewerTiller,
    RevisionConflict,
)

__all__ = [
    "BATCH_BUDGET_BUCKET",
    "DEFAULT_CHUNK_RUNS",
    "BatchAmounts",
    "BatchBudget",
    "BatchBudgetFromNewerTiller",
    "BatchBudgetStatus",
    "BatchLimitsDiffer",
    "MalformedBatchBudget",
    "UnknownBatch",
    "UnknownReservation",
]

#: The bucket batch budgets live in unless told otherwise.
BATCH_BUDGET_BUCKET = "tiller-batch-budgets"
#: A run with no ceiling of its own gets what the batch has left divided by this.
DEFAULT_CHUNK_RUNS = 10

_NANO = 1_000_000_000
_KIND = "batch_budget"

_T = TypeVar("_T")


# ── errors ───────────────────────────────────────────────────────────────────────────


class MalformedBatchBudget(MalformedRecord):
    """A record of the batch-budget bucket does not have the shape this tiller writes;
    `bucket` and `key` name it."""


class BatchBudgetFromNewerTiller(MalformedBatchBudget, RecordFromNewerTiller):
    """A batch budget written by a newer tiller (`written_by`): upgrade tiller to use it."""


class BatchLimitsDiffer(UsageError):
    """`BatchBudget.create` was given other limits than the batch already has."""


class UnknownBatch(NotFound):
    """No budget was created for this batch id (`BatchBudget.create` makes one)."""


class UnknownReservation(NotFound):
    """The run never reserved from this batch (or reserve returned None: nothing to give
    back)."""


# ── values ───────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class BatchAmounts:
    """Steps, output tokens and dollars; None where there is nothing to say (no limit)."""

    steps: int | None
    output_tokens: int | None
    cost_usd: float | None


@dataclass(frozen=True, slots=True)
class BatchBudgetStatus:
    """A batch budget as the store holds it now.

    `reserved` is what open reservations hold (None for a dimension without a limit);
    `spent` what settled and reclaimed runs spent; `left` is `limits - reserved - spent`
    (None without a limit; below zero only after a dollar overshoot)."""

    batch_id: str
    limits: BatchAmounts
    reserved: BatchAmounts
    spent: BatchAmounts
    left: BatchAmounts
    runs_reserved: int
    runs_settled: int
    runs_reclaimed: int


# ── the stored record ────────────────────────────────────────────────────────────────


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class _Amounts(_Strict):
    """Ceilings or limits: None is unlimited. Dollars in nano-dollars, exact to add."""

    steps: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    cost_nanousd: int | None = Field(default=None, ge=0)


class _Spent(_Strict):
    steps: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cost_nanousd: int = Field(default=0, ge=0)


_Status = Literal["reserved", "settled", "reclaimed"]


class _RunEntry(_Strict):
    status: _Status
    #: The run's ceilings (what its `Budget` got): a limited dimension's is never None.
    ceilings: _Amounts
    final_answer_reserve: int = Field(ge=0)
    #: Settled: what the run spent; reclaimed: what the reclaimer said it spent.
    spent: _Spent | None = None
    #: This run's changes so far (1: reserved); a record is never written back to less.
    seq: int = Field(default=1, ge=1)


class _RunRecord(_RunEntry):
    schema_version: int = 1
    written_by: str | None = Field(default_factory=tiller_version)
    batch_id: str
    run_id: str


class _BatchRecord(_Strict):
    schema_version: int = 1
    written_by: str | None = Field(default_factory=tiller_version)
    batch_id: str
    limits: _Amounts
    #: The ceilings the runs `reserved` hold, summed.
    held: _Spent = Field(default_factory=_Spent)
    #: What settled and reclaimed runs spent, summed.
    spent: _Spent = Field(default_factory=_Spent)
    runs_reserved: int = Field(default=0, ge=0)
    runs_settled: int = Field(default=0, ge=0)
    runs_reclaimed: int = Field(default=0, ge=0)
    #: Changes applied to the totals whose run record may not be written yet.
    pending: dict[str, _RunEntry] = Field(default_factory=dict)


_DIMENSIONS = ("steps", "output_tokens", "cost_nanousd")

#: A change's decision: the run's new entry (None: no change), and what to answer.
_Decision = tuple[_RunEntry | None, _T]


def _encode(record: BaseModel) -> bytes:
    return record.model_copy(update={"written_by": tiller_version()}).model_dump_json().encode()


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"field {'.'.join(str(p) for p in error['loc']) or 'the record'!r}: {error['msg']}"
        for error in exc.errors(include_url=False)
    )


def _check_version(bucket: str, key: str, value: bytes) -> None:
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise MalformedBatchBudget(bucket, key, f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise MalformedBatchBudget(bucket, key, "not a JSON object")
    version = data.get("schema_version")
    current = LEDGER[_KIND].current
    if version != current:
        problem = f"schema version {version!r}; this tiller reads {current}"
        if isinstance(version, int) and not isinstance(version, bool) and version > current:
            writer = written_by_of(data)
            raise BatchBudgetFromNewerTiller(
                bucket, key, f"{problem}: {newer_problem(writer)}", writer
            )
        raise MalformedBatchBudget(bucket, key, problem)


def _check_entry(bucket: str, key: str, limits: _Amounts, run_id: str, entry: _RunEntry) -> None:
    for name in _DIMENSIONS:
        if getattr(limits, name) is not None and getattr(entry.ceilings, name) is None:
            raise MalformedBatchBudget(
                bucket, key, f"run {run_id!r} holds no {name} though the batch limits them"
            )
    if (entry.status == "reserved") != (entry.spent is None):
        raise MalformedBatchBudget(
            bucket, key, f"run {run_id!r} is {entry.status} but its spending says otherwise"
        )


def _decode(bucket: str, key: str, value: bytes) -> _BatchRecord:
    _check_version(bucket, key, value)
    try:
        record = _BatchRecord.model_validate_json(value, strict=True)
    except ValidationError as exc:
        raise MalformedBatchBudget(bucket, key, _problems(exc)) from None
    if record.batch_id != key:
        raise MalformedBatchBudget(bucket, key, f"it is the budget of batch {record.batch_id!r}")
    for run_id, entry in record.pending.items():
        _check_entry(bucket, key, record.limits, run_id, entry)
    return record


def _decode_run(bucket: str, key: str, value: bytes, batch: _BatchRecord, run_id: str) -> _RunEntry:
    _check_version(bucket, key, value)
    try:
        record = _RunRecord.model_validate_json(value, strict=True)
    except ValidationError as exc:
        raise MalformedBatchBudget(bucket, key, _problems(exc)) from None
    if (record.batch_id, record.run_id) != (batch.batch_id, run_id):
        raise MalformedBatchBudget(
            bucket, key, f"it is run {record.run_id!r} of batch {record.batch_id!r}"
        )
    entry = _RunEntry(
        status=record.status,
        ceilings=record.ceilings,
        final_answer_reserve=record.final_answer_reserve,
        spent=record.spent,
        seq=record.seq,
    )
    _check_entry(bucket, key, batch.limits, run_id, entry)
    return entry


# ── arithmetic ───────────────────────────────────────────────────────────────────────


def _nano(usd: float) -> int:
    """A limit or ceiling in nano-dollars, rounded down (never more than was given)."""
    return math.floor(usd * _NANO)


def _nano_spent(usd: float) -> int:
    """Dollars spent in nano-dollars, rounded up (never less than was spent)."""
    return math.ceil(usd * _NANO)


def _usd(nano: int | None) -> float | None:
    return None if nano is None else nano / _NANO


def _counted(entry: _RunEntry | None, name: str) -> int:
    if entry is None:
        return 0
    if entry.status == "reserved":
        value = getattr(entry.ceilings, name)
        return 0 if value is None else int(value)
    # A closed entry always has its spending (checked as the record is read).
    return 0 if entry.spent is None else int(getattr(entry.spent, name))


def _applied(
    record: _BatchRecord, run_id: str, before: _RunEntry | None, after: _RunEntry
) -> _BatchRecord:
    """`record` with run `run_id` moved from `before` to `after` in its totals and counts,
    and `after` pending (its run record is written next)."""
    held = {name: getattr(record.held, name) for name in _DIMENSIONS}
    spent = {name: getattr(record.spent, name) for name in _DIMENSIONS}
    counts = {
        "reserved": record.runs_reserved,
        "settled": record.runs_settled,
        "reclaimed": record.runs_reclaimed,
    }
    for entry, sign in ((before, -1), (after, 1)):
        if entry is None:
            continue
        into = held if entry.status == "reserved" else spent
        for name in _DIMENSIONS:
            into[name] += sign * _counted(entry, name)
        counts[entry.status] += sign
    return record.model_copy(
        update={
            "held": _Spent(**held),
            "spent": _Spent(**spent),
            "runs_reserved": counts["reserved"],
            "runs_settled": counts["settled"],
            "runs_reclaimed": counts["reclaimed"],
            "pending": {**record.pending, run_id: after},
        }
    )


def _left(record: _BatchRecord) -> dict[str, int | None]:
    left: dict[str, int | None] = {}
    for name in _DIMENSIONS:
        limit = getattr(record.limits, name)
        used = getattr(record.held, name) + getattr(record.spent, name)
        left[name] = None if limit is None else limit - used
    return left


def _spent_of(spent: Budget) -> _Spent:
    if not isinstance(spent, Budget):
        raise UsageError(f"spent must be the run's Budget, not {type(spent).__name__}")
    return _Spent(
        steps=spent.steps,
        output_tokens=spent.usage.output_tokens,
        cost_nanousd=_nano_spent(spent.cost_usd),
    )


def _amounts(steps: int, tokens: int, nano: int) -> BatchAmounts:
    return BatchAmounts(steps, tokens, nano / _NANO)


def _given_back(limits: _Amounts, back: Mapping[str, int]) -> BatchAmounts:
    """What went back to the batch, in the dimensions it limits (None in the others)."""
    kept = {name: back[name] if getattr(limits, name) is not None else None for name in back}
    return BatchAmounts(kept["steps"], kept["output_tokens"], _usd(kept["cost_nanousd"]))


def _check_limit(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"a batch's {name} must be a non-negative int or None, not {value!r}")
    return value


def _check_cost(value: float | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise UsageError(f"a batch's max_cost_usd must be non-negative dollars, not {value!r}")
    if not math.isfinite(value):
        raise UsageError("a batch's max_cost_usd must be finite (None: no dollar limit)")
    return _nano(value)


def _check_id(what: str, value: str) -> str:
    if not isinstance(value, str) or not value:
        raise UsageError(f"a {what} must be a non-empty string")
    return value


# ── the budget ───────────────────────────────────────────────────────────────────────


class BatchBudget:
    """One batch's shared budget in a `Bus` (see the module docstring).

    `chunk_runs` sizes the share of a run that asks for no ceiling of its own (what is
    left divided by it); `pricing` prices the runs whose `want` carries none. Neither is
    stored: they are this process's way of asking, not the batch's limits."""

    def __init__(
        self,
        bus: Bus,
        batch_id: str,
        *,
        bucket: str = BATCH_BUDGET_BUCKET,
        chunk_runs: int = DEFAULT_CHUNK_RUNS,
        pricing: Mapping[str, Pricing] | None = None,
    ) -> None:
        if isinstance(chunk_runs, bool) or not isinstance(chunk_runs, int) or chunk_runs < 1:
            raise UsageError(f"chunk_runs must be a positive int, not {chunk_runs!r}")
        self.bus = bus
        self.batch_id = _check_id("batch id", batch_id)
        self.bucket = bucket
        self.chunk_runs = chunk_runs
        self.pricing: Mapping[str, Pricing] = {} if pricing is None else dict(pricing)
        self._kv: KeyValue | None = None

    @classmethod
    async def create(
        cls,
        bus: Bus,
        batch_id: str,
        *,
        max_steps: int | None = None,
        max_output_tokens: int | None = None,
        max_cost_usd: float | None = None,
        bucket: str = BATCH_BUDGET_BUCKET,
        chunk_runs: int = DEFAULT_CHUNK_RUNS,
        pricing: Mapping[str, Pricing] | None = None,
    ) -> BatchBudget:
        """The batch's budget, made with these limits (None: unlimited) if it does not
        exist. Creating it again with the same limits is a no-op (a submitter retrying);
        other limits raise `BatchLimitsDiffer`: a batch's limits never change under its
        runs."""
        budget = cls(bus, batch_id, bucket=bucket, chunk_runs=chunk_runs, pricing=pricing)
        limits = _Amounts(
            steps=_check_limit("max_steps", max_steps),
            output_tokens=_check_limit("max_output_tokens", max_output_tokens),
            cost_nanousd=_check_cost(max_cost_usd),
        )
        kv = await budget._bucket()
        record = _BatchRecord(batch_id=batch_id, limits=limits)
        while True:
            try:
                await kv.create(batch_id, _encode(record))
            except RevisionConflict:
                entry = await kv.get(batch_id)
                if entry is None:
                    continue  # deleted between the two calls: create it after all
                existing = _decode(budget.bucket, batch_id, entry.value)
                if existing.limits != limits:
                    raise BatchLimitsDiffer(
                        f"batch {batch_id!r} already has the budget {_describe(existing.limits)}"
                        f", not {_describe(limits)}: create it with the same limits, or "
                        "use another batch id"
                    ) from None
            return budget

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self.bus.kv(self.bucket)
        return self._kv

    async def _read(self) -> tuple[_BatchRecord, int]:
        kv = await self._bucket()
        entry = await kv.get(self.batch_id)
        if entry is None:
            raise UnknownBatch(
                f"{self.bucket}/{self.batch_id}: no budget for batch {self.batch_id!r}; "
                "make it first with BatchBudget.create(bus, batch_id, max_steps=..., ...)"
            )
        return _decode(self.bucket, self.batch_id, entry.value), entry.revision

    async def _write(self, record: _BatchRecord, revision: int) -> int | None:
        """The aggregate's new revision if the compare-and-set won (None: read again and
        decide again)."""
        kv = await self._bucket()
        try:
            return await kv.update(self.batch_id, _encode(record), expected=revision)
        except RevisionConflict:
            return None

    def _run_key(self, run_id: str) -> str:
        return f"{self.batch_id}/runs/{run_id}"

    async def _read_run(self, record: _BatchRecord, run_id: str) -> tuple[_RunEntry | None, int]:
        """The run's entry as its record holds it (None: it never reserved), and the
        record's revision (0: none)."""
        key = self._run_key(run_id)
        entry = await (await self._bucket()).get(key)
        if entry is None:
            return None, 0
        return _decode_run(self.bucket, key, entry.value, record, run_id), entry.revision

    async def _finish(self, record: _BatchRecord, revision: int, run_id: str) -> None:
        """Write the run's pending entry into its record, then drop it from `pending` (see
        the module docstring: either may have been done already, by this worker or
        another)."""
        target = record.pending[run_id]
        kv = await self._bucket()
        key = self._run_key(run_id)
        value = _encode(_RunRecord(batch_id=self.batch_id, run_id=run_id, **dict(target)))
        while True:
            current, current_revision = await self._read_run(record, run_id)
            if current is not None and current.seq >= target.seq:
                break  # written already (or a later change is): never write it back
            try:
                if current is None:
                    await kv.create(key, value)
                else:
                    await kv.update(key, value, expected=current_revision)
            except RevisionConflict:
                continue
            break
        while True:
            if record.pending.get(run_id) != target:
                return  # another worker dropped it
            pending = {k: v for k, v in record.pending.items() if k != run_id}
            if await self._write(record.model_copy(update={"pending": pending}), revision):
                return
            record, revision = await self._read()

    async def _change(
        self, run_id: str, decide: Callable[[_BatchRecord, _RunEntry | None], _Decision[_T]]
    ) -> _T:
        """Decide and apply one change of run `run_id` (see the module docstring):
        `decide(aggregate, the run's entry)` returns the run's new entry (None: no change)
        and the answer."""
        while True:
            record, revision = await self._read()
            if run_id in record.pending:
                await self._finish(record, revision, run_id)  # a change left half done
                continue
            current, _ = await self._read_run(record, run_id)
            after, answer = decide(record, current)
            if after is None:
                return answer
            after = after.model_copy(update={"seq": 1 if current is None else current.seq + 1})
            applied = _applied(record, run_id, current, after)
            new_revision = await self._write(applied, revision)
            if new_revision is None:
                continue
            await self._finish(applied, new_revision, run_id)
            return answer

    def _unknown_run(self, run_id: str) -> UnknownReservation:
        return UnknownReservation(
            f"{self.bucket}/{self.batch_id}: run {run_id!r} holds no reservation of batch "
            f"{self.batch_id!r}; reserve before settling (a run reserve refused never started)"
        )

    # ── reserve ──

    async def reserve(self, run_id: str, want: Budget | None = None) -> Budget | None:
        """Take from the batch what the run may spend, before it starts; the run's
        `Budget` (its ceilings are the reservation), or None when the batch has nothing
        left (then nothing was taken). Asking again for the same run id returns the same
        ceilings and takes nothing more (a recovery, a second delivery)."""
        _check_id("run id", run_id)
        if want is not None and not isinstance(want, Budget):
            raise UsageError(f"want must be a Budget or None, not {type(want).__name__}")

        def decide(record: _BatchRecord, existing: _RunEntry | None) -> _Decision[Budget | None]:
            if existing is not None:
                reclaimed = existing.status == "reclaimed"
                return None, None if reclaimed else self._budget_of(existing, want)
            entry = self._size(record, want)
            return entry, None if entry is None else self._budget_of(entry, want)

        return await self._change(run_id, decide)

    def _size(self, record: _BatchRecord, want: Budget | None) -> _RunEntry | None:
        """The reservation a run asking for `want` gets now (None: nothing left)."""
        left = _left(record)
        if any(value is not None and value <= 0 for value in left.values()):
            return None
        asked: dict[str, int | None] = {
            "steps": None if want is None else want.max_steps,
            "output_tokens": None if want is None else want.max_output_tokens,
            "cost_nanousd": (
                None if want is None or want.max_cost_usd is None else _nano(want.max_cost_usd)
            ),
        }
        ceilings: dict[str, int | None] = {}
        for name in _DIMENSIONS:
            room, ask = left[name], asked[name]
            if room is None:
                ceilings[name] = ask  # not the batch's to limit
            elif ask is not None:
                ceilings[name] = max(min(ask, room), 0)
            else:
                ceilings[name] = min(max(room // self.chunk_runs, 1), room)
        reserve = 0 if want is None else want.final_answer_reserve
        tokens = ceilings["output_tokens"]
        if tokens is not None:
            reserve = min(reserve, tokens)
        return _RunEntry(
            status="reserved",
            ceilings=_Amounts(**ceilings),
            final_answer_reserve=reserve,
        )

    def _budget_of(self, entry: _RunEntry, want: Budget | None) -> Budget:
        pricing = want.pricing if want is not None and want.pricing else self.pricing
        return Budget(
            max_steps=entry.ceilings.steps,
            max_output_tokens=entry.ceilings.output_tokens,
            max_cost_usd=_usd(entry.ceilings.cost_nanousd),
            final_answer_reserve=entry.final_answer_reserve,
            pricing=pricing,
        )

    # ── settle and reclaim ──

    async def settle(self, run_id: str, spent: Budget) -> BatchAmounts:
        """The run has finished: count what it spent (`spent`, its budget's ledger) instead
        of its reservation; returns what went back to the batch in the dimensions it limits
        (below zero where the run overshot; None where the batch has no limit). Settling
        a settled run changes nothing and returns zeros."""
        _check_id("run id", run_id)
        used = _spent_of(spent)
        return await self._close(run_id, used, "settled")

    async def reclaim(self, run_id: str, spent: Budget | None = None) -> BatchAmounts:
        """Give back the reservation of a run known dead, which nobody will recover;
        `spent` is what it had spent, if known (its last checkpoint's budget), else
        nothing is counted. Returns what went back, as `settle` does. A settled or
        reclaimed run is left as it is (zeros)."""
        _check_id("run id", run_id)
        used = _Spent() if spent is None else _spent_of(spent)
        return await self._close(run_id, used, "reclaimed")

    async def _close(
        self, run_id: str, used: _Spent, status: Literal["settled", "reclaimed"]
    ) -> BatchAmounts:
        def decide(record: _BatchRecord, entry: _RunEntry | None) -> _Decision[BatchAmounts]:
            if entry is None:
                raise self._unknown_run(run_id)
            if entry.status == "settled" or (entry.status == status == "reclaimed"):
                return None, _given_back(record.limits, dict.fromkeys(_DIMENSIONS, 0))
            # reserved → settled | reclaimed; reclaimed → settled (it was alive after all).
            closed = entry.model_copy(update={"status": status, "spent": used})
            back = {name: _counted(entry, name) - _counted(closed, name) for name in _DIMENSIONS}
            return closed, _given_back(record.limits, back)

        return await self._change(run_id, decide)

    # ── status ──

    async def status(self) -> BatchBudgetStatus:
        """Limits, what open reservations hold, what finished runs spent, what is left."""
        record, _ = await self._read()
        held, spent = record.held, record.spent
        left = _left(record)
        limits = record.limits

        def held_of(name: str) -> int | None:
            return getattr(held, name) if getattr(limits, name) is not None else None

        return BatchBudgetStatus(
            batch_id=self.batch_id,
            limits=BatchAmounts(limits.steps, limits.output_tokens, _usd(limits.cost_nanousd)),
            reserved=BatchAmounts(
                held_of("steps"), held_of("output_tokens"), _usd(held_of("cost_nanousd"))
            ),
            spent=_amounts(spent.steps, spent.output_tokens, spent.cost_nanousd),
            left=BatchAmounts(left["steps"], left["output_tokens"], _usd(left["cost_nanousd"])),
            runs_reserved=record.runs_reserved,
            runs_settled=record.runs_settled,
            runs_reclaimed=record.runs_reclaimed,
        )


def _describe(limits: _Amounts) -> str:
    cost = _usd(limits.cost_nanousd)
    return (
        f"max_steps={limits.steps}, max_output_tokens={limits.output_tokens}, max_cost_usd={cost}"
    )

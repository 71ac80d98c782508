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

**The record.** One KV record per batch, key `<batch_id>` in `tiller-batch-budgets`:
`{schema_version, written_by, batch_id, limits, runs}`, where `runs` maps each run id to
its entry `{status, ceilings, final_answer_reserve, spent}`. Dollars are stored as whole
nano-dollars (`cost_nanousd`) so that sums are exact. Every change is a read, a check and
a write at the revision read (`KeyValue.update(expected=)`), retried from the read when
another worker wrote first: the backends' compare-and-set (memory, SQLite, NATS) is all
it needs, and there is no second key to get out of step with the first. What is counted
against a limit is computed from the entries, never kept as a separate counter:

- a run `reserved` counts its ceilings (the share it may still spend);
- a run `settled` counts what it spent (which may exceed its ceiling: see dollars);
- a run `reclaimed` counts what the reclaimer said it spent (nothing, by default).

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

**Size.** The record holds one entry per run (about 200 bytes), so a batch of 5,000 runs
is a record of about a megabyte, which NATS stores through its object store; every
reserve and settle rewrites it, and concurrent workers retry their compare-and-set. That
is the price of one atomic record; a batch of tens of thousands of runs wants sharding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

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


class _BatchRecord(_Strict):
    schema_version: int = 1
    written_by: str | None = Field(default_factory=tiller_version)
    batch_id: str
    limits: _Amounts
    runs: dict[str, _RunEntry] = Field(default_factory=dict)


_DIMENSIONS = ("steps", "output_tokens", "cost_nanousd")


def _encode(record: _BatchRecord) -> bytes:
    return record.model_copy(update={"written_by": tiller_version()}).model_dump_json().encode()


def _decode(bucket: str, key: str, value: bytes) -> _BatchRecord:
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
    try:
        record = _BatchRecord.model_validate_json(value, strict=True)
    except ValidationError as exc:
        problems = "; ".join(
            f"field {'.'.join(str(p) for p in error['loc']) or 'the record'!r}: {error['msg']}"
            for error in exc.errors(include_url=False)
        )
        raise MalformedBatchBudget(bucket, key, problems) from None
    if record.batch_id != key:
        raise MalformedBatchBudget(bucket, key, f"it is the budget of batch {record.batch_id!r}")
    for run_id, entry in record.runs.items():
        for name in _DIMENSIONS:
            if getattr(record.limits, name) is not None and getattr(entry.ceilings, name) is None:
                raise MalformedBatchBudget(
                    bucket, key, f"run {run_id!r} holds no {name} though the batch limits them"
                )
        if (entry.status == "reserved") != (entry.spent is None):
            raise MalformedBatchBudget(
                bucket, key, f"run {run_id!r} is {entry.status} but its spending says otherwise"
            )
    return record


# ── arithmetic ───────────────────────────────────────────────────────────────────────


def _nano(usd: float) -> int:
    """A limit or ceiling in nano-dollars, rounded down (never more than was given)."""
    return math.floor(usd * _NANO)


def _nano_spent(usd: float) -> int:
    """Dollars spent in nano-dollars, rounded up (never less than was spent)."""
    return math.ceil(usd * _NANO)


def _usd(nano: int | None) -> float | None:
    return None if nano is None else nano / _NANO


def _counted(entry: _RunEntry, name: str) -> int:
    if entry.status == "reserved":
        value = getattr(entry.ceilings, name)
        return 0 if value is None else int(value)
    # A closed entry always has its spending (checked as the record is read).
    return 0 if entry.spent is None else int(getattr(entry.spent, name))


def _totals(record: _BatchRecord) -> tuple[dict[str, int], dict[str, int]]:
    """(held by open reservations, spent by settled and reclaimed runs), per dimension."""
    held = dict.fromkeys(_DIMENSIONS, 0)
    spent = dict.fromkeys(_DIMENSIONS, 0)
    for entry in record.runs.values():
        into = held if entry.status == "reserved" else spent
        for name in _DIMENSIONS:
            into[name] += _counted(entry, name)
    return held, spent


def _left(record: _BatchRecord) -> dict[str, int | None]:
    held, spent = _totals(record)
    left: dict[str, int | None] = {}
    for name in _DIMENSIONS:
        limit = getattr(record.limits, name)
        left[name] = None if limit is None else limit - held[name] - spent[name]
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

    async def _write(self, record: _BatchRecord, revision: int) -> bool:
        """Whether the compare-and-set won (False: read again and decide again)."""
        kv = await self._bucket()
        try:
            await kv.update(self.batch_id, _encode(record), expected=revision)
        except RevisionConflict:
            return False
        return True

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
        while True:
            record, revision = await self._read()
            existing = record.runs.get(run_id)
            if existing is not None:
                return None if existing.status == "reclaimed" else self._budget_of(existing, want)
            entry = self._size(record, want)
            if entry is None:
                return None
            runs = {**record.runs, run_id: entry}
            if await self._write(record.model_copy(update={"runs": runs}), revision):
                return self._budget_of(entry, want)

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
        while True:
            record, revision = await self._read()
            entry = record.runs.get(run_id)
            if entry is None:
                raise self._unknown_run(run_id)
            if entry.status == "settled" or (entry.status == status == "reclaimed"):
                return _given_back(record.limits, dict.fromkeys(_DIMENSIONS, 0))
            # reserved → settled | reclaimed; reclaimed → settled (it was alive after all).
            before = {name: _counted(entry, name) for name in _DIMENSIONS}
            closed = entry.model_copy(update={"status": status, "spent": used})
            after = {name: _counted(closed, name) for name in _DIMENSIONS}
            runs = {**record.runs, run_id: closed}
            if await self._write(record.model_copy(update={"runs": runs}), revision):
                back = {name: before[name] - after[name] for name in _DIMENSIONS}
                return _given_back(record.limits, back)

    # ── status ──

    async def status(self) -> BatchBudgetStatus:
        """Limits, what open reservations hold, what finished runs spent, what is left."""
        record, _ = await self._read()
        held, spent = _totals(record)
        left = _left(record)
        limits = record.limits
        limited = {name: getattr(limits, name) is not None for name in _DIMENSIONS}

        def held_of(name: str) -> int | None:
            return held[name] if limited[name] else None

        counts = {"reserved": 0, "settled": 0, "reclaimed": 0}
        for entry in record.runs.values():
            counts[entry.status] += 1
        return BatchBudgetStatus(
            batch_id=self.batch_id,
            limits=BatchAmounts(limits.steps, limits.output_tokens, _usd(limits.cost_nanousd)),
            reserved=BatchAmounts(
                held_of("steps"), held_of("output_tokens"), _usd(held_of("cost_nanousd"))
            ),
            spent=_amounts(spent["steps"], spent["output_tokens"], spent["cost_nanousd"]),
            left=BatchAmounts(left["steps"], left["output_tokens"], _usd(left["cost_nanousd"])),
            runs_reserved=counts["reserved"],
            runs_settled=counts["settled"],
            runs_reclaimed=counts["reclaimed"],
        )


def _describe(limits: _Amounts) -> str:
    cost = _usd(limits.cost_nanousd)
    return (
        f"max_steps={limits.steps}, max_output_tokens={limits.output_tokens}, max_cost_usd={cost}"
    )

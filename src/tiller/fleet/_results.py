"""The `tiller-run-results` bucket: one record per fleet run that ended, or that waits for
a person, keyed by its run id.

A result is written with create-or-get, so of two workers that both finished a run (a
stale one whose job lease lapsed, and the one that took it over) the first record stands
and a second writer never overwrites it. The one exception is explicit: a *held* record
(`suspended` for an approval, `blocked` on uncertain calls) is replaced by the record of
the continuation that ends it (compare-and-set on the held record's revision, so two
continuations cannot both replace it). After each write a hint goes out on
`tiller.results.<run_id>` for `RunHandle.result`.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar, Literal

from pydantic import Field

from ..store import (
    Bus,
    KeyValue,
    MalformedRecord,
    Record,
    RevisionConflict,
    StoreError,
    create_or_get,
    decode_record,
    encode_record,
)
from ._subjects import hint_subject
from ._workspace import NoWorkspace, WorkspaceSpec

__all__ = ["HELD", "RESULTS_BUCKET", "ResultStatus", "ResultStore", "RunOutcomeRecord"]

#: The results bucket's default name.
RESULTS_BUCKET = "tiller-run-results"
_HINT_ROOT = "tiller.results"

ResultStatus = Literal[
    "completed",  # the run finished its task
    "stopped",  # a budget, the step cap, a loop, a refusal or a handoff stopped it
    "error",  # the run ended on an error
    "cancelled",  # cancelled: by its handle, its batch, or an operator
    "failed",  # it never started: its agent does not load, its workspace is missing
    "suspended",  # held for a person's approval (`tiller approve`, then a continuation)
    "blocked",  # uncertain calls after a crash: a person reconciles them
]
#: The statuses that wait for a person: a later continuation's record replaces them.
HELD: frozenset[str] = frozenset({"suspended", "blocked"})


class RunOutcomeRecord(Record):
    """How one fleet run ended (see the module docstring)."""

    ledger_kind: ClassVar[str] = "run_result"

    run_id: str
    status: ResultStatus
    #: `tiller.StopCause`'s value; None when the run never started.
    stop_cause: str | None = None
    text: str = ""
    #: The structured output (JSON), when the agent has an output type.
    output: Any = None
    usage: dict[str, int] = Field(default_factory=dict)
    cost_usd: float = 0.0
    steps: int = 0
    error: str | None = None
    #: For `blocked`: the uncertain calls, `name (call id)`.
    blocked_calls: list[str] = Field(default_factory=list)
    worker: str = ""
    #: The run queue its worker took it from: a continuation goes on the same queue.
    queue: str | None = None
    attempt: int = 0
    batch: str | None = None
    finished_at: float = 0.0
    #: The workspace the run's job named: a continuation (after a person decided its
    #: held calls) goes on in the same one.
    workspace: WorkspaceSpec = Field(default_factory=NoWorkspace)
    #: What the run changed in its snapshot workspace (`tiller.fleet.load_diff` reads it;
    #: `RunHandle.diff()` does both); None for another kind of workspace.
    diff_ref: str | None = None

    @property
    def held(self) -> bool:
        """It waits for a person; a continuation's record will replace it."""
        return self.status in HELD


class ResultStore:
    """The results bucket of `bus` (see the module docstring)."""

    def __init__(self, bus: Bus, bucket: str = RESULTS_BUCKET) -> None:
        self.bus = bus
        self.bucket = bucket
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self.bus.kv(self.bucket)
        return self._kv

    @staticmethod
    def subject(run_id: str) -> str:
        """Where a hint goes when the run's record is written."""
        return hint_subject(_HINT_ROOT, run_id)

    async def get(self, run_id: str) -> RunOutcomeRecord | None:
        entry = await (await self._bucket()).get(run_id)
        return None if entry is None else self._read(run_id, entry.value)

    async def record(
        self, result: RunOutcomeRecord, *, replace_held: bool = True
    ) -> RunOutcomeRecord:
        """Store `result` unless the run already has a record; returns the one that
        stands. A held record is replaced (once: compare-and-set on its revision), unless
        `replace_held` is False: for a record that does not come from the continuation
        that ends the hold (a dead-lettered start job's)."""
        kv = await self._bucket()
        value = encode_record(result)
        while True:
            existing = await create_or_get(kv, result.run_id, value)
            if existing is None:
                break
            stored = self._read(result.run_id, existing)
            if not stored.held or not replace_held:
                return stored  # the first writer's record stands
            entry = await kv.get(result.run_id)
            if entry is None:
                continue  # deleted meanwhile: create it
            if self._read(result.run_id, entry.value) != stored:
                continue  # changed since we read it: judge it again
            try:
                await kv.update(result.run_id, value, expected=entry.revision)
            except RevisionConflict:
                continue
            break
        await self._hint(result.run_id)
        return result

    async def _hint(self, run_id: str) -> None:
        with contextlib.suppress(StoreError):  # only a hint: a waiter polls the record
            await self.bus.publish(self.subject(run_id), b"{}")

    def _read(self, run_id: str, value: bytes) -> RunOutcomeRecord:
        record = decode_record(RunOutcomeRecord, self.bucket, run_id, value)
        if record.run_id != run_id:
            raise MalformedRecord(self.bucket, run_id, f"it belongs to run {record.run_id!r}")
        return record

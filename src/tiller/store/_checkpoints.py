"""Checkpoints: a run's `RunState` in the store, and a record per tool call.

One bucket (`tiller-run-checkpoints` by default) holds, per run:
- `<run_id>`: `{"schema_version", "written_by", "status", "epoch", "state"}` — the
  `RunState` at its latest step boundary; `status` is `running`, `suspended`, `resumed` or
  `finished`; `epoch` is the lease epoch of the process that wrote it (0: unknown);
- `<run_id>/calls/<call_id>`: `{"status": "started" | "completed" | "rerun", "result"?,
  "idempotent"?, "epoch"?}` — written before a call runs and after it returns, so a resume
  never runs a completed call again, and knows which calls are uncertain (started, never
  completed) after a crash. A started record says `idempotent: true` when the tool that
  started the call declared itself idempotent (`Tool.idempotent`): recovery may then run
  it again. `rerun` is a call whose interrupted attempt recovery decided to run again
  (`rerun_call`); the continued run runs it, and says so. Records without the newer keys
  (an older tiller's) read as not idempotent;
- `<run_id>/lease`: the run's lease (a process is running it now), and `<run_id>/epoch`:
  `{"epoch": n, "owner"}`, the run's lease epoch (see *Fencing* below);
- `<run_id>/steps/<n>`: `{"schema_version", "written_by", "epoch", "gen", "first", "deltas"}` —
  the steps since the checkpoint (issue 19). A checkpoint record (version 3) carries a
  `gen`, new at each write of it; a durable run writes it whole only now and then
  (`_checkpoint_steps`), and between, at each step, a *delta* of what changed, into
  segments 0, 1, ... (a few deltas each, marked with the checkpoint's `gen`). Loading
  reads the checkpoint, then the segments in order until one is missing or of another
  `gen` (left from before the checkpoint was last written: the next steps overwrite it,
  so nothing is ever deleted and a run keeps as many segments as its longest chain),
  and applies their deltas: a crash between two writes leaves the state of the last one;
- `thread/<thread_id>`: the thread's latest run id (an AG-UI resume arrives with a new run
  id on the same thread).

Claiming a checkpoint for a resume is a compare-and-set on its revision: of two processes
resuming at once, exactly one proceeds; the other gets `AlreadyResumed`.

**Fencing.** A lease alone cannot stop a process whose lease lapsed (it was paused, or cut
off from the store) and was taken over: it does not know, and writes on. So each holder
takes a new *epoch* as it takes the lease (`take_epoch`): a compare-and-set counter kept
in its own key beside the lease, `<run_id>/epoch`, which is never deleted (a released or
broken lease is; the counter must outlive both, or a later holder would count from 1
again). It is an ordinary revisioned record, so it works alike on memory, SQLite and NATS
(no server-side TTL or stream sequence is involved, and JetStream KV keeps no counter of
its own that survives a delete). Renewing a lease keeps its epoch. Every fenced write of
the run passes the writer's epoch (`epoch=`), and every record it writes carries it.

A durable step writes its checkpoint and its calls' records; reading the epoch before each
would double the step's round trips, so most writes are fenced by what the writer already
knows. The checkpoint and a call's completion are one compare-and-set on the revision this
store kept from its own last write of the record (`read_epoch=False`, as the durability
port writes them); that is a fence because taking an epoch *stamps* those records: the
checkpoint is rewritten carrying the new epoch before the epoch record moves, and every
call record still `started` just after. So once a takeover has taken its epoch, the stale
holder's compare-and-set fails, the record read back carries the newer epoch, and the
write is refused (`LeaseLost`, nothing written). A record changed by someone else without
a newer epoch (an unfenced writer) is written after reading the epoch after all. A call's
started record is new, so nothing fences it but the epoch: it is read before the record is
created (nothing lands once the run was taken over) and again after (a call is never
*run* by a process the run was taken from). A write whose check raced a takeover may land
just after it (nothing is atomic across two keys): a started record is then left behind,
as an uncertain call (law 5) — which it may be, for all the new holder knows — and a
completion that lands while the takeover is stamping is the true result of a call started
before it. Other fenced writes (held calls, event log batches) read the epoch first; they
are rare.

A step's delta is fenced as the checkpoint is: it rewrites the segment this store wrote
last, by compare-and-set on the revision it kept, and a takeover stamps every segment of
the run as it stamps the checkpoint, before the epoch moves; a new segment is created
after reading the epoch. A delta never moves the checkpoint's own revision: a claim's
compare-and-set is on the checkpoint record (a claim writes the state it loaded, deltas
applied, under a new `gen`, so the deltas it read are never applied twice).

A recovery's claim is a takeover too (`claim(recovering=True)`): the claimed checkpoint
carries the new epoch, so it fences the process it recovers from before the recovered run
takes its own lease, and the recovery reads the call records again after it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from .. import _public
from .._schema_ledger import LEDGER, newer_problem, tiller_version, written_by_of
from ..errors import NewerSchemaError
from ..state import RunState
from ._bus import Bus, KeyValue, Lease, NotFound, RevisionConflict, StoreError
from ._checkpoint_steps import apply_delta

__all__ = [
    "AlreadyResumed",
    "CallLog",
    "Checkpoint",
    "CheckpointFromNewerTiller",
    "CheckpointStore",
    "LeaseLost",
    "RunStillRunning",
]

SCHEMA_VERSION = LEDGER["run_checkpoint"].current
#: The record versions this tiller reads (1 has no `epoch`: it reads as 0).
_READABLE = LEDGER["run_checkpoint"].readable
DEFAULT_BUCKET = "tiller-run-checkpoints"
#: The version of a segment of step deltas (`<run_id>/steps/<n>`).
STEPS_VERSION = LEDGER["run_checkpoint_steps"].current

#: `continued`: the run was resumed under a new run id (an AG-UI resume), which goes on
#: in its place (`Checkpoint.continued_as`); it can never be claimed again.
Status = Literal["running", "suspended", "resumed", "continued", "finished"]


class CheckpointFromNewerTiller(StoreError, NewerSchemaError):
    """A checkpoint record of a schema newer than this tiller knows: a newer tiller wrote
    it (`written_by`, None when it does not say). Upgrade tiller to resume the run."""

    def __init__(self, message: str, written_by: str | None) -> None:
        super().__init__(message)
        self.written_by = written_by


class AlreadyResumed(StoreError):
    """Another process claimed this checkpoint first; this one must not run it."""


class RunStillRunning(StoreError):
    """A live process holds the run's lease: recovering it now could run a side effect
    twice. Wait for the lease to lapse, or force it if you know that process is dead."""

    def __init__(self, run_id: str, owner: str, seconds_left: float) -> None:
        super().__init__(
            f"run {run_id!r} is still held by {owner} for {seconds_left:.0f} more seconds; "
            "if that process is dead, force the recovery (tiller runs resume --force)"
        )
        self.run_id = run_id
        self.owner = owner
        self.seconds_left = seconds_left


class LeaseLost(StoreError):
    """Another process took the run's lease over since this one took it: this process's
    epoch is stale, and it must write nothing more of the run (see *Fencing* above)."""

    def __init__(self, run_id: str, epoch: int, current: int) -> None:
        super().__init__(
            f"run {run_id!r} was taken over by another process: its lease epoch is now "
            f"{current}, and this process holds epoch {epoch} (the run was recovered "
            "elsewhere: this process's lease had lapsed while it was paused or cut off "
            "from the store, or the recovery was forced). "
            "This process stopped the run without writing anything more of it; the run "
            f"goes on where it was taken over (`tiller runs show {run_id}`). If no process "
            f"runs it any more, recover it: `tiller runs resume {run_id}`."
        )
        self.run_id = run_id
        self.epoch = epoch
        self.current = current


@dataclass(slots=True, frozen=True)
class Checkpoint:
    state: RunState
    status: Status
    revision: int
    #: The run id that went on in this run's place (status `continued`).
    continued_as: str | None = None
    #: The lease epoch of the process that wrote it (0: unknown, or written unfenced).
    epoch: int = 0
    #: The record's `gen` (None before version 3) and how many of the step deltas
    #: written after it are in `state`: a claim checks that no step was written since.
    gen: str | None = None
    steps: int = 0


@dataclass(slots=True, frozen=True)
class CallLog:
    """What the store knows of one call: started, completed with its result, or to be
    run again after an interrupted attempt (`rerun`). `idempotent`: the started call's
    tool declared itself idempotent (False in records that do not say)."""

    call_id: str
    status: Literal["started", "completed", "rerun"]
    content: str | None = None
    is_error: bool = False
    idempotent: bool = False


class CheckpointStore:
    """Reads and writes checkpoints and call records in one bucket of a `Bus`."""

    def __init__(self, bus: Bus, bucket: str = DEFAULT_BUCKET) -> None:
        self.bus = bus
        self.bucket = bucket
        self._kv: KeyValue | None = None
        # Thread index entries this store already wrote: one write per thread, not per step.
        self._indexed: set[tuple[str, str]] = set()
        # The revision of each record this store last wrote fenced: the next fenced write
        # of it is one compare-and-set, read back only when someone else wrote meanwhile.
        self._written: dict[str, int] = {}
        #: The `gen` and size (bytes) of the checkpoint record this store wrote last.
        self.last_gen, self.last_size = "", 0

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self.bus.kv(self.bucket)
        return self._kv

    @staticmethod
    def _encode(
        state: RunState,
        status: Status,
        continued_as: str | None = None,
        epoch: int = 0,
        gen: str = "",
    ) -> bytes:
        record: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "written_by": tiller_version(),
            "status": status,
            "epoch": epoch,
            # New at every write: the step deltas written after it are its `gen`'s.
            "gen": gen,
            "state": orjson.Fragment(state.to_json()),
        }
        if continued_as is not None:
            record["continued_as"] = continued_as
        return orjson.dumps(record)

    async def save(
        self,
        state: RunState,
        status: Status,
        *,
        expected: int | None = None,
        continued_as: str | None = None,
        index: bool = True,
        epoch: int | None = None,
        keep_epoch: int = 0,
        read_epoch: bool = True,
    ) -> int:
        """Write the run's checkpoint (at `expected` revision if given); returns the
        revision. `index=False` leaves the thread's index alone (a write about a run that
        may no longer be its thread's latest). Each write has a new `gen`, which names it
        for the step deltas that follow it (`save_steps`): `last_gen` after, and the
        record's size `last_size`.

        `epoch` is the writer's lease epoch: the write is fenced by it (`LeaseLost`, and
        nothing written, once another holder took the run over). Without it the write is
        unfenced and the record keeps `keep_epoch` (a claim keeps the one it read).
        `read_epoch=False` fences by the record's revision alone where this store knows
        it (one compare-and-set; see `_write_fenced`)."""
        kv = await self._bucket()
        gen = new_gen()
        if epoch is not None:
            if expected is not None:
                raise ValueError("a fenced checkpoint write finds its own revision")
            data = self._encode(state, status, continued_as, epoch, gen)
            revision = await self._write_fenced(
                kv, state.run_id, state.run_id, data, epoch, read_epoch=read_epoch
            )
        elif expected is None:
            data = self._encode(state, status, continued_as, keep_epoch, gen)
            revision = await kv.put(state.run_id, data)
        else:
            data = self._encode(state, status, continued_as, keep_epoch, gen)
            revision = await kv.update(state.run_id, data, expected=expected)
        self.last_gen, self.last_size = gen, len(data)
        if index and (state.thread_id, state.run_id) not in self._indexed:
            await kv.put(f"thread/{state.thread_id}", state.run_id.encode())
            self._indexed.add((state.thread_id, state.run_id))
        return revision

    async def load(self, run_id: str) -> Checkpoint:
        """The run's checkpoint (`NotFound` if there is none)."""
        kv = await self._bucket()
        entry = await kv.get(run_id)
        if entry is None:
            raise NotFound(f"no checkpoint for run {run_id!r} in bucket {self.bucket!r}")
        record: dict[str, Any] = orjson.loads(entry.value)
        version = record.get("schema_version")
        if version not in _READABLE:
            problem = (
                f"checkpoint {run_id!r} has schema version {version}; "
                f"this tiller reads {', '.join(map(str, _READABLE))}"
            )
            if isinstance(version, int) and version > SCHEMA_VERSION:
                writer = written_by_of(record)
                raise CheckpointFromNewerTiller(f"{problem}: {newer_problem(writer)}", writer)
            raise StoreError(problem)
        raw = record["state"]
        epoch = int(record.get("epoch", 0))  # version 1 has none
        gen = record.get("gen")  # before version 3: no step deltas
        deltas: list[Any] = []
        if isinstance(gen, str):
            deltas, steps_epoch = await self._read_steps(kv, run_id, gen)
            epoch = max(epoch, steps_epoch)
            if isinstance(raw, dict):
                for delta in deltas:
                    apply_delta(raw, delta)
        # Read by the ledger as `RunState.from_json` reads a state: newer refused, older
        # migrated, a version it never had refused.
        state = RunState.from_data(raw)
        return Checkpoint(
            state,
            record["status"],
            entry.revision,
            record.get("continued_as"),
            epoch,
            gen if isinstance(gen, str) else None,
            len(deltas),
        )

    async def _read_steps(self, kv: KeyValue, run_id: str, gen: str) -> tuple[list[Any], int]:
        """The step deltas written after the checkpoint `gen`, oldest first, and the
        highest epoch they were written under.

        The segments are read one after the other while their writer may be writing them
        (another process: a reader never holds the run). A segment says the number of its
        first delta (`first`): when it is past the deltas read so far, the writer filled
        the segment read before and went on meanwhile, so that one is read again (it grew),
        and the deltas are never read with a gap in the middle. A segment of another gen
        ends them: it is left from before the checkpoint was written (or the writer has
        written a new checkpoint since: what was read is still a state it wrote)."""
        deltas: list[Any] = []
        epoch = 0
        segment = 0
        reach = 0  # after a step back: where the segment read again must reach
        while True:
            entry = await kv.get(_steps_key(run_id, segment))
            if entry is None:
                return deltas, epoch
            record: dict[str, Any] = orjson.loads(entry.value)
            if record.get("gen") != gen:
                return deltas, epoch  # an older checkpoint's: the steps of this one end here
            version = record.get("schema_version")
            if version != STEPS_VERSION:
                problem = f"the steps of checkpoint {run_id!r} have schema version {version}"
                if isinstance(version, int) and version > STEPS_VERSION:
                    writer = written_by_of(record)
                    raise CheckpointFromNewerTiller(f"{problem}: {newer_problem(writer)}", writer)
                raise StoreError(f"{problem}; this tiller reads {STEPS_VERSION}")
            first = int(record.get("first", len(deltas)))
            if first > len(deltas) and segment > 0 and reach < first:
                # The one before grew since it was read (a segment is started only once
                # the one before reaches its first delta): read that one again.
                segment, reach = segment - 1, first
                continue
            if first > len(deltas) or first + len(record["deltas"]) < reach:
                raise StoreError(
                    f"the steps of checkpoint {run_id!r} do not follow each other: segment "
                    f"{segment} starts at delta {first} and the one before reaches "
                    f"{len(deltas)} (the store was damaged)"
                )
            reach = 0
            deltas[first:] = record["deltas"]
            epoch = max(epoch, int(record.get("epoch", 0)))
            segment += 1

    async def save_steps(
        self,
        run_id: str,
        gen: str,
        segment: int,
        deltas: Sequence[bytes],
        *,
        first: int,
        epoch: int | None = None,
    ) -> None:
        """Write segment `segment` of the step deltas after checkpoint `gen`: `deltas`,
        every delta it holds (encoded), oldest first; `first` is the number of the first
        (the deltas after the checkpoint are numbered from 0), by which a reader sees that
        it read a segment before the writer filled it (`_read_steps`). Fenced by `epoch`
        if given, by the revision this store kept from its last write of the segment (see
        *Fencing*)."""
        kv = await self._bucket()
        record = {
            "schema_version": STEPS_VERSION,
            "written_by": tiller_version(),
            "epoch": epoch or 0,
            "gen": gen,
            "first": first,
            "deltas": [orjson.Fragment(delta) for delta in deltas],
        }
        key = _steps_key(run_id, segment)
        data = orjson.dumps(record)
        if epoch is None:
            await kv.put(key, data)
            return
        await self._write_fenced(kv, run_id, key, data, epoch, read_epoch=False)

    async def run_ids(self) -> list[str]:
        """Every checkpointed run's id, sorted. A run's own records (its lease, its call
        records) and the thread index live under keys of their own, which are skipped."""
        kv = await self._bucket()
        return sorted(
            key
            for key in await kv.keys()
            if not key.startswith("thread/")
            and "/calls/" not in key
            and "/steps/" not in key
            and not key.endswith(("/lease", "/epoch", "/reserved"))
        )

    async def for_thread(self, thread_id: str) -> Checkpoint | None:
        """The latest checkpoint of a thread, if any."""
        kv = await self._bucket()
        entry = await kv.get(f"thread/{thread_id}")
        if entry is None:
            return None
        try:
            return await self.load(entry.value.decode())
        except NotFound:
            return None

    async def claim(
        self,
        checkpoint: Checkpoint,
        *,
        recovering: bool = False,
        continued_as: str | None = None,
        orphan: bool = False,
    ) -> int:
        """Mark a suspended checkpoint `resumed`, compare-and-set: exactly one caller wins.

        `recovering` also claims a `running` checkpoint: the caller asserts that the process
        running it died (`tiller runs resume`). `continued_as` names the new run id the run
        goes on under: the checkpoint becomes `continued`, which nothing can claim again
        (the new run is the one to recover, if it comes to that) — but with `orphan`,
        which the caller passes only when that new run never wrote a checkpoint.

        A recovering claim is a takeover, and fences the process it recovers from (which
        may be alive: paused, or cut off from the store): the claimed record carries an
        epoch above every one taken so far, so that process's next checkpoint is refused
        even before the recovered run takes its lease, and once the claim has won the
        run's epoch is taken too, so its call records and event log are refused from then
        on. A claim that loses the race takes nothing (the winner is not fenced)."""
        # A resumer that died before its first checkpoint leaves `resumed`: recoverable too.
        allowed: tuple[Status, ...] = (
            ("suspended", "running", "resumed") if recovering else ("suspended",)
        )
        if orphan:
            # A `continued` whose new run never started (the caller checked): claimable.
            allowed = (*allowed, "continued")
        if checkpoint.status not in allowed:
            raise AlreadyResumed(
                f"run {checkpoint.state.run_id!r} is {checkpoint.status}, not suspended"
            )
        status: Status = "continued" if continued_as is not None else "resumed"
        run_id = checkpoint.state.run_id
        epoch = checkpoint.epoch
        if recovering:
            epoch = max(epoch, await self.epoch(run_id)) + 1
        try:
            revision = await self.save(
                checkpoint.state,
                status,
                expected=checkpoint.revision,
                continued_as=continued_as,
                keep_epoch=epoch,
            )
        except RevisionConflict as exc:
            raise AlreadyResumed(f"run {run_id!r} was already resumed by another process") from exc
        if recovering:
            await self.take_epoch(run_id, "a recovery")
        await self._check_no_step_since(checkpoint, revision, epoch)
        return revision

    async def _check_no_step_since(self, checkpoint: Checkpoint, revision: int, epoch: int) -> None:
        """`AlreadyResumed` if the run's writer wrote a step after `checkpoint` was loaded,
        with the checkpoint put back as it was, those steps in it.

        A step's delta does not move the checkpoint's revision, so the claim's
        compare-and-set does not see it: a process whose lease lapsed but which is alive
        (paused, cut off from the store) may write one between the load and the claim.
        The claim must not win with the state from before that step (its calls ran; the
        claimed run would make them again, under the same call ids). It looks after the
        compare-and-set, and after taking the epoch (a recovery): from then on the writer
        adds nothing to those segments (a stamped segment refuses it, a new one is
        created only after reading the epoch), so what is read now is all there is."""
        if checkpoint.gen is None:
            return
        kv = await self._bucket()
        run_id = checkpoint.state.run_id
        deltas, _ = await self._read_steps(kv, run_id, checkpoint.gen)
        if len(deltas) <= checkpoint.steps:
            return
        raw = orjson.loads(checkpoint.state.to_json())
        for delta in deltas[checkpoint.steps :]:
            apply_delta(raw, delta)
        await self.save(
            RunState.from_data(raw),
            checkpoint.status,
            expected=revision,
            continued_as=checkpoint.continued_as,
            index=False,
            keep_epoch=epoch,
        )
        raise AlreadyResumed(
            f"run {run_id!r} wrote a step after it was read here (the process running it "
            "was still alive): the checkpoint is put back with that step in it, unclaimed; "
            "read it again"
        )

    # ── run ids and threads taken by a request ───────────────────────────────────

    async def reserve(self, run_id: str) -> bool:
        """Take `run_id` for a new run, once for all processes (create-only): False when
        it is taken already, by a run or by a request that reserved it first."""
        kv = await self._bucket()
        if await kv.get(run_id) is not None:
            return False
        try:
            await kv.create(f"{run_id}/reserved", b"{}")
        except RevisionConflict:
            return False
        return True

    async def is_reserved(self, run_id: str) -> bool:
        """Whether a request reserved `run_id` (`reserve`): its run is starting, or has
        started (then it has a checkpoint too)."""
        kv = await self._bucket()
        return await kv.get(f"{run_id}/reserved") is not None

    async def hold_thread(self, thread_id: str, owner: str, ttl: float) -> Lease | None:
        """The thread's lease, for one run at a time on a thread (None: another holds it).
        Renew it while the run lasts; it lapses on its own if the process dies."""
        kv = await self._bucket()
        return await kv.acquire(f"thread/{thread_id}/active", owner, ttl)

    async def thread_holder(self, thread_id: str) -> tuple[str, float] | None:
        """Who holds the thread's lease, and for how much longer, if anyone does."""
        kv = await self._bucket()
        entry = await kv.get(f"thread/{thread_id}/active")
        if entry is None:
            return None
        record = orjson.loads(entry.value)
        left = float(record["expires_at"]) - self.bus.clock()
        return (str(record["owner"]), left) if left > 0 else None

    # ── the run's lease: "a process is running this now" ─────────────────────────────

    async def hold(self, run_id: str, owner: str, ttl: float) -> Lease:
        """Take the run's lease for `ttl` seconds (`RunStillRunning` if someone else holds
        it). A durable run holds it while it runs and renews it at its checkpoints, so a
        recovery can tell a dead process from a live one."""
        kv = await self._bucket()
        lease = await kv.acquire(f"{run_id}/lease", owner, ttl)
        if lease is None:
            held = await self.holder(run_id)
            who, left = held if held is not None else ("another process", ttl)
            raise RunStillRunning(run_id, who, left)
        return lease

    async def renew_hold(self, lease: Lease, ttl: float) -> Lease:
        kv = await self._bucket()
        return await kv.renew(lease, ttl)

    async def release_hold(self, lease: Lease) -> None:
        kv = await self._bucket()
        await kv.release(lease)

    async def holder(self, run_id: str) -> tuple[str, float] | None:
        """Who holds the run's lease and for how many more seconds, if anyone does."""
        kv = await self._bucket()
        entry = await kv.get(f"{run_id}/lease")
        if entry is None:
            return None
        record = orjson.loads(entry.value)
        left = float(record["expires_at"]) - self.bus.clock()
        return (str(record["owner"]), left) if left > 0 else None

    async def break_hold(self, run_id: str) -> None:
        """Drop the run's lease whoever holds it (the caller knows that process is dead)."""
        kv = await self._bucket()
        await kv.delete(f"{run_id}/lease")

    # ── fencing: the run's lease epoch (see the module docstring) ────────────────────

    async def take_epoch(self, run_id: str, owner: str) -> int:
        """The run's next lease epoch, for a new holder `owner` (compare-and-set: two
        takers never get the same number). Every earlier holder's writes are fenced.

        Taking it stamps the run's records an earlier holder writes by compare-and-set
        on a revision it kept (see *Fencing*): the checkpoint, before the epoch moves, and
        every call record still `started`, after it; so that holder's next such write
        finds the record changed, reads the newer epoch in it, and is refused."""
        kv = await self._bucket()
        key = f"{run_id}/epoch"
        while True:
            entry = await kv.get(key)
            epoch = 1 if entry is None else _epoch_of(entry.value) + 1
            if await self._stamp(kv, run_id, epoch):
                # Its step deltas too, whichever checkpoint they follow: a holder writing
                # one of an older checkpoint must find it stamped as well.
                for steps_key in await kv.keys(f"{run_id}/steps/"):
                    await self._stamp(kv, steps_key, epoch)
            value = orjson.dumps({"epoch": epoch, "owner": owner})
            try:
                if entry is None:
                    await kv.create(key, value)
                else:
                    await kv.update(key, value, expected=entry.revision)
            except RevisionConflict:
                continue  # another taker came first: count after it
            break
        for call_key in await kv.keys(f"{run_id}/calls/"):
            await self._stamp(kv, call_key, epoch, started_only=True)
        return epoch

    async def _stamp(
        self, kv: KeyValue, key: str, epoch: int, *, started_only: bool = False
    ) -> bool:
        """Rewrite the record at `key` carrying `epoch`, if it carries an older one (and,
        with `started_only`, is a call record still `started`); nothing else in it changes.
        The revision written is kept: this store's next fenced write of it is one
        compare-and-set. Whether there is a record at `key`."""
        while True:
            entry = await kv.get(key)
            if entry is None:
                return False
            record = orjson.loads(entry.value)
            if not isinstance(record, dict) or int(record.get("epoch", 0)) >= epoch:
                return True
            if started_only and record.get("status") != "started":
                return True  # completed: its writer never writes it again
            record["epoch"] = epoch
            try:
                revision = await kv.update(key, orjson.dumps(record), expected=entry.revision)
            except RevisionConflict:
                continue  # written meanwhile: look again
            self._written[key] = revision
            return True

    async def epoch(self, run_id: str) -> int:
        """The run's current lease epoch (0: no holder ever took one)."""
        kv = await self._bucket()
        entry = await kv.get(f"{run_id}/epoch")
        return 0 if entry is None else _epoch_of(entry.value)

    async def check_epoch(self, run_id: str, epoch: int) -> None:
        """`LeaseLost` unless `epoch` is still the run's current one."""
        current = await self.epoch(run_id)
        if current != epoch:
            raise LeaseLost(run_id, epoch, current)

    async def _write_fenced(
        self,
        kv: KeyValue,
        run_id: str,
        key: str,
        value: bytes,
        epoch: int,
        *,
        read_epoch: bool = True,
    ) -> int:
        """Write `value` (which carries `epoch`) at `key` of `run_id`, fenced: refused when
        the run's epoch moved past `epoch`, or the record there was written under a newer
        one; else a compare-and-set on the record's revision.

        `read_epoch` reads the run's epoch first. Without it, a record this store wrote
        last is written by one compare-and-set on the revision it kept, and nothing else:
        a takeover stamps the record (`take_epoch`), so the compare-and-set fails and the
        record read back carries the newer epoch. The epoch is read only when the
        revision is not known, or the record changed without a newer epoch in it."""
        known = self._written.get(key)
        if read_epoch or known is None:
            await self.check_epoch(run_id, epoch)
        if known is not None:
            try:
                revision = await kv.update(key, value, expected=known)
            except RevisionConflict:
                pass  # someone else wrote it since: read it, and decide below
            else:
                self._written[key] = revision
                return revision
        checked = read_epoch or known is None
        # Never written here: most likely a new record (a call's), so create it first.
        creating = known is None
        while True:
            entry = None if creating else await kv.get(key)
            creating = False
            if entry is not None:
                stored = _epoch_of(entry.value)
                if stored > epoch:
                    raise LeaseLost(run_id, epoch, stored)
            if not checked:
                # Changed (or deleted), not by a takeover's stamp: by an unfenced writer,
                # so the revision fenced nothing, and the epoch is read after all.
                await self.check_epoch(run_id, epoch)
                checked = True
            try:
                if entry is None:
                    revision = await kv.create(key, value)
                else:
                    revision = await kv.update(key, value, expected=entry.revision)
            except RevisionConflict:
                continue
            self._written[key] = revision
            return revision

    async def call_started(
        self, run_id: str, call_id: str, *, epoch: int | None = None, idempotent: bool = False
    ) -> None:
        """The call is about to run; `idempotent`: its tool declared itself so (a crash
        then leaves a call that recovery may run again). Fenced by `epoch` if given: then
        the epoch is read again after the write, so a takeover that raced the write still
        stops the call."""
        kv = await self._bucket()
        key = f"{run_id}/calls/{call_id}"
        record: dict[str, object] = {"status": "started"}
        if idempotent:
            record["idempotent"] = True
        if epoch is None:
            await kv.put(key, orjson.dumps(record))
            return
        await self._write_fenced(kv, run_id, key, orjson.dumps({**record, "epoch": epoch}), epoch)
        await self.check_epoch(run_id, epoch)

    async def call_completed(
        self,
        run_id: str,
        call_id: str,
        content: str,
        *,
        is_error: bool,
        epoch: int | None = None,
        read_epoch: bool = True,
    ) -> None:
        """The call returned `content`. Fenced by `epoch` if given; `read_epoch=False`
        fences by the revision of the started record this store wrote (see
        `_write_fenced`)."""
        kv = await self._bucket()
        key = f"{run_id}/calls/{call_id}"
        record: Mapping[str, object] = {
            "status": "completed",
            "content": content,
            "is_error": is_error,
        }
        if epoch is None:
            await kv.put(key, orjson.dumps(record))
            return
        value = orjson.dumps({**record, "epoch": epoch})
        await self._write_fenced(kv, run_id, key, value, epoch, read_epoch=read_epoch)
        self._written.pop(key, None)  # a call completes once: nothing more to remember

    async def mark_call(self, run_id: str, call_id: str, *, content: str, is_error: bool) -> None:
        """A person's verdict on an uncertain call: it is done (or failed) with `content`."""
        await self.call_completed(run_id, call_id, content, is_error=is_error)

    async def rerun_call(self, run_id: str, call_id: str) -> None:
        """Recovery's verdict on an uncertain call of an idempotent tool: run it again.
        Unlike `forget_call`, the record stays, as `rerun`: the continued run says the
        call is run again after an interrupted attempt, even if it is recovered again
        before the new attempt starts (which overwrites the record with its own start)."""
        kv = await self._bucket()
        await kv.put(f"{run_id}/calls/{call_id}", orjson.dumps({"status": "rerun"}))

    async def forget_call(self, run_id: str, call_id: str) -> None:
        """A person's verdict on an uncertain call: run it again."""
        kv = await self._bucket()
        await kv.delete(f"{run_id}/calls/{call_id}")

    async def carry_calls(self, from_run: str, to_run: str, call_ids: Iterable[str]) -> None:
        """Copy `from_run`'s records of `call_ids` to `to_run`: a run continued under a new
        id (an AG-UI resume) must know which of its open calls already ran. Copying is
        idempotent, so a caller that then loses the claim leaves nothing wrong behind."""
        kv = await self._bucket()
        for call_id in call_ids:
            entry = await kv.get(f"{from_run}/calls/{call_id}")
            if entry is not None:
                await kv.put(f"{to_run}/calls/{call_id}", entry.value)

    async def calls(self, run_id: str) -> dict[str, CallLog]:
        """Every call record of the run, by call id."""
        kv = await self._bucket()
        prefix = f"{run_id}/calls/"
        logs: dict[str, CallLog] = {}
        for key in await kv.keys(prefix):
            entry = await kv.get(key)
            if entry is None:
                continue
            record = orjson.loads(entry.value)
            call_id = key[len(prefix) :]
            logs[call_id] = CallLog(
                call_id,
                record["status"],
                record.get("content"),
                bool(record.get("is_error")),
                idempotent=record.get("idempotent") is True,
            )
        return logs


def new_gen() -> str:
    """A new checkpoint write's name: its step deltas are found under it."""
    return os.urandom(8).hex()


def _steps_key(run_id: str, segment: int) -> str:
    return f"{run_id}/steps/{segment}"


def _epoch_of(value: bytes) -> int:
    """The `epoch` a record carries (0 when it has none: written unfenced, or before)."""
    record = orjson.loads(value)
    return int(record.get("epoch", 0)) if isinstance(record, dict) else 0


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())

"""Per-run control requests, cancel and steer, kept in the store (DESIGN §7).

A run is often cancelled or steered from a process other than the one running it: another
`tiller serve` process behind the same load balancer, `tiller runs cancel`, a worker fleet.
And the process running it may lose its connection for a while. So a request is a KV record
first and a pub/sub message second. The record *is* the request; the message only gets it
to the run fast. A watcher that missed the message (not subscribed yet, reconnecting, on
another SQLite connection whose poller lags) still finds the record at its next poll.

Keys in the `tiller-control` bucket:

- `<run_id>/cancel`: `{schema_version, run_id, reason, requested_at}`. The first request
  stands; asking again changes nothing but sends the message again;
- `<run_id>/steer/<id>`: `{schema_version, run_id, steer_id, text, sent_at}`. An id is
  `<wall time in ns, 16 hex digits>-<8 random hex digits>`, so ids sort in time order, and
  strictly increase within one process. Two processes steering in the same nanosecond
  are ordered by chance;
- `<run_id>/head`: rewritten after every steer. A poll compares its revision with the one
  it saw, and lists the run's keys only when it changed. On NATS a key listing scans the
  whole bucket, every run's records and their delete markers, so an idle poll costs two
  point reads and no scan.

Messages go on `tiller.control.<encode_key(run_id)>`, or `tiller.control.=h<sha256>` for
run ids too long for a subject: `{"schema_version": 1, "kind": "cancel"}` or
`{"schema_version": 1, "kind": "steer", "id": "<id>"}`. A message is only a hint. The
watcher reads the record it names, so a message never carries text the store does not
hold, and a message on the wrong subject does no harm.

`ControlWatcher` applies one run's requests while its `async with` block runs: each steer
goes into the run's `SteeringQueue` exactly once, in id order, with its id; a cancel fires
the run's `CancellationToken` once. Store errors are logged and retried, never raised into
the run. A watcher for a run continued by another process (a recovery, a takeover) is
given the ids its checkpoint says were folded (`skip=`, `RunState.folded_steers`), and
pushes only the others; the run's loop skips folded ids too, so a watcher that was not
told folds nothing twice either (issue 16).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, ClassVar, Final, Protocol, TypeVar

import orjson

from ..errors import UsageError
from ._bus import Bus, KeyValue, StoreError, Subscription, check_subject, encode_key
from ._ordered_ids import ORDERED_ID, OrderedIds
from ._records import MalformedRecord, Record, create_or_get, decode, encode

if TYPE_CHECKING:
    from ..cancel import CancellationToken

__all__ = ["CONTROL_BUCKET", "ControlStore", "ControlWatcher", "MalformedControl"]

_logger: Final = logging.getLogger(__name__)


class SteeringQueue(Protocol):
    """Where a watcher puts the steering text it reads: the run's steering queue
    (`tiller.loop.SteeringQueue`), seen through the one method the watcher calls, because
    the store knows nothing of the loop (DESIGN §5)."""

    def push(self, text: str, steer_id: str | None = None) -> None: ...


#: The control bucket's default name (DESIGN §7).
CONTROL_BUCKET = "tiller-control"
DEFAULT_REASON = "cancelled by request"
_SUBJECT_ROOT = "tiller.control"
_MESSAGE_VERSION = 1
#: How long leaving a watch waits for its tasks before cancelling them again.
_STOP_RETRY = 0.1


class MalformedControl(MalformedRecord):
    """A record of the control bucket does not have the shape this tiller writes."""


class _RunRecord(Record):
    ledger_kind: ClassVar[str] = "control"

    run_id: str


_R = TypeVar("_R", bound=_RunRecord)


class _CancelRecord(_RunRecord):
    reason: str
    requested_at: float


class _SteerRecord(_RunRecord):
    steer_id: str
    text: str
    sent_at: float


class _HeadRecord(_RunRecord):
    #: The id of the steer whose write last touched this record (for people reading the
    #: store; the watcher looks at the record's revision only).
    latest: str


def _check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not run_id:
        raise UsageError("a run id must be a non-empty string")
    return run_id


def _cancel_key(run_id: str) -> str:
    return f"{run_id}/cancel"


def _head_key(run_id: str) -> str:
    return f"{run_id}/head"


def _steer_prefix(run_id: str) -> str:
    return f"{run_id}/steer/"


class ControlStore:
    """Cancel and steer requests for runs, in one bucket of a `Bus` (see the module
    docstring). Any process that reaches the store may make them; the process running
    the run applies them with `watch`."""

    def __init__(self, bus: Bus, bucket: str = CONTROL_BUCKET) -> None:
        self.bus = bus
        self.bucket = bucket
        self._ids = OrderedIds()
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self.bus.kv(self.bucket)
        return self._kv

    @staticmethod
    def subject(run_id: str) -> str:
        """The pub/sub subject of the run's control messages."""
        subject = f"{_SUBJECT_ROOT}.{encode_key(_check_run_id(run_id))}"
        if len(subject) > 255:
            # Too long for a subject: a digest stands in for it. Two runs sharing a subject
            # would only wake each other's watchers, which then read their own records.
            subject = f"{_SUBJECT_ROOT}.=h{hashlib.sha256(run_id.encode()).hexdigest()}"
        return check_subject(subject)

    # ── requesting ───────────────────────────────────────────────────────────────

    async def request_cancel(self, run_id: str, reason: str = DEFAULT_REASON) -> None:
        """Ask the run to stop. The first request's reason stands, and the token's
        `Cancelled` error carries it. Blank reasons become the default one."""
        _check_run_id(run_id)
        if not isinstance(reason, str):
            raise UsageError(f"a cancel reason must be text, not {type(reason).__name__}")
        record = _CancelRecord(
            run_id=run_id,
            reason=reason.strip() or DEFAULT_REASON,
            requested_at=self.bus.clock(),
        )
        # A request already there stands; the message goes out again all the same, for a
        # watcher that missed the first one.
        await create_or_get(await self._bucket(), _cancel_key(run_id), encode(record))
        await self._notify(run_id, {"kind": "cancel"})

    async def steer(self, run_id: str, text: str) -> str:
        """Queue `text` for the run's next step; returns the steer's id (time-ordered)."""
        _check_run_id(run_id)
        if not isinstance(text, str) or not text.strip():
            raise UsageError("a steering message needs some text")
        steer_id = self._ids.next()
        record = _SteerRecord(run_id=run_id, steer_id=steer_id, text=text, sent_at=self.bus.clock())
        kv = await self._bucket()
        await kv.create(_steer_prefix(run_id) + steer_id, encode(record))
        # After the record, so a poll that read the head before this write will see
        # the head change and list again, however the two interleave.
        await kv.put(_head_key(run_id), encode(_HeadRecord(run_id=run_id, latest=steer_id)))
        await self._notify(run_id, {"kind": "steer", "id": steer_id})
        return steer_id

    async def _notify(self, run_id: str, message: dict[str, str]) -> None:
        """Publish the hint. The request is already stored, so a failed publish only
        delays it until the watcher's next poll: it is logged, not raised."""
        data = orjson.dumps({"schema_version": _MESSAGE_VERSION, **message})
        try:
            await self.bus.publish(self.subject(run_id), data)
        except StoreError as exc:
            _logger.warning(
                "control request for run %s is stored, but its message was not sent (%s); "
                "the run will see it at its next poll",
                run_id,
                exc,
            )

    # ── reading ──────────────────────────────────────────────────────────────────

    async def cancel_requested(self, run_id: str) -> str | None:
        """The reason of the run's cancel request, or None if there is none."""
        return await self._cancel_reason(await self._bucket(), _check_run_id(run_id))

    async def steers(self, run_id: str) -> list[tuple[str, str]]:
        """The run's steers as (id, text), oldest first."""
        kv = await self._bucket()
        found: list[tuple[str, str]] = []
        for steer_id in await self._steer_ids(kv, _check_run_id(run_id)):
            text = await self._steer_text(kv, run_id, steer_id)
            if text is not None:  # None: cleared meanwhile
                found.append((steer_id, text))
        return found

    async def clear(self, run_id: str) -> None:
        """Drop the run's control records, once it has ended (a request made after
        this is stored again, and is the caller's to refuse)."""
        kv = await self._bucket()
        _check_run_id(run_id)
        for steer_id in await self._steer_ids(kv, run_id):
            await kv.delete(_steer_prefix(run_id) + steer_id)
        await kv.delete(_head_key(run_id))
        await kv.delete(_cancel_key(run_id))

    # ── applying ─────────────────────────────────────────────────────────────────

    def watch(
        self,
        run_id: str,
        *,
        cancel: CancellationToken,
        steering: SteeringQueue,
        poll_interval: float = 0.5,
        skip: Iterable[str] = (),
    ) -> ControlWatcher:
        """A watcher that applies the run's requests to `cancel` and `steering` while
        its `async with` block runs; the steers whose ids are in `skip` (those the run's
        checkpoint says were folded: `RunState.folded_steers`) are not pushed."""
        return ControlWatcher(
            self, run_id, cancel=cancel, steering=steering, poll_interval=poll_interval, skip=skip
        )

    # ── records (shared with the watcher) ────────────────────────────────────────

    def _read(self, kind: type[_R], key: str, value: bytes, run_id: str) -> _R:
        try:
            record = decode(kind, self.bucket, key, value)
        except MalformedRecord as exc:
            raise MalformedControl(exc.bucket, exc.key, exc.problem) from None
        if record.run_id != run_id:
            raise MalformedControl(self.bucket, key, f"it belongs to run {record.run_id!r}")
        return record

    async def _cancel_reason(self, kv: KeyValue, run_id: str) -> str | None:
        key = _cancel_key(run_id)
        entry = await kv.get(key)
        if entry is None:
            return None
        return self._read(_CancelRecord, key, entry.value, run_id).reason

    async def _head_revision(self, kv: KeyValue, run_id: str) -> int:
        entry = await kv.get(_head_key(run_id))
        return 0 if entry is None else entry.revision

    async def _steer_ids(self, kv: KeyValue, run_id: str) -> list[str]:
        """The run's steer ids, sorted (keys of runs whose id merely continues with
        `/steer/...` are left out: an id is one fixed-format segment)."""
        prefix = _steer_prefix(run_id)
        ids = (key[len(prefix) :] for key in await kv.keys(prefix))
        return sorted(steer_id for steer_id in ids if ORDERED_ID.fullmatch(steer_id))

    async def _steer_text(self, kv: KeyValue, run_id: str, steer_id: str) -> str | None:
        key = _steer_prefix(run_id) + steer_id
        entry = await kv.get(key)
        if entry is None:
            return None
        record = self._read(_SteerRecord, key, entry.value, run_id)
        if record.steer_id != steer_id:
            raise MalformedControl(self.bucket, key, f"its steer id is {record.steer_id!r}")
        return record.text


class ControlWatcher:
    """Applies one run's control requests while its `async with` block runs.

    On entry it subscribes to the run's subject, then reads the run's records, so a
    request made before the watch is applied before the block starts. Inside the block
    two tasks run. One reads the subscription and wakes the other, which reads the
    record each message names (the fast path) and re-reads the run's records every
    `poll_interval` seconds, so nothing depends on a message arriving. Only that second
    task applies requests, one at a time, so each steer is pushed once, in id order
    among those it reads together (a steer from a process whose clock lags may still
    come after a later one that arrived first). A cancel fires the token once. Store
    errors are logged (the first of a run of failures as a warning) and retried; none
    reaches the run. Leaving the block stops both tasks and closes the subscription. A
    watcher is entered once.
    """

    def __init__(
        self,
        store: ControlStore,
        run_id: str,
        *,
        cancel: CancellationToken,
        steering: SteeringQueue,
        poll_interval: float = 0.5,
        skip: Iterable[str] = (),
    ) -> None:
        if not poll_interval > 0:
            raise UsageError(f"poll_interval must be positive seconds, not {poll_interval!r}")
        self.store = store
        self.run_id = _check_run_id(run_id)
        self.cancel = cancel
        self.steering = steering
        self.poll_interval = poll_interval
        #: Full reads of the run's records completed so far (the one on entry included).
        self.polls = 0
        self._subject = ControlStore.subject(run_id)
        if isinstance(skip, str):
            raise UsageError("skip= takes steer ids (a list), not one string")
        #: Steers pushed (or skipped: malformed, or folded before this watcher).
        self._applied: set[str] = set(skip)
        self._cancel_applied = False
        self._head_seen: int | None = None  # the head's revision at the last listing
        self._hinted: set[str] = set()
        self._cancel_hinted = False
        self._full_due = False
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._subscription: Subscription | None = None
        self._entered = False
        self._stopping = False
        self._failing = False

    @property
    def applied(self) -> frozenset[str]:
        """The ids of the steers pushed, or skipped (malformed, or given in `skip=`), so far."""
        return frozenset(self._applied)

    async def __aenter__(self) -> ControlWatcher:
        if self._entered:
            raise UsageError("a ControlWatcher is entered once; take a new one from watch()")
        self._entered = True
        # Subscribe before reading: a request made in between is then both in the read
        # and in the subscription, and the applied ids absorb the duplicate.
        self._subscription = await self._subscribe()
        try:
            await self._guarded(self._sync(), "read the run's control records")
            event_loop = asyncio.get_running_loop()
            name = f"tiller-control-watch {self.run_id}"
            self._tasks = [
                event_loop.create_task(self._apply_loop(), name=f"{name} apply"),
                event_loop.create_task(self._listen(), name=f"{name} listen"),
            ]
        except BaseException:
            await self._drop_subscription()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stopping = True
        self._wake.set()
        tasks, self._tasks = self._tasks, []
        pending = set(tasks)
        while pending:
            # A cancel alone is not enough on Python 3.11: its `asyncio.wait_for` (under
            # every nats-py request) drops a cancel that lands as the reply arrives. The
            # tasks also stop at the `_stopping` check of their next round, and the
            # cancel is repeated in case one got stuck waiting for a message. `wait`, not
            # `gather`: if this exit is cancelled, the tasks unwind on their own.
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=_STOP_RETRY)
        for task in tasks:
            if not task.cancelled() and task.exception() is not None:
                _logger.error(
                    "control watcher of run %s stopped on an error",
                    self.run_id,
                    exc_info=task.exception(),
                )
        # Here, not in the listener: a task cancelled before its first step never runs
        # its `finally`.
        await self._drop_subscription()

    # ── the two tasks ────────────────────────────────────────────────────────────

    async def _listen(self) -> None:
        """Turn messages into hints for the apply loop; resubscribe when the subscription
        ends or fails (and ask for a full read, for what was sent meanwhile)."""
        while not self._stopping:
            if self._subscription is None:
                await asyncio.sleep(self.poll_interval)
                self._subscription = await self._subscribe()
                if self._subscription is None or self._stopping:
                    continue
                self._request_full()
            try:
                async for message in self._subscription:
                    self._hint(message.data)
            except Exception as exc:  # a lost connection: subscribe again
                self._failed(f"receive on {self._subject}", exc)
            await self._drop_subscription()

    async def _apply_loop(self) -> None:
        event_loop = asyncio.get_running_loop()
        next_full = event_loop.time() + self.poll_interval
        while not self._stopping:
            delay = next_full - event_loop.time()
            if delay > 0 and not self._wake.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
            self._wake.clear()
            if self._full_due or event_loop.time() >= next_full:
                # A full read covers every hint made before it starts (the record is
                # written before its message is sent).
                self._full_due, self._cancel_hinted = False, False
                self._hinted.clear()
                await self._guarded(self._sync(), "read the run's control records")
                next_full = event_loop.time() + self.poll_interval
            else:
                await self._guarded(self._apply_hints(), "read a control request")

    # ── hints ────────────────────────────────────────────────────────────────────

    def _hint(self, data: bytes) -> None:
        try:
            message = orjson.loads(data)
            kind, steer_id = message["kind"], message.get("id")
        except (orjson.JSONDecodeError, TypeError, KeyError, AttributeError):
            kind, steer_id = None, None
        if kind == "cancel":
            self._cancel_hinted = True
        elif kind == "steer" and isinstance(steer_id, str) and ORDERED_ID.fullmatch(steer_id):
            self._hinted.add(steer_id)
        else:
            self._full_due = True  # a message from a newer tiller: read everything
        self._wake.set()

    def _request_full(self) -> None:
        self._full_due = True
        self._wake.set()

    async def _apply_hints(self) -> None:
        hinted = sorted(self._hinted - self._applied)
        self._hinted.clear()
        cancel, self._cancel_hinted = self._cancel_hinted, False
        kv = await self.store._bucket()
        if cancel and not self._cancel_applied:
            await self._check_cancel(kv)
        for steer_id in hinted:
            await self._take_steer(kv, steer_id)

    # ── reading and applying ─────────────────────────────────────────────────────

    async def _sync(self) -> None:
        """Read the run's records and apply what is new."""
        kv = await self.store._bucket()
        if not self._cancel_applied:
            await self._check_cancel(kv)
        head = await self.store._head_revision(kv, self.run_id)
        if head != self._head_seen:
            for steer_id in await self.store._steer_ids(kv, self.run_id):
                await self._take_steer(kv, steer_id)
            self._head_seen = head
        self.polls += 1

    async def _check_cancel(self, kv: KeyValue) -> None:
        try:
            reason = await self.store._cancel_reason(kv, self.run_id)
        except MalformedControl as exc:
            # Someone asked for a stop; only the reason is unreadable. Stopping is the
            # safe reading.
            _logger.warning("run %s: %s; cancelling with the default reason", self.run_id, exc)
            reason = DEFAULT_REASON
        if reason is not None and not self._cancel_applied:
            self._cancel_applied = True
            self.cancel.cancel(reason)

    async def _take_steer(self, kv: KeyValue, steer_id: str) -> None:
        if steer_id in self._applied:
            return
        try:
            text = await self.store._steer_text(kv, self.run_id, steer_id)
        except MalformedControl as exc:
            _logger.warning("run %s: steer skipped: %s", self.run_id, exc)
            self._applied.add(steer_id)
            return
        if text is not None and steer_id not in self._applied:
            self._applied.add(steer_id)
            self.steering.push(text, steer_id)

    # ── failures ─────────────────────────────────────────────────────────────────

    async def _drop_subscription(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            with contextlib.suppress(Exception):
                await subscription.aclose()

    async def _subscribe(self) -> Subscription | None:
        try:
            subscription = await self.store.bus.subscribe(self._subject)
        except Exception as exc:
            self._failed(f"subscribe to {self._subject}", exc)
            return None
        return subscription

    async def _guarded(self, work: Awaitable[None], what: str) -> None:
        """Run `work`; a failure is logged, never raised: the next poll tries again."""
        try:
            await work
        except Exception as exc:
            self._failed(what, exc)
        else:
            if self._failing:
                _logger.info("control of run %s: the store answers again", self.run_id)
                self._failing = False

    def _failed(self, what: str, exc: Exception) -> None:
        log = _logger.debug if self._failing else _logger.warning
        log(
            "control of run %s: could not %s (%s); retrying every %gs",
            self.run_id,
            what,
            exc,
            self.poll_interval,
        )
        self._failing = True

"""Fleet-wide flow control: limits every worker of a fleet keeps together, in the store.

A fleet's workers share one store, so they share its limits too: at most `max_runs` runs at
once across the fleet, and per model string at most `max_concurrent` calls in flight and
`rpm` requests a minute. And when a provider answers 429 with a Retry-After, every worker
waits it out, not only the run that was told (issue 16).

Everything is a record of one KV bucket (`tiller-fleet-limits`), changed by compare-and-set
only, so it works the same on memory, SQLite and NATS JetStream:

| key | record |
|---|---|
| `runs` | the live run slots: `{holders: {run_id: [holder, expires_at, token]}}` |
| `calls/<model>` | the live model-call slots of one model string, same shape |
| `rpm/<model>` | the current fixed minute window: `{window, count}` |
| `pause/<provider>` | a 429 pause: `{until, reason}` |

**One record per limit, holding its live holders with their expiries.** Taking a slot reads
the record, drops every holder whose lease has lapsed (a dead worker's slots come back to
the next acquirer, in the same compare-and-set), and adds itself if there is room. At 100
holders the record is ~6 KiB of JSON: one read and one conditional write, no listing, no
per-holder keys to scan. A key per holder would make counting a key listing, which NATS
answers slowly and not atomically with the write.

**Holders renew while they hold.** A run lasts hours, and a streamed model call can
outlast any fixed lease, so neither lease is "long enough". Each `FleetLimits` runs one
renewer task that, every `renew_every` seconds (a third of the lease by default), pushes
the expiry of all the slots it holds, with one compare-and-set per key (not one per slot).
A worker that dies stops renewing; its slots lapse `lease` seconds later. A renewer that
finds its slot already pruned (the worker stalled past its lease) puts it back even over
the limit: the work is already in flight, and hiding it would let yet more in.

**Requests per minute** is a fixed window per model string (`floor(now / 60)`): simple and
one small record, at the price of up to twice `rpm` across a window boundary. The token is
taken while holding the call slot, right before the request goes out.

Time is the store's clock (`bus.clock`), so leases agree across workers and tests move
time by hand; waiting polls with jittered backoff (`poll`: first and longest wait, in real
seconds) and gives up at once on a task cancel or a fired `CancellationToken`, leaving no
slot taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from .._task_stop import stop_task
from ..cancel import CancellationToken
from ..errors import UsageError
from ..store import Bus, BusClosed, KeyValue, RevisionConflict, StoreError
from ._limit_records import Holders, dump_record, holders_of, load_record, number_of

__all__ = [
    "LIMITS_BUCKET",
    "FleetLimits",
    "ModelLimit",
    "parse_model_limit",
    "provider_of",
]

#: The bucket the limits live in, unless `FleetLimits(bucket=)` says otherwise.
LIMITS_BUCKET = "tiller-fleet-limits"

_RUNS_KEY = "runs"
_WINDOW = 60.0

_T = TypeVar("_T")


def _check_limit(what: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{what} must be a positive int or None, not {value!r}")
    if value < 1:
        raise UsageError(
            f"{what} must be at least 1, not {value} (use None for no limit; to stop work, "
            "cancel it)"
        )
    return value


@dataclass(frozen=True, slots=True)
class ModelLimit:
    """The fleet-wide limits of one model string: calls in flight at once, requests a
    minute. `None` is no limit."""

    max_concurrent: int | None = None
    rpm: int | None = None

    def __post_init__(self) -> None:
        _check_limit("ModelLimit.max_concurrent", self.max_concurrent)
        _check_limit("ModelLimit.rpm", self.rpm)


def parse_model_limit(text: str) -> tuple[str, ModelLimit]:
    """`"MODEL=CONCURRENT[/RPM]"` (`tiller worker --model-limit`) as the model string and
    its `ModelLimit`: `"openai:gpt-4o=8/500"` is 8 calls at once and 500 a minute. The
    model string is everything before the last `=`; `UsageError` says what is wrong."""
    model, sep, numbers = text.rpartition("=")
    model = model.strip()
    example = "for example openai:gpt-4o=8 or openai:gpt-4o=8/500"
    if not sep or not model:
        raise UsageError(f"a model limit is MODEL=CONCURRENT[/RPM] ({example}), not {text!r}")
    concurrent_text, slash, rpm_text = numbers.partition("/")
    values: list[int | None] = []
    for what, value in (("CONCURRENT", concurrent_text), ("RPM", rpm_text if slash else None)):
        if value is None:
            values.append(None)
            continue
        value = value.strip()
        if not value.isdigit() or int(value) < 1:
            raise UsageError(
                f"in the model limit {text!r}, {what} must be a whole number of at least 1, "
                f"not {value!r} ({example})"
            )
        values.append(int(value))
    provider_of(model)
    return model, ModelLimit(max_concurrent=values[0], rpm=values[1])


def provider_of(model_string: str) -> str:
    """The provider a model string's calls go to, which a 429 pause covers.

    `"openai:gpt-4o"` → `"openai"`; `"openai-compat:http://gpu:8000/v1#qwen"` →
    `"openai-compat:http://gpu:8000/v1"` (each server is its own provider); a string
    without a colon is taken as a provider already.
    """
    if not isinstance(model_string, str):
        raise UsageError(f"a model string must be a str, not {model_string!r}")
    prefix, sep, rest = model_string.strip().partition(":")
    prefix = prefix.strip().lower()
    if not prefix:
        raise UsageError(f"{model_string!r} names no provider: expected <provider>:<model>")
    if sep and prefix == "openai-compat":
        base_url, _, _ = rest.partition("#")
        return f"{prefix}:{base_url.strip()}"
    return prefix


# ── the limits ───────────────────────────────────────────────────────────────────────


class FleetLimits:
    """The fleet's shared limits, as one worker (`holder`) sees and takes them.

    ```python
    limits = FleetLimits(bus, max_runs=20, holder="worker-3",
                         per_model={"openai:gpt-4o": ModelLimit(max_concurrent=8, rpm=500)})
    async with limits.run_slot(run_id):
        ...  # the run; its model goes through LimitedModel(model, limits, "openai:gpt-4o")
    ```

    Every worker builds its own `FleetLimits` with the same numbers; the numbers are the
    workers', the counts are the store's. Slots are leased for `lease` seconds and renewed
    every `renew_every` (default a third of the lease); waits poll every `poll[0]` seconds,
    growing to `poll[1]`. `aclose()` stops the renewer (slots still held then lapse after
    `lease`, as a dead worker's do).
    """

    def __init__(
        self,
        bus: Bus,
        *,
        max_runs: int | None = None,
        per_model: Mapping[str, ModelLimit] | None = None,
        bucket: str = LIMITS_BUCKET,
        holder: str = "",
        lease: float = 30.0,
        renew_every: float | None = None,
        poll: tuple[float, float] = (0.05, 1.0),
    ) -> None:
        if not isinstance(bus, Bus):
            raise UsageError(f"FleetLimits needs a tiller.store.Bus, not {type(bus).__name__}")
        self._max_runs = _check_limit("max_runs", max_runs)
        models: dict[str, ModelLimit] = {}
        for name, limit in (per_model or {}).items():
            if not isinstance(name, str) or not name.strip():
                raise UsageError(f"per_model keys must be model strings, not {name!r}")
            if not isinstance(limit, ModelLimit):
                raise UsageError(
                    f"per_model[{name!r}] must be a ModelLimit(max_concurrent=, rpm=), "
                    f"not {type(limit).__name__}"
                )
            provider_of(name)
            models[name] = limit
        self._per_model = models
        if not isinstance(holder, str):
            raise UsageError(f"holder must be a worker name (str), not {holder!r}")
        self.holder = holder or f"worker-{uuid.uuid4().hex[:8]}"
        if not isinstance(poll, tuple) or len(poll) != 2:
            raise UsageError(f"poll must be (first, longest) seconds, not {poll!r}")
        poll_min, poll_max = poll
        renew = lease / 3 if renew_every is None and isinstance(lease, int | float) else renew_every
        for what, value in (
            ("lease", lease),
            ("renew_every", renew),
            ("poll[0]", poll_min),
            ("poll[1]", poll_max),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise UsageError(f"{what} must be positive seconds, not {value!r}")
        if renew is None or renew >= lease:
            raise UsageError(f"renew_every ({renew}) must be shorter than the lease ({lease})")
        if poll_max < poll_min:
            raise UsageError(
                f"poll's longest wait ({poll_max}) must not be below its first ({poll_min})"
            )
        self._bus = bus
        self._bucket = bucket
        self.lease = float(lease)
        self._renew_every = float(renew)
        self._poll = (float(poll_min), float(poll_max))
        self._kv: KeyValue | None = None
        #: What this worker holds, to renew: key → slot id → token.
        self._held: dict[str, dict[str, str]] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._random = random.Random()

    # ── public API ───────────────────────────────────────────────────────────────────

    def limit_of(self, model_string: str) -> ModelLimit:
        """The limits of a model string (no limits when `per_model` does not name it)."""
        return self._per_model.get(model_string, ModelLimit())

    @contextlib.asynccontextmanager
    async def run_slot(
        self, run_id: str, *, cancel: CancellationToken | None = None
    ) -> AsyncIterator[None]:
        """Hold one of the fleet's `max_runs` run slots while the block runs (waiting for
        one first). One run counts once: a run taken over by another worker (recovered)
        takes its slot over instead of a second one."""
        if not isinstance(run_id, str) or not run_id:
            raise UsageError(f"run_slot needs a run id, not {run_id!r}")
        async with self._slot(_RUNS_KEY, self._max_runs, run_id, cancel):
            yield

    @contextlib.asynccontextmanager
    async def model_call(
        self, model_string: str, *, cancel: CancellationToken | None = None
    ) -> AsyncIterator[None]:
        """Hold a call slot of `model_string` (its `max_concurrent`) and one of the minute's
        requests (its `rpm`) while the block runs, after any 429 pause of its provider."""
        provider = provider_of(model_string)
        limit = self.limit_of(model_string)
        async with self._slot(
            f"calls/{model_string}", limit.max_concurrent, uuid.uuid4().hex, cancel
        ):
            await self._cancellable(cancel, self._admit(model_string, provider, limit.rpm, cancel))
            yield

    async def pause_provider(
        self, model_string_or_provider: str, seconds: float, *, reason: str = ""
    ) -> float:
        """Pause every worker's calls to a provider for `seconds` (a 429's Retry-After).

        Returns the pause's end (store clock). A pause already ending later is kept: a
        shorter Retry-After never cuts a longer one short.
        """
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise UsageError(f"a pause must be finite, non-negative seconds, not {seconds!r}")
        provider = provider_of(model_string_or_provider)
        key = f"pause/{provider}"
        until = self._bus.clock() + float(seconds)

        def change(record: dict[str, Any] | None) -> tuple[bytes | None, float]:
            if record is not None:
                current = number_of(self._bucket, key, record, "until")
                if current >= until:
                    return None, current
            return dump_record({"until": until, "reason": reason, "by": self.holder}), until

        return await self._mutate(key, change)

    async def paused_until(self, model_string_or_provider: str) -> float | None:
        """When the provider's live pause ends (store clock), or None if it is not paused."""
        key = f"pause/{provider_of(model_string_or_provider)}"
        record = await self._read(key)
        if record is None:
            return None
        until = number_of(self._bucket, key, record, "until")
        return until if until > self._bus.clock() else None

    async def runs_held(self) -> int:
        """Live run slots across the fleet (lapsed ones not counted)."""
        return await self._live_count(_RUNS_KEY)

    async def calls_held(self, model_string: str) -> int:
        """Live call slots of a model string across the fleet."""
        return await self._live_count(f"calls/{model_string}")

    async def aclose(self) -> None:
        """Stop renewing. Slots still held lapse after the lease, as a dead worker's do."""
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            await stop_task(renewer)

    # ── slots ────────────────────────────────────────────────────────────────────────

    @contextlib.asynccontextmanager
    async def _slot(
        self, key: str, limit: int | None, slot: str, cancel: CancellationToken | None
    ) -> AsyncIterator[None]:
        if limit is None:
            yield
            return
        token = uuid.uuid4().hex
        try:
            await self._cancellable(cancel, self._wait_for_slot(key, limit, slot, token, cancel))
        except BaseException:
            # The write may have landed before the cancel did: take it back if it did.
            await self._give_back(key, slot, token)
            raise
        self._held.setdefault(key, {})[slot] = token
        self._ensure_renewer()
        try:
            yield
        finally:
            held = self._held.get(key, {})
            if held.get(slot) == token:
                del held[slot]
                if not held:
                    self._held.pop(key, None)
            if not self._held and self._renewer is not None:
                self._renewer.cancel()  # nothing left to renew; the next slot starts another
                self._renewer = None
            await self._give_back(key, slot, token)

    async def _give_back(self, key: str, slot: str, token: str) -> None:
        """Release a slot, shielded from a cancel (a release must not be half done). A store
        that fails here does not hide the error that ended the block: the slot then lapses
        with its lease, as a dead worker's does."""
        with contextlib.suppress(StoreError, BusClosed):
            await asyncio.shield(self._drop(key, slot, token))

    async def _wait_for_slot(
        self, key: str, limit: int, slot: str, token: str, cancel: CancellationToken | None
    ) -> None:
        def change(record: dict[str, Any] | None) -> tuple[bytes | None, bool]:
            now = self._bus.clock()
            holders = self._live(key, record, now)
            if slot not in holders and len(holders) >= limit:
                return None, False
            holders[slot] = (self.holder, now + self.lease, token)
            return self._dump_holders(holders), True

        delay = self._poll[0]
        nap = _Nap(cancel)
        while not await self._mutate(key, change):
            await nap(self._jitter(delay))
            delay = min(delay * 1.5, self._poll[1])

    async def _drop(self, key: str, slot: str, token: str) -> None:
        def change(record: dict[str, Any] | None) -> tuple[bytes | None, None]:
            if record is None:
                return None, None
            holders = self._live(key, record, self._bus.clock())
            entry = holders.get(slot)
            if entry is None or entry[2] != token:
                return None, None  # not ours (any more): a taken-over run keeps its slot
            del holders[slot]
            return self._dump_holders(holders), None

        await self._mutate(key, change)

    def _live(self, key: str, record: dict[str, Any] | None, now: float) -> Holders:
        if record is None:
            return {}
        holders = holders_of(self._bucket, key, record)
        return {slot: entry for slot, entry in holders.items() if entry[1] > now}

    def _dump_holders(self, holders: Holders) -> bytes:
        return dump_record({"holders": {slot: list(entry) for slot, entry in holders.items()}})

    async def _live_count(self, key: str) -> int:
        return len(self._live(key, await self._read(key), self._bus.clock()))

    def _ensure_renewer(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(
                self._renew_forever(), name=f"tiller-fleet-limits-renewer-{self.holder}"
            )

    async def _renew_forever(self) -> None:
        """Push the expiry of every held slot, one compare-and-set per key, until none is
        held. A store error is retried at the next beat: if the store stays away, the
        slots lapse, which is what a limit should do when its holder cannot be seen. A
        closed store ends the renewing: the worker is going away."""
        while self._held:
            await asyncio.sleep(self._renew_every)
            for key, slots in list(self._held.items()):
                try:
                    await self._renew(key, dict(slots))
                except BusClosed:
                    return
                except StoreError:
                    continue

    async def _renew(self, key: str, slots: dict[str, str]) -> None:
        def change(record: dict[str, Any] | None) -> tuple[bytes | None, None]:
            now = self._bus.clock()
            holders = self._live(key, record, now)
            for slot, token in slots.items():
                entry = holders.get(slot)
                if entry is not None and entry[2] != token:
                    continue  # taken over by another worker: theirs now
                if self._held.get(key, {}).get(slot) == token:
                    holders[slot] = (self.holder, now + self.lease, token)
            return self._dump_holders(holders), None

        await self._mutate(key, change)

    # ── requests per minute, pauses ──────────────────────────────────────────────────

    async def _admit(
        self, model_string: str, provider: str, rpm: int | None, cancel: CancellationToken | None
    ) -> None:
        """Wait out the provider's pause, then take one of the minute's requests."""
        delay = self._poll[0]
        nap = _Nap(cancel)
        while True:
            now = self._bus.clock()
            until = await self.paused_until(provider)
            if until is not None:
                await nap(self._jitter(min(max(until - now, self._poll[0]), delay)))
                delay = min(delay * 1.5, self._poll[1])
                continue
            if rpm is None or await self._take_request(model_string, rpm):
                return
            await nap(self._jitter(delay))
            delay = min(delay * 1.5, self._poll[1])

    async def _take_request(self, model_string: str, rpm: int) -> bool:
        key = f"rpm/{model_string}"

        def change(record: dict[str, Any] | None) -> tuple[bytes | None, bool]:
            window = math.floor(self._bus.clock() / _WINDOW) * _WINDOW
            count = 0
            if record is not None:
                recorded = number_of(self._bucket, key, record, "window")
                used = number_of(self._bucket, key, record, "count")
                count = int(used) if recorded == window else 0
            if count >= rpm:
                return None, False
            return dump_record({"window": window, "count": count + 1}), True

        return await self._mutate(key, change)

    # ── the store ────────────────────────────────────────────────────────────────────

    async def _store(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self._bus.kv(self._bucket)
        return self._kv

    async def _read(self, key: str) -> dict[str, Any] | None:
        entry = await (await self._store()).get(key)
        return None if entry is None else load_record(self._bucket, key, entry.value)

    async def _mutate(
        self, key: str, change: Callable[[dict[str, Any] | None], tuple[bytes | None, _T]]
    ) -> _T:
        """Read, change, compare-and-set; again while another worker wrote in between.
        `change` returns the new value (None: write nothing) and the answer."""
        kv = await self._store()
        while True:
            entry = await kv.get(key)
            record = None if entry is None else load_record(self._bucket, key, entry.value)
            value, answer = change(record)
            if value is None:
                return answer
            try:
                if entry is None:
                    await kv.create(key, value)
                else:
                    await kv.update(key, value, expected=entry.revision)
            except RevisionConflict:
                await asyncio.sleep(self._jitter(self._poll[0] / 10))
                continue
            return answer

    def _jitter(self, seconds: float) -> float:
        return seconds * (0.5 + self._random.random())

    @staticmethod
    async def _cancellable(
        cancel: CancellationToken | None, work: Coroutine[Any, Any, None]
    ) -> None:
        """Await `work`, interrupted (`Cancelled`) when `cancel` fires."""
        if cancel is None:
            await work
            return
        if cancel.is_cancelled:
            work.close()  # the token fired already: never start it
            cancel.check()
        with cancel.scope():
            await work


class _Nap:
    """One wait between polls, which also notices a cancellation that got lost.

    Python 3.11's `asyncio.wait_for` (under nats-py's requests) can swallow a
    `task.cancel()` that arrives as the answer does, so a waiter could poll on forever
    after its token fired or its task was cancelled. Before each nap this checks the
    token, and whether the task's cancel requests rose since the wait began without one
    being delivered.
    """

    __slots__ = ("_cancel", "_cancelling", "_task")

    def __init__(self, cancel: CancellationToken | None) -> None:
        self._cancel = cancel
        self._task = asyncio.current_task()
        self._cancelling = self._task.cancelling() if self._task is not None else 0

    async def __call__(self, seconds: float) -> None:
        if self._cancel is not None:
            self._cancel.check()
        if self._task is not None and self._task.cancelling() > self._cancelling:
            raise asyncio.CancelledError("cancelled while waiting for a fleet limit")
        await asyncio.sleep(seconds)

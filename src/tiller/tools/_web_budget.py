"""`WebBudget`: the bytes one step's web fetches may download, shared and reserved.

All calls of one step share one budget (64 MiB of decoded bytes by default), so eight
parallel fetches cannot download eight times the limit. Each body is also capped (16 MiB).
Transport code charges every decoded chunk as it is accepted, error responses and retries
included: a server that answers 500 with a gigabyte still spends the budget.

A charge is atomic, and one that would go over the limit fails *without* changing the
counter: the call whose chunk did not fit fails, and its siblings go on. A body whose size
is announced (`Content-Length`) is *reserved* whole when its headers arrive, before any of
it is read, so parallel fetches are served in arrival order: those whose bodies fit
complete in full, and one that would cross the limit fails at once, having downloaded
nothing (six parallel 15 MiB pages in a 64 MiB turn: four complete, two fail). Without a
reservation (no announced size) every chunk is paid for as it arrives and the first that
would cross fails its fetch. Either way the counter never exceeds the limit, and a failed
fetch has read at most the one chunk that was refused.

`BodyMeter` is that transport-side handle for one body: it reserves the announced size, cuts
chunks at the body's cap, charges what it keeps to the step's budget (from its reservation
first), and gives back what it reserved and did not use when it is closed.
"""

from __future__ import annotations

import threading
from typing import Final

from ..errors import TillerError

__all__ = [
    "BODY_LIMIT_BYTES",
    "TURN_LIMIT_BYTES",
    "BodyMeter",
    "WebBudget",
    "WebBudgetExceeded",
]

#: Decoded bytes all web fetches of one step may download together.
TURN_LIMIT_BYTES: Final = 64 * 1024 * 1024
#: Decoded bytes one response body may have.
BODY_LIMIT_BYTES: Final = 16 * 1024 * 1024


class WebBudgetExceeded(TillerError):
    """A download would go over the step's web byte budget (or a body over its cap)."""

    def __init__(
        self, limit: int, what: str = "this step's web downloads", *, remaining: int = 0
    ) -> None:
        self.limit = limit
        #: Bytes still free in the budget when the charge was refused.
        self.remaining = remaining
        super().__init__(
            f"{what} reached the limit of {limit} bytes; fetch fewer or smaller pages, "
            "or continue in the next step"
        )


class WebBudget:
    """A step's shared web byte counter (thread-safe)."""

    __slots__ = ("_held", "_limit", "_lock", "_used", "body_limit")

    def __init__(
        self, limit: int = TURN_LIMIT_BYTES, *, body_limit: int = BODY_LIMIT_BYTES
    ) -> None:
        if limit < 0 or body_limit < 0:
            raise ValueError("web byte limits must be zero or more")
        self._limit = limit
        self.body_limit = body_limit
        self._used = 0
        self._held = 0  # reserved for announced bodies, not yet downloaded
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def used(self) -> int:
        """Bytes downloaded (charged) so far."""
        return self._used

    @property
    def reserved(self) -> int:
        """Bytes held for announced bodies still being read."""
        return self._held

    @property
    def remaining(self) -> int:
        """Bytes neither downloaded nor reserved: what a new body may still have."""
        return self._limit - self._used - self._held

    @property
    def exhausted(self) -> bool:
        return self._used + self._held >= self._limit

    def charge(self, n: int, *, held: int = 0) -> int:
        """Count `n` more bytes, the first `held` of them out of this caller's reservation;
        returns the new total.

        Raises `WebBudgetExceeded` if the bytes beyond `held` do not fit in what is
        neither downloaded nor reserved; then nothing changes (the counter is not
        saturated), so a sibling fetch that fits still completes.
        """
        if n < 0 or not 0 <= held <= n:
            raise ValueError("cannot charge a negative number of bytes, or hold more than n")
        with self._lock:
            if held > self._held:
                raise ValueError(f"{held} bytes were never reserved")
            extra = n - held
            if extra and self._used + self._held + extra > self._limit:
                raise WebBudgetExceeded(self._limit, remaining=self._free())
            self._held -= held
            self._used += n
            return self._used

    def reserve(self, n: int) -> None:
        """Hold `n` bytes for one body before reading it (its announced size).

        Raises `WebBudgetExceeded`, holding nothing, if they do not fit: the fetch fails
        before downloading any of its body, and the budget stays as it was for others.
        """
        if n < 0:
            raise ValueError("cannot reserve a negative number of bytes")
        with self._lock:
            if n and self._used + self._held + n > self._limit:
                raise WebBudgetExceeded(self._limit, remaining=self._free())
            self._held += n

    def release(self, n: int) -> None:
        """Give back `n` reserved bytes that were not downloaded."""
        with self._lock:
            if not 0 <= n <= self._held:
                raise ValueError(f"cannot release {n} of {self._held} reserved bytes")
            self._held -= n

    def _free(self) -> int:
        return max(self._limit - self._used - self._held, 0)

    def __repr__(self) -> str:
        held = f" ({self._held} reserved)" if self._held else ""
        return f"<WebBudget {self._used}/{self._limit} bytes{held}>"


class BodyMeter:
    """One response body's share of a `WebBudget`: its own cap, and the step's counter.

    With `expected` (the body's announced size), the meter reserves `min(expected, cap)`
    when it is made, and raises `WebBudgetExceeded` then if that does not fit: the body
    is refused before any of it is read. `accept(chunk)` keeps the part of `chunk` that
    fits under the body's cap, charges that part (and only that part) to the step's
    budget, out of the reservation first, and returns it. Once a chunk has not fit,
    `truncated` is set and the reader should stop: the rest of the body is not wanted. If
    the step's budget cannot pay, `WebBudgetExceeded` propagates and nothing of the chunk
    is kept, so the bytes a reader keeps never exceed what the budget counted. `close()`
    (or leaving a `with` block) gives back what was reserved and not read.

    Not thread-safe on its own (one body is read by one task); the budget it charges is.
    """

    __slots__ = ("_budget", "_held", "cap", "received", "truncated")

    def __init__(
        self, budget: WebBudget, cap: int | None = None, *, expected: int | None = None
    ) -> None:
        if cap is not None and cap < 0:
            raise ValueError("a body cap must be zero or more")
        if expected is not None and expected < 0:
            raise ValueError("an expected body size must be zero or more")
        self._budget = budget
        #: The most bytes this body may have: the budget's `body_limit`, or `cap` if smaller.
        self.cap = budget.body_limit if cap is None else min(cap, budget.body_limit)
        #: Bytes accepted (and charged) so far.
        self.received = 0
        #: Whether some bytes did not fit under `cap` and were dropped.
        self.truncated = False
        hold = 0 if expected is None else min(expected, self.cap)
        budget.reserve(hold)
        self._held = hold

    @property
    def budget(self) -> WebBudget:
        return self._budget

    @property
    def reserved(self) -> int:
        """Bytes still held for this body (reserved and not yet read)."""
        return self._held

    def accept(self, chunk: bytes) -> bytes:
        """The part of `chunk` that fits under the cap, charged to the step's budget.

        Raises `WebBudgetExceeded` (changing nothing) if the step's budget cannot pay for
        what goes beyond this body's reservation.
        """
        room = self.cap - self.received
        part = chunk if len(chunk) <= room else chunk[: max(room, 0)]
        if len(part) < len(chunk):
            self.truncated = True
        if part:
            held = min(len(part), self._held)
            self._budget.charge(len(part), held=held)
            self._held -= held
            self.received += len(part)
        return part

    def close(self) -> None:
        """Give back the reservation not read (idempotent)."""
        held, self._held = self._held, 0
        if held:
            self._budget.release(held)

    def __enter__(self) -> BodyMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        cut = " truncated" if self.truncated else ""
        return f"<BodyMeter {self.received}/{self.cap} bytes{cut}>"

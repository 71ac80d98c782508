"""`WebBudget`: the bytes one model turn's web fetches may download, shared and saturating.

All calls of one turn share one budget (64 MiB of decoded bytes by default), so eight
parallel fetches cannot download eight times the limit. Each body is also capped (16 MiB).
A charge is atomic and *saturating*: one that would go over sets the counter to the limit
and fails, so every later charge fails too and the total never exceeds the limit. Transport
code charges every decoded chunk as it is accepted, error responses and retries included:
a server that answers 500 with a gigabyte still spends the budget.

`BodyMeter` is that transport-side handle for one body: it cuts chunks at the body's cap
and charges what it keeps to the turn's budget, so a reader needs one call per chunk.
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

#: Decoded bytes all web fetches of one turn may download together.
TURN_LIMIT_BYTES: Final = 64 * 1024 * 1024
#: Decoded bytes one response body may have.
BODY_LIMIT_BYTES: Final = 16 * 1024 * 1024


class WebBudgetExceeded(TillerError):
    """A download would go over the turn's web byte budget (or a body over its cap)."""

    def __init__(self, limit: int, what: str = "this turn's web downloads") -> None:
        self.limit = limit
        super().__init__(
            f"{what} reached the limit of {limit} bytes; fetch fewer or smaller pages, "
            "or continue in the next turn"
        )


class WebBudget:
    """A turn's shared web byte counter (thread-safe)."""

    __slots__ = ("_limit", "_lock", "_used", "body_limit")

    def __init__(
        self, limit: int = TURN_LIMIT_BYTES, *, body_limit: int = BODY_LIMIT_BYTES
    ) -> None:
        if limit < 0 or body_limit < 0:
            raise ValueError("web byte limits must be zero or more")
        self._limit = limit
        self.body_limit = body_limit
        self._used = 0
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def used(self) -> int:
        return self._used

    @property
    def remaining(self) -> int:
        return self._limit - self._used

    @property
    def exhausted(self) -> bool:
        return self._used >= self._limit

    def charge(self, n: int) -> int:
        """Count `n` more bytes; returns the new total.

        Raises `WebBudgetExceeded` if the counter was already full or `n` would take it
        over the limit; in that case the counter is left full (saturated), so every later
        charge fails too.
        """
        if n < 0:
            raise ValueError("cannot charge a negative number of bytes")
        with self._lock:
            if self._used >= self._limit and n > 0:
                raise WebBudgetExceeded(self._limit)
            total = self._used + n
            if total > self._limit:
                self._used = self._limit
                raise WebBudgetExceeded(self._limit)
            self._used = total
            return total

    def __repr__(self) -> str:
        return f"<WebBudget {self._used}/{self._limit} bytes>"


class BodyMeter:
    """One response body's share of a `WebBudget`: its own cap, and the turn's counter.

    `accept(chunk)` keeps the part of `chunk` that fits under the body's cap, charges that
    part (and only that part) to the turn's budget, and returns it. Once a chunk has not
    fit, `truncated` is set and the reader should stop: the rest of the body is not wanted.
    If the turn's budget cannot pay, `WebBudgetExceeded` propagates and nothing of the
    chunk is kept, so the bytes a reader keeps never exceed what the budget counted.

    Not thread-safe on its own (one body is read by one task); the budget it charges is.
    """

    __slots__ = ("_budget", "cap", "received", "truncated")

    def __init__(self, budget: WebBudget, cap: int | None = None) -> None:
        if cap is not None and cap < 0:
            raise ValueError("a body cap must be zero or more")
        self._budget = budget
        #: The most bytes this body may have: the budget's `body_limit`, or `cap` if smaller.
        self.cap = budget.body_limit if cap is None else min(cap, budget.body_limit)
        #: Bytes accepted (and charged) so far.
        self.received = 0
        #: Whether some bytes did not fit under `cap` and were dropped.
        self.truncated = False

    @property
    def budget(self) -> WebBudget:
        return self._budget

    def accept(self, chunk: bytes) -> bytes:
        """The part of `chunk` that fits under the cap, charged to the turn's budget.

        Raises `WebBudgetExceeded` (leaving the budget saturated) if the turn's budget
        cannot pay for it.
        """
        room = self.cap - self.received
        part = chunk if len(chunk) <= room else chunk[: max(room, 0)]
        if len(part) < len(chunk):
            self.truncated = True
        if part:
            self._budget.charge(len(part))
            self.received += len(part)
        return part

    def __repr__(self) -> str:
        cut = " truncated" if self.truncated else ""
        return f"<BodyMeter {self.received}/{self.cap} bytes{cut}>"

"""`DetachSwitch`: how a person sends a step's long work to the background.

Each step's calls share a `background` token (`ExecContext.background`). A long command
selects on it: when it fires, the command is handed to the run's background jobs and the
call returns at once, so the run goes on while the command keeps working (its result
arrives through `ExecContext.notify` at a later step). The token must be per step — a
token, once fired, stays fired, and a later command must not detach by itself — so a
person holds this switch, shared by the run like the steering queue, and `detach()` fires
whichever step is running now. Thread-safe: a terminal reads keys on another thread.
"""

from __future__ import annotations

import threading

from ..cancel import CancellationToken

__all__ = ["DetachSwitch"]


class DetachSwitch:
    """Fires the running step's background token on `detach()`."""

    __slots__ = ("_current", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: CancellationToken | None = None

    def token_for_turn(self) -> CancellationToken:
        """A fresh background token for the step about to run; `detach()` fires it."""
        token = CancellationToken()
        with self._lock:
            self._current = token
        return token

    def detach(self) -> bool:
        """Send the running step's long work to the background. Returns whether a step
        was there to receive it."""
        with self._lock:
            token = self._current
        if token is None or token.is_cancelled:
            return False
        token.cancel("detached by a person")
        return True

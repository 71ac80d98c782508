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
    """Fires the running step's background token on `detach()`.

    A step begins with `begin_turn()`; its token is made when a call first asks for it
    (`token()`), or by `detach()` itself (already fired, for a call that asks later), so
    a step whose calls never read one makes none."""

    __slots__ = ("_current", "_lock", "_open")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: CancellationToken | None = None
        self._open = False

    def begin_turn(self) -> None:
        """A step is about to run: the token of the step before is no longer fired."""
        with self._lock:
            self._current = None
            self._open = True

    def token(self) -> CancellationToken:
        """The running step's background token (made now if nothing asked for it yet)."""
        with self._lock:
            token = self._current
            if token is None:
                token = self._current = CancellationToken()
            return token

    def token_for_turn(self) -> CancellationToken:
        """A fresh background token for the step about to run; `detach()` fires it."""
        self.begin_turn()
        return self.token()

    def detach(self) -> bool:
        """Send the running step's long work to the background. Returns whether a step
        was there to receive it."""
        with self._lock:
            token = self._current
            if token is None:
                if not self._open:
                    return False
                token = self._current = CancellationToken()
        if token.is_cancelled:
            return False
        token.cancel("detached by a person")
        return True

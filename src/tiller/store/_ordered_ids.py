"""`OrderedIds`: record ids that sort in the order they were made.

Steers and mail are read back in id order, so an id starts with the wall time in
nanoseconds, made strictly increasing within one generator (a coarse clock, or two ids in
one tick, must neither reorder nor collide), and ends with random digits so two processes
never collide. Across processes, the order is as good as their clocks.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from typing import Final

__all__ = ["ORDERED_ID", "OrderedIds"]

#: What an id looks like: 16 hex digits of time, a dash, 8 random hex digits.
ORDERED_ID: Final = re.compile(r"[0-9a-f]{16}-[0-9a-f]{8}")


class OrderedIds:
    """A generator of time-ordered unique ids (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def next(self) -> str:
        with self._lock:
            self._last = max(time.time_ns(), self._last + 1)
            stamp = self._last
        return f"{stamp:016x}-{secrets.token_hex(4)}"

"""The steering queue: text a person types while the run works.

Drained at the top of each step and folded into the user message that carries the tool
results (law 1: there is no legal slot between a tool call and its result). Text that
arrives while the model writes its final answer starts another step instead of being lost.
Thread-safe, because a terminal reads its input on another thread.
"""

from __future__ import annotations

import threading
from collections import deque

__all__ = ["SteeringQueue"]


class SteeringQueue:
    """A queue of steering messages, shareable between the run and whoever types."""

    def __init__(self) -> None:
        self._items: deque[str] = deque()
        self._lock = threading.Lock()

    def push(self, text: str) -> None:
        """Queue a message for the run's next step; blank text is ignored."""
        if text.strip():
            with self._lock:
                self._items.append(text.strip())

    def drain(self) -> list[str]:
        """Everything queued, oldest first, removed from the queue."""
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

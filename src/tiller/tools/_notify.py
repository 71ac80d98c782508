"""`Notifier`: the channel detached work uses to reach the run at a later step.

`ctx.progress` dies with the call; work a tool detached (a command sent to the background)
outlives it. When such work finishes it posts a note here, and the loop folds every pending
note into the next user message at the top of its next step, after steering (law 1: the
note rides with the tool results, never between a call and its result). Thread-safe: a
note may come from a watcher task or a worker thread.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

__all__ = ["Notice", "Notifier"]


@dataclass(frozen=True, slots=True)
class Notice:
    """One note for the model: who sent it (e.g. `bg-1`) and what it says."""

    source: str
    text: str

    def render(self) -> str:
        return f"[{self.source}] {self.text}"


class Notifier:
    """A run's queue of notes from detached work, drained at the top of each step."""

    __slots__ = ("_items", "_lock")

    def __init__(self) -> None:
        self._items: deque[Notice] = deque()
        self._lock = threading.Lock()

    def send(self, source: str, text: str) -> None:
        """Queue a note for the run's next step."""
        with self._lock:
            self._items.append(Notice(source, text))

    def drain(self) -> list[Notice]:
        """Every pending note, oldest first, removed from the queue."""
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items

    def sources(self) -> list[str]:
        """Who sent the pending notes, oldest first (they stay queued)."""
        with self._lock:
            return [notice.source for notice in self._items]

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

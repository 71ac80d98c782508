"""The steering queue: text a person types while the run works.

Drained at the top of each step (`take_steering`) and folded into the user message that
carries the tool results (law 1: there is no legal slot between a tool call and its
result). Text that arrives while the model writes its final answer starts another step
instead of being lost.
Thread-safe, because a terminal reads its input on another thread.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..events import CustomEvent

if TYPE_CHECKING:
    from ..tools import Notice
    from ._run_parts import RunParts

__all__ = ["SteeringQueue", "take_steering"]


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


def take_steering(run: RunParts, notices: Sequence[Notice]) -> None:
    """At the top of a step: what a person typed (the run's queue) and what detached work
    reported (`notices`) join the conversation, each also shown as a `CUSTOM` event."""
    state, agui = run.state, run.agui
    drained = run.run_ctx.queued_input.drain()
    # Into the state before any emit: an emit that raises (a cancel) loses nothing.
    state.pending_input.extend(drained)
    state.pending_input.extend(f"[background work: {n.source}] {n.text}" for n in notices)
    for text in drained:
        agui.emit(CustomEvent("tiller.queued_input", {"text": text}))
    for notice in notices:
        agui.emit(CustomEvent("tiller.notice", {"source": notice.source, "text": notice.text}))
    if state.pending_input:
        for text in state.pending_input:
            state.append_user_text(text)
        state.pending_input.clear()

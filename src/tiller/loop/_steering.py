"""The steering queue: text a person types while the run works.

Drained at the top of each step (`take_steering`) and folded into the user message that
carries the tool results (law 1: there is no legal slot between a tool call and its
result). Text that arrives while the model writes its final answer starts another step
instead of being lost.
Thread-safe, because a terminal reads its input on another thread.

A steer stored in the run's control records (`tiller.store.ControlStore.steer`) comes
with its id, and the state records the ids folded (`RunState.folded_steers`): a process
that continues the run finds every stored steer again, and folds only those not folded
before (issue 16). Local text (a terminal, `push(text)`) has no id and is folded as it
comes.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..events import CustomEvent

if TYPE_CHECKING:
    from ..state import RunState
    from ..tools import Notice
    from ._run_parts import RunParts

__all__ = ["SteeringQueue", "take_steering"]


class SteeringQueue:
    """A queue of steering messages, shareable between the run and whoever types."""

    def __init__(self) -> None:
        self._items: deque[tuple[str, str | None]] = deque()
        self._lock = threading.Lock()

    def push(self, text: str, steer_id: str | None = None) -> None:
        """Queue a message for the run's next step; blank text is ignored. `steer_id`:
        the id of the stored steer it is (a run folds each id once), None for text
        typed locally."""
        if text.strip():
            with self._lock:
                self._items.append((text.strip(), steer_id))

    def drain(self) -> list[str]:
        """Everything queued, oldest first, removed from the queue (the text only)."""
        return [text for text, _ in self.drain_with_ids()]

    def drain_with_ids(self) -> list[tuple[str, str | None]]:
        """Everything queued as (text, steer id or None), oldest first, removed."""
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
    drained = _not_folded(state, run.run_ctx.queued_input.drain_with_ids())
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


def _not_folded(state: RunState, items: list[tuple[str, str | None]]) -> list[str]:
    """The text of `items` not folded into the run before (a stored steer's id is in
    `state.folded_steers` once folded, and recorded here as it is taken)."""
    folded = set(state.folded_steers)
    texts: list[str] = []
    for text, steer_id in items:
        if steer_id is not None:
            if steer_id in folded:
                continue  # folded before a crash or a takeover: the checkpoint holds it
            folded.add(steer_id)
            state.folded_steers.append(steer_id)
        texts.append(text)
    return texts

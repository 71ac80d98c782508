"""Deterministic ids within a run, so recorded streams diff cleanly (law 10).

`{run_id}-msg-{n}`, `{run_id}-call-{n}`, `{run_id}-sub-{n}`, counting from 1; the prefix is
`run` when the run id is empty.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["RunIds"]


class RunIds:
    """Allocates message, tool call and subagent ids for one run."""

    __slots__ = ("_calls", "_messages", "_subagents", "prefix")

    def __init__(self, run_id: str) -> None:
        self.prefix = run_id or "run"
        self._messages = 0
        self._calls = 0
        self._subagents = 0

    def message(self) -> str:
        self._messages += 1
        return f"{self.prefix}-msg-{self._messages}"

    def tool_call(self) -> str:
        self._calls += 1
        return f"{self.prefix}-call-{self._calls}"

    def subagent(self) -> str:
        self._subagents += 1
        return f"{self.prefix}-sub-{self._subagents}"

    def counters(self) -> dict[str, int]:
        """How many of each id were handed out, to store with the run's state."""
        return {"msg": self._messages, "call": self._calls, "sub": self._subagents}

    def restore(self, counters: dict[str, int]) -> None:
        """Go on from stored counters, so a continued run never reuses an id."""
        self._messages = max(self._messages, counters.get("msg", 0))
        self._calls = max(self._calls, counters.get("call", 0))
        self._subagents = max(self._subagents, counters.get("sub", 0))

    def skip(self, ids: Iterable[str]) -> None:
        """Go on past every id in `ids` this allocator would hand out: a conversation given
        to a run may already hold some (a client that sent a run id again, a state whose
        counters were not stored), and no id may name two things (law 10)."""
        counters = self.counters()
        start = len(self.prefix) + 1
        for value in ids:
            if not value.startswith(f"{self.prefix}-"):
                continue
            kind, _, number = value[start:].rpartition("-")
            if kind in counters and number.isdigit():
                counters[kind] = max(counters[kind], int(number))
        self.restore(counters)

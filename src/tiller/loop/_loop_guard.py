"""The loop guard: stop a run that, after a compaction, keeps making the same calls and
getting the same results.

A compaction removes what the model had seen. A model that no longer remembers it already
read a file, ran a check or got an answer may do it again, and again, until the budget is
gone. Once a run has compacted, the guard fingerprints each tool exchange (an assistant
step's calls, names and arguments, and the results they got) as it arrives, and when the
same fingerprint comes back `repeats` times in a row the run stops with stop cause `loop`.

The guard reads the exchange at the top of the next step, before any compaction of that
step rewrites it, and remembers only the last fingerprint and its count
(`RunState.compaction`), so a resumed run goes on counting. Text from a person folded into
the results message (steering) breaks the streak: someone intervened.
"""

from __future__ import annotations

import hashlib

import orjson

from ..conversation import AssistantMessage, ToolCall, ToolResult, UserMessage
from ..state import RunState, StopCause

__all__ = ["LoopGuard", "canonical_arguments", "exchange_fingerprint"]


def canonical_arguments(call: ToolCall) -> bytes:
    """The arguments with keys sorted, so `{"a":1,"b":2}` and `{"b":2,"a":1}` match."""
    try:
        return orjson.dumps(orjson.loads(call.arguments or "{}"), option=orjson.OPT_SORT_KEYS)
    except orjson.JSONDecodeError:
        return call.arguments.encode()


def exchange_fingerprint(calls: tuple[ToolCall, ...], results: tuple[ToolResult, ...]) -> str:
    """A hash of the calls (name, arguments) and their results (content, error flag)."""
    digest = hashlib.blake2b(digest_size=16)
    for call in calls:
        digest.update(call.name.encode())
        digest.update(b"\0")
        digest.update(canonical_arguments(call))
        digest.update(b"\1")
    for result in results:
        digest.update(b"E" if result.is_error else b"R")
        digest.update(result.content.encode())
        digest.update(b"\2")
    return digest.hexdigest()


class LoopGuard:
    """Feeds on the run's last tool exchange once armed; see the module docstring."""

    __slots__ = ("repeats",)

    def __init__(self, repeats: int | None) -> None:
        #: Identical exchanges in a row that stop the run (None: never).
        self.repeats = repeats

    def armed(self, state: RunState) -> bool:
        return self.repeats is not None and state.compaction.compactions > 0

    def observe(self, state: RunState) -> str | None:
        """Count the exchange that ends the transcript, if it is new; stop the run (and
        return why) when it repeated `repeats` times. Call only when `armed`."""
        repeats = self.repeats
        messages = state.messages
        if repeats is None or len(messages) < 2:
            return None
        results, turn = messages[-1], messages[-2]
        if not (
            isinstance(results, UserMessage)
            and results.tool_results
            and isinstance(turn, AssistantMessage)
            and turn.tool_calls
        ):
            return None
        memory = state.compaction
        marker = turn.tool_calls[0].id
        if memory.guard_seen == marker:
            return None  # already counted (the step made no new exchange)
        memory.guard_seen = marker
        if results.text.strip():
            # A person's words (or a nudge) came with these results: a new situation.
            memory.guard_hash, memory.guard_count = None, 0
            return None
        fingerprint = exchange_fingerprint(turn.tool_calls, results.tool_results)
        if fingerprint == memory.guard_hash:
            memory.guard_count += 1
        else:
            memory.guard_hash, memory.guard_count = fingerprint, 1
        if memory.guard_count < repeats:
            return None
        names = ", ".join(sorted({call.name for call in turn.tool_calls}))
        reason = (
            f"the run made the same call ({names}) and got the same result "
            f"{memory.guard_count} times in a row after its history was compacted; it was "
            "stopped so it does not spend its budget going round in a loop"
        )
        state.stop_cause = StopCause.LOOP
        state.error = reason
        return reason

"""A finished run leaves no reference cycles: its parts go by reference counting.

With a thousand runs in flight, parts kept until the next full collection made those
collections a third of the batch's time; a cycle between a run's parts (a callback one
part hands another, a cancel scope and its token's handle, the context and its sink)
keeps everything they reach alive until then.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tiller import Agent, AllowAll, ScriptedModel, StopCause, tool
from tiller.loop import RunContext


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def times(a: int, b: int) -> int:
    """Multiply two numbers (sync: it runs in a worker thread)."""
    return a * b


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _cyclic_garbage() -> Counter[str]:
    """What only the cycle collector could free, by type (found, then let go)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    found = Counter(type(o).__qualname__ for o in gc.garbage)
    gc.garbage.clear()
    gc.set_debug(0)
    return found


async def test_a_finished_run_leaves_no_cyclic_garbage(workspace: Path, no_collector: None) -> None:
    def script() -> ScriptedModel:
        return ScriptedModel(
            [
                {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]},
                {"tool_calls": [{"name": "times", "arguments": {"a": 2, "b": 3}}]},
                "5 and 6",
            ]
        )

    ctx = RunContext.sandboxed(workspace, AllowAll())
    first = await Agent(script(), [add, times]).run_in(ctx, "go")  # first-call caches
    assert first.stop_cause is StopCause.COMPLETED
    del first
    _cyclic_garbage()
    result = await Agent(script(), [add, times]).run_in(ctx, "go")
    assert result.stop_cause is StopCause.COMPLETED
    del result
    assert _cyclic_garbage() == Counter()

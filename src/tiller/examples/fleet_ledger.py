"""The fleet scenario's agent: five steps, each a real side effect that happens once per
call id, however often a killed worker's recovery runs it (issue 16's "done when").

`agent()` is a scripted model that waits 10 ms per turn (a stand-in for a model call)
and makes five steps, every step one call of `append_ledger`. That tool is declared
idempotent, so recovery re-runs a call a SIGKILL left uncertain instead of holding it
for a person; it earns the declaration by keying its effect on `ExecContext.call_id`:
under an exclusive lock on the ledger it reads the ids already there and appends its
own only if absent. Every attempt is also appended, unconditionally, to `<ledger>.attempts`,
so a test can tell re-runs happened while the ledger itself holds each id once. The
tool says `read_only` so the default policy runs it without asking (the ledger is
outside the run's workspace, a record of the test's, like the fleet tests' `note`):
otherwise every call would suspend its run for a person.

The ledger's path is the `TILLER_FLEET_LEDGER` environment variable, read per call (a
worker process gets it from whoever starts it). Used by tests/fleet/test_chaos.py and
bench/fleet.py:

```sh
TILLER_FLEET_LEDGER=/tmp/ledger tiller worker --agent tiller.examples.fleet_ledger:agent
```
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..conversation import AssistantMessage, UserMessage
from ..errors import UsageError
from ..loop import Agent
from ..model import ScriptedModel, TurnInfo
from ..tools import ExecContext, tool

__all__ = [
    "LEDGER_ENV",
    "SLOW_STEPS",
    "SLOW_TURN_DELAY",
    "STEPS",
    "TURN_DELAY",
    "agent",
    "append_ledger",
    "ledger_ids",
    "slow",
]

#: The environment variable naming the ledger file.
LEDGER_ENV = "TILLER_FLEET_LEDGER"
#: Tool steps per run.
STEPS = 5
#: Seconds each scripted model turn waits.
TURN_DELAY = 0.01
#: `slow()`'s steps and seconds per turn: a run of ten seconds or more
#: (under `RunOptions.max_steps`), to be cancelled while it runs.
SLOW_STEPS = 90
SLOW_TURN_DELAY = 0.1


def _ledger() -> Path:
    path = os.environ.get(LEDGER_ENV)
    if not path:
        raise UsageError(f"set {LEDGER_ENV} to the ledger file's path before running this agent")
    return Path(path)


def ledger_ids(path: Path) -> list[str]:
    """The call ids in a ledger, in the order they were appended (one a line)."""
    return path.read_text().splitlines() if path.exists() else []


def _append_line(path: Path, line: str) -> None:
    """One `write` on an `O_APPEND` descriptor: a whole line, never interleaved."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@tool(read_only=True, idempotent=True)
def append_ledger(step: int, ctx: ExecContext) -> str:
    """Append this call's id to the ledger, once per call id."""
    path = _ledger()
    _append_line(path.with_name(path.name + ".attempts"), ctx.call_id)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or the process dies)
        if ctx.call_id in set(ledger_ids(path)):
            return f"step {step} was already recorded"
        _append_line(path, ctx.call_id)
    return f"step {step} recorded"


def _script(steps: int, delay: float) -> Any:
    def turn(messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo) -> dict[str, Any]:
        made = sum(1 for m in messages if isinstance(m, AssistantMessage) and m.tool_calls)
        if made < steps:
            call = {"name": "append_ledger", "arguments": {"step": made + 1}}
            return {"tool_calls": [call], "delay": delay}
        return {"text": f"recorded {made} steps", "delay": delay}

    return turn


def agent() -> Agent:
    """A fresh five-step ledger agent (a factory: each run gets its own model)."""
    model = ScriptedModel(_script(STEPS, TURN_DELAY), name="ledger-script")
    return Agent(model, [append_ledger], name="ledger")


def slow() -> Agent:
    """The same agent, `SLOW_STEPS` steps of `SLOW_TURN_DELAY` seconds: a run that is
    still going when a test cancels it."""
    model = ScriptedModel(_script(SLOW_STEPS, SLOW_TURN_DELAY), name="slow-ledger-script")
    return Agent(model, [append_ledger], name="slow-ledger")

"""The steps of a run: `ModelTurn → Dispatch → (Suspend | ModelTurn | Finish)`.

A run is a sequence of these values. Each is taken by a function of the run's `RunState`
and its contexts that returns the next one (`_model_turn.ModelTurns.take`,
`_dispatch.Dispatcher.take` and `.suspend`); `_run.Loop` drives them and keeps the
step boundaries (checkpoint, lease, the AG-UI `STEP_STARTED`/`STEP_FINISHED` around a
model turn and its dispatch). `agent.iter(...)` yields each step before it is taken, so a
caller can watch a run, stop it, or test it step by step.

A resumed run continues at its step: a run suspended on calls opens with the `Dispatch`
of those calls (the person decided them), a run suspended between steps with a
`ModelTurn`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..conversation import ToolCall
from ..events import ToolCallHandle
from ..state import StopCause

__all__ = ["Dispatch", "Finish", "ModelTurn", "Step", "Suspend"]


@dataclass(frozen=True, slots=True)
class ModelTurn:
    """Ask the model: step `number` of the run (from 1). `final_answer` is the ceiling
    (steps, tokens or cost) that was reached: one tool-less answer is asked for, from the
    budget's reserve, and the run then stops with that cause."""

    number: int
    final_answer: StopCause | None = None


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Gate the `calls` the model asked for, run the allowed ones, answer every one.

    `resumed`: the calls of a suspended step, continued after a person decided (their
    `TOOL_CALL_START` went out in an earlier run; calls recorded as completed are
    answered from the record, never run again)."""

    calls: tuple[ToolCall, ...]
    resumed: bool = False
    #: The streamed calls' AG-UI handles, for their results (none for a resumed batch).
    handles: dict[str, ToolCallHandle] = field(default_factory=dict, repr=False, compare=False)
    #: Calls whose arguments were not JSON: call id -> the text the model wrote.
    malformed: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    #: Calls already answered (before a crash or the suspension): id -> (content, is_error).
    recorded: dict[str, tuple[str, bool]] = field(default_factory=dict, repr=False, compare=False)
    #: Calls run again after an interrupted attempt (recovery decided it: their tools are
    #: idempotent); they go through the gate as on their first run, and say so.
    rerun: frozenset[str] = field(default_factory=frozenset, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Suspend:
    """The `calls` wait for a person (a review pause, or Asks held in a durable run):
    the run stops with its state as the checkpoint, to be resumed with decisions."""

    calls: tuple[ToolCall, ...]
    reason: str
    #: Calls of the step whose arguments were not JSON (kept for the resume).
    malformed: dict[str, str] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Finish:
    """The run stops, and why."""

    cause: StopCause


#: One step of a run, as `agent.iter(...)` yields it.
Step = ModelTurn | Dispatch | Suspend | Finish

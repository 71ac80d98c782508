"""`RunCalls`: the run's own model, with each call numbered in the run.

Every call a run makes to its agent's model (a model turn, the compaction summary, the
classifier when it is the run's own model), every attempt counted, a retry included, is
numbered from 1 in `RunState.model_calls` and stamped on the request as
`ModelRequest.run_id` and `run_call`. The count lives in the state, so it is checkpointed
with the run: a run resumed in another process goes on counting where it stopped. A
rewind puts it back with the conversation (`RunState.model_calls_at`): the rewound run
goes on counting from the cut, so a scripted model replays its script from there.

What reads it is an offline model: `ScriptedModel` keeps its place in a script by the
run's count, not its own, so one module-level scripted agent serves any number of runs,
concurrent ones included, each from turn 1 (issue 18). Providers never see it.

It wraps the model innermost, inside the context's `model_wrapper` (the fleet's limits),
so a call that a wrapper refuses before it reaches the model is not counted.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import fields
from inspect import isasyncgen
from operator import attrgetter

from ..model import Model, ModelRequest, StreamEvent
from ..state import RunState

__all__ = ["RunCalls"]

#: A request's fields, in order, read at once (a faster `dataclasses.replace`).
_FIELDS = attrgetter(*(field.name for field in fields(ModelRequest)))


class RunCalls:
    """`model`, with each request numbered in the run `state` is (see the module)."""

    __slots__ = ("_state", "context_window", "model", "name", "provider")

    def __init__(self, model: Model, state: RunState) -> None:
        #: The model called.
        self.model = model
        self.provider = model.provider
        self.name = model.name
        self.context_window = model.context_window
        self._state = state

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """The model's own stream for `request`, numbered: no generator of its own in
        between, so closing it closes the model's stream, and each event costs nothing
        here. The call is counted when its stream is asked for, which is when the caller
        (`stream_with_retry`, a wrapper holding its slot) makes the attempt.

        Only an async generator is handed out as it is: one is closed when it is let go,
        even by a wrapper that only iterates it (`async for`, as the fleet's limits do).
        Any other stream (an iterator object over a connection) is not, so it gets a
        generator that closes it however the reading ends."""
        state = self._state
        number = state.count_model_call()
        numbered = ModelRequest(*_FIELDS(request))  # a copy: each attempt its own number
        numbered.run_id = state.run_id
        numbered.run_call = number
        events = self.model.stream(numbered)
        real_generator = isasyncgen(events)  # (a look-alike class has no finalizer)
        return events if real_generator else _closing(events)

    async def aclose(self) -> None:
        """The run does not own its agent's model: closing it is the agent's business."""

    def __repr__(self) -> str:
        return f"RunCalls({self.model!r}, run {self._state.run_id!r})"


async def _closing(events: AsyncIterator[StreamEvent]) -> AsyncGenerator[StreamEvent, None]:
    """`events`, closed when this generator ends: exhausted, failed, closed or let go."""
    try:
        async for event in events:
            yield event
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()

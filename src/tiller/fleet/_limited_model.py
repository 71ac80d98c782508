"""`LimitedModel`: any `Model`, with every call under the fleet's limits.

The loop never learns about fleet limits: a worker sets its runs' `model_wrapper` to
`limited_models(limits)`, so every model the run tree calls (the agent's, a subagent's,
the classifier's, a summary's) is wrapped right before the call, keyed by the string of
the model actually called. Each `stream` call then holds a `model_call` slot
(concurrency and the minute's request) for as long as it streams. An error the wrapped
model raises with the provider's `retry_after` (a 429's Retry-After) pauses that provider
for the whole fleet before it propagates, so the loop's own retry (`stream_with_retry`,
which wraps this model) waits out the same pause on every worker instead of each run
hammering the provider in turn.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator

from ..cancel import CancellationToken
from ..errors import UsageError
from ..loop import ModelWrapper
from ..model import Model, ModelError, ModelRequest, StreamEvent
from ._limits import FleetLimits, provider_of

__all__ = ["LimitedModel", "limited_models"]


def limited_models(limits: FleetLimits, *, cancel: CancellationToken | None = None) -> ModelWrapper:
    """A `RunContext.model_wrapper` that puts each model call under `limits`: the model,
    as a `LimitedModel` keyed by the string it was built from (else its
    `provider:name`). `cancel` interrupts a call still waiting for a slot."""
    if not isinstance(limits, FleetLimits):
        raise UsageError(f"limited_models needs a FleetLimits, not {type(limits).__name__}")

    def limited(model: Model, model_string: str | None, /) -> Model:
        return LimitedModel(model, limits, model_string, cancel=cancel)

    return limited


class LimitedModel:
    """Wraps `model` so each call takes a slot of `model_string`'s fleet limits.

    `model_string` is the key of `FleetLimits(per_model=)` (use the string the agent was
    built from: `agent.model_spec`); by default `"<provider>:<name>"` of the model.

    `provider`, `name` and `context_window` are the wrapped model's, so usage, pricing and
    compaction see the real model; `wrapped` is the model itself. `cancel` (optional)
    interrupts a call that is still waiting for a slot.
    """

    def __init__(
        self,
        model: Model,
        limits: FleetLimits,
        model_string: str | None = None,
        *,
        cancel: CancellationToken | None = None,
    ) -> None:
        if not isinstance(model, Model):
            raise UsageError(f"LimitedModel wraps a tiller.model.Model, not {type(model).__name__}")
        if not isinstance(limits, FleetLimits):
            raise UsageError(f"LimitedModel needs a FleetLimits, not {type(limits).__name__}")
        if model_string is None:
            model_string = f"{model.provider}:{model.name}"
        if not isinstance(model_string, str):
            raise UsageError(f"model_string must be a str, not {model_string!r}")
        provider_of(model_string)
        self.wrapped = model
        self.model_string = model_string
        self.provider: str = model.provider
        self.name: str = model.name
        self.context_window: int | None = model.context_window
        self._limits = limits
        self._cancel = cancel

    def __repr__(self) -> str:
        return f"LimitedModel({self.wrapped!r}, {self.model_string!r})"

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """The wrapped model's stream, inside a `model_call` slot."""
        async with self._limits.model_call(self.model_string, cancel=self._cancel):
            try:
                async for event in self.wrapped.stream(request):
                    yield event
            except ModelError as exc:
                advice = exc.retry_after
                if advice is not None and math.isfinite(advice) and advice > 0:
                    await self._limits.pause_provider(self.model_string, advice, reason=str(exc))
                raise

    async def aclose(self) -> None:
        """Close the wrapped model (the limits belong to the worker, not to the model)."""
        await self.wrapped.aclose()

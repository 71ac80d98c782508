"""`ModelWrapper`: what a run's context puts around each model right before it is called.

Law 7 says every model call of the run tree (the agent's turns, its subagents' whatever
model their type names, the classifier's, the compaction summary's) is budgeted, so the
budget travels in the run's context to each of them. Anything else that must see every
one of those calls travels the same way: `RunContext.model_wrapper`, inherited by the
contexts derived from it and by every subagent's, applied by each model-calling site
through `model_to_call(run_ctx, model, model_string)` just before the call.

A fleet's worker sets it to put every call of its runs under the fleet's limits
(`tiller.fleet.LimitedModel`, keyed by the model string of the model actually called);
a run with no wrapper pays one `None` check per call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..model import Model

if TYPE_CHECKING:
    from ._context import RunContext

__all__ = ["ModelWrapper", "model_to_call"]


class ModelWrapper(Protocol):
    """Returns the model to call in place of `model` (usually `model`, wrapped).

    `model_string` is the string the model was built from (`"openai:gpt-4o"`, a subagent
    type's `model`, the run's `model_spec`), or None when it was given as an object; a
    wrapper that needs a key then uses `f"{model.provider}:{model.name}"`. It is called
    once per model call (once per run for the classifier), so it should be cheap.
    """

    def __call__(self, model: Model, model_string: str | None, /) -> Model: ...


def model_to_call(run_ctx: RunContext, model: Model, model_string: str | None = None) -> Model:
    """The model to call in place of `model` (built from `model_string`, None if it was
    given as an object): `model` itself, or what the context's `model_wrapper` puts
    around it."""
    wrapper = run_ctx.model_wrapper
    return model if wrapper is None else wrapper(model, model_string)

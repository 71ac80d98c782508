"""The run's budget: steps, output tokens and cost, shared by every model call of a run tree.

A `Budget` is a ledger as well as a set of ceilings: a nested run (a subagent, a
classifier call, a summary) gets the same `Budget` object, so the whole tree spends from
one purse. Ceilings are checked *before* a call (law 7), and each call's `max_tokens` is
capped at what is left, minus the reserve held back for a tool-less final answer.

Calls of concurrent runs overlap, so a check before a call is not enough on its own: the
call also *reserves* its step and its `max_tokens` at once (`reserve_call`, in the same
synchronous step as the check), and `settle` swaps the reservation for what was really
spent. Cost cannot be reserved before the response is priced; it is checked against what
was spent. A step's `max_tokens` is also capped at the output tokens the dollars left can
buy at the model's price (`cap_max_tokens(price=)`), so its output cannot pass the cost
ceiling; its prompt's price is known only after the call, so a call can still overshoot
the ceiling by its input's cost (and concurrent calls of a run tree by theirs, each capped
at what was left when it started).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

from .. import _public
from ..conversation import Usage
from ..errors import UsageError
from ..state import StopCause

__all__ = ["Budget", "Pricing"]


@dataclass(slots=True, frozen=True)
class Pricing:
    """USD per million tokens. `cached_input` defaults to the input price."""

    input: float
    output: float
    cached_input: float | None = None

    def cost(self, usage: Usage) -> float:
        cached = usage.cached_input_tokens
        fresh = max(usage.input_tokens - cached, 0)
        cached_price = self.input if self.cached_input is None else self.cached_input
        return (
            fresh * self.input + cached * cached_price + usage.output_tokens * self.output
        ) / 1e6


@dataclass(slots=True, init=False)
class Budget:
    """Ceilings (None: unlimited) and what has been spent against them.

    `max_steps` caps the steps (model calls) of the whole run tree. `final_answer_reserve`
    output tokens are held back: when a ceiling is reached the loop may make one
    tool-less final call paid from it; with no reserve, no call is made. `pricing` maps
    `"provider:model"` or `"model"` to a `Pricing`; a model without a price costs nothing
    here, and then `max_cost_usd` cannot stop it (the result says so).

    `max_turns=` is the previous release's name for `max_steps=`: it still works, with a
    `DeprecationWarning`, and goes in the next release.
    """

    max_steps: int | None
    max_output_tokens: int | None
    max_cost_usd: float | None
    final_answer_reserve: int
    pricing: Mapping[str, Pricing]
    # What the run tree has spent.
    steps: int
    usage: Usage
    cost_usd: float
    unpriced_models: set[str]
    # Reserved by calls in flight, released by `settle` or `release`.
    steps_in_flight: int
    tokens_in_flight: int

    def __init__(  # noqa: PLR0913, PLR0917  # the dataclass fields, positional as before
        self,
        max_steps: int | None = None,
        max_output_tokens: int | None = None,
        max_cost_usd: float | None = None,
        final_answer_reserve: int = 0,
        pricing: Mapping[str, Pricing] | None = None,
        steps: int = 0,
        usage: Usage | None = None,
        cost_usd: float = 0.0,
        unpriced_models: set[str] | None = None,
        steps_in_flight: int = 0,
        tokens_in_flight: int = 0,
        *,
        max_turns: int | None = None,
    ) -> None:
        if max_turns is not None:
            if max_steps is not None:
                raise UsageError("give max_steps only (max_turns is its deprecated name)")
            warnings.warn(
                "Budget(max_turns=) is now Budget(max_steps=); max_turns goes in the next release",
                DeprecationWarning,
                stacklevel=2,
            )
            max_steps = max_turns
        self.max_steps = max_steps
        self.max_output_tokens = max_output_tokens
        self.max_cost_usd = max_cost_usd
        self.final_answer_reserve = final_answer_reserve
        self.pricing = {} if pricing is None else pricing
        self.steps = steps
        self.usage = Usage() if usage is None else usage
        self.cost_usd = cost_usd
        self.unpriced_models = set() if unpriced_models is None else unpriced_models
        self.steps_in_flight = steps_in_flight
        self.tokens_in_flight = tokens_in_flight

    @classmethod
    def steps_only(cls, max_steps: int) -> Budget:
        return cls(max_steps=max_steps)

    def unspent(self) -> Budget:
        """The same ceilings, reserve and pricing with nothing spent: the budget policy of
        this one for another run (a sibling's spending must not show in this ledger)."""
        return Budget(
            max_steps=self.max_steps,
            max_output_tokens=self.max_output_tokens,
            max_cost_usd=self.max_cost_usd,
            final_answer_reserve=self.final_answer_reserve,
            pricing=self.pricing,
        )

    def exceeded(self) -> StopCause | None:
        """The first ceiling reached (steps, then tokens, then cost), or None."""
        if self.max_steps is not None and self.steps + self.steps_in_flight >= self.max_steps:
            return StopCause.STEP_BUDGET
        spent = self.usage.output_tokens + self.tokens_in_flight
        if self.max_output_tokens is not None and (
            spent >= self.max_output_tokens - self.final_answer_reserve
        ):
            return StopCause.TOKEN_BUDGET
        if self.max_cost_usd is not None and self.cost_usd >= self.max_cost_usd:
            return StopCause.COST_BUDGET
        return None

    def cap_max_tokens(
        self, requested: int | None, *, final_answer: bool = False, price: Pricing | None = None
    ) -> int | None:
        """`requested`, capped at what the budget has left for this kind of call; with the
        model's `price` (`price_of`), also at the output tokens the dollars left can buy
        (at least 1: `exceeded()` said there is money left)."""
        if final_answer:
            return (
                self.final_answer_reserve
                if requested is None
                else min(requested, self.final_answer_reserve)
            )
        capped = requested
        if self.max_output_tokens is not None:
            spent = self.usage.output_tokens + self.tokens_in_flight
            left = max(self.max_output_tokens - self.final_answer_reserve - spent, 1)
            capped = left if capped is None else min(capped, left)
        if price is not None and self.max_cost_usd is not None and price.output > 0:
            # Calls in flight may spend their whole max_tokens: count them at this price.
            dollars = self.max_cost_usd - self.cost_usd
            affordable = max(math.floor(dollars * 1e6 / price.output) - self.tokens_in_flight, 1)
            capped = affordable if capped is None else min(capped, affordable)
        return capped

    def price_of(self, provider: str, model: str) -> Pricing | None:
        """The model's price (`"provider:model"` first, then `"model"`), or None."""
        pricing = self.pricing
        if not pricing:
            return None
        return pricing.get(f"{provider}:{model}") or pricing.get(model)

    def reserve_call(self, max_tokens: int | None) -> int:
        """Hold a step and `max_tokens` for a call about to be made; returns the tokens held.

        Call it right after `exceeded()` returned None, with no `await` between, so two
        concurrent runs cannot both take the last step."""
        held = max_tokens or 0
        self.steps_in_flight += 1
        self.tokens_in_flight += held
        return held

    def release(self, held_tokens: int) -> None:
        """Give back a reservation whose call was never made (a guardrail refused it)."""
        self.steps_in_flight -= 1
        self.tokens_in_flight -= held_tokens

    def settle(self, usage: Usage, *, provider: str, model: str, held_tokens: int) -> float:
        """Replace a call's reservation by what it really spent; returns its cost."""
        self.release(held_tokens)
        return self.charge(usage, provider=provider, model=model)

    def charge(self, usage: Usage, *, provider: str, model: str, step: bool = True) -> float:
        """Record one call's usage; returns its cost in USD. `step=False`: a call that is
        not one of the run's steps (a classifier call, a summary) spends no step."""
        price = self.price_of(provider, model)
        cost = price.cost(usage) if price is not None else 0.0
        if price is None and usage.total_tokens:
            self.unpriced_models.add(f"{provider}:{model}")
        if step:
            self.steps += 1
        self.usage = self.usage + usage
        self.cost_usd += cost
        return cost


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())

"""The fleet's limits cover every model call of a run tree, not only the agent's own:
a subagent's model (whatever its type names), the classifier's and a summary's go
through the limits under the string of the model actually called (`RunContext.
model_wrapper`, which the worker sets and every subagent's context inherits)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from types import ModuleType

import pytest

from tiller.cancel import CancellationToken
from tiller.fleet import Fleet, FleetLimits, ModelLimit, RunJob
from tiller.loop import RunContext, SubagentConfig, SubagentType
from tiller.model import ScriptedModel
from tiller.policy import AutoClassifier
from tiller.store import Bus
from tiller.tools import SafetyMode

from .conftest import Store, ref, running_worker

pytestmark = [
    pytest.mark.filterwarnings("error"),
    pytest.mark.parametrize("store", ["memory"], indirect=True),
]

FAST = (0.01, 0.05)


class WatchingLimits(FleetLimits):
    """The fleet's limits, noting each call that begins (`call <model string>`) and each
    pause (`pause <model string>`, with when it ends), and telling the agents' module
    when a call of the subagent model begins."""

    def __init__(self, bus: Bus, agents: ModuleType, **options: object) -> None:
        super().__init__(bus, poll=FAST, **options)  # type: ignore[arg-type]
        self.seen: list[str] = []
        self.pauses: list[tuple[str, float]] = []
        self._agents = agents

    @contextlib.asynccontextmanager
    async def model_call(
        self, model_string: str, *, cancel: CancellationToken | None = None
    ) -> AsyncIterator[None]:
        self.seen.append(f"call {model_string}")
        if model_string == "scripted:sub":
            self._agents.sub_asked()
        async with super().model_call(model_string, cancel=cancel):
            yield

    async def pause_provider(
        self, model_string_or_provider: str, seconds: float, *, reason: str = ""
    ) -> float:
        until = await super().pause_provider(model_string_or_provider, seconds, reason=reason)
        self.seen.append(f"pause {model_string_or_provider}")
        self.pauses.append((model_string_or_provider, until))
        return until


class Configured:
    """A guard that only configures each run's context (`configure`)."""

    def __init__(self, configure: Callable[[RunContext], RunContext]) -> None:
        self._configure = configure

    @contextlib.asynccontextmanager
    async def admit(self, job: RunJob) -> AsyncIterator[Callable[[RunContext], RunContext]]:
        yield self._configure


def with_sub_types(agents: ModuleType) -> Configured:
    """Runs whose `agent` tool can start `sub` and `sub429`, each on its own model."""
    config = SubagentConfig().with_type(SubagentType(name="sub", model=agents.SUB_MODEL))
    config = config.with_type(SubagentType(name="sub429", model=agents.SUB_THROTTLED))
    return Configured(lambda ctx: ctx.with_subagents(config))


async def test_two_runs_subagents_share_their_models_one_call_slot(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    """Each subagent's call waits until the other run's subagent has called too: with the
    limit, the second waits for the slot the first holds; without it, both are in."""
    fleet = Fleet(bus)
    handles = [await fleet.submit(ref(agents, "delegator"), "sub") for _ in range(2)]
    per_model = {"scripted:sub": ModelLimit(max_concurrent=1)}
    guard = with_sub_types(agents)
    async with await store.open() as bus_a, await store.open() as bus_b:
        limits_a = WatchingLimits(bus_a, agents, per_model=per_model, holder="A")
        limits_b = WatchingLimits(bus_b, agents, per_model=per_model, holder="B")
        async with (
            running_worker(store, name="A", concurrency=1, limits=limits_a, guard=guard),
            running_worker(store, name="B", concurrency=1, limits=limits_b, guard=guard),
        ):
            records = [await handle.result(30) for handle in handles]
        await limits_a.aclose()
        await limits_b.aclose()
    assert [(r.status, r.text) for r in records] == [
        ("completed", "delegated: the sub's report")
    ] * 2
    assert {r.worker for r in records} == {"A", "B"}
    assert agents.SUB["peak"] == 1  # never two subagent calls at once
    assert agents.SUB["asked"] == 2
    # Each run: its own turn, its subagent's call under the sub model's string, its answer.
    for limits in (limits_a, limits_b):
        assert limits.seen == ["call scripted:parent", "call scripted:sub", "call scripted:parent"]


async def test_a_429_from_a_subagents_model_pauses_its_provider_for_the_parent_too(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    handle = await fleet.submit(ref(agents, "delegator"), "sub429")
    async with await store.open() as limits_bus:
        limits = WatchingLimits(limits_bus, agents)
        async with running_worker(store, limits=limits, guard=with_sub_types(agents)):
            record = await handle.result(30)
        await limits.aclose()
    assert (record.status, record.text) == (
        "completed",
        "delegated: the sub's report after the pause",
    )
    assert limits.seen == [
        "call scripted:parent",
        "call scripted:sub429",
        "pause scripted:sub429",  # the provider `scripted`, for the whole fleet
        "call scripted:sub429",  # the subagent's retry
        "call scripted:parent",
    ]
    ((_, pause_ends),) = limits.pauses
    # The parent's answer (a model of the same provider) went out once the pause ended.
    parent_calls = [t for name, t in agents.CALL_TIMES if name == "delegator"]
    assert len(parent_calls) == 2 and parent_calls[1] >= pause_ends


async def test_the_classifiers_calls_go_through_the_limits(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    judge = ScriptedModel(["ALLOW"], name="judge")

    def vetted(ctx: RunContext) -> RunContext:
        return ctx.with_classifier(AutoClassifier(judge)).with_safety_mode(SafetyMode.AUTO)

    fleet = Fleet(bus)
    handle = await fleet.submit(ref(agents, "pinger"), "ping it")
    async with await store.open() as limits_bus:
        limits = WatchingLimits(limits_bus, agents)
        async with running_worker(store, limits=limits, guard=Configured(vetted)):
            record = await handle.result(30)
        await limits.aclose()
    assert (record.status, record.text) == ("completed", "pinged: pong from example.com")
    assert len(judge.requests) == 1
    assert limits.seen == ["call scripted:parent", "call scripted:judge", "call scripted:parent"]

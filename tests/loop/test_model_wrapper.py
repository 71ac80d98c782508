"""`RunContext.model_wrapper`: put around every model the run tree calls, right before
the call (the agent's turns, a subagent's model, the classifier's, a compaction
summary's), with the string the model was built from; kept by derived contexts and by
every subagent's. The fleet's limits reach each call this way (`tests/fleet`)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tiller.conversation import UserMessage
from tiller.errors import UsageError
from tiller.loop import Agent, RunContext, SubagentConfig, SubagentType
from tiller.loop._model_wrapper import model_to_call
from tiller.loop._summary import SUMMARY_SYSTEM_PROMPT
from tiller.model import Model, ModelRequest, ScriptedModel, StreamEvent, TurnInfo
from tiller.policy import AllowAll, AutoClassifier
from tiller.state import RunState
from tiller.tools import SafetyMode, tool
from tiller.tools.builtin import agent as agent_tool

from ._support import drive

pytestmark = pytest.mark.filterwarnings("error")


class Noting:
    """A model wrapper that notes each call: the key it was given (the model string, else
    `provider:name`) and the request's system prompt's first words."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, model: Model, model_string: str | None, /) -> Model:
        return _Noted(model, model_string or f"{model.provider}:{model.name}", self.calls)


class _Noted:
    def __init__(self, model: Model, key: str, calls: list[tuple[str, str]]) -> None:
        self.wrapped, self._key, self._calls = model, key, calls
        self.provider, self.name = model.provider, model.name
        self.context_window = model.context_window

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        self._calls.append((self._key, " ".join((request.system or "").split()[:3])))
        async for event in self.wrapped.stream(request):
            yield event

    async def aclose(self) -> None:
        await self.wrapped.aclose()


@tool(risk="network")
def ping(host: str) -> str:
    """Ping a host (network: in auto mode the classifier vets it)."""
    return f"pong from {host}"


@tool(read_only=True)
def read_file(path: str) -> str:
    """Read a file (900 characters of it, whichever it is)."""
    return "".join(f"line {n} of {path}\n" for n in range(60))[:900]


def test_without_a_wrapper_the_model_is_called_as_it_is(workspace: Path) -> None:
    model = ScriptedModel(["hi"])
    assert model_to_call(RunContext.sandboxed(workspace), model, "scripted:x") is model


def test_derived_contexts_keep_the_wrapper_and_a_bad_one_is_refused(workspace: Path) -> None:
    noting = Noting()
    ctx = RunContext.sandboxed(workspace).with_model_wrapper(noting)
    for derived in (
        ctx.with_phase(ctx.phase),
        ctx.with_safety_mode(SafetyMode.AUTO),
        ctx.sandboxed(workspace / "other"),
        ctx.with_subagents(SubagentConfig()),
    ):
        assert derived.model_wrapper is noting
    assert RunContext.sandboxed(workspace).model_wrapper is None  # the base is unchanged
    assert ctx.with_model_wrapper(None).model_wrapper is None
    with pytest.raises(UsageError, match="model_wrapper must be a callable"):
        ctx.with_model_wrapper("limits")  # type: ignore[arg-type]


async def test_every_model_call_of_the_run_tree_goes_through_the_wrapper(
    workspace: Path,
) -> None:
    """The agent's turns under the run's model string, a subagent's under its type's
    model, the classifier the context was given, each called through the wrapper."""
    sub_model = ScriptedModel(["the sub's report"], name="sub")
    judge = ScriptedModel(["ALLOW"], name="judge")

    def answer(messages: Sequence[Any], info: TurnInfo) -> Any:
        if info.turn == 1:
            arguments = {"description": "help", "prompt": "help me", "subagent_type": "sub"}
            return {"tool_calls": [{"name": "agent", "arguments": arguments}]}
        if info.turn == 2:
            return {"tool_calls": [{"name": "ping", "arguments": {"host": "example.com"}}]}
        return "done"

    noting = Noting()
    subagents = SubagentConfig().with_type(SubagentType(name="sub", model=sub_model))
    ctx = (
        RunContext.sandboxed(workspace, AllowAll())
        .with_subagents(subagents)
        .with_classifier(AutoClassifier(judge))
        .with_safety_mode(SafetyMode.AUTO)
        .with_model_wrapper(noting)
    )
    agent = Agent(ScriptedModel(answer, name="parent"), [agent_tool, ping])
    run = await drive(agent, "go", ctx)
    assert run.result.text == "done"
    assert len(judge.requests) == 1
    assert [key for key, _ in noting.calls] == [
        "scripted:parent",
        "scripted:sub",
        "scripted:parent",
        "scripted:judge",
        "scripted:parent",
    ]


async def test_the_default_classifier_and_summaries_are_wrapped_too(workspace: Path) -> None:
    """With no classifier given, the run's own model vets (wrapped, under the run's model
    string); a compaction summary is called through the wrapper as well."""

    turns = 0

    def answer(messages: Sequence[Any], info: TurnInfo) -> Any:
        nonlocal turns
        if info.system == SUMMARY_SYSTEM_PROMPT:
            return "The summary."
        if info.system is not None and "review one action" in info.system:
            return "ALLOW"
        turns += 1
        if turns == 1:
            return {"tool_calls": [{"name": "ping", "arguments": {"host": "example.com"}}]}
        if turns < 24:
            return {"tool_calls": [{"name": "read_file", "arguments": {"path": f"f{turns}.py"}}]}
        return "done"

    noting = Noting()
    ctx = (
        RunContext.sandboxed(workspace, AllowAll())
        .with_safety_mode(SafetyMode.AUTO)
        .with_compact_at(1200)
        .with_model_wrapper(noting)
    )
    agent = Agent(ScriptedModel(answer, name="own"), [ping, read_file])
    agent.model_spec = "scripted:own-spec"
    run = await drive(agent, "go", ctx)
    assert run.result.text == "done"
    systems = {system for _, system in noting.calls}
    assert {"You review one", "You summarise the"} <= systems
    assert {key for key, _ in noting.calls} == {"scripted:own-spec"}


async def test_a_subagent_on_the_parents_model_is_keyed_by_the_runs_model_string(
    workspace: Path,
) -> None:
    """A run whose model string is its own (a fleet job's `model=`, the agent built from
    an object): a child of the default type calls the parent's model under that string."""

    def answer(messages: Sequence[Any], info: TurnInfo) -> Any:
        if info.system is not None and "subagent" in info.system:
            return "the child's report"
        if len(messages) == 1:
            arguments = {"description": "help", "prompt": "help me"}
            return {"tool_calls": [{"name": "agent", "arguments": arguments}]}
        return "done"

    noting = Noting()
    ctx = RunContext.sandboxed(workspace, AllowAll()).with_model_wrapper(noting)
    agent = Agent(ScriptedModel(answer, name="object"), [agent_tool])
    state = RunState(
        run_id="r1", thread_id="r1", messages=[UserMessage(text="go")], model_spec="job-model"
    )
    run = await drive(agent, state, ctx)
    assert run.result.text == "done"
    assert [key for key, _ in noting.calls] == ["job-model"] * 3

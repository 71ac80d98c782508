"""Law 13: contexts are values; what is live and shared is one explicit `RunControls`.

The breaks these pin (each test fails on the main before `RunControls`):
- `TillerConfig.apply(base)` with `mode = "full_access"` switched the *base* context's live
  mode, so every other run of that base ran in full access too;
- contexts derived from one base shared one steering queue, budget and detach switch: a
  steer pushed to run A was drained by run B, B's spending showed in A's budget, and A's
  `/bg` could detach B's command;
- one base context run twice at once: both runs spent from one budget;
- `base.sandboxed(ws, approver)` was a classmethod: it silently dropped `base`'s phase,
  budget, hooks and rules;
- `Jail.sandboxed` dropped the safety ceiling of the jail it copied.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tiller.cancel import CancellationToken
from tiller.config import TillerConfig, load_config
from tiller.conversation import AssistantMessage, UserMessage
from tiller.errors import UsageError
from tiller.loop import (
    Agent,
    Budget,
    DetachSwitch,
    MailboxRoute,
    OutboxRoute,
    RunContext,
    RunControls,
    SteeringQueue,
    SubagentConfig,
)
from tiller.model import ScriptedModel, TurnInfo
from tiller.model.scripted import TurnLike
from tiller.phase import Phase
from tiller.policy import AllowAll, HookSet, Interlock, PolicyEngine, PolicyRules, ReadOnly
from tiller.store import MemoryBus
from tiller.tools import ExecContext, Jail, LiveSafetyMode, SafetyMode, tool

from ._support import drive

Messages = Sequence[UserMessage | AssistantMessage]
STEER = "Only the failing test, please."


def _tool_then_answer(answer: str) -> Callable[[Messages, TurnInfo], TurnLike]:
    """A model that calls `wait` once, then answers with `answer` and what it was told."""

    def turn(messages: Messages, info: TurnInfo) -> TurnLike:
        if len(messages) == 1:
            return {"tool_calls": [{"name": "wait", "arguments": {}}]}
        last = messages[-1]
        assert isinstance(last, UserMessage)
        return f"{answer}: {last.text or '-'}"

    return turn


def _meeting(runs: int) -> Any:
    """A `wait` tool that returns once `runs` calls are inside it (the runs overlap)."""
    arrived = 0
    everyone = asyncio.Event()

    @tool(read_only=True, name="wait")
    async def wait() -> str:
        """Wait until every run is inside."""
        nonlocal arrived
        arrived += 1
        if arrived >= runs:
            everyone.set()
        await everyone.wait()
        return "waited"

    return wait


# ── apply() ─────────────────────────────────────────────────────────────────────


def test_apply_with_full_access_leaves_the_base_mode_unchanged(workspace: Path) -> None:
    """Break: `apply()` called `run_ctx.jail.safety.set(mode)` on the context it was given."""
    (workspace / "tiller.toml").write_text('[policy]\nmode = "full_access"\n')
    base = RunContext.sandboxed(workspace, AllowAll())
    sibling = base.with_phase(Phase.EXECUTE)
    applied = load_config(workspace / "tiller.toml").apply(base)
    assert base.jail.safety.mode is SafetyMode.ASK
    assert sibling.jail.safety.mode is SafetyMode.ASK
    assert applied.jail.safety.mode is SafetyMode.FULL_ACCESS
    assert applied.controls.safety.mode is SafetyMode.FULL_ACCESS
    assert applied.jail.safety is applied.controls.safety  # one live mode per context
    assert base.jail.safety.mode is SafetyMode.ASK
    assert sibling.jail.safety.mode is SafetyMode.ASK
    # Flipping the applied context's switch (a REPL command, a control request) is its own.
    applied.controls.safety.set(SafetyMode.READ_ONLY)
    assert base.jail.safety.mode is SafetyMode.ASK


def test_apply_keeps_controls_that_were_passed_on(workspace: Path) -> None:
    """A caller's steering queue and budget survive `apply()`; only the mode is new."""
    controls = RunControls(budget=Budget(max_steps=3))
    base = RunContext.sandboxed(workspace).with_controls(controls)
    applied = TillerConfig(mode=SafetyMode.AUTO).apply(base)
    assert applied.queued_input is controls.steering
    assert applied.budget is controls.budget
    assert applied.detach is controls.detach
    assert applied.jail.safety.mode is SafetyMode.AUTO
    assert controls.safety.mode is SafetyMode.ASK  # the caller's switch is not flipped


def test_a_mode_set_on_the_context_never_loosens_its_ceiling(workspace: Path) -> None:
    tools = Jail(workspace, safety=LiveSafetyMode(SafetyMode.ASK, ceiling=SafetyMode.AUTO))
    ctx = RunContext.new(tools).with_safety_mode(SafetyMode.FULL_ACCESS)
    assert ctx.jail.safety.mode is SafetyMode.AUTO
    assert ctx.jail.safety.ceiling is SafetyMode.AUTO


# ── every builder is a value ───────────────────────────────────────────────────


def _snapshot(ctx: RunContext) -> dict[str, Any]:
    """Everything a builder could change in place: the fields, the live members, the
    mode and the spending."""
    seen: dict[str, Any] = {f.name: getattr(ctx, f.name) for f in dataclasses.fields(ctx)}
    controls = ctx.controls
    seen.update(
        steering=controls.steering,
        safety=controls.safety,
        detach=controls.detach,
        cancel=controls.cancel,
        budget=controls.budget,
        mode=controls.safety.mode,
        spent=(controls.budget.steps, controls.budget.usage, controls.budget.cost_usd),
        tools_safety=ctx.jail.safety,
        queued=len(controls.steering),
    )
    return seen


def _with_tools(context: RunContext, jail: Jail) -> RunContext:
    """The deprecated spelling of `with_jail`: it must behave as a builder too."""
    with pytest.warns(DeprecationWarning, match="with_tools is now with_jail"):
        return context.with_tools(jail)


def _builders(other: Path) -> dict[str, Callable[[RunContext], RunContext]]:
    bus = MemoryBus()
    return {
        "with_jail": lambda c: c.with_jail(Jail(other)),
        "with_tools": lambda c: _with_tools(c, Jail(other)),
        "with_jail_same": lambda c: c.with_jail(c.jail.with_shell_timeout(5)),
        "with_approver": lambda c: c.with_approver(ReadOnly()),
        "with_phase": lambda c: c.with_phase(Phase.PLAN),
        "with_withheld": lambda c: c.with_withheld(["x"]),
        "with_compact_at": lambda c: c.with_compact_at(5000),
        "with_store": lambda c: c.with_store(bus),
        "with_questions": lambda c: c.with_questions(None),
        "with_policy": lambda c: c.with_policy(PolicyEngine()),
        "with_classifier": lambda c: c.with_classifier(None),
        "with_interlock": lambda c: c.with_interlock(Interlock()),
        "with_hooks": lambda c: c.with_hooks(HookSet()),
        "with_outbox": lambda c: c.with_outbox(OutboxRoute(frozenset({"send"}))),
        "with_mailbox": lambda c: c.with_mailbox(MailboxRoute(bus)),
        "with_subagents": lambda c: c.with_subagents(SubagentConfig()),
        "with_pinned_policy": lambda c: c.with_pinned_policy({"pinned": True}),
        "with_model_wrapper": lambda c: c.with_model_wrapper(lambda model, spec: model),
        "with_safety_mode": lambda c: c.with_safety_mode(SafetyMode.FULL_ACCESS),
        "with_budget": lambda c: c.with_budget(Budget(max_steps=2)),
        "with_cancel": lambda c: c.with_cancel(CancellationToken()),
        "with_queued_input": lambda c: c.with_queued_input(SteeringQueue()),
        "with_detach": lambda c: c.with_detach(DetachSwitch()),
        "with_controls": lambda c: c.with_controls(RunControls()),
        "sandboxed": lambda c: c.sandboxed(other / "jail", ReadOnly()),
        "apply_full_access": lambda c: TillerConfig(mode=SafetyMode.FULL_ACCESS).apply(c),
        "apply_rules": lambda c: TillerConfig(
            rules=PolicyRules.from_config({"rules": [{"action": "deny", "command": "rm"}]})
        ).apply(c),
    }


def test_the_builder_cases_cover_every_builder() -> None:
    """A builder added to `RunContext` without a case here fails this test."""
    builders = {name for name in dir(RunContext) if name.startswith("with_")}
    assert builders <= set(_builders(Path("/"))), builders - set(_builders(Path("/")))


@pytest.mark.parametrize("name", sorted(_builders(Path("/"))))
def test_every_builder_leaves_the_original_as_it_was(
    workspace: Path, tmp_path: Path, name: str
) -> None:
    """Break: `apply()` flipped the original's mode, and every builder handed the derived
    context the original's live queue, budget, detach and safety switch."""
    other = tmp_path / "other"
    other.mkdir()
    build = _builders(other)[name]
    base = RunContext.sandboxed(workspace, AllowAll()).with_phase(Phase.EXECUTE)
    before = _snapshot(base)
    derived = build(base)
    after = _snapshot(base)
    for key, value in before.items():
        assert after[key] is value or after[key] == value, key
    assert derived is not base
    assert derived.jail.safety is derived.controls.safety
    # The derived context's live parts are its own: running it, steering it, spending
    # from it or flipping its mode reaches nothing of the original.
    derived.queued_input.push("for the derived context")
    derived.controls.safety.set(SafetyMode.READ_ONLY)
    derived.budget.charge(_usage(), provider="p", model="m")
    derived.detach.token_for_turn()
    assert not base.queued_input
    assert base.jail.safety.mode is before["mode"]
    assert base.budget.steps == 0
    assert base.detach.detach() is False  # no turn of the original's was handed the switch


def _usage() -> Any:
    from tiller.conversation import Usage

    return Usage(input_tokens=1, output_tokens=1)


def test_a_control_passed_on_is_shared_by_what_is_derived(workspace: Path) -> None:
    queue, budget, detach = SteeringQueue(), Budget(max_steps=9), DetachSwitch()
    base = (
        RunContext.sandboxed(workspace)
        .with_queued_input(queue)
        .with_budget(budget)
        .with_detach(detach)
    )
    derived = base.with_phase(Phase.PLAN).with_hooks(HookSet()).sandboxed(workspace / "b")
    assert derived.queued_input is queue
    assert derived.budget is budget
    assert derived.detach is detach
    # The switch was not passed on: the derived context's is its own, at the same mode.
    assert derived.jail.safety is not base.jail.safety
    # Controls built without a switch take one at the context's mode, shared like the rest.
    given = base.with_controls(RunControls())
    shared = given.with_phase(Phase.PLAN)
    assert shared.controls.safety is given.controls.safety
    assert shared.jail.safety is given.controls.safety


def test_run_controls_refuse_a_member_of_the_wrong_kind() -> None:
    with pytest.raises(UsageError, match=r"RunControls\.budget must be a Budget"):
        RunControls(budget=None)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="unknown member"):
        RunControls(shared=frozenset({"steering", "mailbox"}))
    with pytest.raises(UsageError, match=r"RunControls\.steering must be a SteeringQueue"):
        RunControls().with_member("steering", [])


# ── sandboxed() ─────────────────────────────────────────────────────────────────


def test_sandboxed_on_a_context_keeps_its_policy(workspace: Path, tmp_path: Path) -> None:
    """Break: `base.sandboxed(ws2, approver)` built a context with the defaults."""
    rules = PolicyRules.from_config({"rules": [{"action": "deny", "command": "make"}]})
    hooks = HookSet(pre_tool=[lambda call: None])
    base = (
        RunContext.sandboxed(workspace, AllowAll())
        .with_phase(Phase.PLAN)
        .with_budget(Budget(max_steps=7, max_cost_usd=2.0))
        .with_hooks(hooks)
        .with_policy(PolicyEngine(rules, workspace=workspace))
        .with_withheld(["web_fetch"])
        .with_jail(Jail(workspace, shell_timeout=9, network=True))
    )
    approver = ReadOnly()
    moved = base.sandboxed(tmp_path / "ws2", approver)
    assert moved.jail.root == (tmp_path / "ws2").resolve()
    assert moved.approver is approver
    assert moved.phase is Phase.PLAN
    assert moved.budget.max_steps == 7 and moved.budget.max_cost_usd == 2.0
    assert moved.hooks is hooks
    assert moved.withheld == frozenset({"web_fetch"})
    assert moved.jail.shell_timeout == 9 and moved.jail.network
    assert moved.policy is not None and moved.policy.rules is rules
    # The engine judges shell paths against the new jail, not the old one.
    assert moved.policy.decide(
        "execute_command", {"command": f"make -C {workspace}"}, None, SafetyMode.FULL_ACCESS
    ) == base.policy.decide(  # type: ignore[union-attr]
        "execute_command", {"command": f"make -C {workspace}"}, None, SafetyMode.FULL_ACCESS
    )
    # The budget was passed on with `with_budget`: one purse for both, as the caller said.
    assert moved.budget is base.budget
    # The class form still builds a context with the defaults.
    plain = RunContext.sandboxed(tmp_path / "ws3")
    assert plain.phase is Phase.EXECUTE and plain.approver is None
    assert plain.jail.root == (tmp_path / "ws3").resolve()


def test_sandboxed_gives_a_fresh_budget_with_the_same_ceilings(
    workspace: Path, tmp_path: Path
) -> None:
    base = RunContext(Jail(workspace)).with_controls(
        RunControls(budget=Budget(max_steps=4), shared=frozenset())
    )
    moved = base.sandboxed(tmp_path / "case-1")
    assert moved.budget is not base.budget
    assert moved.budget.max_steps == 4 and moved.budget.steps == 0


def test_toolctx_sandboxed_keeps_the_safety_ceiling(workspace: Path, tmp_path: Path) -> None:
    """Break: `Jail.sandboxed` started `LiveSafetyMode(mode)`, dropping the ceiling."""
    tools = Jail(workspace, safety=LiveSafetyMode(SafetyMode.ASK, ceiling=SafetyMode.AUTO))
    other = tmp_path / "other"
    other.mkdir()
    moved = tools.sandboxed(other)
    assert moved.safety is not tools.safety
    assert moved.safety.ceiling is SafetyMode.AUTO
    assert moved.safety.set(SafetyMode.FULL_ACCESS) is SafetyMode.AUTO


# ── runs side by side ───────────────────────────────────────────────────────────


async def test_sibling_runs_of_one_base_keep_their_own_steering_budget_and_detach(
    workspace: Path,
) -> None:
    """Break: A and B (derived from one base) shared one queue, budget and detach switch.

    The order is forced: B's first step starts after A is inside its tool (so on the old
    main B's turn held the shared detach switch last); A pushes a steer to *its* context
    and detaches *its* turn while B is inside its tool; B goes on to its second request
    before A's tool returns, so a shared queue would be drained by B."""
    base = RunContext.sandboxed(workspace, AllowAll())
    a = base.with_approver(AllowAll())
    b = base.with_approver(AllowAll())
    a_in_tool, b_in_tool, a_acted, b_asked_again = (asyncio.Event() for _ in range(4))
    backgrounds: dict[str, bool] = {}

    @tool(read_only=True, name="wait")
    async def wait_a(ctx: ExecContext) -> str:
        """Wait for the other run."""
        a_in_tool.set()
        await b_in_tool.wait()
        a.queued_input.push(STEER)
        assert a.detach.detach() is True  # A's own turn was there to receive it
        backgrounds["a"] = ctx.background.is_cancelled
        a_acted.set()
        await b_asked_again.wait()
        return "waited"

    @tool(read_only=True, name="wait")
    async def wait_b(ctx: ExecContext) -> str:
        """Wait for the other run."""
        b_in_tool.set()
        await a_acted.wait()
        backgrounds["b"] = ctx.background.is_cancelled
        return "waited"

    turn_a = _tool_then_answer("A")
    turn_b = _tool_then_answer("B")

    async def b_turn(messages: Messages, info: TurnInfo) -> TurnLike:
        if len(messages) == 1:
            await a_in_tool.wait()
        else:
            b_asked_again.set()
        return turn_b(messages, info)

    agent_a = Agent(ScriptedModel(turn_a), [wait_a])
    agent_b = Agent(ScriptedModel(b_turn), [wait_b])
    run_a, run_b = await asyncio.gather(
        drive(agent_a, "go", a, run_id="run-a"), drive(agent_b, "go", b, run_id="run-b")
    )
    assert run_a.result.text == f"A: {STEER}"
    assert run_b.result.text == "B: -"
    assert backgrounds == {"a": True, "b": False}
    assert (a.budget.steps, b.budget.steps, base.budget.steps) == (2, 2, 0)
    assert a.budget is not b.budget


async def test_one_base_run_twice_at_once_gives_each_run_its_own_budget(
    workspace: Path,
) -> None:
    """Break: two concurrent runs of the same context spent from one budget."""
    base = RunContext.sandboxed(workspace, AllowAll()).with_phase(Phase.EXECUTE)
    wait = _meeting(2)

    agent = Agent(ScriptedModel(_tool_then_answer("done")), [wait])

    runs = await asyncio.gather(
        drive(agent, "go", base, run_id="r0"), drive(agent, "go", base, run_id="r1")
    )
    assert all(run.result.steps == 2 for run in runs)
    # One run took the context's own controls, the other got fresh ones.
    assert base.budget.steps == 2
    # Run again after both ended: the context's own controls are free, and reused.
    await drive(agent, "go", base, run_id="r2")
    assert base.budget.steps == 4


async def test_controls_passed_on_are_shared_by_every_run_on_purpose(workspace: Path) -> None:
    """A batch budget: given with `with_controls`, both runs spend from it and it stops them."""
    controls = RunControls(budget=Budget(max_steps=3))
    base = RunContext.sandboxed(workspace, AllowAll()).with_controls(controls)
    wait = _meeting(2)

    agent = Agent(ScriptedModel(_tool_then_answer("done")), [wait])
    runs = await asyncio.gather(
        drive(agent, "go", base, run_id="r0"),
        drive(agent, "go", base.with_phase(Phase.EXECUTE), run_id="r1"),
    )
    assert controls.budget.steps == 3
    assert sorted(run.result.steps for run in runs) == [1, 2]


async def test_a_subagent_spends_from_its_parent_and_steering_reaches_the_parent(
    workspace: Path,
) -> None:
    """A child shares the run tree's budget (law 7) and gets its own steering queue: a
    steer typed to the parent is not drained by the child."""
    from tiller.tools import builtin

    controls = RunControls(budget=Budget(max_steps=10))
    ctx = RunContext.sandboxed(workspace, AllowAll()).with_controls(controls)
    child_saw: list[str] = []

    @tool(read_only=True)
    def poke(ctx: ExecContext) -> str:
        """Steer the parent from inside the child."""
        controls.steering.push(STEER)
        return "poked"

    def turn(messages: Messages, info: TurnInfo) -> TurnLike:
        is_parent = any(spec.name == "agent" for spec in info.tools)
        last = messages[-1]
        if is_parent:
            if len(messages) == 1:
                task = {"description": "poke", "prompt": "poke it", "subagent_type": "general"}
                return {"tool_calls": [{"name": "agent", "arguments": task}]}
            assert isinstance(last, UserMessage)
            return f"parent heard: {last.text}"
        if len(messages) == 1:
            return {"tool_calls": [{"name": "poke", "arguments": {}}]}
        assert isinstance(last, UserMessage)
        child_saw.append(last.text)
        return "child done"

    run = await drive(Agent(ScriptedModel(turn), [poke, builtin.agent]), "go", ctx)
    assert run.result.text == f"parent heard: {STEER}"
    assert child_saw == [""]
    assert controls.budget.steps == 4  # parent 2 + child 2: one purse


async def test_agent_run_with_a_cancel_token_runs_the_contexts_own_controls(
    workspace: Path,
) -> None:
    """`agent.run(prompt, context=ctx, cancel=token)` runs *ctx*: a steer pushed to
    `ctx.queued_input` reaches it and its spending shows in `ctx.budget`, though the
    token is the caller's."""
    ctx = RunContext.sandboxed(workspace, AllowAll())
    token = CancellationToken()

    @tool(read_only=True, name="wait")
    def steer_it() -> str:
        """Steer the run."""
        ctx.queued_input.push(STEER)
        return "waited"

    agent = Agent(ScriptedModel(_tool_then_answer("done")), [steer_it])
    result = await agent.run("go", context=ctx, cancel=token)
    assert result.text == f"done: {STEER}"
    assert ctx.budget.steps == 2
    assert ctx.cancel is None  # the context itself is unchanged


def test_a_classifier_built_on_the_contexts_budget_spends_with_the_run(
    workspace: Path,
) -> None:
    """Break (law 7, a sibling of the fresh-controls rule): `with_classifier` gave the new
    context a fresh budget, so `ctx.with_classifier(AutoClassifier(m, budget=ctx.budget))`
    ran the run on one ledger and the classifier on another; neither saw the other's
    spending, and the run tree's ceiling no longer covered the classifier."""
    from tiller.policy import AutoClassifier

    base = RunContext.sandboxed(workspace, AllowAll())
    classifier = AutoClassifier(ScriptedModel(["ok"]), budget=base.budget)
    ctx = base.with_classifier(classifier)
    assert ctx.classifier is classifier
    assert ctx.budget is base.budget
    # The budget is passed on from here: what is derived keeps the classifier's purse.
    assert ctx.with_phase(Phase.PLAN).budget is base.budget
    # A classifier spending from elsewhere (or none) does not tie the budgets together.
    other = base.with_classifier(AutoClassifier(ScriptedModel(["ok"]), budget=Budget()))
    assert other.budget is not base.budget
    assert base.with_classifier(None).budget is not base.budget


def test_controls_given_without_a_switch_keep_the_contexts_mode_and_ceiling(
    workspace: Path,
) -> None:
    """Break (review of law 13): `RunControls()` brought a fresh `ask` switch with no
    ceiling, so `ctx.with_controls(RunControls(budget=...))` loosened a `read_only`
    context, and `RunContext(tools, controls=RunControls())` dropped the tools' mode."""
    tools = Jail(workspace, safety=LiveSafetyMode(SafetyMode.READ_ONLY, ceiling=SafetyMode.AUTO))
    ctx = RunContext.new(tools).with_controls(RunControls(budget=Budget(max_steps=3)))
    assert ctx.jail.safety.mode is SafetyMode.READ_ONLY
    assert ctx.jail.safety.ceiling is SafetyMode.AUTO
    assert ctx.controls.budget.max_steps == 3
    built = RunContext(Jail(workspace, safety=SafetyMode.FULL_ACCESS), controls=RunControls())
    assert built.jail.safety.mode is SafetyMode.FULL_ACCESS
    # A switch given on purpose is the one the context runs with.
    given = LiveSafetyMode(SafetyMode.AUTO)
    chosen = RunContext.new(tools).with_controls(RunControls(safety=given))
    assert chosen.jail.safety is given

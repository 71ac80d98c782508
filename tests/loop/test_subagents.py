"""Subagents: the `agent` tool runs child runs inside the parent's run and stream.

One `ScriptedModel` plays the parent and its children: a turn function tells them apart
by the request (only the parent is offered `agent`; a child's system prompt starts with
its type's preamble), so the tests script a whole run tree in one place. Every run goes
through `drive`, which checks the stream with `ag-ui-validate` (subagent rules included),
the transcript's legality and the state's round trip.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui

from tiller.cancel import CancellationToken
from tiller.config import ConfigError, TillerConfig, load_config
from tiller.conversation import AssistantMessage, Taint, UserMessage
from tiller.loop import Agent, Budget, RunContext, RunOptions, SubagentConfig, SubagentType
from tiller.model import ScriptedModel, TurnInfo
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.tools import Capability, ExecContext, Jail, LiveSafetyMode, SafetyMode, builtin, tool

from ._support import Run, drive

Messages = Sequence[UserMessage | AssistantMessage]

PARENT_PROMPT = "You are the lead."


@tool(read_only=True)
def probe(ctx: ExecContext) -> str:
    """Say which safety mode this call runs under."""
    return f"mode={ctx.safety_mode.value}"


@tool(read_only=True, capabilities=Capability.UNTRUSTED_INPUT)
def read_web() -> str:
    """Read a web page."""
    return "some page"


@tool(risk="file_mutation")
def note(text: str, ctx: ExecContext) -> str:
    """Write a note to notes.txt."""
    with (ctx.workdir / "notes.txt").open("a") as notes:
        notes.write(text + "\n")
    return "noted"


def is_parent(info: TurnInfo) -> bool:
    return any(spec.name == "agent" for spec in info.tools)


def spawn(*children: tuple[str, str], ids: Sequence[str] = ()) -> dict[str, Any]:
    """A parent turn starting one subagent per (type, prompt), in parallel."""
    calls = []
    for index, (kind, prompt) in enumerate(children):
        call: dict[str, Any] = {
            "name": "agent",
            "arguments": {"description": f"task {index}", "prompt": prompt, "subagent_type": kind},
        }
        if ids:
            call["id"] = ids[index]
        calls.append(call)
    return {"tool_calls": calls}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def tree(parent: Sequence[Any], child: Any, *, finish: str = "all done") -> ScriptedModel:
    """A model for a run tree: the parent's turns in order (then `finish` with the
    results it got), and `child(messages, info)` for every child turn."""
    turns = iter(parent)

    def play(messages: Messages, info: TurnInfo) -> Any:
        if not is_parent(info):
            return child(messages, info)
        turn = next(turns, None)
        if turn is not None:
            return turn
        last = messages[-1]
        answers = [r.content.split("\n")[0] for r in last.tool_results]
        return f"{finish}: " + " | ".join(answers)

    return ScriptedModel(play)


def one_tool_then_answer(name: str, **arguments: Any) -> Any:
    """A child that calls one tool, then answers with the prompt and the tool's result."""

    def child(messages: Messages, info: TurnInfo) -> Any:
        if len(messages) == 1:
            return call(name, **arguments)
        return f"{messages[0].text} -> {messages[-1].tool_results[0].content}"

    return child


def subagent_events(run: Run) -> list[dict[str, Any]]:
    return [e for e in run.wire if e["type"].startswith("SUBAGENT_")]


async def test_parallel_subagents_run_inside_the_parents_stream(ctx: RunContext) -> None:
    (ctx.jail.root / "a.txt").write_text("alpha")

    def child(messages: Messages, info: TurnInfo) -> Any:
        if len(messages) == 1:
            return call("read_file", path="a.txt")
        found = "alpha" in messages[-1].tool_results[0].content
        return f"{messages[0].text}: {'alpha' if found else 'nothing'}"

    model = tree(
        [spawn(("explore", "read a.txt"), ("general", "list files"), ("explore", "read b"))],
        child,
    )
    agent = Agent(model, [builtin.read_file, builtin.list_dir, builtin.agent])
    run = await drive(agent, "investigate", ctx)
    assert_valid_agui(run.wire, max_warnings=0)  # `drive` checks it too: the Done-when item

    assert run.result.stop_cause is StopCause.COMPLETED
    started = [e for e in run.wire if e["type"] == "SUBAGENT_STARTED"]
    calls = [c.id for c in run.result.state.messages[1].tool_calls]
    assert [(e["subagentRunId"], e["name"], e["parentToolCallId"]) for e in started] == [
        ("r1-sub-1", "explore", calls[0]),
        ("r1-sub-2", "general", calls[1]),
        ("r1-sub-3", "explore", calls[2]),
    ]
    finished = {e["subagentRunId"]: e for e in run.wire if e["type"] == "SUBAGENT_FINISHED"}
    assert finished["r1-sub-1"]["result"] == {
        "text": "read a.txt: alpha",
        "stopCause": "completed",
    }
    # The three ran side by side: the second started before the first finished.
    kinds = [(e["type"], e.get("subagentRunId")) for e in run.wire]
    assert kinds.index(("SUBAGENT_STARTED", "r1-sub-2")) < kinds.index(
        ("SUBAGENT_FINISHED", "r1-sub-1")
    )
    # Every event between a child's start and end that is not the parent's is the child's.
    for event in run.wire:
        if event["type"] in ("TEXT_MESSAGE_CONTENT", "TOOL_CALL_START", "STEP_STARTED"):
            owner = event.get("subagentRunId")
            if owner is not None:
                assert owner in finished
    child_tools = [e for e in run.wire if e["type"] == "TOOL_CALL_START" and "subagentRunId" in e]
    assert {e["toolCallName"] for e in child_tools} == {"read_file"}
    # The parent reads each child's answer and what it spent.
    results = run.results()
    assert results[0].content.startswith("read a.txt: alpha\n\n[subagent r1-sub-1 (explore): ")
    assert "completed, 2 turns" in results[0].content
    assert run.result.text == "all done: read a.txt: alpha | list files: alpha | read b: alpha"
    # The parent's usage is its own calls and its children's (2 + 3 x 2 model calls).
    assert run.result.usage.requests == 8
    assert run.terminal["usage"][0]["totalTokens"] == run.result.usage.total_tokens


async def test_explore_is_read_only_and_no_child_gets_the_agent_tool(ctx: RunContext) -> None:
    model = tree(
        [spawn(("explore", "look"), ("general", "work"))],
        lambda messages, info: "ok",
    )
    agent = Agent(
        model,
        [builtin.read_file, builtin.write_file, builtin.agent],
        system_prompt=PARENT_PROMPT,
    )
    await drive(agent, "go", ctx)

    children = [r for r in model.requests if not any(t.name == "agent" for t in r.tools)]
    by_prompt = {r.messages[0].text: r for r in children}
    explore, general = by_prompt["look"], by_prompt["work"]
    assert [t.name for t in explore.tools] == ["read_file"]
    assert [t.name for t in general.tools] == ["read_file", "write_file"]
    assert explore.system is not None and explore.system.startswith("You are an explore subagent")
    assert general.system is not None and general.system.startswith("You are a subagent")
    assert explore.system.endswith(PARENT_PROMPT)  # the parent's prompt follows the preamble


async def test_a_child_that_calls_agent_anyway_is_refused(ctx: RunContext) -> None:
    model = tree(
        [spawn(("general", "recurse"))],
        one_tool_then_answer("agent", description="deeper", prompt="again"),
    )
    run = await drive(Agent(model, [builtin.agent]), "go", ctx)
    assert run.results()[0].content.startswith("recurse -> Unknown tool 'agent'")
    assert len([e for e in run.wire if e["type"] == "SUBAGENT_STARTED"]) == 1


async def test_an_unknown_type_is_answered_with_the_types(ctx: RunContext) -> None:
    model = tree([spawn(("wizard", "do magic"))], lambda messages, info: "never")
    run = await drive(Agent(model, [builtin.agent]), "go", ctx)
    (result,) = run.results()
    assert result.is_error
    assert "there is no subagent type 'wizard'" in result.content
    assert "- explore:" in result.content and "- general:" in result.content
    assert subagent_events(run) == []


@pytest.mark.parametrize(
    ("parent_mode", "kind", "ceiling", "expected"),
    [
        (SafetyMode.FULL_ACCESS, "careful", SafetyMode.ASK, "ask"),
        (SafetyMode.READ_ONLY, "general", None, "read_only"),
        (SafetyMode.AUTO, "general", None, "auto"),
        (SafetyMode.FULL_ACCESS, "explore", None, "read_only"),
    ],
)
async def test_a_childs_mode_is_the_stricter_of_its_parents_and_its_ceiling(
    workspace: Path,
    parent_mode: SafetyMode,
    kind: str,
    ceiling: SafetyMode | None,
    expected: str,
) -> None:
    config = SubagentConfig()
    if ceiling is not None:
        config = config.with_type(SubagentType(kind, safety_ceiling=ceiling))
    ctx = RunContext.new(Jail(workspace, safety=parent_mode), AllowAll()).with_subagents(config)
    model = tree([spawn((kind, "probe"))], one_tool_then_answer("probe"))
    run = await drive(Agent(model, [probe, builtin.agent]), "go", ctx)
    assert run.results()[0].content.startswith(f"probe -> mode={expected}")
    assert ctx.jail.safety.mode is parent_mode  # the parent's own mode is untouched


async def test_children_spend_from_the_parents_budget(workspace: Path) -> None:
    budget = Budget(max_steps=4)
    ctx = RunContext.sandboxed(workspace, AllowAll()).with_budget(budget)
    model = tree(
        [spawn(("general", "loop"))],
        lambda messages, info: call("probe"),  # a child that never stops on its own
    )
    run = await drive(Agent(model, [probe, builtin.agent]), "go", ctx)
    # One parent turn, then the child took the three turns left: the tree's purse is empty.
    assert budget.steps == 4
    assert run.result.stop_cause is StopCause.STEP_BUDGET
    (result,) = run.results()
    assert "stopped early: step_budget" in result.content
    assert run.result.usage.requests == 4


@pytest.mark.parametrize(("limit", "children"), [(None, 11), (3, 7)])
async def test_at_most_so_many_children_work_at_once_the_rest_wait(
    workspace: Path, limit: int | None, children: int
) -> None:
    active = 0
    most = 0

    @tool(read_only=True)
    async def slow() -> str:
        """Take a moment."""
        nonlocal active, most
        active += 1
        most = max(most, active)
        await asyncio.sleep(0.02)
        active -= 1
        return "slept"

    ctx = RunContext.sandboxed(workspace, AllowAll())
    if limit is not None:
        ctx = ctx.with_subagents(SubagentConfig(max_concurrent=limit))
    model = tree(
        [spawn(*[("general", f"job {n}") for n in range(children)])],
        one_tool_then_answer("slow"),
    )
    run = await drive(Agent(model, [slow, builtin.agent]), "go", ctx)
    assert most == (limit or 10)
    assert [r.content.split("\n")[0] for r in run.results()] == [
        f"job {n} -> slept" for n in range(children)
    ]


async def test_a_child_that_runs_out_of_time_fails_and_the_parent_goes_on(
    workspace: Path,
) -> None:
    ctx = RunContext.sandboxed(workspace, AllowAll()).with_subagents(SubagentConfig(timeout=0.2))
    model = tree(
        [spawn(("general", "take forever"))],
        lambda messages, info: {"text": "too late", "delay": 30},
        finish="went on",
    )
    run = await drive(Agent(model, [builtin.agent]), "go", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    (error,) = [e for e in run.wire if e["type"] == "SUBAGENT_ERROR"]
    assert error["code"] == "TIMEOUT"
    assert "ran out of time (0.2 s)" in error["message"]
    (result,) = run.results()
    assert result.is_error
    assert result.content.startswith("The subagent did not finish: ")
    assert run.result.text.startswith("went on: The subagent did not finish")


async def test_cancelling_the_parent_cancels_its_children(workspace: Path) -> None:
    tokens: list[CancellationToken] = []
    both_waiting = asyncio.Event()

    @tool(read_only=True)
    async def wait_forever(ctx: ExecContext) -> str:
        """Wait until cancelled."""
        tokens.append(ctx.token)
        if len(tokens) == 2:
            both_waiting.set()
        await asyncio.Event().wait()
        return "never"

    cancel = CancellationToken()
    ctx = RunContext.sandboxed(workspace, AllowAll()).with_cancel(cancel)
    model = tree(
        [spawn(("general", "one"), ("general", "two"))], one_tool_then_answer("wait_forever")
    )

    async def cancel_when_both_wait() -> None:
        await both_waiting.wait()
        cancel.cancel("the person stopped it")

    agent = Agent(model, [wait_forever, builtin.agent])
    async with asyncio.TaskGroup() as group:
        group.create_task(cancel_when_both_wait())
        run = await drive(agent, "go", ctx)

    assert run.result.stop_cause is StopCause.CANCELLED
    assert all(token.is_cancelled for token in tokens)
    errors = [e for e in run.wire if e["type"] == "SUBAGENT_ERROR"]
    assert sorted(e["subagentRunId"] for e in errors) == ["r1-sub-1", "r1-sub-2"]
    assert {e["code"] for e in errors} == {"CANCELLED"}
    assert run.terminal["outcome"] == {"type": "cancelled"}


async def test_what_a_child_read_taints_its_parent(ctx: RunContext) -> None:
    model = tree([spawn(("explore", "browse"))], one_tool_then_answer("read_web"))
    run = await drive(Agent(model, [read_web, builtin.agent]), "go", ctx)
    assert run.result.state.taint_flags & Taint.UNTRUSTED_INPUT


async def test_a_childs_answer_is_wrapped_as_untrusted_when_it_read_untrusted_input(
    ctx: RunContext,
) -> None:
    from tiller.policy import Interlock

    model = tree([spawn(("explore", "browse"))], one_tool_then_answer("read_web"))
    wrapping = ctx.with_interlock(Interlock(wrap_untrusted=True))
    run = await drive(Agent(model, [read_web, builtin.agent]), "go", wrapping)
    (answer,) = run.results()
    assert answer.content.startswith('<untrusted-data source="agent">')
    plain = await drive(
        Agent(
            tree([spawn(("explore", "browse"))], one_tool_then_answer("read_web")),
            [read_web, builtin.agent],
        ),
        "go",
        ctx,
    )
    assert "<untrusted-data" not in plain.results()[0].content  # wrapping is opt-in


async def test_a_child_needing_approval_with_no_one_to_ask_is_blocked(workspace: Path) -> None:
    # No approver and no store: nothing could resume a suspension, so the call is refused.
    ctx = RunContext.sandboxed(workspace)
    model = tree([spawn(("general", "write"))], one_tool_then_answer("note", text="hi"))
    run = await drive(Agent(model, [note, builtin.agent]), "go", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert "Blocked by policy: this action needs approval" in run.results()[0].content
    assert not (workspace / "notes.txt").exists()


async def test_custom_types_come_from_tiller_toml(tmp_path: Path, workspace: Path) -> None:
    child_script = tmp_path / "reviewer.yaml"
    child_script.write_text("turns:\n  - text: looks fine\n")
    (workspace / "tiller.toml").write_text(
        f"""
[subagents]
max_concurrent = 4
timeout = 60

[subagents.reviewer]
description = "Reviews a change"
tools = ["read_file"]
safety_ceiling = "read_only"
preamble = "You review code."
model = "scripted:{child_script}"

[subagents.explore]
timeout = 5
"""
    )
    config = load_config(workspace / "tiller.toml")
    assert config.subagents is not None
    reviewer = config.subagents.types["reviewer"]
    assert reviewer.tools == ("read_file",)
    assert reviewer.safety_ceiling is SafetyMode.READ_ONLY
    explore = config.subagents.types["explore"]
    assert explore.read_only and explore.timeout == 5.0  # the built-in, reshaped
    assert config.subagents.max_concurrent == 4

    ctx = config.apply(RunContext.sandboxed(workspace, AllowAll()))
    parent = tree([spawn(("reviewer", "review it"))], lambda m, i: "the parent's model")
    run = await drive(
        Agent(parent, [builtin.read_file, builtin.write_file, builtin.agent]), "go", ctx
    )
    assert run.results()[0].content.startswith("looks fine\n\n[subagent r1-sub-1 (reviewer)")
    (started,) = [e for e in run.wire if e["type"] == "SUBAGENT_STARTED"]
    assert started["name"] == "reviewer"
    # The child's turn went to its own model, not the parent's.
    assert all(any(t.name == "agent" for t in r.tools) for r in parent.requests)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[subagents]\nretries = 2\n", "unknown key 'retries'"),
        ("[subagents.x]\ncolour = 'red'\n", "unknown key(s) colour"),
        ("[subagents.x]\nsafety_ceiling = 'yolo'\n", "unknown safety mode"),
        ("[subagents]\nmax_concurrent = 0\n", "at least 1"),
        ("[subagents.x]\ntools = 'read_file'\n", "list of tool names"),
    ],
)
def test_a_bad_subagents_section_says_what_to_fix(toml: str, message: str) -> None:
    import tomllib

    with pytest.raises(ConfigError, match="subagents") as caught:
        TillerConfig.from_mapping(tomllib.loads(toml))
    assert message in str(caught.value)


async def test_parallel_children_never_spend_the_final_answer_reserve(tmp_path: Path) -> None:
    """The reserve held back for a tool-less final answer is the run tree's, paid once (by
    the parent): five children at their ceiling do not each make a final call (law 7)."""
    import dataclasses

    @tool(read_only=True)
    def noop() -> str:
        """Nothing."""
        return "ok"

    def play(messages: Any, info: Any) -> Any:
        allowed = info.max_tokens or 1000
        if any(spec.name == "agent" for spec in info.tools):
            if len(messages) == 1:
                calls = [
                    {
                        "id": f"p{i}",
                        "name": "agent",
                        "arguments": {"description": f"d{i}", "prompt": f"task {i}"},
                    }
                    for i in range(5)
                ]
                return {"tool_calls": calls, "usage": {"input_tokens": 1, "output_tokens": 10}}
            return {"text": "parent final", "usage": {"input_tokens": 1, "output_tokens": allowed}}
        if not info.tools:
            return {"text": "child final", "usage": {"input_tokens": 1, "output_tokens": allowed}}
        call = {"id": f"c{len(messages)}-{messages[0].text}", "name": "noop", "arguments": {}}
        return {"tool_calls": [call], "usage": {"input_tokens": 1, "output_tokens": allowed}}

    budget = Budget(max_output_tokens=200, final_answer_reserve=50)
    ctx = dataclasses.replace(RunContext.sandboxed(tmp_path), budget=budget)
    model = ScriptedModel(play)
    await Agent(model, [noop, builtin.agent]).run_in(ctx, "go", RunOptions())
    assert budget.usage.output_tokens <= budget.max_output_tokens
    assert len([request for request in model.requests if not request.tools]) <= 1


# ── a person's detach sends a running subagent to the background ────────────────────


async def test_a_detached_subagent_keeps_running_and_reports_at_a_later_turn(
    ctx: RunContext,
) -> None:
    """Pins the break where the `agent` tool ignored the step's background token: a
    person's detach did nothing, and the parent's turn waited for the whole subagent.
    Now the call returns at once, the parent goes on, and the report arrives as a note."""
    from tiller.loop import DetachSwitch

    switch = DetachSwitch()
    release = asyncio.Event()
    seen: dict[str, Any] = {}

    async def child(messages: Messages, info: TurnInfo) -> Any:
        switch.detach()  # the person presses the key while the subagent works
        await release.wait()  # a slow model: it answers once the test lets it
        return "the bug is in parse()"

    async def parent(messages: Messages, info: TurnInfo) -> Any:
        if not is_parent(info):
            return await child(messages, info)
        turn = len(seen)
        if turn == 0:
            seen["spawn"] = True
            return spawn(("explore", "find the bug"))
        if turn == 1:
            # The agent call came back while its subagent still works: the step went on.
            seen["result"] = messages[-1].tool_results[0].content
            seen["child done"] = release.is_set()
            release.set()
            return "I will wait for the subagent's report."
        seen["note"] = messages[-1].text
        return "The subagent says the bug is in parse()."

    model = ScriptedModel(parent)
    run = await drive(Agent(model, [builtin.agent]), "go", ctx.with_detach(switch))

    assert run.result.stop_cause is StopCause.COMPLETED
    assert seen["child done"] is False
    assert seen["result"].startswith(
        "The person moved subagent r1-sub-1 (explore) to the background"
    )
    assert seen["note"].startswith("[background work: r1-sub-1] the subagent (task 0) ended:\n")
    assert "the bug is in parse()" in seen["note"]
    assert run.result.text == "The subagent says the bug is in parse()."
    assert run.results()[0].is_error is False
    # The subagent's segment opened in the first step and closed after the call returned.
    kinds = [e["type"] for e in run.wire]
    result_at = kinds.index("TOOL_CALL_RESULT")
    assert kinds.index("SUBAGENT_STARTED") < result_at < kinds.index("SUBAGENT_FINISHED")
    finished = next(e for e in run.wire if e["type"] == "SUBAGENT_FINISHED")
    assert finished["result"]["text"] == "the bug is in parse()"
    assert run.custom("tiller.notice")[0]["source"] == "r1-sub-1"
    assert [m.role for m in run.messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


async def test_a_run_that_stops_otherwise_cancels_its_detached_subagent(
    ctx: RunContext,
) -> None:
    """A run that ends on a ceiling while a detached subagent still works cancels it (as
    it kills background commands): no task outlives the run, and the stream is closed."""
    from tiller.loop import DetachSwitch

    switch = DetachSwitch()
    never = asyncio.Event()
    cancelled: list[bool] = []

    async def play(messages: Messages, info: TurnInfo) -> Any:
        if not is_parent(info):
            switch.detach()
            try:
                await never.wait()
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
        if len(messages) == 1:
            return spawn(("explore", "look around"))
        return call("agent", description="again", prompt="look", subagent_type="nope")

    model = ScriptedModel(play)
    run = await drive(
        Agent(model, [builtin.agent]), "go", ctx.with_detach(switch), RunOptions(max_steps=2)
    )

    assert run.result.stop_cause is StopCause.MAX_STEPS
    assert cancelled == [True]
    errors = [e for e in run.wire if e["type"] == "SUBAGENT_ERROR"]
    assert [e["subagentRunId"] for e in errors] == ["r1-sub-1"]


async def test_a_detached_subagent_that_needs_a_person_fails_instead_of_suspending(
    ctx: RunContext,
) -> None:
    """Sibling: a child in the background cannot suspend its parent for a person (its
    agent call was answered when it was detached, so nothing would hold it): it fails
    with a reason, which reaches the parent as its note; nothing is left nested."""
    from tiller.loop import DetachSwitch, PauseOnWrites

    switch = DetachSwitch()
    notes: list[str] = []

    def play(messages: Messages, info: TurnInfo) -> Any:
        if not is_parent(info):
            switch.detach()
            return call("note", text="from the child")
        if len(messages) == 1:
            return spawn(("general", "write a note"))
        if "[background work:" in messages[-1].text:
            notes.append(messages[-1].text)
            return "The subagent could not write without approval."
        return "Waiting."

    model = ScriptedModel(play)
    options = RunOptions(review_policy=PauseOnWrites())
    run = await drive(Agent(model, [builtin.agent, note]), "go", ctx.with_detach(switch), options)

    assert run.result.stop_cause is StopCause.COMPLETED
    assert not (ctx.jail.root / "notes.txt").exists()
    assert run.result.state.children == {}
    assert len(notes) == 1 and "needs a person's approval" in notes[0]
    errors = [e for e in run.wire if e["type"] == "SUBAGENT_ERROR"]
    assert [e.get("code") for e in errors] == ["NEEDS_PERSON"]


async def test_a_final_answer_on_the_last_step_stands_with_a_detached_subagent(
    ctx: RunContext,
) -> None:
    """With no step left to read a detached child's report, the final answer stands (the
    run completed; it is not turned into max_steps) and the child is cancelled."""
    from tiller.loop import DetachSwitch

    switch = DetachSwitch()
    never = asyncio.Event()

    async def play(messages: Messages, info: TurnInfo) -> Any:
        if not is_parent(info):
            switch.detach()
            await never.wait()
        if len(messages) == 1:
            return spawn(("explore", "look around"))
        return "Done without it."

    model = ScriptedModel(play)
    run = await drive(
        Agent(model, [builtin.agent]), "go", ctx.with_detach(switch), RunOptions(max_steps=2)
    )

    assert run.result.stop_cause is StopCause.COMPLETED
    assert run.result.text == "Done without it."
    assert [e["type"] for e in run.wire if e["type"].startswith("SUBAGENT_")] == [
        "SUBAGENT_STARTED",
        "SUBAGENT_ERROR",
    ]


@tool(read_only=True)
def raise_mode(ctx: ExecContext) -> str:
    """Switch this run to full access, then say which mode is in force."""
    assert ctx.jail.safety is not None
    return f"mode={ctx.jail.safety.set(SafetyMode.FULL_ACCESS).value}"


async def test_a_childs_ceiling_is_never_above_its_parents(workspace: Path) -> None:
    """Break: a child's switch took its type's ceiling alone (full access for `general`),
    so a parent capped at `auto` had a child that could be switched to full access."""
    parent = LiveSafetyMode(SafetyMode.ASK, ceiling=SafetyMode.AUTO)
    ctx = RunContext.new(Jail(workspace, safety=parent), AllowAll())
    model = tree([spawn(("general", "raise"))], one_tool_then_answer("raise_mode"))
    run = await drive(Agent(model, [raise_mode, builtin.agent]), "go", ctx)
    assert run.results()[0].content.startswith("raise -> mode=auto")
    assert ctx.jail.safety.mode is SafetyMode.ASK

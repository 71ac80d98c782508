"""`tiller runs list | show | reconcile | resume` and `tiller replay`, on a SQLite store.

The commands run in this process through typer's runner (the crash test in
`tests/loop/test_crash.py` runs them as real subprocesses); the runs they act on are set
up with the library, then inspected in the store. Also `load_agent` and the policy stored
in a checkpoint (`run_context_from`, `options_from`), which the commands build on.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from typer.testing import CliRunner, Result

from tiller.capture import CAPTURE_BUCKET, bus_capture
from tiller.cli import app
from tiller.cli._runs import CAPTURES_BUCKET, CHECKPOINTS_BUCKET
from tiller.conversation import AssistantMessage, ToolCall, UserMessage
from tiller.errors import UsageError
from tiller.loop import (
    Agent,
    Budget,
    PauseOnTools,
    PauseOnWrites,
    ResumeDecision,
    ReviewPolicy,
    RunContext,
    RunOptions,
    load_agent,
    record_policy,
    resume,
    run_context_from,
)
from tiller.loop._agent_ref import options_from
from tiller.ops import resume_run
from tiller.phase import Phase
from tiller.policy import AllowAll
from tiller.state import RunState, StopCause
from tiller.store import DEFAULT_BUCKET, Bus, CheckpointStore, open_bus

from .cli_support import made_store

T = TypeVar("T")

AGENT_MODULE = '''
from pydantic import BaseModel

from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import ExecContext, tool


@tool
def append(text: str, ctx: ExecContext) -> str:
    """Append a line to log.txt."""
    with (ctx.workdir / "log.txt").open("a") as log:
        log.write(text + "\\n")
    return f"appended {text}"


def _answer(messages, info):
    if messages and getattr(messages[-1], "tool_results", ()):
        return "finished"
    return {"tool_calls": [{"name": "append", "arguments": {"text": t}} for t in "abc"]}


def build():
    return Agent(ScriptedModel(_answer), [append], name="appender")


class Count(BaseModel):
    n: int


def build_structured():
    # Asked the way an older Claude is: by a forced output tool.
    model = ScriptedModel([{"tool_calls": [{"name": "final_result", "arguments": {"n": 3}}]}])
    return Agent(model, output_type=Count, output_mode="tool", name="counter")


agent = build()
not_an_agent = 42


def needs_arguments(x):
    return build()


def returns_a_string():
    return "no"
'''


@pytest.fixture
def agent_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The name of a fresh importable module defining the test agent."""
    name = f"runs_agent_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(AGENT_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.fixture
def url(tmp_path: Path) -> str:
    # There, empty: the reading commands refuse a SQLite store that is not there.
    return made_store(tmp_path / "store.db")


def on_store(url: str, work: Callable[[Bus], Coroutine[Any, Any, T]]) -> T:
    async def run() -> T:
        async with await open_bus(url) as bus:
            return await work(bus)

    return asyncio.run(run())


def tiller(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def lines(workspace: Path) -> list[str]:
    path = workspace / "log.txt"
    return path.read_text().splitlines() if path.exists() else []


def crashed_run(url: str, workspace: Path, agent_ref: str | None) -> dict[str, str]:
    """A run as a crash leaves it: checkpointed `running` after a step that asked
    for three calls, `a` completed, `b` and `c` started. Returns the call ids by text."""

    async def work(bus: Bus) -> dict[str, str]:
        ctx = RunContext.sandboxed(workspace, AllowAll()).with_store(bus)
        state = RunState(run_id="r-crash", thread_id="t-1", messages=[UserMessage(text="go")])
        record_policy(state, ctx, agent_ref=agent_ref)
        calls = tuple(
            ToolCall(id=f"call-{t}", name="append", arguments=f'{{"text": "{t}"}}') for t in "abc"
        )
        state.messages.append(AssistantMessage(id="r-crash-msg-1", tool_calls=calls))
        state.step = 1
        store = CheckpointStore(bus)
        await store.save(state, "running")
        await store.call_completed("r-crash", "call-a", "appended a", is_error=False)
        await store.call_started("r-crash", "call-b")
        await store.call_started("r-crash", "call-c")
        return {t: f"call-{t}" for t in "abc"}

    return on_store(url, work)


def suspended_run(url: str, workspace: Path, agent_ref: str | None, run_id: str) -> str:
    """A run paused for review before its one call; returns the call id."""

    async def work(bus: Bus) -> str:
        ctx = RunContext.sandboxed(workspace).with_store(bus)
        options = RunOptions(review_policy=PauseOnWrites(), checkpoint_bucket=DEFAULT_BUCKET)
        agent = load_agent(agent_ref) if agent_ref else None
        assert agent is not None
        state = RunState(run_id=run_id, thread_id=f"t-{run_id}", messages=[UserMessage(text="go")])
        record_policy(state, ctx, options, agent_ref=agent_ref)
        result = await agent.run_in(ctx, state, options)
        assert result.stop_cause is StopCause.SUSPENDED
        return result.state.unanswered_calls()[0].id

    return on_store(url, work)


# ── the bucket names the CLI writes out ──────────────────────────────────────────────


def test_the_cli_default_buckets_are_the_stores() -> None:
    assert CHECKPOINTS_BUCKET == DEFAULT_BUCKET
    assert CAPTURES_BUCKET == CAPTURE_BUCKET


# ── list and show ────────────────────────────────────────────────────────────────────


def test_list_on_an_empty_store(url: str) -> None:
    done = tiller("runs", "list", "--store", url)
    assert done.exit_code == 0, done.stderr
    assert "no runs" in done.stdout


def test_list_and_show_runs(url: str, tmp_path: Path, agent_module: str) -> None:
    call_id = suspended_run(url, tmp_path / "ws", f"{agent_module}:build", "r-paused")
    crashed_run(url, tmp_path / "ws", None)
    listed = tiller("runs", "list", "--store", url)
    assert listed.exit_code == 0, listed.stderr
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert rows["r-paused"][1:5] == ["t-r-paused", "suspended", "1", "suspended"]
    assert rows["r-crash"][1:5] == ["t-1", "running", "1", "-"]
    assert listed.stdout.splitlines()[0].split()[:5] == ["RUN", "THREAD", "STATUS", "STEP", "STOP"]

    shown = tiller("runs", "show", "r-paused", "--store", url)
    assert shown.exit_code == 0, shown.stderr
    out = shown.stdout
    assert "status     suspended" in out
    assert f"{agent_module}:build" in out
    assert "user       go" in out
    assert "→ append" in out and call_id in out
    assert "not started" in out

    crash = tiller("runs", "show", "r-crash", "--store", url)
    assert crash.exit_code == 0, crash.stderr
    assert "completed (recorded)" in crash.stdout
    assert crash.stdout.count("UNCERTAIN") == 2
    assert "tiller runs reconcile r-crash" in crash.stdout


def test_show_says_which_calls_recovery_runs_again(url: str, tmp_path: Path) -> None:
    """A `rerun` record (recovery decided to run an idempotent call again) was shown as
    "completed (recorded)"; and an uncertain idempotent call looked like any other."""
    crashed_run(url, tmp_path / "ws", None)

    async def mark(bus: Bus) -> None:
        store = CheckpointStore(bus)
        await store.call_started("r-crash", "call-b", idempotent=True)
        await store.rerun_call("r-crash", "call-c")

    on_store(url, mark)
    shown = tiller("runs", "show", "r-crash", "--store", url)
    assert shown.exit_code == 0, shown.stderr
    out = shown.stdout
    assert out.count("completed (recorded)") == 1  # call-a's
    assert "said idempotent: recover runs it again" in out
    assert "to run again (its attempt was interrupted" in out


def test_list_skips_a_held_lease(url: str, tmp_path: Path) -> None:
    """A run that is running holds `<run>/lease` in the same bucket: not a run id."""
    crashed_run(url, tmp_path / "ws", None)

    async def hold(bus: Bus) -> None:
        await CheckpointStore(bus).hold("r-crash", "another-process", 600)

    on_store(url, hold)
    listed = tiller("runs", "list", "--store", url)
    assert listed.exit_code == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["r-crash"]


def test_an_unknown_run_id_is_a_clear_error(url: str) -> None:
    for command in ("show", "reconcile", "resume"):
        done = tiller("runs", command, "nope", "--store", url)
        assert done.exit_code == 2, (command, done.stdout)
        assert "no checkpoint for run 'nope'" in done.stderr


def test_a_bad_store_url_is_a_clear_error() -> None:
    done = tiller("runs", "list", "--store", "postgres://x")
    assert done.exit_code == 2
    assert "'postgres://x' is not a store URL" in done.stderr


# ── reconcile ────────────────────────────────────────────────────────────────────────


def test_reconcile_lists_then_marks_uncertain_calls(url: str, tmp_path: Path) -> None:
    ids = crashed_run(url, tmp_path / "ws", None)
    listed = tiller("runs", "reconcile", "r-crash", "--store", url)
    assert listed.exit_code == 0, listed.stderr
    assert ids["b"] in listed.stdout and ids["c"] in listed.stdout
    assert ids["a"] not in listed.stdout  # completed: not uncertain

    not_uncertain = tiller("runs", "reconcile", "r-crash", "--done", ids["a"], "--store", url)
    assert not_uncertain.exit_code == 2
    assert "not uncertain" in not_uncertain.stderr
    twice = tiller(
        "runs", "reconcile", "r-crash", "--done", ids["b"], "--rerun", ids["b"], "--store", url
    )
    assert twice.exit_code == 2 and "twice" in twice.stderr
    lonely = tiller(
        "runs", "reconcile", "r-crash", "--rerun", ids["b"], "--result", "x", "--store", url
    )
    assert lonely.exit_code == 2 and "--result" in lonely.stderr

    marked = tiller(
        "runs", "reconcile", "r-crash", "--done", ids["b"], "--result", "b by hand", "--store", url
    )
    assert marked.exit_code == 0, marked.stderr
    assert ids["c"] in marked.stdout  # still uncertain, and listed
    failed = tiller("runs", "reconcile", "r-crash", "--failed", ids["c"], "--store", url)
    assert failed.exit_code == 0, failed.stderr
    assert "no uncertain calls" in failed.stdout

    logs = on_store(url, lambda bus: CheckpointStore(bus).calls("r-crash"))
    assert (logs[ids["b"]].status, logs[ids["b"]].content) == ("completed", "b by hand")
    assert logs[ids["c"]].is_error and "marked failed" in (logs[ids["c"]].content or "")


# ── resume ───────────────────────────────────────────────────────────────────────────


def test_resume_refuses_uncertain_calls_then_runs_only_the_rest(
    url: str, tmp_path: Path, agent_module: str
) -> None:
    workspace = tmp_path / "ws"
    ids = crashed_run(url, workspace, None)
    no_agent = tiller("runs", "resume", "r-crash", "--yes", "--store", url)
    assert no_agent.exit_code == 2
    assert "--agent" in no_agent.stderr
    bad_agent = tiller("runs", "resume", "r-crash", "--agent", "nowhere:x", "--store", url)
    assert bad_agent.exit_code == 2
    assert "cannot import module 'nowhere'" in bad_agent.stderr

    ref = f"{agent_module}:build"
    refused = tiller("runs", "resume", "r-crash", "--agent", ref, "--yes", "--store", url)
    assert refused.exit_code == 3
    assert ids["b"] in refused.stderr and ids["c"] in refused.stderr
    assert "tiller runs reconcile" in refused.stderr
    assert lines(workspace) == []

    # The refusal did not claim the run: once reconciled, it resumes.
    tiller("runs", "reconcile", "r-crash", "--done", ids["b"], "--rerun", ids["c"], "--store", url)
    done = tiller("runs", "resume", "r-crash", "--agent", ref, "--yes", "--store", url)
    assert done.exit_code == 0, done.stdout + done.stderr
    assert "finished" in done.stdout and "stop cause  completed" in done.stdout
    assert lines(workspace) == ["c"]  # a completed before the crash, b marked done

    checkpoint = on_store(url, lambda bus: CheckpointStore(bus).load("r-crash"))
    assert checkpoint.status == "finished"
    assert checkpoint.state.agent_ref == ref  # recorded for later resumes

    again = tiller("runs", "resume", "r-crash", "--yes", "--store", url)
    assert again.exit_code == 1
    assert "finished" in again.stderr


def test_resume_without_yes_blocks_calls_that_need_approval(
    url: str, tmp_path: Path, agent_module: str
) -> None:
    workspace = tmp_path / "ws"
    ids = crashed_run(url, workspace, f"{agent_module}:build")
    tiller("runs", "reconcile", "r-crash", "--done", ids["b"], "--rerun", ids["c"], "--store", url)
    done = tiller("runs", "resume", "r-crash", "--store", url)  # the agent: from the checkpoint
    assert done.exit_code == 0, done.stdout + done.stderr
    assert "Blocked by policy" in done.stdout and "--yes" in done.stdout
    assert lines(workspace) == []


def test_a_suspended_run_needs_a_person_or_yes(url: str, tmp_path: Path, agent_module: str) -> None:
    workspace = tmp_path / "ws"
    suspended_run(url, workspace, f"{agent_module}:build", "r-review")
    refused = tiller("runs", "resume", "r-review", "--store", url)
    assert refused.exit_code == 2
    assert "suspended for review" in refused.stderr
    done = tiller("runs", "resume", "r-review", "--yes", "--store", url)
    assert done.exit_code == 0, done.stdout + done.stderr
    assert sorted(lines(workspace)) == ["a", "b", "c"]


def test_resume_in_another_jail_with_workspace(url: str, tmp_path: Path, agent_module: str) -> None:
    ids = crashed_run(url, tmp_path / "ws", f"{agent_module}:build")
    tiller("runs", "reconcile", "r-crash", "--done", ids["b"], "--rerun", ids["c"], "--store", url)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    done = tiller("runs", "resume", "r-crash", "--yes", "-w", str(moved), "--store", url)
    assert done.exit_code == 0, done.stdout + done.stderr
    assert lines(moved) == ["c"] and lines(tmp_path / "ws") == []


# ── replay ───────────────────────────────────────────────────────────────────────────


def test_replay_a_captured_run_offline(url: str, tmp_path: Path, agent_module: str) -> None:
    workspace = tmp_path / "ws"

    async def capture(bus: Bus) -> None:
        captures = bus_capture(bus)
        options = RunOptions(capture_sink=captures)
        agent = load_agent(f"{agent_module}:build")
        ctx = RunContext.sandboxed(workspace, AllowAll())
        result = await agent.run_in(ctx, "go", options, run_id="r-captured")
        assert result.completed
        await captures.wait()

    on_store(url, capture)
    assert sorted(lines(workspace)) == ["a", "b", "c"]
    replayed = tiller("replay", "r-captured", "--store", url)
    assert replayed.exit_code == 0, replayed.stdout + replayed.stderr
    assert "finished" in replayed.stdout and "appended b" in replayed.stdout
    assert sorted(lines(workspace)) == ["a", "b", "c"]  # recorded tools: nothing ran again
    with_agent = tiller("replay", "r-captured", "--agent", f"{agent_module}:build", "--store", url)
    assert with_agent.exit_code == 0, with_agent.stdout + with_agent.stderr
    missing = tiller("replay", "nope", "--store", url)
    assert missing.exit_code == 2 and "no capture of run 'nope'" in missing.stderr


def test_replay_a_run_whose_answer_came_by_the_output_tool(
    url: str, tmp_path: Path, agent_module: str
) -> None:
    async def capture(bus: Bus) -> None:
        captures = bus_capture(bus)
        agent = load_agent(f"{agent_module}:build_structured")
        ctx = RunContext.sandboxed(tmp_path / "ws", AllowAll())
        options = RunOptions(capture_sink=captures)
        result = await agent.run_in(ctx, "count", options, run_id="r-structured")
        assert result.completed and result.output is not None
        await captures.wait()

    on_store(url, capture)
    ref = f"{agent_module}:build_structured"
    replayed = tiller("replay", "r-structured", "--agent", ref, "--store", url)
    assert replayed.exit_code == 0, replayed.stdout + replayed.stderr
    assert "diverged" not in replayed.stdout + replayed.stderr
    # Without the agent, the stand-in answers by the output tool as the run did.
    alone = tiller("replay", "r-structured", "--store", url)
    assert alone.exit_code == 0, alone.stdout + alone.stderr
    assert "diverged" not in alone.stdout + alone.stderr


# ── load_agent and the stored policy ─────────────────────────────────────────────────


def test_load_agent_takes_an_agent_or_a_factory(agent_module: str) -> None:
    assert isinstance(load_agent(f"{agent_module}:agent"), Agent)
    built = load_agent(f"{agent_module}:build")
    assert built.name == "appender" and built is not load_agent(f"{agent_module}:build")


@pytest.mark.parametrize(
    ("attr", "message"),
    [
        ("missing", "has no attribute 'missing'"),
        ("not_an_agent", "is a int, not an Agent"),
        ("needs_arguments", "an agent factory takes no arguments, or only `model`"),
        ("returns_a_string", "returned a str, not an Agent"),
    ],
)
def test_load_agent_says_what_to_fix(agent_module: str, attr: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        load_agent(f"{agent_module}:{attr}")


@pytest.mark.parametrize("ref", ["no_colon", ":attr", "module:", "surely_not_a_module_x:y"])
def test_load_agent_refuses_bad_references(ref: str) -> None:
    with pytest.raises(UsageError):
        load_agent(ref)


def test_the_policy_round_trips_with_what_was_spent(tmp_path: Path) -> None:
    budget = Budget(max_steps=9, max_cost_usd=1.5, final_answer_reserve=10)
    budget.steps, budget.cost_usd = 4, 0.25
    ctx = (
        RunContext.sandboxed(tmp_path, AllowAll())
        .with_budget(budget)
        .with_phase(Phase.PLAN)
        .with_withheld(["shell"])
        .with_compact_at(5000)
    )
    options = RunOptions(max_steps=7, review_policy=PauseOnTools(["append", "shell"]))
    state = record_policy(RunState(run_id="p", thread_id="p"), ctx, options, agent_ref="m:a")
    stored = RunState.from_json(state.to_json())  # as another process reads it
    assert stored.agent_ref == "m:a"
    rebuilt = run_context_from(stored, store=None)
    assert rebuilt.jail.root == tmp_path.resolve()
    assert rebuilt.phase is Phase.PLAN and rebuilt.withheld == frozenset({"shell"})
    assert rebuilt.compact_at_tokens == 5000 and rebuilt.approver is None
    assert (rebuilt.budget.max_steps, rebuilt.budget.max_cost_usd) == (9, 1.5)
    assert (rebuilt.budget.steps, rebuilt.budget.cost_usd) == (4, 0.25)  # no fresh purse
    again = options_from(stored)
    assert again.max_steps == 7
    assert isinstance(again.review_policy, PauseOnTools)


def test_a_custom_review_policy_is_not_silently_dropped(tmp_path: Path) -> None:
    class Custom:
        def should_pause(self, step: int, message: Any, registry: Any) -> str | None:
            return None

    custom: ReviewPolicy = Custom()
    state = record_policy(
        RunState(run_id="p", thread_id="p"),
        RunContext.sandboxed(tmp_path),
        RunOptions(review_policy=custom),
    )
    with pytest.raises(UsageError, match="cannot be rebuilt"):
        options_from(state)


def test_run_context_from_needs_a_stored_policy() -> None:
    with pytest.raises(UsageError, match="no stored policy"):
        run_context_from(RunState(run_id="p", thread_id="p"), store=None)


async def test_resume_rebuilds_agent_and_context_from_the_checkpoint(
    tmp_path: Path, agent_module: str
) -> None:
    workspace = tmp_path / "ws"
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        ctx = RunContext.sandboxed(workspace).with_store(bus)
        options = RunOptions(review_policy=PauseOnWrites(), checkpoint_bucket=DEFAULT_BUCKET)
        state = RunState(run_id="r", thread_id="t", messages=[UserMessage(text="go")])
        record_policy(state, ctx, options, agent_ref=f"{agent_module}:build")
        paused = await load_agent(f"{agent_module}:build").run_in(ctx, state, options)
        assert paused.stop_cause is StopCause.SUSPENDED
        decisions = {c.id: ResumeDecision.approved() for c in paused.state.unanswered_calls()}
        with pytest.raises(UsageError, match="not both"), pytest.warns(DeprecationWarning):
            await resume(None, "r", decisions, run_ctx=ctx, store=await open_bus("memory://"))
        done = await resume_run(bus, "r", decisions)  # no agent, no context
        assert done.completed and done.text == "finished"
        assert sorted(lines(workspace)) == ["a", "b", "c"]


def test_show_renders_the_run_from_its_event_log(
    url: str, tmp_path: Path, agent_module: str
) -> None:
    suspended_run(url, tmp_path / "ws", f"{agent_module}:build", "r-shown")
    shown = tiller("runs", "show", "r-shown", "--events", "--store", url)
    assert shown.exit_code == 0, shown.output
    assert "→ append(" in shown.output  # the call as it streamed
    assert "events)" in shown.output
    missing = tiller("runs", "show", "r-nothing", "--events", "--store", url)
    assert missing.exit_code == 2
    assert "no event log" in missing.output


def test_replay_refuses_an_agent_defined_in_the_runs_jail(
    url: str, tmp_path: Path, agent_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The model writes its jail: code there must not be what replay imports (law 11), as
    # `tiller run`, `approve` and `runs resume` refuse it.
    workspace = tmp_path / "ws"

    async def capture(bus: Bus) -> None:
        captures = bus_capture(bus)
        ctx = RunContext.sandboxed(workspace, AllowAll())
        agent = load_agent(f"{agent_module}:build")
        result = await agent.run_in(ctx, "go", RunOptions(capture_sink=captures), run_id="r-j")
        assert result.completed
        await captures.wait()
        state = record_policy(RunState(run_id="r-j", thread_id="t"), ctx)
        await CheckpointStore(bus, CHECKPOINTS_BUCKET).save(state, "finished")

    on_store(url, capture)
    marker = tmp_path / "ran-on-the-host"
    name = f"jailed_{uuid.uuid4().hex[:8]}"
    (workspace / f"{name}.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nfrom {agent_module} import build\n"
    )
    monkeypatch.syspath_prepend(str(workspace))  # replay run from inside the jail
    replayed = tiller("replay", "r-j", "--agent", f"{name}:build", "--store", url)
    assert replayed.exit_code == 2, replayed.stdout + replayed.stderr
    assert not marker.exists()

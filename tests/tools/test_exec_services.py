"""What `ExecContext` carries beyond the basics: assemble, progress kinds, the web budget,
the checkpoint anchor, the Plan phase's scratchpad rule, snapshots, safety modes, the goal."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tiller import CancellationToken, UsageError
from tiller.conversation import AssistantMessage, ToolResult, UserMessage
from tiller.events import CustomEvent, Event
from tiller.phase import Phase
from tiller.tools import (
    PROGRESS_EVENT,
    CallSite,
    CheckpointOrigin,
    ExecContext,
    Jail,
    LiveSafetyMode,
    Notifier,
    PathOutsideJail,
    SafetyMode,
    StepSignals,
    ToolServices,
    UserGoal,
    WebBudget,
    WebBudgetExceeded,
    least_permissive,
)


def test_assemble_takes_each_field_from_its_bundle(tmp_path: Path) -> None:
    seen: list[Event] = []
    token, background, budget = CancellationToken(), CancellationToken(), WebBudget(10)
    notify = Notifier()
    tools = Jail(tmp_path)
    goal = UserGoal(requests=("fix the bug",))
    ctx = ExecContext.assemble(
        step=3,
        call_id="r-call-7",
        signals=StepSignals(token, background, budget),
        dispatch=CallSite(tools, Phase.PLAN, SafetyMode.AUTO, message_index=12),
        services=ToolServices(
            emit=seen.append,
            notify=notify,
            config={"k": 1},
            model_id="m",
            task_id="task-1",
            session_id="thread-1",
            scratchpad=tmp_path / "pad",
            goal=goal,
        ),
    )
    assert (ctx.step, ctx.call_id, ctx.token, ctx.background) == (3, "r-call-7", token, background)
    assert (ctx.web_bytes, ctx.web_budget()) == (budget, budget)
    assert (ctx.jail, ctx.workdir, ctx.phase) == (tools, tools.root, Phase.PLAN)
    assert (ctx.safety_mode, ctx.message_index, ctx.notify) == (SafetyMode.AUTO, 12, notify)
    assert (ctx.config, ctx.model_id, ctx.goal) == ({"k": 1}, "m", goal)
    assert ctx.checkpoint_origin() == CheckpointOrigin("task-1", "thread-1", 12)
    assert ctx.checkpoint_origin().anchored
    ctx.progress.output("hello\n")
    assert seen == [
        CustomEvent(
            name=PROGRESS_EVENT,
            value={
                "toolCallId": "r-call-7",
                "kind": "output",
                "text": "hello\n",
                "stream": "stdout",
            },
        )
    ]


def test_absent_services_degrade_to_safe_defaults(tmp_path: Path) -> None:
    ctx = ExecContext.for_test(tmp_path)
    assert ctx.notify is None and ctx.questions is None and ctx.tasks is None
    assert ctx.jobs is None and ctx.snapshots is None and ctx.classifier is None
    assert ctx.safety_mode is SafetyMode.FULL_ACCESS  # tool tests exercise the tool
    assert not ctx.background.is_cancelled
    assert not ctx.checkpoint_origin().anchored
    assert ctx.snapshot_before_write([tmp_path / "a"]) is None
    assert ctx.goal.render() == "(no request from the user yet)"


def test_every_progress_kind_has_its_fields(tmp_path: Path) -> None:
    seen: list[Event] = []
    ctx = ExecContext.for_test(tmp_path, call_id="c", emit=seen.append)
    ctx.progress.status("half", 0.5)
    ctx.progress.transferred(10, 100)
    ctx.progress.artifact("image/png", b"\x89PNG", "a plot")
    ctx.progress.subagent_tool_call("c-sub", "read_file", "started")
    ctx.progress.subagent_activity("reading")
    assert ctx.progress.subagent_tokens(120)
    assert not ctx.progress.subagent_tokens(130)  # throttled
    assert ctx.progress.subagent_tokens(140, force=True)
    ctx.progress.output("")  # nothing to say
    kinds = [e.value["kind"] for e in seen]  # type: ignore[attr-defined]
    assert kinds == [
        "status",
        "bytes",
        "artifact",
        "subagent_tool_call",
        "subagent_activity",
        "subagent_tokens",
        "subagent_tokens",
    ]
    assert seen[2].value["data"] == "iVBORw=="  # type: ignore[attr-defined]
    ctx.progress.close()
    ctx.progress("after the call returned")
    assert len(seen) == 7


def test_a_web_charge_that_does_not_fit_fails_alone(tmp_path: Path) -> None:
    budget = WebBudget(100, body_limit=50)
    ctx = ExecContext.for_test(tmp_path, web_bytes=budget)
    assert ctx.charge_web_bytes(60) == 60
    with pytest.raises(WebBudgetExceeded, match="100 bytes"):
        ctx.charge_web_bytes(41)
    assert budget.used == 60 and not budget.exhausted  # the refusal changed nothing
    assert ctx.charge_web_bytes(40) == 100  # what fits is still paid for
    with pytest.raises(WebBudgetExceeded):
        ctx.charge_web_bytes(1)
    assert budget.used == 100 and budget.exhausted


def test_the_web_budget_is_shared_by_threads_and_never_overshoots() -> None:
    budget = WebBudget(10_000)
    refused = 0
    lock = threading.Lock()

    def spend() -> None:
        nonlocal refused
        for _ in range(500):
            try:
                budget.charge(7)
            except WebBudgetExceeded:
                with lock:
                    refused += 1

    threads = [threading.Thread(target=spend) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert budget.used == 10_000 // 7 * 7  # refused charges cost nothing
    assert refused == 8 * 500 - 10_000 // 7


def test_plan_phase_writes_only_in_the_scratchpad(tmp_path: Path) -> None:
    pad = tmp_path / ".tiller" / "scratch" / "s1"
    pad.mkdir(parents=True)
    ctx = ExecContext.for_test(tmp_path, phase=Phase.PLAN, scratchpad=pad.resolve())
    ctx.require_writable(pad.resolve() / "plan.md")
    with pytest.raises(PathOutsideJail, match="outside the scratchpad"):
        ctx.require_writable(tmp_path.resolve() / "app.py")
    no_pad = ExecContext.for_test(tmp_path, phase=Phase.PLAN)
    with pytest.raises(PathOutsideJail, match="has none"):
        no_pad.require_writable(tmp_path.resolve() / "plan.md")
    ExecContext.for_test(tmp_path).require_writable(tmp_path.resolve() / "app.py")


class _Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[CheckpointOrigin, Path, list[Path], str]] = []
        self.fail = fail

    async def snapshot(
        self, origin: CheckpointOrigin, root: Path, paths: Sequence[Path], *, reason: str
    ) -> str:
        await asyncio.sleep(0)
        if self.fail:
            raise OSError("disk full")
        self.calls.append((origin, root, list(paths), reason))
        return f"fc-{len(self.calls)}"


async def test_snapshots_run_on_the_loop_from_a_worker_thread(tmp_path: Path) -> None:
    recorder = _Recorder()
    ctx = ExecContext.for_test(
        tmp_path, snapshots=recorder, session_id="s", message_index=4, task_id=None
    )
    root = ctx.workdir  # already resolved
    target = root / "a.txt"
    got = await asyncio.to_thread(ctx.snapshot_before_write, [target], reason="write_file")
    assert got == "fc-1"
    assert recorder.calls == [(CheckpointOrigin(None, "s", 4), root, [target], "write_file")]
    assert await ctx.snapshot_before_write_async([target]) == "fc-2"
    with pytest.raises(UsageError, match="_async"):
        ctx.snapshot_before_write([target])  # blocking on the loop's own thread
    failing = ExecContext.for_test(tmp_path, snapshots=_Recorder(fail=True))
    with pytest.raises(OSError, match="disk full"):
        await asyncio.to_thread(failing.snapshot_before_write, [target])


def test_call_on_loop_without_a_loop_just_runs(tmp_path: Path) -> None:
    assert ExecContext.for_test(tmp_path).call_on_loop(lambda: 41 + 1) == 42


def test_safety_modes_are_ranked_and_ceilings_only_tighten() -> None:
    order = [SafetyMode.READ_ONLY, SafetyMode.ASK, SafetyMode.AUTO, SafetyMode.FULL_ACCESS]
    assert sorted(SafetyMode, key=lambda m: m.rank) == order
    for a in order:
        for b in order:
            assert least_permissive(a, b) is (a if a.rank <= b.rank else b)
    live = LiveSafetyMode(SafetyMode.FULL_ACCESS, ceiling=SafetyMode.AUTO)
    assert live.mode is SafetyMode.AUTO
    assert live.set(SafetyMode.READ_ONLY) is SafetyMode.READ_ONLY
    assert live.set(SafetyMode.FULL_ACCESS) is SafetyMode.AUTO
    assert SafetyMode.parse("Full-Access") is SafetyMode.FULL_ACCESS
    with pytest.raises(ValueError, match="read_only, ask, auto, full_access"):
        SafetyMode.parse("yolo")


def test_the_safety_mode_is_live_across_tool_contexts(tmp_path: Path) -> None:
    tools = Jail(tmp_path)
    assert tools.safety.mode is SafetyMode.ASK
    same = tools.with_shell_timeout(5)
    tools.safety.set(SafetyMode.AUTO)
    assert same.safety.mode is SafetyMode.AUTO  # one live mode, shared
    other = tools.sandboxed(tmp_path)
    tools.safety.set(SafetyMode.READ_ONLY)
    assert other.safety.mode is SafetyMode.AUTO  # a new jail starts its own


def _texts(*messages: Any) -> list[Any]:
    return list(messages)


def test_the_goal_keeps_first_and_latest_requests_under_budget() -> None:
    call_result = ToolResult(call_id="c", name="t", content="x" * 5000)
    messages = _texts(
        UserMessage(text="first: " + "a" * 3000),
        AssistantMessage(text="ok"),
        *[
            m
            for n in range(10)
            for m in (UserMessage(text=f"request {n} " + "b" * 1500), AssistantMessage(text="k"))
        ],
        UserMessage(tool_results=(call_result,)),
        AssistantMessage(text="Shall I delete the build directory?"),
        UserMessage(text="yes, go ahead"),
    )
    goal = UserGoal.from_messages(messages, summary="s" * 7000)
    assert goal.requests[0].startswith("first: ") and len(goal.requests[0].encode()) <= 2003
    assert goal.requests[-1] == "yes, go ahead"
    assert sum(len(r.encode()) for r in goal.requests) <= 8000 + 2 * 3
    assert goal.omitted == 12 - len(goal.requests)
    assert goal.omitted > 0
    assert goal.prior_reply == "Shall I delete the build directory?"
    assert len(goal.summary.encode()) <= 6003
    assert "x" * 100 not in goal.render()  # tool results are data, not requests
    assert "earlier requests omitted" in goal.render()

"""Compaction: a run that outgrows its model's window keeps going, inside the window,
with a legal transcript and its task checklist.

The passes are tested alone on hand-built histories; the whole mechanism through runs of a
`ScriptedModel` with a small `context_window`, whose turn function checks every request it
is sent (legal, inside the window) and answers the summary requests itself.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from tiller.cancel import CancellationToken
from tiller.conversation import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    UserMessage,
    check_transcript,
)
from tiller.errors import UsageError
from tiller.loop import Agent, Budget, Pricing, RunContext, RunOptions
from tiller.loop._compaction import (
    AUDIT_BUCKET,
    AUDIT_KEPT,
    COMPACTED_EVENT,
    collapse_failures,
    compaction_threshold,
    supersede_results,
    thin_results,
)
from tiller.loop._summary import (
    SUMMARY_SYSTEM_PROMPT,
    VALIDATE_SYSTEM_PROMPT,
    SummaryFailed,
    SummaryWriter,
    render_transcript,
    summary_cut,
)
from tiller.model import ModelRequest, ScriptedModel, TurnInfo
from tiller.state import CompactionState, RunState, StopCause
from tiller.store import MemoryBus
from tiller.tools import ToolError, tool
from tiller.tools.builtin import task_create, task_list, task_update

from ._support import drive

PROMPT = "Audit the modules under src/ and get the checks passing."


# ── tools and helpers ────────────────────────────────────────────────────────────


def file_text(path: str) -> str:
    """A deterministic 900-character file."""
    body = "".join(f"def f{i}(x):  # {path}\n    return x + {i}\n" for i in range(40))
    return body[:900]


@tool(read_only=True)
def read_file(path: str) -> str:
    """Read a file of the project."""
    return file_text(path)


CHECKS_FAILED = "3 checks failed: test_discount, test_rounding, test_currency. " + (
    "Run them again after fixing the calculation in src/pricing.py. " * 2
)


@tool
def run_checks() -> str:
    """Run the project's checks."""
    raise ToolError(CHECKS_FAILED)


TOOLS = [read_file, run_checks, task_create, task_update, task_list]


def prompt_tokens(request: ModelRequest) -> int:
    """The request's size as the scripted model counts it (4 characters a token)."""
    chars = len(request.system or "")
    for message in request.messages:
        chars += len(message.text)
        if isinstance(message, AssistantMessage):
            chars += sum(len(call.arguments) for call in message.tool_calls)
        else:
            chars += sum(len(result.content) for result in message.tool_results)
    return math.ceil(chars / 4)


def assert_legal_request(messages: Sequence[Message]) -> None:
    """What a provider would refuse: an illegal transcript, roles out of turn."""
    check_transcript(messages)
    assert isinstance(messages[0], UserMessage)
    for before, after in itertools.pairwise(messages):
        assert before.role != after.role


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def exchange(
    call_id: str, name: str, content: str, *, is_error: bool = False, **arguments: Any
) -> list[Message]:
    return [
        AssistantMessage(
            id=f"a-{call_id}",
            tool_calls=(
                ToolCall(id=call_id, name=name, arguments=orjson.dumps(arguments).decode()),
            ),
        ),
        UserMessage(
            tool_results=(
                ToolResult(call_id=call_id, name=name, content=content, is_error=is_error),
            )
        ),
    ]


def contents(messages: Sequence[Message]) -> dict[str, str]:
    return {
        result.call_id: result.content
        for message in messages
        if isinstance(message, UserMessage)
        for result in message.tool_results
    }


class Project:
    """A scripted agent working through a long task: it plans three tasks, reads the
    modules in turn (each one again every seven turns), runs the failing checks every
    fifth turn, ticks tasks off, and stops after `turns` turns. Summary requests are
    answered with a short summary. Every request is checked on the way in."""

    def __init__(self, turns: int, window: int, *, summary: str | None = None) -> None:
        self.turns = turns
        self.window = window
        self.summary = summary
        self.main = 0
        self.summaries = 0
        self.largest = 0
        self.requests: list[ModelRequest] = []

    def __call__(self, messages: Sequence[Message], info: TurnInfo) -> Any:
        self.requests.append(info.request)
        size = prompt_tokens(info.request)
        self.largest = max(self.largest, size)
        assert size <= self.window, f"request {info.turn} has {size} tokens"
        assert_legal_request(messages)
        if info.system == SUMMARY_SYSTEM_PROMPT:
            assert not info.tools  # isolated: no tools
            self.summaries += 1
            if self.summary is not None:
                return self.summary
            return (
                f"Summary {self.summaries}: the user wants the checks passing. The modules "
                "src/m0.py to src/m6.py were read; the checks still fail on discount, "
                "rounding and currency. Next: fix src/pricing.py."
            )
        self.main += 1
        turn = self.main
        if turn == 1:
            return {
                "tool_calls": [
                    call("task_create", subject="Read the modules"),
                    call("task_create", subject="Fix the pricing"),
                    call("task_create", subject="Get the checks passing"),
                ]
            }
        if turn >= self.turns:
            return "All done."
        if turn in (100, 200):
            return {"tool_calls": [call("task_update", id=f"t{turn // 100}", status="completed")]}
        if turn % 5 == 0:
            return {"tool_calls": [call("run_checks")]}
        return {"tool_calls": [call("read_file", path=f"src/m{turn % 7}.py")]}


def compacted(run: Any) -> list[dict[str, Any]]:
    return [value for value in run.custom(COMPACTED_EVENT)]


def pass_names(event: dict[str, Any]) -> list[str]:
    return [item["name"] for item in event["passes"]]


# ── the passes ───────────────────────────────────────────────────────────────────


def test_a_later_identical_read_supersedes_an_earlier_one() -> None:
    messages: list[Message] = [
        UserMessage(text="go"),
        *exchange("c1", "read_file", file_text("a.py"), path="a.py"),
        *exchange("c2", "read_file", file_text("b.py"), path="b.py"),
        *exchange("c3", "write_file", "x" * 500, path="a.py"),
        *exchange("c4", "write_file", "x" * 500, path="a.py"),
        *exchange("c5", "read_file", file_text("a.py") + "changed", path="a.py"),
    ]
    outcome = supersede_results(messages, lambda name: name == "read_file")
    after = contents(outcome.messages)
    assert outcome.count == 1
    assert after["c1"].startswith("[superseded: read_file was called again later")
    assert "call c5" in after["c1"]
    # The newest read, another file's read, and calls of tools that change things stay.
    assert after["c5"] == contents(messages)["c5"]
    assert after["c2"] == file_text("b.py")
    assert after["c3"] == after["c4"] == "x" * 500
    assert outcome.changed == {2}
    assert len(outcome.messages) == len(messages)
    check_transcript(outcome.messages)
    # Again: nothing more to do (a note is never rewritten).
    assert supersede_results(outcome.messages, lambda name: name == "read_file").count == 0


def test_arguments_match_whatever_their_key_order() -> None:
    messages: list[Message] = [
        UserMessage(text="go"),
        AssistantMessage(
            tool_calls=(ToolCall(id="c1", name="grep", arguments='{"a": 1, "b": 2}'),)
        ),
        UserMessage(tool_results=(ToolResult(call_id="c1", name="grep", content="y" * 300),)),
        AssistantMessage(tool_calls=(ToolCall(id="c2", name="grep", arguments='{"b":2,"a":1}'),)),
        UserMessage(tool_results=(ToolResult(call_id="c2", name="grep", content="y" * 300),)),
    ]
    assert supersede_results(messages, lambda name: True).count == 1


def test_repeated_identical_failures_collapse_into_the_last() -> None:
    error = "ImportError: no module named pricing; check the path and try again " * 2
    messages: list[Message] = [
        UserMessage(text="go"),
        *exchange("c1", "run", error, is_error=True, cmd="pytest"),
        *exchange("c2", "run", "a different failure " * 5, is_error=True, cmd="pytest"),
        *exchange("c3", "run", error, is_error=True, cmd="pytest -x"),
        *exchange("c4", "run", error, is_error=True, cmd="pytest"),
    ]
    outcome = collapse_failures(messages)
    after = contents(outcome.messages)
    assert outcome.count == 2
    assert after["c1"] == after["c3"] == "[failed again later with the same error (call c4)]"
    assert after["c4"] == error
    assert after["c2"] == "a different failure " * 5
    # Still errors: the model sees they failed.
    results = [r for m in outcome.messages if isinstance(m, UserMessage) for r in m.tool_results]
    assert all(result.is_error for result in results)


def test_thinning_keeps_the_calls_and_the_newest_results() -> None:
    long = "line of output\n" * 100
    messages: list[Message] = [UserMessage(text="go")]
    for index in range(1, 7):
        messages += exchange(f"c{index}", "read_file", long, path=f"f{index}")
    messages += exchange("c7", "task_list", "Checklist:\n" + "[ ] t1 something\n" * 40)
    messages += exchange("c8", "read_file", "short", path="f8")
    outcome = thin_results(messages, keep_messages=4)
    after = contents(outcome.messages)
    for index in range(1, 7):
        assert after[f"c{index}"].startswith("[thinned to save context: the result had 1500")
        assert after[f"c{index}"].endswith(long[:160] + "…")
    # The newest two exchanges (four messages) are untouched; the checklist is carried.
    assert after["c7"] == contents(messages)["c7"]
    assert after["c8"] == "short"
    # The calls are all still there, each with its one result.
    assert [m.tool_calls for m in outcome.messages if isinstance(m, AssistantMessage)] == [
        m.tool_calls for m in messages if isinstance(m, AssistantMessage)
    ]
    check_transcript(outcome.messages)
    # With nothing kept back, the rest goes too (short results are not worth it).
    everything = contents(thin_results(outcome.messages, keep_messages=0).messages)
    assert everything["c7"] == contents(messages)["c7"]
    assert everything["c8"] == "short"


def test_the_summary_cut_never_separates_a_call_from_its_result() -> None:
    messages: list[Message] = [UserMessage(text="go")]
    for index in range(1, 6):
        messages += exchange(f"c{index}", "read_file", "x", path=str(index))
    # 11 messages: user, then (assistant, user) five times.
    for keep in range(0, 12):
        cut = summary_cut(messages, keep)
        if cut is None:
            continue
        assert isinstance(messages[cut], AssistantMessage)
        assert isinstance(messages[cut - 1], UserMessage)
        assert cut <= len(messages) - keep
        check_transcript([UserMessage(text="summary"), *messages[cut:]])
    assert summary_cut(messages, 0) == 9  # the latest exchange is always kept
    assert summary_cut(messages, 2) == 9
    assert summary_cut(messages, 4) == 7
    assert summary_cut(messages, 10) is None  # only the request would go
    assert summary_cut(messages[:3], 0) is None


def test_the_transcript_for_a_summary_fits_its_budget() -> None:
    messages: list[Message] = [UserMessage(text=PROMPT)]
    for index in range(60):
        messages += exchange(f"c{index}", "read_file", "z" * 5000, path=str(index))
    text = render_transcript(messages, 6000)
    assert len(text) <= 6000
    assert text.startswith(f"[user]\n{PROMPT}")
    assert "earlier entries left out" in text
    assert "(c59)" in text  # the newest entries are kept
    small = render_transcript(messages[:3], 100_000)
    assert "z" * 1000 in small and "characters left out" in small


# ── the threshold ────────────────────────────────────────────────────────────────


def test_the_threshold_comes_from_the_run_then_the_agent_then_the_window(
    workspace: Path,
) -> None:
    ctx = RunContext.sandboxed(workspace)
    windowed = ScriptedModel("x", context_window=9000)
    assert compaction_threshold(ctx, Agent(windowed)) == 6000
    assert compaction_threshold(ctx, Agent(ScriptedModel("x"))) is None
    configured = Agent(windowed, config={"compact_at_tokens": 5000})
    assert compaction_threshold(ctx, configured) == 5000
    assert compaction_threshold(ctx.with_compact_at(1234), configured) == 1234
    off = Agent(windowed, config={"compact_at_tokens": 0})
    assert compaction_threshold(ctx, off) is None
    assert compaction_threshold(ctx.with_compact_at(0), Agent(windowed)) is None
    with pytest.raises(UsageError, match="compact_at_tokens"):
        compaction_threshold(ctx, Agent(windowed, config={"compact_at_tokens": "lots"}))


def test_compaction_tunables_are_checked() -> None:
    with pytest.raises(UsageError):
        RunOptions(compact_keep_recent=-1)
    with pytest.raises(UsageError):
        RunOptions(loop_guard_repeats=1)
    options = RunOptions().with_compaction(keep_recent=2, validate=True).with_loop_guard(None)
    assert (options.compact_keep_recent, options.compact_validate) == (2, True)
    assert options.compact_summary_max_tokens == 8192
    assert options.loop_guard_repeats is None


# ── whole runs ───────────────────────────────────────────────────────────────────


async def test_a_300_turn_run_compacts_stays_in_its_window_and_keeps_its_tasks(
    ctx: RunContext,
) -> None:
    window = 4000
    project = Project(300, window)
    model = ScriptedModel(project, context_window=window)
    budget = Budget()
    ctx = ctx.with_budget(budget)
    run = await drive(Agent(model, TOOLS), PROMPT, ctx, RunOptions(max_steps=400))
    result, state = run.result, run.result.state

    assert result.stop_cause is StopCause.COMPLETED
    assert result.text == "All done."
    assert project.main == 300
    # It compacted several times, with summaries among them, and stayed in the window.
    events = compacted(run)
    summaries = [event for event in events if "summary" in pass_names(event)]
    assert len(events) >= 5
    assert len(summaries) >= 3
    assert state.compaction.summaries == project.summaries == len(summaries)
    assert state.compaction.compactions == len(events)
    assert not state.compaction.gave_up
    assert project.largest <= window
    assert all(event["reason"] == "threshold" for event in events)
    assert all(event["tokensAfter"] < event["tokensBefore"] for event in events)
    assert all(event["tokensBefore"] >= event["threshold"] == 2666 for event in events)
    assert {"supersede", "collapse_failures", "thin"} <= {
        name for event in events for name in pass_names(event)
    }
    # The checklist: the broker's state is untouched, and it is in the summary message.
    assert [(task["id"], task["status"]) for task in state.tasks] == [
        ("t1", "completed"),
        ("t2", "completed"),
        ("t3", "pending"),
    ]
    head = state.messages[0]
    assert isinstance(head, UserMessage)
    assert head.text.startswith("[Context compacted:")
    assert f"The user's original request:\n{PROMPT}" in head.text
    assert "[x] t1 Read the modules\n[x] t2 Fix the pricing\n[ ] t3 Get the checks" in head.text
    # Every summary call was paid from the run's budget, and counted in its usage.
    assert budget.steps == len(model.requests) == 300 + project.summaries
    assert budget.usage == result.usage
    assert result.steps == 300
    # The audit trail is bounded.
    assert len(state.compaction.rewritten) == AUDIT_KEPT
    assert state.compaction.rewritten_dropped == len(events) - AUDIT_KEPT
    assert [record.number for record in state.compaction.rewritten] == [
        len(events) - 2,
        len(events) - 1,
        len(events),
    ]


async def test_a_compaction_forgets_the_call_counts_of_the_history_it_rewrote(
    ctx: RunContext,
) -> None:
    # `model_calls_history` says at which call each conversation length was first
    # answered, for a rewind. After a summary, the first messages are the summary's: a
    # count recorded for them before it (call 0 at length 1) would take a rewind to the
    # run's first call, not to the summary's time.
    window = 4000
    project = Project(60, window)
    run = await drive(
        Agent(ScriptedModel(project, context_window=window), TOOLS),
        PROMPT,
        ctx,
        RunOptions(max_steps=400),
    )
    state = run.result.state
    summaries = [r for r in state.compaction.rewritten if "summary" in r.passes]
    assert summaries, "the run should have compacted with a summary"
    assert state.messages[0].text.startswith("[Context compacted:")
    assert state.model_calls_at(1) >= summaries[-1].step
    calls = [entry.model_calls for entry in state.model_calls_history]
    assert calls == sorted(calls)


async def test_a_run_without_a_threshold_never_compacts(ctx: RunContext) -> None:
    project = Project(40, window=1_000_000)
    run = await drive(Agent(ScriptedModel(project), TOOLS), PROMPT, ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert compacted(run) == []
    assert run.result.state.compaction == CompactionState()
    assert project.summaries == 0


async def test_the_runs_own_threshold_wins(ctx: RunContext) -> None:
    project = Project(30, window=1_000_000)
    agent = Agent(ScriptedModel(project), TOOLS, config={"compact_at_tokens": 100_000})
    run = await drive(agent, PROMPT, ctx.with_compact_at(1500))
    events = compacted(run)
    assert events and all(event["threshold"] == 1500 for event in events)
    assert project.largest < 1500 + 500


async def test_the_cheap_passes_come_before_a_summary(ctx: RunContext) -> None:
    """A compaction runs the passes cheapest first, each only while the prompt is above
    the target (three quarters of the threshold); a summary only when they fall short."""
    project = Project(16, window=1_000_000)
    run = await drive(Agent(ScriptedModel(project), TOOLS), PROMPT, ctx.with_compact_at(1800))
    first, *later = compacted(run)
    assert pass_names(first) == ["supersede", "collapse_failures", "thin"]
    assert [item["results"] for item in first["passes"]] == [1, 1, 3]
    assert first["tokensBefore"] >= 1800 > 1350 >= first["tokensAfter"]
    assert project.summaries == len(later) == 1
    assert pass_names(later[0])[-1] == "summary"


async def test_summaries_are_charged_to_the_budget(ctx: RunContext) -> None:
    def turns(messages: Sequence[Message], info: TurnInfo) -> Any:
        if info.system == SUMMARY_SYSTEM_PROMPT:
            return {"text": "The summary.", "usage": {"input_tokens": 900, "output_tokens": 77}}
        return _long_task(info)

    budget = Budget(pricing={"scripted": Pricing(input=1.0, output=10.0)})
    model = ScriptedModel(turns)
    run = await drive(Agent(model, TOOLS), PROMPT, ctx.with_budget(budget).with_compact_at(1200))
    summaries = [r for r in model.requests if r.system == SUMMARY_SYSTEM_PROMPT]
    assert summaries
    summary_request = summaries[0]
    assert list(summary_request.tools) == []
    # Its own output cap: a quarter of the window (unknown here: 1.5 x the threshold).
    assert summary_request.max_tokens == 1200 * 3 // 2 // 4
    assert budget.steps == len(model.requests)
    assert budget.usage == run.result.usage
    assert budget.usage.output_tokens >= 77 * len(summaries)
    assert run.result.cost_usd == pytest.approx(budget.cost_usd)
    assert budget.steps_in_flight == budget.tokens_in_flight == 0
    assert run.result.steps == len(model.requests) - len(summaries)


def _long_task(info: TurnInfo) -> Any:
    """A model reading a new file each step, answering at its 24th request."""
    if info.turn >= 24:
        return "Finished."
    return {"tool_calls": [call("read_file", path=f"src/file{info.turn}.py")]}


async def test_a_summary_that_spends_the_last_turn_stops_the_run_there(
    ctx: RunContext,
) -> None:
    options = RunOptions().with_compaction(keep_recent=1)
    # Where the first summary comes, with no ceiling.
    free = ScriptedModel(Project(30, window=1_000_000))
    await drive(Agent(free, TOOLS), PROMPT, ctx.with_compact_at(700), options, run_id="free")
    first = 1 + [r.system for r in free.requests].index(SUMMARY_SYSTEM_PROMPT)
    # The same run, with that summary as the last step the budget allows.
    project = Project(30, window=1_000_000)
    budget = Budget(max_steps=first)
    model = ScriptedModel(project)
    run = await drive(
        Agent(model, TOOLS), PROMPT, ctx.with_budget(budget).with_compact_at(700), options
    )
    assert run.result.stop_cause is StopCause.STEP_BUDGET
    assert project.summaries == 1
    assert model.requests[-1].system == SUMMARY_SYSTEM_PROMPT  # no call after it
    assert budget.steps == len(model.requests) == first  # never past the ceiling (law 7)
    assert run.result.state.messages[0].text.startswith("[Context compacted")


async def test_an_empty_summary_is_rejected_and_no_other_is_tried(ctx: RunContext) -> None:
    project = Project(40, window=1_000_000, summary="")
    options = RunOptions().with_compaction(keep_recent=1)
    run = await drive(
        Agent(ScriptedModel(project), TOOLS), PROMPT, ctx.with_compact_at(1500), options
    )
    state = run.result.state
    assert run.result.stop_cause is StopCause.COMPLETED
    assert project.summaries == 1
    assert state.compaction.gave_up
    assert state.compaction.gave_up_reason == "the model returned an empty summary"
    assert state.compaction.summaries == 0
    events = compacted(run)
    failed = [event for event in events if "summaryFailed" in event]
    assert [event["summaryFailed"] for event in failed] == [state.compaction.gave_up_reason]
    # The cheap passes go on after the failure.
    later = events[events.index(failed[0]) + 1 :]
    assert later and all("thin" in pass_names(e) or "supersede" in pass_names(e) for e in later)
    assert not any(m.text.startswith("[Context compacted") for m in state.messages)


@pytest.mark.parametrize(
    ("summary", "reason"),
    [
        ({"text": "A summary that goes on and", "finish": "length"}, "cut off at its limit"),
        ({"error": {"status": 400, "message": "bad request"}}, "the summary call failed"),
    ],
)
async def test_a_truncated_or_failed_summary_is_rejected(
    ctx: RunContext, summary: dict[str, Any], reason: str
) -> None:
    def turns(messages: Sequence[Message], info: TurnInfo) -> Any:
        if info.system == SUMMARY_SYSTEM_PROMPT:
            return summary
        return _long_task(info)

    model = ScriptedModel(turns)
    run = await drive(
        Agent(model, TOOLS),
        PROMPT,
        ctx.with_compact_at(1200),
        RunOptions().with_compaction(keep_recent=1),
    )
    state = run.result.state
    assert run.result.stop_cause is StopCause.COMPLETED
    assert state.compaction.gave_up
    assert reason in (state.compaction.gave_up_reason or "")
    assert sum(r.system == SUMMARY_SYSTEM_PROMPT for r in model.requests) == 1
    assert state.messages[0] == UserMessage(text=PROMPT)


@pytest.mark.parametrize("omitted", [True, False])
async def test_the_optional_validation_pass(ctx: RunContext, omitted: bool) -> None:
    def turns(messages: Sequence[Message], info: TurnInfo) -> Any:
        if info.system == VALIDATE_SYSTEM_PROMPT:
            assert "<summary>\nSummary, first draft.\n</summary>" in messages[0].text
            return "- src/file3.py was read" if omitted else "NONE"
        if info.system == SUMMARY_SYSTEM_PROMPT:
            if "left out the following" in messages[0].text:
                assert "- src/file3.py was read" in messages[0].text
                return "Summary, second draft."
            return "Summary, first draft."
        return _long_task(info)

    model = ScriptedModel(turns)
    options = RunOptions().with_compaction(keep_recent=1, validate=True)
    run = await drive(Agent(model, TOOLS), PROMPT, ctx.with_compact_at(1000), options)
    head = run.result.state.messages[0]
    systems = [r.system for r in model.requests if r.system != None]  # noqa: E711
    if omitted:
        assert "Summary, second draft." in head.text
        assert systems[:3] == [SUMMARY_SYSTEM_PROMPT, VALIDATE_SYSTEM_PROMPT, SUMMARY_SYSTEM_PROMPT]
    else:
        assert "Summary, first draft." in head.text
        assert systems[:2] == [SUMMARY_SYSTEM_PROMPT, VALIDATE_SYSTEM_PROMPT]


async def test_the_history_before_a_rewrite_is_kept_in_the_store(ctx: RunContext) -> None:
    bus = MemoryBus()
    project = Project(30, window=1_000_000)
    run = await drive(
        Agent(ScriptedModel(project), TOOLS), PROMPT, ctx.with_store(bus).with_compact_at(1500)
    )
    state = run.result.state
    events = compacted(run)
    assert events
    records = state.compaction.rewritten
    assert records and all(record.originals == [] for record in records)
    assert [e["auditKey"] for e in events][-len(records) :] == [r.store_key for r in records]
    bucket = await bus.kv(AUDIT_BUCKET)
    entry = await bucket.get("r1/0001")
    assert entry is not None
    body = orjson.loads(entry.value)
    assert body["run_id"] == "r1" and body["number"] == 1
    assert len(body["messages"]) == events[0]["messagesBefore"]
    assert body["messages"][0] == {"role": "user", "id": "", "text": PROMPT, "tool_results": []}
    await bus.aclose()


async def test_without_a_store_the_state_keeps_what_was_rewritten(ctx: RunContext) -> None:
    project = Project(14, window=1_000_000)
    run = await drive(Agent(ScriptedModel(project), TOOLS), PROMPT, ctx.with_compact_at(1500))
    records = run.result.state.compaction.rewritten
    assert records
    first = records[0]
    assert first.number == 1 and first.store_key is None
    assert first.originals
    # What was rewritten is there as it was: whole file contents.
    originals = contents(first.originals)
    assert any(
        content == file_text(f"src/m{i}.py") for content in originals.values() for i in range(7)
    )
    assert RunState.from_json(run.result.state.to_json()) == run.result.state


async def test_a_summary_writer_never_calls_past_the_budget(tmp_path: Path) -> None:
    model = ScriptedModel(["never"])
    budget = Budget(max_steps=1, steps=1)
    state = RunState(run_id="r", thread_id="t")
    writer = SummaryWriter(model, Agent(model).retry, budget, state, max_tokens=100)
    with pytest.raises(SummaryFailed) as info:
        await writer.write([UserMessage(text="hello")], input_chars=1000)
    assert info.value.give_up is False
    assert "budget refused" in info.value.reason
    assert model.requests == [] and writer.calls == 0


async def test_a_cancel_during_the_summary_leaves_the_history_untouched(
    ctx: RunContext,
) -> None:
    token = CancellationToken()
    project = Project(40, window=1_000_000)

    def turns(messages: Sequence[Message], info: TurnInfo) -> Any:
        if info.system == SUMMARY_SYSTEM_PROMPT:
            token.cancel()
            return {"text": "never arrives", "delay": 5}
        return project(messages, info)

    budget = Budget()
    options = RunOptions().with_compaction(keep_recent=1)
    run = await drive(
        Agent(ScriptedModel(turns), TOOLS),
        PROMPT,
        ctx.with_budget(budget).with_cancel(token).with_compact_at(700),
        options,
    )
    state = run.result.state
    assert run.result.stop_cause is StopCause.CANCELLED
    assert state.compaction == CompactionState()  # nothing was kept, not even the thinning
    assert compacted(run) == []
    assert state.messages[0] == UserMessage(text=PROMPT)
    assert all(not content.startswith("[thinned") for content in contents(state.messages).values())
    assert budget.steps_in_flight == budget.tokens_in_flight == 0


async def test_runs_sharing_a_budget_never_overspend_it_across_a_compaction(
    ctx: RunContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compacting awaits (the audit write): another run may spend the shared budget
    meanwhile. The step checks it again before it reserves its call (law 7)."""
    import asyncio

    from tiller.loop import Budget
    from tiller.store import open_bus
    from tiller.store._memory import MemoryKeyValue
    from tiller.tools import tool

    @tool(read_only=True)
    def peek(i: int) -> str:
        """Peek."""
        return f"result {i} " + "y" * 600

    def looping() -> Any:
        count = {"main": 0}

        def turn(messages: Any, info: TurnInfo) -> Any:
            if info.system == SUMMARY_SYSTEM_PROMPT:
                return ""  # rejected: only the cheap passes (and their audit writes) go on
            count["main"] += 1
            return {"tool_calls": [{"name": "peek", "arguments": {"i": count["main"]}}]}

        return turn

    real_put = MemoryKeyValue.put

    async def slow_put(self: MemoryKeyValue, key: str, value: bytes) -> int:
        if key.startswith(("ra/0", "rb/0")):  # the audit records, {run_id}/{n:04d}
            await asyncio.sleep(0.005)
        return await real_put(self, key, value)

    monkeypatch.setattr(MemoryKeyValue, "put", slow_put)
    for max_steps in range(6, 16):
        async with await open_bus("memory://") as bus:
            budget = Budget(max_steps=max_steps)
            shared = ctx.with_store(bus).with_budget(budget).with_compact_at(200)
            options = RunOptions().with_loop_guard(None).with_compaction(keep_recent=0)
            first = Agent(ScriptedModel(looping()), [peek])
            second = Agent(ScriptedModel(looping()), [peek])
            await asyncio.gather(
                first.run_in(shared, "go", options, run_id="ra"),
                second.run_in(shared, "go", options, run_id="rb"),
            )
            assert budget.steps <= max_steps, (max_steps, budget.steps)

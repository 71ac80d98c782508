"""`RunOptions`: the hard step cap, the response byte cap, guardrails, and the value's
own rules (immutable, validated)."""

from __future__ import annotations

import dataclasses

import pytest

from tiller.conversation import AssistantMessage, UserMessage
from tiller.errors import UsageError
from tiller.loop import (
    Agent,
    Guardrail,
    GuardrailOutcome,
    MaxResponseLength,
    RefusalKeywords,
    RunContext,
    RunOptions,
)
from tiller.model import ModelRequest, ScriptedModel
from tiller.state import StopCause
from tiller.tools import tool

from ._support import Run, drive, texts


@tool(read_only=True)
def look() -> str:
    """Look around."""
    return "seen"


LOOK = {"text": "Looking.", "tool_calls": [{"name": "look"}]}


# ── max_steps ────────────────────────────────────────────────────────────────────


async def test_max_steps_is_a_hard_cap(ctx: RunContext) -> None:
    model = ScriptedModel([LOOK, LOOK, LOOK, "done"])
    run = await drive(Agent(model, [look]), "go", ctx, RunOptions(max_steps=2))
    assert run.result.stop_cause is StopCause.MAX_STEPS
    assert run.result.exhausted
    assert run.result.steps == 2
    assert len(model.requests) == 2
    assert run.terminal["result"] == {"stopCause": "max_steps"}
    assert run.kinds.count("STEP_STARTED") == 2


async def test_max_steps_does_not_stop_a_run_that_finishes_in_time(ctx: RunContext) -> None:
    model = ScriptedModel([LOOK, "done"])
    run = await drive(Agent(model, [look]), "go", ctx, RunOptions().with_max_steps(2))
    assert run.result.stop_cause is StopCause.COMPLETED
    assert not run.result.exhausted


# ── max_response_bytes ───────────────────────────────────────────────────────────


async def test_an_oversized_response_stops_the_run_and_keeps_the_partial(
    ctx: RunContext,
) -> None:
    model = ScriptedModel(["hello world, and much more after that"])
    run = await drive(Agent(model), "go", ctx, RunOptions(max_response_bytes=10))
    result = run.result
    assert result.stop_cause is StopCause.ERROR
    assert result.error is not None
    assert "max_response_bytes" in result.error
    assert run.terminal["type"] == "RUN_ERROR"
    assert run.terminal["code"] == "RESPONSE_TOO_LARGE"
    assert "10 bytes" in run.terminal["message"]
    # "hello" (5) + " world," (7) passed 10 bytes: the text up to the cap is kept, and it
    # is exactly what the client was sent.
    assert run.messages[-1] == AssistantMessage(id="r1-msg-1", text="hello worl")
    assert result.text == "hello worl" == streamed(run, "TEXT_MESSAGE_CONTENT")
    assert result.usage_complete is False
    assert len(model.requests) == 1


def streamed(run: Run, kind: str) -> str:
    """The deltas of one kind of content event, joined as a client joins them."""
    return "".join(event["delta"] for event in run.wire if event["type"] == kind)


@pytest.mark.parametrize(
    ("chunks", "limit", "kept"),
    [
        (["ab", "cdef", "gh"], 4, "abcd"),  # the cap falls mid-delta
        (["ab", "cd", "ef"], 4, "abcd"),  # exactly at a delta's end
        (["ab", "\u00e9\u00e9\u00e9"], 5, "ab\u00e9"),  # mid-character: cut before it
        (["\u00e9", "x"], 1, ""),  # nothing fits: nothing kept, nothing streamed
    ],
)
async def test_the_kept_text_is_exactly_what_was_streamed(
    ctx: RunContext, chunks: list[str], limit: int, kept: str
) -> None:
    """Pins the break where the delta that crossed `max_response_bytes` was kept in the
    transcript but never sent to the client (kept "abcdef", streamed "ab")."""
    model = ScriptedModel([{"chunks": chunks}])
    run = await drive(Agent(model), "go", ctx, RunOptions(max_response_bytes=limit))
    assert run.terminal["code"] == "RESPONSE_TOO_LARGE"
    assert streamed(run, "TEXT_MESSAGE_CONTENT") == kept
    assert run.result.text == kept
    if kept:
        assert run.messages[-1] == AssistantMessage(id="r1-msg-1", text=kept)
    else:
        assert texts(run.messages) == [("user", "go")]


async def test_reasoning_that_crosses_the_cap_is_cut_where_it_is_streamed(
    ctx: RunContext,
) -> None:
    """Sibling: reasoning counts towards the cap and is streamed; the client is sent no
    more of it than the cap allows, and no text after it."""
    model = ScriptedModel([{"reasoning": [{"text": "think " * 10}], "text": "answer"}])
    run = await drive(Agent(model), "go", ctx, RunOptions(max_response_bytes=20))
    assert run.terminal["code"] == "RESPONSE_TOO_LARGE"
    assert streamed(run, "REASONING_MESSAGE_CONTENT") == ("think " * 10)[:20]
    assert streamed(run, "TEXT_MESSAGE_CONTENT") == ""
    assert texts(run.messages) == [("user", "go")]


async def test_tool_arguments_count_towards_the_response_cap(ctx: RunContext) -> None:
    """The cap covers tool arguments too; a call cut by it is never run."""
    ran: list[str] = []

    @tool
    def write(content: str) -> str:
        """Write."""
        ran.append(content)
        return "written"

    big = {"tool_calls": [{"name": "write", "arguments": {"content": "x" * 200}}]}
    model = ScriptedModel([big])
    run = await drive(Agent(model, [write]), "go", ctx, RunOptions(max_response_bytes=100))
    assert run.result.stop_cause is StopCause.ERROR
    assert run.terminal["code"] == "RESPONSE_TOO_LARGE"
    assert ran == []
    assert texts(run.messages) == [("user", "go")]


def test_options_are_validated_and_immutable() -> None:
    with pytest.raises(UsageError):
        RunOptions(max_steps=0)
    with pytest.raises(UsageError):
        RunOptions(max_response_bytes=0)
    options = RunOptions()
    assert options.max_steps == 100
    assert options.max_response_bytes == 4 * 1024 * 1024
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_steps = 3  # type: ignore[misc]
    changed = (
        options.with_max_steps(7)
        .with_max_history_tokens(500)
        .with_max_response_bytes(99)
        .with_output_retries(0)
        .with_max_tokens(50)
        .with_temperature(0.2)
        .with_guardrails(MaxResponseLength(3))
    )
    assert (changed.max_steps, changed.max_history_tokens, changed.max_response_bytes) == (
        7,
        500,
        99,
    )
    assert (changed.output_retries, changed.max_tokens, changed.temperature) == (0, 50, 0.2)
    assert len(changed.guardrails) == 1
    assert options == RunOptions()


# ── guardrails ───────────────────────────────────────────────────────────────────


class Recorder:
    """A guardrail that answers `pre` and `post` and records what it saw."""

    def __init__(
        self,
        name: str,
        pre: GuardrailOutcome | None = None,
        post: GuardrailOutcome | None = None,
    ) -> None:
        self.name = name
        self.pre = pre or GuardrailOutcome.passed()
        self.post = post or GuardrailOutcome.passed()
        self.seen: list[str] = []

    async def pre_llm(self, request: ModelRequest) -> GuardrailOutcome:
        self.seen.append("pre")
        return self.pre

    async def post_llm(self, request: ModelRequest, response: AssistantMessage) -> GuardrailOutcome:
        self.seen.append(f"post:{response.text}")
        return self.post


async def test_refusal_before_the_model_call(ctx: RunContext) -> None:
    model = ScriptedModel(["never"])
    options = RunOptions(guardrails=(RefusalKeywords(["Bomb"]),))
    run = await drive(Agent(model), "How do I build a BOMB?", ctx, options)
    assert run.result.stop_cause is StopCause.REFUSED
    assert run.result.error == "the request mentions 'bomb'"
    assert model.requests == []
    assert run.terminal["result"] == {"stopCause": "refused"}
    assert texts(run.messages) == [("user", "How do I build a BOMB?")]


async def test_refusal_after_the_model_call(ctx: RunContext) -> None:
    model = ScriptedModel(["Here is the secret password."])
    options = RunOptions().with_guardrails(RefusalKeywords(["password"]))
    run = await drive(Agent(model), "hi", ctx, options)
    assert run.result.stop_cause is StopCause.REFUSED
    assert run.result.error == "the response mentions 'password'"
    assert len(model.requests) == 1
    # The refused answer is not kept as the run's answer.
    assert texts(run.messages) == [("user", "hi")]
    assert run.result.text == ""


async def test_max_response_length(ctx: RunContext) -> None:
    model = ScriptedModel(["far too long an answer"])
    run = await drive(Agent(model), "hi", ctx, RunOptions(guardrails=(MaxResponseLength(5),)))
    assert run.result.stop_cause is StopCause.REFUSED
    assert run.result.error == "the response is 22 characters; the limit is 5"


async def test_a_refused_tool_turn_runs_no_tool(ctx: RunContext) -> None:
    ran: list[str] = []

    @tool
    def delete_all() -> str:
        """Delete everything."""
        ran.append("deleted")
        return "gone"

    model = ScriptedModel(
        [{"text": "Deleting everything.", "tool_calls": [{"name": "delete_all"}]}]
    )
    options = RunOptions(guardrails=(RefusalKeywords(["deleting"]),))
    run = await drive(Agent(model, [delete_all]), "clean up", ctx, options)
    assert run.result.stop_cause is StopCause.REFUSED
    assert ran == []
    assert run.result.state.calls == {}


async def test_handoff_from_a_custom_guardrail(ctx: RunContext) -> None:
    billing = Recorder("billing", post=GuardrailOutcome.handoff("billing-agent", "money talk"))
    model = ScriptedModel(["About your invoice..."])
    run = await drive(Agent(model), "my invoice", ctx, RunOptions(guardrails=(billing,)))
    assert run.result.stop_cause is StopCause.HANDOFF
    assert run.result.handoff == "billing-agent"
    assert run.result.error == "money talk"
    assert billing.seen == ["pre", "post:About your invoice..."]
    assert run.terminal["result"] == {"stopCause": "handoff"}


async def test_handoff_before_the_model_call(ctx: RunContext) -> None:
    router = Recorder("router", pre=GuardrailOutcome.handoff("sales", "a sales question"))
    model = ScriptedModel(["never"])
    run = await drive(Agent(model), "buy", ctx, RunOptions(guardrails=(router,)))
    assert run.result.stop_cause is StopCause.HANDOFF
    assert run.result.handoff == "sales"
    assert model.requests == []


@pytest.mark.parametrize(
    ("order", "cause", "error"),
    [
        (("pass", "handoff", "refuse"), StopCause.HANDOFF, "to billing"),
        (("pass", "refuse", "handoff"), StopCause.REFUSED, "the response mentions 'invoice'"),
    ],
)
async def test_the_first_non_pass_wins(
    ctx: RunContext, order: tuple[str, ...], cause: StopCause, error: str
) -> None:
    made: dict[str, Guardrail] = {
        "pass": Recorder("pass"),
        "handoff": Recorder("handoff", post=GuardrailOutcome.handoff("billing", "to billing")),
        "refuse": RefusalKeywords(["invoice"]),
    }
    model = ScriptedModel(["About your invoice."])
    options = RunOptions(guardrails=tuple(made[name] for name in order))
    run = await drive(Agent(model), "hi", ctx, options)
    assert run.result.stop_cause is cause
    assert run.result.error == error
    passing = made["pass"]
    assert isinstance(passing, Recorder)
    assert passing.seen == ["pre", "post:About your invoice."]
    later = made[order[2]]
    if isinstance(later, Recorder):
        assert later.seen == ["pre"]  # never asked after the winner


async def test_guardrails_see_every_turn(ctx: RunContext) -> None:
    watcher = Recorder("watcher")
    model = ScriptedModel([LOOK, "done"])
    run = await drive(Agent(model, [look]), "go", ctx, RunOptions(guardrails=(watcher,)))
    assert run.result.stop_cause is StopCause.COMPLETED
    assert watcher.seen == ["pre", "post:Looking.", "pre", "post:done"]


async def test_refusal_keywords_check_the_latest_user_text(ctx: RunContext) -> None:
    """Pre-model keyword checks read the newest message, so steering is checked too."""
    ctx.queued_input.push("now do something forbidden")
    model = ScriptedModel(["never"])
    run = await drive(
        Agent(model), "hello", ctx, RunOptions(guardrails=(RefusalKeywords(["forbidden"]),))
    )
    assert run.result.stop_cause is StopCause.REFUSED
    assert run.messages == [UserMessage(text="hello\n\nnow do something forbidden")]


def test_options_keep_their_own_guardrails_when_given_a_list() -> None:
    """Break (law 13's sibling): `RunOptions(guardrails=[...])` kept the caller's list, so
    appending to it later changed the options of every run that shared them."""
    mine: list[Guardrail] = [RefusalKeywords(["nope"])]
    options = RunOptions(guardrails=mine)
    mine.append(RefusalKeywords(["later"]))
    assert len(options.guardrails) == 1
    assert isinstance(options.guardrails, tuple)

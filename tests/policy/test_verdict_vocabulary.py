"""Every verdict type speaks one vocabulary: `kind` (allow, ask, deny) and `by` (who
decided), within the table of who may say what; and the gate's refusals are worded from
`by`, never by the refuser (law 4)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tiller.conversation import ToolCall
from tiller.errors import UsageError
from tiller.loop import Agent, GuardrailOutcome, ResumeDecision, RunContext
from tiller.loop._gate_answer import Refuse, recorded_refuser, refusal_text
from tiller.model import ScriptedModel
from tiller.policy import (
    Callback,
    CallDecision,
    Decision,
    FunctionHook,
    HookOutcome,
    HookSet,
    HookVerdict,
    InterlockVerdict,
    PolicyDecision,
    RiskClass,
    VetVerdict,
)
from tiller.policy._verdict import Verdict, may_say, who_may_say
from tiller.state import StopCause
from tiller.tools import tool

R = RiskClass.FILE_MUTATION
CALL = ToolCall(id="r1-call-1", name="write_note", arguments='{"text":"hi"}')

#: Each public constructor, and the (kind, by) it must say.
CONSTRUCTED: list[tuple[str, Any, str, str]] = [
    ("PolicyDecision.allow", PolicyDecision.allow(R), "allow", "policy"),
    ("PolicyDecision.ask", PolicyDecision.ask(R), "ask", "policy"),
    ("PolicyDecision.classify", PolicyDecision.classify(R), "ask", "policy"),
    ("PolicyDecision.deny", PolicyDecision.deny(R, "no"), "deny", "policy"),
    ("Decision.allow", Decision.allow(), "allow", "user"),
    ("Decision.allow(always)", Decision.allow(always=True), "allow", "user"),
    ("Decision.deny", Decision.deny("no"), "deny", "user"),
    ("Decision.blocked", Decision.blocked("no approver is attached"), "deny", "policy"),
    ("CallDecision.for_call", CallDecision.for_call(Decision.deny("no"), CALL), "deny", "user"),
    ("CallDecision.bind", CallDecision.bind(Decision.allow(), "t", {}), "allow", "user"),
    ("HookVerdict.allow", HookVerdict.allow(), "allow", "hook"),
    ("HookVerdict.deny", HookVerdict.deny("no"), "deny", "hook"),
    ("HookOutcome.allow", HookOutcome.allow(), "allow", "hook"),
    ("HookOutcome(denied)", HookOutcome(False, "no", "guard"), "deny", "hook:guard"),
    ("VetVerdict(allow)", VetVerdict(True, "fine", "model"), "allow", "classifier"),
    ("VetVerdict(escalate)", VetVerdict(False, "odd", "timeout"), "ask", "classifier"),
    ("GuardrailOutcome.passed", GuardrailOutcome.passed(), "allow", "guardrail"),
    ("GuardrailOutcome.refuse", GuardrailOutcome.refuse("no"), "deny", "guardrail"),
    ("GuardrailOutcome.handoff", GuardrailOutcome.handoff("billing", "x"), "deny", "guardrail"),
    ("InterlockVerdict(allow)", InterlockVerdict("allow"), "allow", "interlock"),
    ("InterlockVerdict(ask)", InterlockVerdict("ask", "private"), "ask", "interlock"),
    ("InterlockVerdict(deny)", InterlockVerdict("deny", "trifecta"), "deny", "interlock"),
    ("ResumeDecision.approved", ResumeDecision.approved(), "allow", "user"),
    ("ResumeDecision.rejected", ResumeDecision.rejected("no"), "deny", "user"),
]


@pytest.mark.parametrize(
    ("verdict", "kind", "by"),
    [case[1:] for case in CONSTRUCTED],
    ids=[case[0] for case in CONSTRUCTED],
)
def test_every_constructor_says_its_kind_and_who(verdict: Any, kind: str, by: str) -> None:
    assert isinstance(verdict, Verdict)
    assert (verdict.kind, verdict.by) == (kind, by)
    assert may_say(verdict.by, verdict.kind), f"{by} may not say {kind}"


def test_the_extra_facts_stay_on_their_own_fields() -> None:
    classify = PolicyDecision.classify(R, "auto mode vets it")
    assert classify.to_classifier and classify.whom == "classifier"
    assert not PolicyDecision.ask(R).to_classifier
    assert Decision.blocked("x").blocked_by_policy and not Decision.deny("x").blocked_by_policy
    handoff = GuardrailOutcome.handoff("billing", "to billing")
    assert (handoff.handoff_to, handoff.agent, handoff.refused) == ("billing", "billing", False)
    assert GuardrailOutcome.refuse("no").refused
    assert not GuardrailOutcome.passed().refused
    assert InterlockVerdict("deny", "x").blocked and not InterlockVerdict("ask").blocked


def test_the_table_of_who_may_say_what() -> None:
    assert may_say("classifier", "allow") and may_say("classifier", "ask")
    assert not may_say("classifier", "deny")  # it fails to Ask, never denies (law 3)
    assert not may_say("user", "ask")
    assert may_say("hook:guard", "deny") and not may_say("hook:guard", "ask")
    for lookup in ("phase", "withheld", "unknown_tool"):
        assert who_may_say[lookup] == {"deny"}
    assert not may_say("the model", "allow")
    assert set(who_may_say) == {
        "policy",
        "user",
        "hook",
        "classifier",
        "guardrail",
        "interlock",
        "phase",
        "withheld",
        "unknown_tool",
    }


def test_an_approver_cannot_answer_as_another_refuser() -> None:
    """The prefix comes from `by`: a decision claiming to be a hook's or the phase's
    would put words in another refuser's mouth."""
    with pytest.raises(UsageError, match="by 'user' or 'policy'"):
        Decision("deny", "no", by="hook:guard")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="'allow' or 'deny'"):
        Decision("ask", "who knows")  # type: ignore[arg-type]
    # The older spelling of a blocked answer still works, and means the same.
    assert Decision("blocked", "no") == Decision.blocked("no")  # type: ignore[arg-type]


# ── the gate writes the prefix from `by` ────────────────────────────────────────


@pytest.mark.parametrize(
    ("by", "reason", "text", "recorded"),
    [
        ("user", "not now.", "Denied by the user: not now.", "user"),
        ("policy", "rule 7.", "Blocked by policy: rule 7.", "policy"),
        ("interlock", "it sends.", "Blocked by the interlock: it sends.", "policy"),
        ("hook:guard", "no rm", "Refused by hook guard: no rm", "hook"),
        ("phase", "x changes things.", "Refused by the plan phase: x changes things.", "phase"),
        ("withheld", "the tool x is withheld.", "Refused: the tool x is withheld.", "withheld"),
        ("unknown_tool", "'x'. The tools: a.", "Unknown tool 'x'. The tools: a.", "unknown"),
    ],
)
def test_the_refusal_text_comes_from_who_refused(
    by: str, reason: str, text: str, recorded: str
) -> None:
    answer = Refuse(by, reason)
    assert refusal_text(answer) == text
    assert recorded_refuser(answer) == recorded
    assert refusal_text(Refuse(by, reason, remedy="Draft it.")) == f"{text} Draft it."


@tool
def write_note(text: str) -> str:
    """Write a note."""
    return "noted"


async def _refusal(workspace: Path, context: RunContext) -> tuple[str, str | None]:
    model = ScriptedModel(
        [{"tool_calls": [{"name": "write_note", "arguments": {"text": "hi"}}]}, "done"]
    )
    async with asyncio.timeout(10):
        result = await Agent(model, [write_note]).run_in(context, "go")
    assert result.stop_cause is StopCause.COMPLETED
    first = result.state.messages[2].tool_results[0]
    assert first.is_error
    return first.content, result.tool_trace[0].refused_by


@pytest.mark.parametrize(
    ("answer", "text", "recorded"),
    [
        (Decision.deny("not now"), "Denied by the user: not now.", "user"),
        (Decision.blocked("rule 9"), "Blocked by policy: rule 9.", "policy"),
        # Built by hand, the same deny by the policy reads the same: `by` decides.
        (Decision("deny", "rule 9", by="policy"), "Blocked by policy: rule 9.", "policy"),
    ],
)
async def test_an_approvers_deny_is_worded_from_its_by(
    tmp_path: Path, answer: Decision, text: str, recorded: str
) -> None:
    context = RunContext.sandboxed(tmp_path, Callback(lambda call, tool: answer))
    assert await _refusal(tmp_path, context) == (text, recorded)


async def test_a_hooks_deny_is_worded_from_its_by(tmp_path: Path) -> None:
    guard = FunctionHook(lambda event: HookVerdict.deny("no notes"), name="guard")
    hooks = HookSet(pre_tool=[guard])
    context = RunContext.sandboxed(tmp_path, Callback(lambda call, tool: True)).with_hooks(hooks)
    assert await _refusal(tmp_path, context) == ("Refused by hook guard: no notes", "hook")

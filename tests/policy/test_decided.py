"""`DecidedApprover`: a person's decision answers the one call it was made for, once."""

from __future__ import annotations

from tiller.conversation import ToolCall
from tiller.policy import CallDecision, DecidedApprover, Decision


def call(arguments: str, call_id: str = "r1-call-1", name: str = "write_file") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


async def test_a_bound_decision_is_spent_on_the_call_it_was_made_for() -> None:
    """Broke: decisions were looked up by id and never consumed, so a second call under
    the id was answered by the first one's approval."""
    decided = DecidedApprover(
        {"r1-call-1": CallDecision.bind(Decision.allow(), "write_file", {"path": "a", "n": 1})},
        None,
    )
    same = call('{ "n": 1, "path": "a" }')  # the same arguments, spelled otherwise
    assert decided.has_decision(same) and decided.mismatch(same) is None
    assert (await decided.approve(same, None)).allowed
    # Spent: the same id again is a call no one decided.
    assert not decided.has_decision(same)
    again = await decided.approve(same, None)
    assert (again.kind, again.by) == ("deny", "policy")  # blocked: no approver


async def test_a_decision_for_other_arguments_or_another_tool_is_not_applied() -> None:
    bound = CallDecision.bind(Decision.allow(), "write_file", '{"path":"a"}')
    for other in (call('{"path":"b"}'), call('{"path":"a"}', name="delete_file")):
        decided = DecidedApprover({"r1-call-1": bound}, None)
        reason = decided.mismatch(other)
        assert reason is not None and "was not applied" in reason
        assert decided.spend(other) is None  # and it answers nothing afterwards
        assert not decided.has_decision(other)


async def test_a_bare_decision_answers_the_first_call_under_its_id_once() -> None:
    decided = DecidedApprover({"r1-call-1": Decision.deny("no")}, None)
    first = call('{"path":"a"}')
    assert decided.mismatch(first) is None
    assert (await decided.approve(first, None)).kind == "deny"
    assert decided.spend(first) is None

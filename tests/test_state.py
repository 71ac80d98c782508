"""`RunState`: one serializable value with a schema version, and its small rules."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError

import tiller
from tiller.conversation import (
    AssistantMessage,
    Reasoning,
    Taint,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)
from tiller.phase import Phase
from tiller.state import SCHEMA_VERSION, CallRecord, RunState, RunStateError, StopCause


def full_state() -> RunState:
    """A state with something in every field."""
    return RunState(
        run_id="r1",
        thread_id="t1",
        agent_name="coder",
        messages=[
            UserMessage(text="Fix the bug."),
            AssistantMessage(
                id="r1-msg-1",
                text="Reading.",
                reasoning=(
                    Reasoning(text="hmm", signature="sig"),
                    Reasoning(redacted="opaque"),
                ),
                tool_calls=(ToolCall(id="c1", name="read_file", arguments='{"path":"a.py"}'),),
            ),
            UserMessage(
                text="Use tabs.",
                tool_results=(
                    ToolResult(call_id="c1", name="read_file", content="x = 1", is_error=False),
                ),
            ),
        ],
        step=1,
        usage=Usage(input_tokens=100, output_tokens=20, cached_input_tokens=10, requests=1),
        cost_usd=0.0012,
        usage_complete=False,
        taint=(Taint.PRIVATE_DATA | Taint.UNTRUSTED_INPUT).value,
        phase=Phase.PLAN,
        agent_state={"todo": ["a", "b"], "count": 2},
        calls={
            "c1": CallRecord(
                call_id="c1",
                name="read_file",
                step=1,
                status="completed",
                refused_by=None,
                malformed_arguments=False,
            )
        },
        interrupts=[{"id": "i1", "reason": "tool_call", "toolCallId": "c1"}],
        pending_input=["later"],
        empty_turn_nudges=1,
        output_retries=1,
        stop_cause=StopCause.SUSPENDED,
        error="held for approval",
    )


def test_a_full_state_round_trips_through_json() -> None:
    state = full_state()
    data = state.to_json()
    assert isinstance(data, bytes)
    loaded = RunState.from_json(data)
    assert loaded == state
    assert RunState.from_json(data.decode()) == state
    assert loaded.to_json() == data


def test_the_json_carries_its_schema_version() -> None:
    raw = orjson.loads(full_state().to_json())
    assert raw["schema_version"] == SCHEMA_VERSION
    assert raw["stop_cause"] == "suspended"
    assert raw["phase"] == "plan"
    assert raw["messages"][1]["role"] == "assistant"


def test_defaults() -> None:
    state = RunState(run_id="r", thread_id="t")
    assert state.messages == []
    assert (state.step, state.cost_usd, state.usage) == (0, 0.0, Usage())
    assert state.usage_complete is True
    assert state.phase is Phase.EXECUTE
    assert state.stop_cause is None
    assert RunState.from_json(state.to_json()) == state


@pytest.mark.parametrize("version", [0])
def test_another_schema_version_is_refused(version: int) -> None:
    raw = orjson.loads(full_state().to_json())
    raw["schema_version"] = version
    with pytest.raises(RunStateError) as caught:
        RunState.from_json(orjson.dumps(raw))
    assert str(caught.value) == (
        f"run state schema version {version} is not supported "
        "(this tiller reads versions 1, 2, 3, 4, 5, 6, 7, 8)"
    )


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 99])
def test_a_newer_schema_version_is_refused_naming_its_writer(version: int) -> None:
    """Issue 15: a state of a newer schema says which tiller wrote it, and to upgrade."""
    raw = orjson.loads(full_state().to_json())
    raw["schema_version"] = version
    raw["written_by"] = "7.0.0"
    with pytest.raises(RunStateError) as caught:
        RunState.from_json(orjson.dumps(raw))
    assert str(caught.value) == (
        f"run state schema version {version} is not supported "
        "(this tiller reads versions 1, 2, 3, 4, 5, 6, 7, 8)"
        f": it was written by tiller 7.0.0 (this is tiller {tiller.__version__}): "
        "upgrade tiller to read it"
    )


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"{}",
        b'{"run_id": "r", "thread_id": "t", "surprise": 1}',
        b'{"run_id": "r", "thread_id": "t", "stop_cause": "exploded"}',
        b'{"run_id": "r", "thread_id": "t", "messages": [{"role": "system", "text": "x"}]}',
        b'{"run_id": "r", "thread_id": "t", "calls": {"c": {"call_id": "c", "name": "n", '
        b'"step": 1, "status": "maybe"}}}',
    ],
)
def test_a_corrupt_state_is_refused(data: bytes) -> None:
    with pytest.raises(RunStateError, match="the run state is not valid"):
        RunState.from_json(data)


def test_call_records_know_their_statuses() -> None:
    for status in ("pending", "started", "completed", "failed"):
        assert CallRecord(call_id="c", name="n", step=1, status=status).status == status
    with pytest.raises(ValidationError):
        CallRecord(call_id="c", name="n", step=1, status="done")  # type: ignore[arg-type]
    assert CallRecord(call_id="c", name="n", step=1).status == "pending"


def test_stop_causes_are_the_designed_ones() -> None:
    assert {cause.value for cause in StopCause} == {
        "completed",
        "cancelled",
        "suspended",
        "max_steps",
        "step_budget",
        "token_budget",
        "cost_budget",
        "loop",
        "no_output",
        "refused",
        "handoff",
        "error",
    }


def test_user_text_folds_into_a_trailing_user_message() -> None:
    state = RunState(run_id="r", thread_id="t", messages=[UserMessage(text="first")])
    state.append_user_text("second")
    assert state.messages == [UserMessage(text="first\n\nsecond")]

    results = UserMessage(tool_results=(ToolResult(call_id="c", name="n", content="ok"),))
    state = RunState(
        run_id="r",
        thread_id="t",
        messages=[
            UserMessage(text="go"),
            AssistantMessage(tool_calls=(ToolCall(id="c", name="n"),)),
            results,
        ],
    )
    state.append_user_text("steer")
    assert state.messages[-1] == results.model_copy(update={"text": "steer"})
    assert len(state.messages) == 3


def test_user_text_after_an_answer_starts_a_user_message() -> None:
    state = RunState(
        run_id="r",
        thread_id="t",
        messages=[UserMessage(text="q"), AssistantMessage(text="a")],
    )
    state.append_user_text("next")
    assert state.messages[-1] == UserMessage(text="next")
    state = RunState(run_id="r", thread_id="t")
    state.append_user_text("hello")
    assert state.messages == [UserMessage(text="hello")]


def test_taint_only_grows() -> None:
    state = RunState(run_id="r", thread_id="t")
    state.add_taint(Taint.PRIVATE_DATA)
    state.add_taint(Taint.NONE)
    assert state.taint_flags == Taint.PRIVATE_DATA
    state.add_taint(Taint.UNTRUSTED_INPUT)
    state.add_taint(Taint.PRIVATE_DATA)
    assert state.taint_flags == Taint.PRIVATE_DATA | Taint.UNTRUSTED_INPUT
    assert RunState.from_json(state.to_json()).taint_flags == state.taint_flags


def test_last_assistant_and_unanswered_calls() -> None:
    call = ToolCall(id="c", name="n")
    asking = AssistantMessage(id="a1", text="calling", tool_calls=(call,))
    state = RunState(run_id="r", thread_id="t", messages=[UserMessage(text="go"), asking])
    assert state.last_assistant() == asking
    assert state.unanswered_calls() == [call]
    state.messages.append(
        UserMessage(tool_results=(ToolResult(call_id="c", name="n", content=""),))
    )
    assert state.unanswered_calls() == []
    assert state.last_assistant() == asking
    assert RunState(run_id="r", thread_id="t").last_assistant() is None


def test_the_checklist_history_keeps_one_change_per_length_and_answers_by_length() -> None:
    state = RunState(run_id="r", thread_id="t", messages=[UserMessage(text="go")])
    assert state.checklist_at(1) == []  # never changed, nothing recorded
    first = [{"id": "t1", "subject": "a", "status": "pending"}]
    second = [{"id": "t1", "subject": "a", "status": "completed"}]
    state.messages.append(AssistantMessage(text="planning"))
    state.record_checklist(first)
    state.record_checklist(second)  # the same length: replaces, not appends
    assert state.tasks == second
    assert [(e.messages, e.tasks) for e in state.tasks_history] == [(2, second)]
    assert state.checklist_at(1) == [] and state.checklist_at(2) == second
    # A conversation cut shorter (compaction, rewind) forgets changes past its length.
    del state.messages[1:]
    state.record_checklist(first)
    assert [(e.messages, e.tasks) for e in state.tasks_history] == [(1, first)]
    assert RunState.from_json(state.to_json()).checklist_at(1) == first


def test_a_state_without_checklist_history_answers_its_checklist() -> None:
    """A checkpoint written before the history was kept: the current checklist is all
    that is known, so a rewind keeps it rather than inventing an empty one."""
    tasks = [{"id": "t1", "subject": "a", "status": "pending"}]
    state = RunState(run_id="r", thread_id="t", tasks=tasks)
    assert state.checklist_at(0) == tasks


def test_a_version_1_state_is_read_and_migrated() -> None:
    """Version 2 added `ToolCall.provider_id` (law 10): a version 1 checkpoint, whose call
    ids were the provider's, still loads; its calls keep their ids, with no provider id."""
    raw = _as_version_2(orjson.loads(full_state().to_json()))
    raw["schema_version"] = 1
    for message in raw["messages"]:
        for call in message.get("tool_calls", ()):
            del call["provider_id"]
    loaded = RunState.from_json(orjson.dumps(raw))
    assert loaded.schema_version == SCHEMA_VERSION
    assert loaded.agent_state == full_state().agent_state
    calls = [c for m in loaded.messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert calls and all(c.provider_id == "" for c in calls)
    original = [
        c for m in full_state().messages if isinstance(m, AssistantMessage) for c in m.tool_calls
    ]
    assert [c.id for c in calls] == [c.id for c in original]


def test_a_version_3_state_reads_with_no_steers_folded_and_its_mail_unknown() -> None:
    """Version 4 records the steers and mail folded (issue 16): a version 3 checkpoint
    still loads, with no steer ids and `folded_mail` None (its mail may be folded
    already: nothing is delivered again), and is written again as version 4."""
    raw = orjson.loads(full_state().to_json())
    raw["schema_version"] = 3
    del raw["folded_steers"], raw["folded_mail"], raw["model_calls"], raw["model_calls_history"]
    loaded = RunState.from_json(orjson.dumps(raw))
    assert (loaded.schema_version, loaded.folded_steers, loaded.folded_mail) == (
        SCHEMA_VERSION,
        [],
        None,
    )
    assert RunState(run_id="r", thread_id="t").folded_mail == []
    again = RunState.from_json(loaded.to_json())
    assert (again.schema_version, again.folded_mail) == (SCHEMA_VERSION, None)


def test_a_version_4_state_counts_one_model_call_a_step() -> None:
    """Version 5 counts the run's model calls (issue 18), retries included, so a resumed
    run's scripted model goes on at the next turn: a version 4 state did not count them,
    and reads with one call a step (what it made, retries aside)."""
    state = full_state()
    state.step = 3
    raw = orjson.loads(state.to_json())
    raw["schema_version"] = 4
    del raw["model_calls"], raw["model_calls_history"]
    loaded = RunState.from_json(orjson.dumps(raw))
    assert (loaded.schema_version, loaded.model_calls) == (SCHEMA_VERSION, 3)
    assert orjson.loads(loaded.to_json())["model_calls"] == 3


def _as_version_2(raw: dict[str, Any]) -> dict[str, Any]:
    """A current state's JSON as version 2 wrote it: `state`, and calls with `turn`."""
    raw["schema_version"] = 2
    del raw["folded_steers"], raw["folded_mail"]  # version 4's
    del raw["model_calls"]  # version 5's
    del raw["model_calls_history"]  # version 6's
    raw["state"] = raw.pop("agent_state")
    for record in raw["calls"].values():
        record["turn"] = record.pop("step")
    for child in raw["children"].values():
        _as_version_2(child)
    return raw


def test_a_version_2_state_is_read_with_its_agent_state_and_call_steps() -> None:
    """Version 3 renamed `state` to `agent_state` and a call record's `turn` to `step`
    (issue 15): a version 2 checkpoint still loads, its agent state and steps intact,
    and is written again as the current version."""
    original = full_state()
    child = RunState(run_id="r-sub-1", thread_id="t", agent_state={"child": True})
    child.calls["k1"] = CallRecord(call_id="k1", name="look", step=4)
    original.children["c9"] = child
    raw = _as_version_2(orjson.loads(original.model_dump_json()))
    assert "agent_state" not in raw and raw["state"] == {"todo": ["a", "b"], "count": 2}
    loaded = RunState.from_json(orjson.dumps(raw))
    assert loaded.agent_state == {"todo": ["a", "b"], "count": 2}
    assert loaded.calls["c1"].step == 1
    assert loaded.children["c9"].agent_state == {"child": True}
    assert loaded.children["c9"].calls["k1"].step == 4
    assert loaded.schema_version == SCHEMA_VERSION
    child.folded_mail = None  # a version 2 child's mail is not known either
    migrated = {"schema_version": SCHEMA_VERSION, "folded_mail": None, "model_calls": original.step}
    assert loaded == original.model_copy(update=migrated)
    again = orjson.loads(loaded.to_json())
    assert again["schema_version"] == SCHEMA_VERSION and "state" not in again
    assert again["agent_state"] == {"todo": ["a", "b"], "count": 2}
    # A checkpoint reads its state through `from_data`: the same migration.
    assert RunState.from_data(raw).agent_state == {"todo": ["a", "b"], "count": 2}


def test_a_current_state_with_the_old_key_is_refused() -> None:
    """Only an older version's keys are renamed: at version 3, `state` is an unknown key."""
    raw = orjson.loads(full_state().to_json())
    raw["state"] = raw.pop("agent_state")
    with pytest.raises(RunStateError, match="the run state is not valid"):
        RunState.from_json(orjson.dumps(raw))


def test_a_version_5_state_reads_with_no_model_call_history() -> None:
    """Version 6 keeps where each conversation length was first answered (issue 18, for
    a rewind): a version 5 state reads with none, and a rewind of it keeps its count."""
    state = full_state()
    state.model_calls = 4
    raw = orjson.loads(state.to_json())
    raw["schema_version"] = 5
    del raw["model_calls_history"]
    loaded = RunState.from_json(orjson.dumps(raw))
    assert (loaded.schema_version, loaded.model_calls_history) == (SCHEMA_VERSION, [])
    assert loaded.model_calls_at(1) == 4


def test_the_model_call_count_is_kept_per_conversation_length() -> None:
    state = RunState(run_id="r", thread_id="t", messages=[UserMessage(text="go")])
    assert [state.count_model_call(), state.count_model_call()] == [1, 2]  # a retry
    state.messages.append(AssistantMessage(text="x"))
    state.messages.append(UserMessage(text="more"))
    assert state.count_model_call() == 3
    assert state.model_calls_at(1) == 0  # the cut's first answer is numbered 1 again
    assert state.model_calls_at(3) == 2
    assert state.model_calls_at(5) == 3  # past the last call: the count as it is
    del state.messages[1:]  # a rewrite: the history past the new length is forgotten
    assert state.count_model_call() == 4
    assert [(e.messages, e.model_calls) for e in state.model_calls_history] == [(1, 0)]

"""Approvals and questions over AG-UI: the interrupt contract, end to end over HTTP."""

# Inline snapshots hold each event line whole, as the server sent it.
# ruff: noqa: E501

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inline_snapshot import snapshot

from tiller.examples.console_agent import make_agent

from .._transcript import event_lines, event_types
from .conftest import last_messages, post_run, run_input, types

# The example agent's task list and usage counters: not what these tests specify (the
# paused stream's whole shape, state events included, is pinned with `event_types`).
STATE = ("STATE_SNAPSHOT", "STATE_DELTA", "CUSTOM")


def _user(text: str) -> list[dict[str, Any]]:
    return [{"id": "u1", "role": "user", "content": text}]


def _answer(
    interrupt: dict[str, Any], payload: dict[str, Any], status: str = "resolved"
) -> dict[str, Any]:
    return {"interruptId": interrupt["id"], "status": status, "payload": payload}


def _paused(
    url: str, thread: str, run: str, text: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return _held(post_run(url, run_input(thread, run, _user(text))))


def _held(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The messages and the one interrupt of a suspended run's stream."""
    assert events[-1]["outcome"]["type"] == "interrupt", types(events)
    # The contract: state, then messages, then the pausing RUN_FINISHED.
    assert types(events)[-3:] == ["STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    return last_messages(events), interrupt


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def test_an_approved_write_runs_once_and_a_second_resume_runs_nothing(
    serve: Callable[..., str], tmp_path: Path
) -> None:
    url = serve(make_agent())
    paused = post_run(url, run_input("t1", "r1", _user("write notes.txt: hello")))
    messages, interrupt = _held(paused)
    assert event_types(paused) == snapshot(
        [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "STEP_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "STATE_SNAPSHOT",
            "CUSTOM",
            "TOOL_CALL_RESULT",
            "STEP_FINISHED",
            "STATE_DELTA",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TEXT_MESSAGE_END",
            "STEP_FINISHED",
            "STATE_SNAPSHOT",
            "STATE_SNAPSHOT",
            "MESSAGES_SNAPSHOT",
            "RUN_FINISHED",
        ]
    )
    assert interrupt == snapshot(
        {
            "id": "approve-r1-call-2",
            "reason": "tool_call",
            "message": 'Review: ask mode asks before file_mutation: `write_file` writes `notes.txt`. Allow write_file({"path":"notes.txt","content":"hello"})?',
            "toolCallId": "r1-call-2",
            "responseSchema": {
                "type": "object",
                "properties": {
                    "decision": {"enum": ["approve", "approve_always", "deny"]},
                    "reason": {"type": "string"},
                    "arguments": {"type": "object"},
                },
                "required": ["decision"],
            },
            "metadata": {
                "tool": "write_file",
                "arguments": '{"content":"hello","path":"notes.txt"}',
                "risk": "file_mutation",
            },
        }
    )
    target = tmp_path / "workspace" / "notes.txt"
    assert not target.exists()
    resume = [_answer(interrupt, {"decision": "approve"})]
    events = post_run(url, run_input("t1", "r2", messages, resume=resume))
    assert event_lines(events, skip=STATE) == snapshot(
        [
            'RUN_STARTED r2 thread=t1 {"protocolVersion":"1.0"}',
            "MESSAGES_SNAPSHOT",
            "  u1 user: write notes.txt: hello",
            "  r1-msg-1 assistant:",
            '  r1-msg-1 call r1-call-1 task_create {"subject":"Write notes.txt"}',
            "  r1-msg-2 tool r1-call-1: Created t1: Write notes.txt¶Checklist (0/1 completed):¶[ ] t1 Write notes.txt",
            "  r1-msg-3 assistant: Writing notes.txt.",
            '  r1-msg-3 call r1-call-2 write_file {"path":"notes.txt","content":"hello"}',
            "TOOL_CALL_RESULT r1-call-2 (r2-msg-5): created notes.txt (5 bytes)",
            "STEP_STARTED step 3",
            "TOOL_CALL_START r2-call-3 task_update in r2-msg-6",
            'TOOL_CALL_ARGS r2-call-3 {"id":"t1","status":"completed"}',
            "TOOL_CALL_END r2-call-3",
            "TOOL_CALL_RESULT r2-call-3 (r2-msg-7): t1 is completed: Write notes.txt¶Checklist (1/1 completed):¶[x] t1 Write notes.txt",
            "STEP_FINISHED step 3",
            "STEP_STARTED step 4",
            "TEXT_MESSAGE_START r2-msg-8",
            "TEXT_MESSAGE_CONTENT r2-msg-8 Done: notes.txt is written.",
            "TEXT_MESSAGE_END r2-msg-8",
            "STEP_FINISHED step 4",
            'RUN_FINISHED r2 thread=t1 {"result":{"stopCause":"completed"},"outcome":{"type":"success"}}',
        ]
    )
    assert target.read_text() == "hello"
    target.write_text("changed by hand")
    again = post_run(url, run_input("t1", "r3", messages, resume=resume))
    assert event_lines(again) == snapshot(
        [
            'RUN_STARTED r3 thread=t1 {"protocolVersion":"1.0"}',
            'RUN_ERROR {"message":"there is no open interrupt to resume: run r2 is finished. A resume answers the interrupts of the thread\'s paused run once; send new input without `resume` instead","code":"INVALID_RESUME"}',
        ]
    )
    assert target.read_text() == "changed by hand"  # nothing ran twice


def test_deny_with_a_reason_reaches_the_model(serve: Callable[..., str], tmp_path: Path) -> None:
    url = serve(make_agent())
    messages, interrupt = _paused(url, "t1", "r1", "write a.txt: x")
    events = post_run(
        url,
        run_input(
            "t1",
            "r2",
            messages,
            resume=[_answer(interrupt, {"decision": "deny", "reason": "not today"})],
        ),
    )
    assert event_lines(events, skip=STATE) == snapshot(
        [
            'RUN_STARTED r2 thread=t1 {"protocolVersion":"1.0"}',
            "MESSAGES_SNAPSHOT",
            "  u1 user: write a.txt: x",
            "  r1-msg-1 assistant:",
            '  r1-msg-1 call r1-call-1 task_create {"subject":"Write a.txt"}',
            "  r1-msg-2 tool r1-call-1: Created t1: Write a.txt¶Checklist (0/1 completed):¶[ ] t1 Write a.txt",
            "  r1-msg-3 assistant: Writing a.txt.",
            '  r1-msg-3 call r1-call-2 write_file {"path":"a.txt","content":"x"}',
            "TOOL_CALL_RESULT r1-call-2 (r2-msg-5): Denied by the user: not today. Describe the change you would make (the path and the new content) instead of writing it.",
            "STEP_STARTED step 3",
            "TOOL_CALL_START r2-call-3 task_update in r2-msg-6",
            'TOOL_CALL_ARGS r2-call-3 {"id":"t1","status":"completed"}',
            "TOOL_CALL_END r2-call-3",
            "TOOL_CALL_RESULT r2-call-3 (r2-msg-7): t1 is completed: Write a.txt¶Checklist (1/1 completed):¶[x] t1 Write a.txt",
            "STEP_FINISHED step 3",
            "STEP_STARTED step 4",
            "TEXT_MESSAGE_START r2-msg-8",
            "TEXT_MESSAGE_CONTENT r2-msg-8 Done: a.txt is written.",
            "TEXT_MESSAGE_END r2-msg-8",
            "STEP_FINISHED step 4",
            'RUN_FINISHED r2 thread=t1 {"result":{"stopCause":"completed"},"outcome":{"type":"success"}}',
        ]
    )
    assert not (tmp_path / "workspace" / "a.txt").exists()


def test_a_cancelled_resume_entry_means_deny(serve: Callable[..., str], tmp_path: Path) -> None:
    url = serve(make_agent())
    messages, interrupt = _paused(url, "t1", "r1", "write a.txt: x")
    events = post_run(
        url, run_input("t1", "r2", messages, resume=[_answer(interrupt, {}, "cancelled")])
    )
    assert event_lines(events, skip=STATE) == snapshot(
        [
            'RUN_STARTED r2 thread=t1 {"protocolVersion":"1.0"}',
            "MESSAGES_SNAPSHOT",
            "  u1 user: write a.txt: x",
            "  r1-msg-1 assistant:",
            '  r1-msg-1 call r1-call-1 task_create {"subject":"Write a.txt"}',
            "  r1-msg-2 tool r1-call-1: Created t1: Write a.txt¶Checklist (0/1 completed):¶[ ] t1 Write a.txt",
            "  r1-msg-3 assistant: Writing a.txt.",
            '  r1-msg-3 call r1-call-2 write_file {"path":"a.txt","content":"x"}',
            "TOOL_CALL_RESULT r1-call-2 (r2-msg-5): Denied by the user: the person cancelled the request. Describe the change you would make (the path and the new content) instead of writing it.",
            "STEP_STARTED step 3",
            "TOOL_CALL_START r2-call-3 task_update in r2-msg-6",
            'TOOL_CALL_ARGS r2-call-3 {"id":"t1","status":"completed"}',
            "TOOL_CALL_END r2-call-3",
            "TOOL_CALL_RESULT r2-call-3 (r2-msg-7): t1 is completed: Write a.txt¶Checklist (1/1 completed):¶[x] t1 Write a.txt",
            "STEP_FINISHED step 3",
            "STEP_STARTED step 4",
            "TEXT_MESSAGE_START r2-msg-8",
            "TEXT_MESSAGE_CONTENT r2-msg-8 Done: a.txt is written.",
            "TEXT_MESSAGE_END r2-msg-8",
            "STEP_FINISHED step 4",
            'RUN_FINISHED r2 thread=t1 {"result":{"stopCause":"completed"},"outcome":{"type":"success"}}',
        ]
    )
    assert not (tmp_path / "workspace" / "a.txt").exists()


def test_edited_arguments_are_what_runs(serve: Callable[..., str], tmp_path: Path) -> None:
    url = serve(make_agent())
    messages, interrupt = _paused(url, "t1", "r1", "write a.txt: draft")
    edited = {"decision": "approve", "arguments": {"path": "a.txt", "content": "final"}}
    post_run(url, run_input("t1", "r2", messages, resume=[_answer(interrupt, edited)]))
    assert (tmp_path / "workspace" / "a.txt").read_text() == "final"


def test_resumes_that_do_not_fit_get_run_error(serve: Callable[..., str]) -> None:
    url = serve(make_agent())
    messages, interrupt = _paused(url, "t1", "r1", "write a.txt: x")
    cases = {
        "r2": [
            {
                "interruptId": "approve-nope",
                "status": "resolved",
                "payload": {"decision": "approve"},
            }
        ],
        "r3": [_answer(interrupt, {"decision": "maybe"})],
        "r4": [
            _answer(interrupt, {"decision": "approve"}),
            _answer(interrupt, {"decision": "approve"}),
        ],
    }
    refused = {
        run_id: event_lines(post_run(url, run_input("t1", run_id, messages, resume=resume)))
        for run_id, resume in cases.items()
    }
    assert refused == snapshot(
        {
            "r2": [
                'RUN_STARTED r2 thread=t1 {"protocolVersion":"1.0"}',
                'RUN_ERROR {"message":"the resume does not match run r1\'s open interrupts: unknown interrupt ids [\'approve-nope\']; no answer for open interrupts [\'approve-r1-call-2\']. Send one entry for every open interrupt, and only those","code":"INVALID_RESUME"}',
            ],
            "r3": [
                'RUN_STARTED r3 thread=t1 {"protocolVersion":"1.0"}',
                'RUN_ERROR {"message":"the answer to \'approve-r1-call-2\' needs a decision: `{\\"decision\\": \\"approve\\" | \\"approve_always\\" | \\"deny\\", \\"reason\\"?, \\"arguments\\"?}`","code":"INVALID_RESUME"}',
            ],
            "r4": [
                'RUN_STARTED r4 thread=t1 {"protocolVersion":"1.0"}',
                'RUN_ERROR {"message":"interrupt \'approve-r1-call-2\' is answered twice; answer it once","code":"INVALID_RESUME"}',
            ],
        }
    )
    # New input while the interrupt is open is refused too, with what to do.
    events = post_run(
        url, run_input("t1", "r5", [*messages, {"id": "u2", "role": "user", "content": "hi"}])
    )
    assert event_lines(events) == snapshot(
        [
            'RUN_STARTED r5 thread=t1 {"protocolVersion":"1.0"}',
            'RUN_ERROR {"message":"thread \'t1\' has open interrupts (approve-r1-call-2); answer them with `resume` before sending new input","code":"INVALID_RESUME"}',
        ]
    )
    # After all that, the interrupt is still open and a right resume works.
    events = post_run(
        url, run_input("t1", "r6", messages, resume=[_answer(interrupt, {"decision": "approve"})])
    )
    assert events[-1]["outcome"] == {"type": "success"}


def test_an_expired_interrupt_cannot_be_resumed(serve: Callable[..., str]) -> None:
    url = serve(make_agent(), interrupt_ttl=0.05)
    messages, interrupt = _paused(url, "t1", "r1", "write a.txt: x")
    assert "expiresAt" in interrupt
    time.sleep(0.1)  # let it expire (the outcome is asserted, not the time)
    events = post_run(
        url, run_input("t1", "r2", messages, resume=[_answer(interrupt, {"decision": "approve"})])
    )
    assert events[-1]["type"] == "RUN_ERROR"
    assert "expired" in events[-1]["message"]
    # An expired interrupt no longer blocks the thread: new input runs.
    events = post_run(url, run_input("t1", "r3", _user("hello")))
    assert events[-1]["outcome"] == {"type": "success"}


def test_approve_always_approves_the_held_call(serve: Callable[..., str], tmp_path: Path) -> None:
    url = serve(make_agent())
    messages, interrupt = _paused(url, "t1", "r1", "write a.txt: one")
    events = post_run(
        url,
        run_input(
            "t1", "r2", messages, resume=[_answer(interrupt, {"decision": "approve_always"})]
        ),
    )
    assert events[-1]["outcome"] == {"type": "success"}
    assert (tmp_path / "workspace" / "a.txt").read_text() == "one"


def test_a_question_is_an_interrupt_and_the_answer_reaches_the_model(
    serve: Callable[..., str],
) -> None:
    url = serve(make_agent())
    messages, interrupt = _paused(url, "t1", "r1", "ask")
    assert interrupt == snapshot(
        {
            "id": "question-r1-call-1",
            "reason": "question",
            "message": "Which color should the report use?",
            "toolCallId": "r1-call-1",
            "responseSchema": {
                "type": "object",
                "properties": {
                    "answers": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "header": {"type": "string"},
                                "question": {"type": "string"},
                                "selected": {"type": "array", "items": {"type": "string"}},
                                "note": {"type": "string"},
                            },
                        },
                    }
                },
                "required": ["answers"],
            },
            "metadata": {
                "questions": [
                    {
                        "header": "Color",
                        "question": "Which color should the report use?",
                        "options": [
                            {"label": "red", "description": "warm", "recommended": True},
                            {"label": "blue", "description": "calm", "recommended": False},
                        ],
                        "multiSelect": False,
                    }
                ]
            },
        }
    )
    payload = {"answers": [{"header": "Color", "selected": ["blue"], "note": "calm please"}]}
    events = post_run(url, run_input("t1", "r2", messages, resume=[_answer(interrupt, payload)]))
    assert event_lines(events, skip=STATE) == snapshot(
        [
            'RUN_STARTED r2 thread=t1 {"protocolVersion":"1.0"}',
            "MESSAGES_SNAPSHOT",
            "  u1 user: ask",
            "  r1-msg-1 assistant:",
            '  r1-msg-1 call r1-call-1 ask_user {"questions":[{"header":"Color","question":"Which color should the report use?","options":[{"label":"red","description":"warm","recommended":true},{"label":"blue","description":"calm"}]}]}',
            "TOOL_CALL_RESULT r1-call-1 (r2-msg-3): The person answered:¶- [Color] Which color should the report use?¶  selected: blue¶  note: calm please",
            "STEP_STARTED step 2",
            "TEXT_MESSAGE_START r2-msg-4",
            "TEXT_MESSAGE_CONTENT r2-msg-4 Thanks. The person answered:¶- [Color] Which color should the report use?¶  selected: blue¶  note: calm please",
            "TEXT_MESSAGE_END r2-msg-4",
            "STEP_FINISHED step 2",
            'RUN_FINISHED r2 thread=t1 {"result":{"stopCause":"completed"},"outcome":{"type":"success"}}',
        ]
    )
    bad = post_run(
        url, run_input("t1", "r3", messages, resume=[_answer(interrupt, {"answers": "blue"})])
    )
    assert bad[-1]["type"] == "RUN_ERROR"  # already answered: nothing is open any more


def test_the_pausing_snapshot_keeps_results_of_calls_that_did_not_wait(
    serve: Callable[..., str],
) -> None:
    from tiller.loop import Agent
    from tiller.model import ScriptedModel
    from tiller.tools import builtin

    both = {
        "tool_calls": [
            {"name": "list_dir", "arguments": {"path": "."}},
            {"name": "write_file", "arguments": {"path": "x.txt", "content": "y"}},
        ]
    }
    url = serve(Agent(ScriptedModel([both, "ok"]), [builtin.list_dir, builtin.write_file]))
    messages, interrupt = _paused(url, "t1", "r1", "go")
    roles = [(m["role"], m.get("toolCallId")) for m in messages]
    # The read ran and the client saw its result: the snapshot keeps it; the write waits.
    assert roles == [("user", None), ("assistant", None), ("tool", "r1-call-1")]
    assert interrupt["toolCallId"] == "r1-call-2"
    events = post_run(
        url, run_input("t1", "r2", messages, resume=[_answer(interrupt, {"decision": "approve"})])
    )
    assert events[-1]["outcome"] == {"type": "success"}


def test_a_resumed_run_keeps_counting_on_the_same_budget(serve: Callable[..., str]) -> None:
    import jsonpatch

    url = serve(make_agent())
    messages, interrupt = _paused(url, "t1", "r1", "write a.txt: x")
    events = post_run(
        url, run_input("t1", "r2", messages, resume=[_answer(interrupt, {"decision": "approve"})])
    )
    state: Any = None
    for event in events:
        if event["type"] == "STATE_SNAPSHOT":
            state = event["snapshot"]
        elif event["type"] == "STATE_DELTA":
            state = jsonpatch.apply_patch(state, event["delta"])
    # Two turns before the pause, two after: the budget saw all four.
    assert state["tiller"]["budget"]["spentSteps"] == 4
    assert state["tiller"]["usage"]["steps"] == 4


def test_approve_always_lets_a_second_write_through_without_asking(
    serve: Callable[..., str], tmp_path: Path
) -> None:
    from tiller.loop import Agent
    from tiller.model import ScriptedModel
    from tiller.tools import builtin

    def write(path: str) -> dict[str, Any]:
        return {
            "tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": path}}]
        }

    url = serve(
        Agent(ScriptedModel([write("a.txt"), write("b.txt"), "both written"]), [builtin.write_file])
    )
    messages, interrupt = _paused(url, "t1", "r1", "write two files")
    events = post_run(
        url,
        run_input(
            "t1", "r2", messages, resume=[_answer(interrupt, {"decision": "approve_always"})]
        ),
    )
    # The second write of the same tool asked no one: the run went straight to the end.
    assert events[-1]["outcome"] == {"type": "success"}
    assert "both written" in _text(events)
    assert (tmp_path / "workspace" / "b.txt").read_text() == "b.txt"


def test_without_always_the_second_write_asks_again(serve: Callable[..., str]) -> None:
    from tiller.loop import Agent
    from tiller.model import ScriptedModel
    from tiller.tools import builtin

    def write(path: str) -> dict[str, Any]:
        return {
            "tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": path}}]
        }

    url = serve(
        Agent(ScriptedModel([write("a.txt"), write("b.txt"), "done"]), [builtin.write_file])
    )
    messages, interrupt = _paused(url, "t1", "r1", "write two files")
    events = post_run(
        url, run_input("t1", "r2", messages, resume=[_answer(interrupt, {"decision": "approve"})])
    )
    assert events[-1]["outcome"]["type"] == "interrupt"


def test_an_expired_interrupt_is_closed_by_a_cancelled_entry_or_by_new_input(
    serve: Callable[..., str], tmp_path: Path
) -> None:
    url = serve(make_agent(), interrupt_ttl=0.05)
    messages, interrupt = _paused(url, "t1", "r1", "write a.txt: x")
    time.sleep(0.1)
    # As @ag-ui/client does: an expired interrupt is answered "cancelled", and that is a no.
    events = post_run(
        url, run_input("t1", "r2", messages, resume=[_answer(interrupt, {}, "cancelled")])
    )
    assert events[-1]["outcome"] == {"type": "success"}
    assert not (tmp_path / "workspace" / "a.txt").exists()
    # Another thread: new input with the whole history, the held call without a result.
    messages, interrupt = _paused(url, "t2", "r3", "write b.txt: x")
    time.sleep(0.1)
    history = [*messages, {"id": "u9", "role": "user", "content": "hello"}]
    events = post_run(url, run_input("t2", "r4", history))
    # The server answered the lapsed call "expired" (the model went on from there).
    assert events[-1]["outcome"] == {"type": "success"}
    assert not (tmp_path / "workspace" / "b.txt").exists()


def test_a_resume_whose_process_died_before_starting_can_be_answered_again(
    serve: Callable[..., str], tmp_path: Path
) -> None:
    import asyncio

    from tiller.store import CheckpointStore, open_bus

    url = serve(make_agent())
    messages, interrupt = _paused(url, "t1", "r1", "write a.txt: x")

    async def claim_and_die() -> None:
        # What a resume leaves when its process dies between its claim and its first
        # checkpoint: r1 `continued` as r2, and no r2.
        bus = await open_bus(f"sqlite:///{tmp_path / 'serve.db'}")
        try:
            store = CheckpointStore(bus)
            await store.claim(await store.load("r1"), continued_as="r2")
        finally:
            await bus.aclose()

    asyncio.run(claim_and_die())
    events = post_run(
        url, run_input("t1", "r3", messages, resume=[_answer(interrupt, {"decision": "approve"})])
    )
    assert events[-1]["outcome"] == {"type": "success"}
    assert (tmp_path / "workspace" / "a.txt").read_text() == "x"


def test_a_repeated_provider_id_after_a_served_resume_asks_again(
    serve: Callable[..., str], tmp_path: Path
) -> None:
    """Broke (law 10): the model asked for a second write under the id of the one just
    approved (`call-1-0` both times); the served resume's decision, looked up by that id,
    ran it with no one asked. Now each call has the run's id, the client is told it (so it
    answers by it), and the second write is an interrupt of its own."""
    from tiller.loop import Agent
    from tiller.model import ScriptedModel
    from tiller.tools import builtin

    def write(content: str) -> dict[str, Any]:
        arguments = {"path": "a.txt", "content": content}
        return {"tool_calls": [{"id": "call-1-0", "name": "write_file", "arguments": arguments}]}

    url = serve(
        Agent(ScriptedModel([write("first"), write("second"), "done"]), [builtin.write_file])
    )
    events = post_run(url, run_input("t1", "r1", _user("write a.txt twice")))
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    starts = [e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_START"]
    assert starts == ["r1-call-1"] and interrupt["toolCallId"] == "r1-call-1"
    assert interrupt["metadata"] == {
        "tool": "write_file",
        "arguments": '{"content":"first","path":"a.txt"}',
        "risk": "file_mutation",
    }
    target = tmp_path / "workspace" / "a.txt"

    resume = [_answer(interrupt, {"decision": "approve"})]
    events = post_run(url, run_input("t1", "r2", last_messages(events), resume=resume))
    assert target.read_text() == "first"  # the approved write, and only it
    assert events[-1]["outcome"]["type"] == "interrupt", types(events)
    (second,) = events[-1]["outcome"]["interrupts"]
    assert second["toolCallId"] == "r2-call-2"  # numbering goes on from the checkpoint
    snapshot = last_messages(events)
    ids = [c["id"] for m in snapshot for c in m.get("toolCalls", ())]
    assert ids == ["r1-call-1", "r2-call-2"]

    denied = [_answer(second, {"decision": "deny", "reason": "once is enough"})]
    events = post_run(url, run_input("t1", "r3", snapshot, resume=denied))
    assert events[-1]["outcome"] == {"type": "success"}
    assert target.read_text() == "first"

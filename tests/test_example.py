"""The bundled example agent and `tiller demo`, end to end."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import orjson
import pytest

from tiller.events import MessageLog, approval_interrupt_id, run_agent
from tiller.examples.agui_tour import WeatherTour
from tiller.testing import assert_valid_stream

USER = {"id": "u1", "role": "user", "content": "weather in Lisbon please"}


async def first_run() -> list[Any]:
    events = await run_agent(
        WeatherTour(), {"threadId": "t", "runId": "r1", "messages": [USER]}
    ).collect()
    assert_valid_stream(events)
    return events


def resume_input(events: list[Any], resume: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "threadId": "t",
        "runId": "r2",
        "messages": MessageLog([USER]).feed_all(events).messages,
        "state": next(e.snapshot for e in reversed(events) if e.type == "STATE_SNAPSHOT"),
        "resume": resume,
    }


async def test_first_run_uses_the_whole_context_api() -> None:
    events = await first_run()
    wire = [e.to_wire() for e in events]
    kinds = [e["type"] for e in wire]
    for expected in (
        "STEP_STARTED",
        "REASONING_START",
        "TEXT_MESSAGE_START",
        "TOOL_CALL_RESULT",
        "SUBAGENT_STARTED",
        "SUBAGENT_FINISHED",
    ):
        assert expected in kinds
    # The state update lands between the weather call's arguments and its result.
    end = kinds.index("TOOL_CALL_END")
    assert kinds[end + 1].startswith("STATE_") and kinds[end + 2] == "TOOL_CALL_RESULT"
    assert wire[end + 1].get("snapshot", {}).get("forecast", {}).get("city") == "Lisbon" or (
        wire[end + 1]["type"] == "STATE_DELTA"
    )
    outcome = wire[-1]["outcome"]
    assert outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    assert interrupt["reason"] == "tool_call"
    assert interrupt["id"] == approval_interrupt_id(interrupt["toolCallId"])
    assert interrupt["responseSchema"]["required"] == ["decision"]
    assert kinds[-2] == "STATE_SNAPSHOT"  # state before the pausing RUN_FINISHED


@pytest.mark.parametrize(
    ("payload", "status", "said"),
    [
        ({"decision": "approve"}, "published", "Published the report."),
        (
            {"decision": "deny", "reason": "not now"},
            "not published",
            "Understood, I won't publish it (not now).",
        ),
    ],
)
async def test_a_second_run_resumes_the_interrupt(
    payload: dict[str, Any], status: str, said: str
) -> None:
    events = await first_run()
    interrupt_id = events[-1].to_wire()["outcome"]["interrupts"][0]["id"]
    resumed = await run_agent(
        WeatherTour(),
        resume_input(
            events, [{"interruptId": interrupt_id, "status": "resolved", "payload": payload}]
        ),
    ).collect()
    wire = assert_valid_stream(resumed)
    assert wire[1]["type"] == "MESSAGES_SNAPSHOT"  # so the result refers to a known call
    assert wire[2]["type"] == "TOOL_CALL_RESULT"
    assert said in [e.get("delta") for e in wire]
    assert [e["snapshot"]["status"] for e in wire if e["type"] == "STATE_SNAPSHOT"] == [status]
    assert wire[-1]["outcome"] == {"type": "success"}


async def test_a_cancelled_resume_entry_means_deny() -> None:
    events = await first_run()
    interrupt_id = events[-1].to_wire()["outcome"]["interrupts"][0]["id"]
    resumed = await run_agent(
        WeatherTour(), resume_input(events, [{"interruptId": interrupt_id, "status": "cancelled"}])
    ).collect()
    wire = assert_valid_stream(resumed)
    assert any("won't publish" in (e.get("delta") or "") for e in wire)


@pytest.mark.parametrize(
    "resume",
    [
        [
            {
                "interruptId": "approve-someone-else",
                "status": "resolved",
                "payload": {"decision": "approve"},
            }
        ],
        [
            {
                "interruptId": "approve-r1-call-2",
                "status": "resolved",
                "payload": {"decision": "approve"},
            },
            {
                "interruptId": "approve-r1-call-2",
                "status": "resolved",
                "payload": {"decision": "approve"},
            },
        ],
    ],
    ids=["unknown-interrupt", "answered-twice"],
)
async def test_a_bad_resume_runs_nothing(resume: list[dict[str, Any]]) -> None:
    events = await first_run()
    resumed = await run_agent(WeatherTour(), resume_input(events, resume)).collect()
    wire = assert_valid_stream(resumed)
    assert [e["type"] for e in wire] == ["RUN_STARTED", "RUN_ERROR"]
    assert wire[-1]["code"] == "INVALID_RESUME"


def test_tiller_demo_prints_both_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tiller", "demo", "--agui"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("RUN_STARTED") == 2
    assert "interrupt" in done.stdout and "Published the report." in done.stdout


def test_tiller_demo_raw_is_a_valid_sse_stream_per_run() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tiller", "demo", "--agui", "--raw", "--deny"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    frames = [orjson.loads(f.removeprefix(b"data: ")) for f in done.stdout.split(b"\n\n") if f]
    starts = [i for i, f in enumerate(frames) if f["type"] == "RUN_STARTED"]
    assert len(starts) == 2
    assert_valid_stream(frames[: starts[1]])
    second = assert_valid_stream(frames[starts[1] :])
    assert any("won't publish" in (f.get("delta") or "") for f in second)

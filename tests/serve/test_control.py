"""Run control over HTTP: steer, cancel, the runs list, frontend tools, the run's state."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
from ag_ui_validate.pytest_plugin import assert_valid_agui

from tiller.examples.console_agent import make_agent
from tiller.store import CheckpointStore, ControlStore, open_bus

from .conftest import AUTH, SSE, parse_sse, post_run, run_input, types, wait_for


def _user(text: str) -> list[dict[str, Any]]:
    return [{"id": "u1", "role": "user", "content": text}]


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def _stream_until(client: httpx.Client, url: str, body: dict[str, Any], marker: str) -> Any:
    response = client.send(
        client.build_request("POST", f"{url}/agui", content=orjson.dumps(body), headers=SSE),
        stream=True,
    )
    seen: list[str] = []
    lines = response.iter_lines()
    for line in lines:
        seen.append(line)
        if marker in line:
            return response, lines, seen
    raise AssertionError(f"{marker} never came: {seen}")


def test_a_steer_reaches_the_running_run(serve: Callable[..., str]) -> None:
    url = serve(make_agent(step_delay=0.3))
    with httpx.Client(timeout=30) as client:
        response, lines, seen = _stream_until(
            client, url, run_input("t1", "r1", _user("slow 4")), "TOOL_CALL_RESULT"
        )
        steer = client.post(f"{url}/runs/r1/steer", json={"text": "use blue"}, headers=AUTH)
        assert steer.status_code == 202
        rest = "\n".join(seen) + "\n" + "\n".join(lines)
        response.close()
    events = parse_sse(rest)
    assert_valid_agui(events, max_warnings=0)
    assert any(e["type"] == "CUSTOM" and e["name"] == "tiller.queued_input" for e in events)
    assert "use blue" in _text(events)
    assert events[-1]["outcome"] == {"type": "success"}


def test_cancel_ends_the_run_cancelled_and_control_after_the_end_is_409(
    serve: Callable[..., str],
) -> None:
    url = serve(make_agent(step_delay=0.3))
    with httpx.Client(timeout=30) as client:
        response, lines, seen = _stream_until(
            client, url, run_input("t1", "r1", _user("slow 30")), "STEP_STARTED"
        )
        assert client.post(f"{url}/runs/r1/cancel", json={}, headers=AUTH).status_code == 202
        rest = "\n".join(seen) + "\n" + "\n".join(lines)
        response.close()
        events = parse_sse(rest)
        assert_valid_agui(events, max_warnings=0)
        assert events[-1]["type"] == "RUN_FINISHED"
        assert events[-1]["outcome"] == {"type": "cancelled"}
        run = wait_for(
            lambda: (
                (r := client.get(f"{url}/runs/r1", headers=AUTH).json())["status"] == "finished"
                and r
            ),
            what="the cancelled run's checkpoint",
        )
        assert run["stopCause"] == "cancelled"
        assert (
            client.post(f"{url}/runs/r1/steer", json={"text": "x"}, headers=AUTH).status_code == 409
        )
        assert client.post(f"{url}/runs/r1/cancel", json={}, headers=AUTH).status_code == 409
        assert client.post(f"{url}/runs/nope/cancel", json={}, headers=AUTH).status_code == 404
        assert client.post(f"{url}/runs/r1/steer", json={}, headers=AUTH).status_code == 400
        # Not JSON: refused, so a page on another site cannot send it as a simple request.
        plain = {**AUTH, "Content-Type": "text/plain"}
        assert client.post(f"{url}/runs/r1/steer", content=b"hi", headers=plain).status_code == 415
        assert client.post(f"{url}/runs/r1/cancel", headers=AUTH).status_code == 415


def test_the_runs_list_and_one_run(serve: Callable[..., str]) -> None:
    url = serve(make_agent())
    post_run(url, run_input("t1", "r1", _user("hello")))
    post_run(url, run_input("t2", "r2", _user("write a.txt: x")))
    listed = httpx.get(f"{url}/runs", headers=AUTH).json()["runs"]
    assert [r["runId"] for r in listed] == ["r2", "r1"]  # newest first
    assert listed[0]["status"] == "suspended"
    assert listed[0]["interrupts"][0]["reason"] == "tool_call"
    one = httpx.get(f"{url}/runs/r1", headers=AUTH).json()
    assert one["status"] == "finished"
    assert one["usage"]["totalTokens"] > 0
    assert one["live"] is False


def test_a_frontend_tool_call_ends_the_run_and_its_result_continues_it(
    serve: Callable[..., str],
) -> None:
    url = serve(make_agent())
    banner = {
        "name": "show_banner",
        "description": "Show a banner on the page.",
        "parameters": {"type": "object", "properties": {"reason": {"type": "string"}}},
    }
    events = post_run(url, run_input("t1", "r1", _user("client"), tools=[banner]))
    outcome = events[-1]["outcome"]
    assert outcome["type"] == "success"
    (pending,) = outcome["pendingToolCallIds"]
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "show_banner"
    assert start["toolCallId"] == pending
    assert not any(e["type"] == "TOOL_CALL_RESULT" for e in events)  # the server ran nothing
    messages = [
        *_user("client"),
        {
            "id": "a1",
            "role": "assistant",
            "toolCalls": [
                {
                    "id": pending,
                    "type": "function",
                    "function": {"name": "show_banner", "arguments": '{"reason":"demo"}'},
                }
            ],
        },
        {"id": "t-res", "role": "tool", "toolCallId": pending, "content": "banner shown"},
    ]
    events = post_run(url, run_input("t1", "r2", messages, tools=[banner]))
    assert "The page answered: banner shown" in _text(events)
    assert events[-1]["outcome"] == {"type": "success"}


def test_a_client_tool_may_not_shadow_the_agents_own(serve: Callable[..., str]) -> None:
    url = serve(make_agent())
    clash = {"name": "write_file", "description": "x", "parameters": {"type": "object"}}
    body = orjson.dumps(run_input("t1", "r1", _user("hi"), tools=[clash]))
    response = httpx.post(f"{url}/agui", content=body, headers=SSE)
    assert response.status_code == 400
    assert "write_file" in response.json()["error"]


def test_the_state_carries_tasks_usage_budget_and_the_agents_own(serve: Callable[..., str]) -> None:
    url = serve(make_agent())
    events = post_run(url, run_input("t1", "r1", _user("write a.txt: x"), state={"theme": "dark"}))
    state: Any = None
    for event in events:
        if event["type"] == "STATE_SNAPSHOT":
            state = event["snapshot"]
        elif event["type"] == "STATE_DELTA":
            state = jsonpatch.apply_patch(state, event["delta"])
    assert state["theme"] == "dark"  # the client's own state, kept
    runtime = state["tiller"]
    assert [t["subject"] for t in runtime["tasks"]] == ["Write a.txt"]
    assert runtime["usage"]["steps"] == 2
    assert runtime["budget"]["spentSteps"] == 2
    assert types(events)[-1] == "RUN_FINISHED"


def test_staged_outbox_items_are_in_the_state(serve: Callable[..., str], tmp_path: Any) -> None:
    from tiller.loop import OutboxRoute

    url = serve(make_agent(), configure=lambda ctx: ctx.with_outbox(OutboxRoute(["write_file"])))
    events = post_run(url, run_input("t1", "r1", _user("write draft.txt: hello")))
    state: Any = None
    for event in events:
        if event["type"] == "STATE_SNAPSHOT":
            state = event["snapshot"]
        elif event["type"] == "STATE_DELTA":
            state = jsonpatch.apply_patch(state, event["delta"])
    (item,) = state["tiller"]["outbox"]
    assert item["tool"] == "write_file"
    assert item["item"]
    assert not (tmp_path / "workspace" / "draft.txt").exists()  # staged, not sent


def test_a_run_that_is_starting_takes_steers_and_cancels(
    serve: Callable[..., str], tmp_path: Path
) -> None:
    """A request reserved its run id (here, as another process sharing the store would)
    but the run has not started: a steer or cancel is stored for its watcher to read when
    it starts, not refused as an unknown run (the console steered that early under load,
    got a 404, and the steer was lost)."""
    url = serve(make_agent())
    store = f"sqlite:///{tmp_path / 'serve.db'}"

    async def reserve_and_read() -> None:
        async with await open_bus(store) as bus:
            assert await CheckpointStore(bus).reserve("starting")

    asyncio.run(reserve_and_read())
    with httpx.Client(timeout=30) as client:
        steer = client.post(f"{url}/runs/starting/steer", json={"text": "early"}, headers=AUTH)
        assert steer.status_code == 202, steer.text
        assert client.post(f"{url}/runs/starting/cancel", json={}, headers=AUTH).status_code == 202
        unknown = client.post(f"{url}/runs/never/steer", json={"text": "x"}, headers=AUTH)
        assert unknown.status_code == 404

    async def stored() -> tuple[list[str], bool]:
        async with await open_bus(store) as bus:
            control = ControlStore(bus)
            texts = [text for _, text in await control.steers("starting")]
            return texts, await control.cancel_requested("starting") is not None

    assert asyncio.run(stored()) == (["early"], True)

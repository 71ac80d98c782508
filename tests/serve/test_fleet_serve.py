"""`tiller serve --fleet`: each request's run is submitted to the fleet and run by a
worker; the response streams its events from the store (the server holds no run), and an
approval from a page resumes through the fleet's continuation. A real HTTP server (its own
thread and loop) and a `Worker` in the test's loop, on one SQLite file."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tiller.errors import UsageError
from tiller.examples.console_agent import make_agent
from tiller.fleet import Fleet, Worker
from tiller.serve import AppSettings, create_app
from tiller.store import ControlStore, EventLog, open_bus

from ..cli_support import tiller
from .conftest import AUTH, SSE, TOKEN, ServerThread, free_port, post_run, run_input, types

DEMO = "tiller.examples.console_agent:agent"


async def until(check: Callable[[], Awaitable[bool]], *, within: float = 30.0) -> None:
    """Poll `check` until it holds (a hang guard, not a timing test)."""
    async with asyncio.timeout(within):
        while True:
            if await check():
                return
            await asyncio.sleep(0.02)


def _user(text: str) -> list[dict[str, Any]]:
    return [{"id": "u1", "role": "user", "content": text}]


@contextlib.asynccontextmanager
async def a_worker(url: str) -> AsyncIterator[Worker]:
    """A worker on its own connection, until the block ends (then drained)."""
    async with await open_bus(url) as bus:
        worker = Worker(bus, poll_interval=0.02, control_poll=0.05, event_log_batch=1)
        working = asyncio.create_task(worker.run())
        try:
            yield worker
        finally:
            worker.drain()
            async with asyncio.timeout(30):
                await working


@contextlib.asynccontextmanager
async def fleet_server(
    tmp_path: Path, *, worker: bool = True
) -> AsyncIterator[tuple[ServerThread, str]]:
    """A fleet server and (unless `worker=False`) one worker on the same SQLite file."""
    url = f"sqlite:///{tmp_path / 'fleet.db'}?poll_interval=0.02"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    settings = AppSettings(
        store=url,
        token=TOKEN,
        workspace=workspace,
        fleet_queue="tiller-runs",
        fleet_agent=DEMO,
    )
    server = ServerThread(create_app(make_agent(), settings), free_port())
    server.start()
    try:
        async with contextlib.AsyncExitStack() as stack:
            if worker:
                await stack.enter_async_context(a_worker(url))
            yield server, url
    finally:
        await asyncio.to_thread(server.stop)


def _held_here(server: ServerThread) -> int:
    return len(server.app.state.tiller.runner.live)


async def test_a_request_runs_on_a_worker_and_streams_from_the_store(tmp_path: Path) -> None:
    async with fleet_server(tmp_path) as (server, url):
        events = await asyncio.to_thread(
            post_run, server.url, run_input("t1", "r1", _user("hello fleet"))
        )
        assert _held_here(server) == 0  # no run lived in the server
        async with await open_bus(url) as bus:
            record = await Fleet(bus).handle("r1").result(30)
            checkpoint_thread = (await Fleet(bus).handle("r1").peek()) is not None
    assert types(events)[0] == "RUN_STARTED" and types(events)[-1] == "RUN_FINISHED"
    assert events[0]["threadId"] == "t1" and events[0]["runId"] == "r1"
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "hello fleet" in text
    assert record.status == "completed" and record.worker  # a worker ran it
    assert checkpoint_thread


def _said(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


_IMAGE = {"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}


@pytest.mark.parametrize(
    ("content", "context", "heard"),
    [
        (
            [{"type": "text", "text": "hello"}, {"type": "text", "text": "fleet"}],
            [],
            "hello\nfleet",
        ),
        (
            "hello",
            [{"description": "page", "value": "settings"}],
            "hello\n\nContext from the app:\n- page: settings",
        ),
        (
            [{"type": "text", "text": "look"}, _IMAGE],
            [],
            "look\n[image omitted: not supported yet]",
        ),
    ],
    ids=["text-parts", "context", "non-text-part"],
)
async def test_a_request_reads_the_same_on_the_fleet_as_in_process(
    tmp_path: Path,
    serve: Callable[..., str],
    content: Any,
    context: list[dict[str, str]],
    heard: str,
) -> None:
    """One reading of a request's messages: the worker's run is asked what a run in the
    server's own process is asked (the console agent echoes it)."""
    messages = [{"id": "u1", "role": "user", "content": content}]
    body = run_input("t-read", "r-read", messages, context=context)
    async with fleet_server(tmp_path) as (server, _):
        on_fleet = await asyncio.to_thread(post_run, server.url, body)
        in_process = await asyncio.to_thread(
            post_run, serve(make_agent(), store=f"sqlite:///{tmp_path / 'own.db'}"), body
        )
    assert _said(on_fleet) == _said(in_process) == f"You said: {heard}"


async def test_an_approval_resumes_through_the_fleet(tmp_path: Path) -> None:
    async with fleet_server(tmp_path) as (server, url):
        paused = await asyncio.to_thread(
            post_run, server.url, run_input("t2", "r2", _user("write notes.txt: hello"))
        )
        assert paused[-1]["outcome"]["type"] == "interrupt", types(paused)
        (interrupt,) = paused[-1]["outcome"]["interrupts"]
        answer = {
            "interruptId": interrupt["id"],
            "status": "resolved",
            "payload": {"decision": "approve"},
        }
        resumed = await asyncio.to_thread(
            post_run, server.url, run_input("t2", "r2b", [], resume=[answer])
        )
        assert _held_here(server) == 0
        async with await open_bus(url) as bus:
            record = await Fleet(bus).handle("r2").result(30, through_holds=True)
    assert types(resumed)[0] == "RUN_STARTED" and resumed[-1]["type"] == "RUN_FINISHED"
    assert "outcome" not in resumed[-1] or resumed[-1]["outcome"]["type"] == "success"
    assert record.status == "completed"
    assert (tmp_path / "workspace" / "notes.txt").read_text() == "hello"


async def test_a_resume_that_does_not_fit_ends_with_run_error(tmp_path: Path) -> None:
    async with fleet_server(tmp_path) as (server, _):
        answer = {"interruptId": "nope", "status": "resolved", "payload": {"decision": "approve"}}
        events = await asyncio.to_thread(
            post_run, server.url, run_input("t3", "r3", [], resume=[answer])
        )
    assert types(events) == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1]["code"] == "INVALID_RESUME"


@pytest.mark.parametrize(
    ("extra", "messages", "says"),
    [
        (
            {"tools": [{"name": "pick", "description": "d", "parameters": {}}]},
            _user("hi"),
            "frontend tools",
        ),
        ({}, [], "no user message"),
        (
            {},
            [*_user("hi"), {"id": "a1", "role": "assistant", "content": "hello"}],
            "ends with an assistant message",
        ),
        (
            {},
            [
                *_user("pick one"),
                {
                    "id": "a1",
                    "role": "assistant",
                    "toolCalls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "pick", "arguments": "{}"},
                        }
                    ],
                },
                {"id": "r1", "role": "tool", "toolCallId": "c1", "content": "red"},
            ],
            "no text (only tool results)",
        ),
        ({"state": {"count": 1}}, _user("hi"), "client state"),
        ({"threadId": "t/x"}, _user("hi"), "threadId 't/x' must be"),
        ({"runId": "thread"}, _user("hi"), "runId 'thread' must be"),
        ({"runId": "-r4"}, _user("hi"), "starting with a letter, digit or '_'"),
    ],
)
async def test_what_no_worker_could_run_is_a_400(
    tmp_path: Path, extra: dict[str, Any], messages: list[dict[str, Any]], says: str
) -> None:
    async with fleet_server(tmp_path) as (server, url):

        def post() -> httpx.Response:
            body = run_input("t4", "r4", messages, **extra)
            with httpx.Client(timeout=30) as client:
                return client.post(f"{server.url}/agui", content=orjson.dumps(body), headers=SSE)

        response = await asyncio.to_thread(post)
        async with await open_bus(url) as bus:
            depth = await (await bus.queue("tiller-runs")).depth()
    assert response.status_code == 400 and says in response.text
    assert (depth.waiting, depth.in_flight) == (0, 0)


async def test_cancel_from_the_api_stops_the_fleet_run(tmp_path: Path) -> None:
    """`POST /runs/{id}/cancel` goes through the store to the worker running it."""
    async with fleet_server(tmp_path) as (server, url):
        streaming = asyncio.create_task(
            asyncio.to_thread(
                post_run, server.url, run_input("t5", "r5", _user("slow 30")), timeout=60
            )
        )
        async with await open_bus(url) as bus:
            log = EventLog(bus)

            async def started() -> bool:
                return any(
                    e["type"] == "TOOL_CALL_START" or e["type"] == "TEXT_MESSAGE_START"
                    for e in await log.read("r5")
                )

            await until(started)

            def cancel() -> httpx.Response:
                with httpx.Client(timeout=30) as client:
                    return client.post(
                        f"{server.url}/runs/r5/cancel",
                        headers={"Content-Type": "application/json", **AUTH},
                        content=b"{}",
                    )

            response = await asyncio.to_thread(cancel)
            events = await streaming
            record = await Fleet(bus).handle("r5").result(30)
    assert response.status_code == 202, response.text
    assert record.status == "cancelled"
    assert types(events)[-1] in ("RUN_FINISHED", "RUN_ERROR")


async def test_a_client_that_leaves_cancels_its_fleet_run(tmp_path: Path) -> None:
    async with fleet_server(tmp_path) as (server, url):

        def read_one_then_leave() -> str:
            body = orjson.dumps(run_input("t6", "r6", _user("slow 30")))
            with (
                httpx.Client(timeout=30) as client,
                client.stream("POST", f"{server.url}/agui", content=body, headers=SSE) as response,
            ):
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        return line  # and close the connection
            return ""

        first = await asyncio.to_thread(read_one_then_leave)
        async with await open_bus(url) as bus:
            record = await Fleet(bus).handle("r6").result(30)
    assert orjson.loads(first[6:])["type"] == "RUN_STARTED"
    assert record.status == "cancelled"


def test_a_fleet_server_needs_an_agent_its_workers_can_load(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="fleet_agent='module:attr'"):
        AppSettings(store="memory://", token=TOKEN, fleet_queue="tiller-runs")
    done = tiller("serve", "--fleet", "--model", "scripted:x.yaml", "--no-auth", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().endswith("is served in this process only")
    assert done.stderr.count("\n") == 1


async def test_new_input_while_the_thread_waits_or_works_gets_run_error(tmp_path: Path) -> None:
    async with fleet_server(tmp_path) as (server, url):
        paused = await asyncio.to_thread(
            post_run, server.url, run_input("t7", "r7", _user("write notes.txt: hi"))
        )
        assert paused[-1]["outcome"]["type"] == "interrupt"
        refused = await asyncio.to_thread(
            post_run, server.url, run_input("t7", "r7b", _user("something else"))
        )
        async with await open_bus(url) as bus:
            depth = await (await bus.queue("tiller-runs")).depth()
    assert types(refused) == ["RUN_STARTED", "RUN_ERROR"]
    assert refused[-1]["code"] == "INVALID_RESUME" and "open interrupts" in refused[-1]["message"]
    assert (depth.waiting, depth.in_flight) == (0, 0)  # nothing was queued


async def test_new_input_while_the_threads_run_works_is_thread_busy(tmp_path: Path) -> None:
    async with fleet_server(tmp_path) as (server, url):
        streaming = asyncio.create_task(
            asyncio.to_thread(
                post_run, server.url, run_input("t8", "r8", _user("slow 30")), timeout=60
            )
        )
        async with await open_bus(url) as bus:
            log = EventLog(bus)

            async def started() -> bool:
                return len(await log.read("r8")) > 2

            await until(started)
            busy = await asyncio.to_thread(
                post_run, server.url, run_input("t8", "r8b", _user("hello"))
            )
            await Fleet(bus).handle("r8").cancel()
            await streaming
    assert types(busy) == ["RUN_STARTED", "RUN_ERROR"]
    assert busy[-1]["code"] == "THREAD_BUSY"


async def test_a_client_that_leaves_a_resume_cancels_the_run_it_continues(tmp_path: Path) -> None:
    """The resume's decisions and continuation are in the store before its response
    starts, and its stream follows the suspended run (the continuation goes on under that
    run's id): leaving it cancels that run, not the request's new run id."""
    async with fleet_server(tmp_path, worker=False) as (server, url):
        async with a_worker(url):
            paused = await asyncio.to_thread(
                post_run, server.url, run_input("t9", "r9", _user("write notes.txt: hi"))
            )
        (interrupt,) = paused[-1]["outcome"]["interrupts"]
        answer = {
            "interruptId": interrupt["id"],
            "status": "resolved",
            "payload": {"decision": "approve"},
        }

        def resume_and_leave() -> int:
            body = orjson.dumps(run_input("t9", "r9b", [], resume=[answer]))
            with (
                httpx.Client(timeout=30) as client,
                client.stream("POST", f"{server.url}/agui", content=body, headers=SSE) as response,
            ):
                return response.status_code  # and leave before any event (no worker yet)

        assert await asyncio.to_thread(resume_and_leave) == 200
        async with await open_bus(url) as bus:
            control = ControlStore(bus)

            async def asked() -> bool:
                return await control.cancel_requested("r9") is not None

            await until(asked)
            assert await control.cancel_requested("r9b") is None
            async with a_worker(url):
                record = await Fleet(bus).handle("r9").result(30, through_holds=True)
    assert record.status == "cancelled"
    assert not (tmp_path / "workspace" / "notes.txt").exists()

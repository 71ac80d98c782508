"""A server that shuts down leaves its runs recoverable, and never hangs on its streams."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import orjson

from tiller.conversation import UserMessage
from tiller.events import RunStartedEvent
from tiller.examples.console_agent import make_agent
from tiller.serve import AppSettings, create_app
from tiller.state import RunState
from tiller.store import CheckpointStore, EventLog, open_bus

from .conftest import AUTH, SSE, TOKEN, ServerThread, free_port, parse_sse, run_input


def _server(tmp_path: Path) -> ServerThread:
    app = create_app(
        make_agent(step_delay=0.3),
        AppSettings(
            store=f"sqlite:///{tmp_path / 'serve.db'}",
            token=TOKEN,
            workspace=tmp_path / "workspace",
        ),
    )
    server = ServerThread(app, free_port())
    server.start()
    return server


async def _status(tmp_path: Path, run_id: str) -> str:
    bus = await open_bus(f"sqlite:///{tmp_path / 'serve.db'}")
    try:
        return (await CheckpointStore(bus).load(run_id)).status
    finally:
        await bus.aclose()


def test_a_shutdown_stops_its_runs_promptly_and_leaves_them_recoverable(
    tmp_path: Path,
) -> None:
    first = _server(tmp_path)
    body = run_input(
        "t1",
        "r1",
        [{"id": "u1", "role": "user", "content": "slow 4"}],
        forwardedProps={"tiller": {"detach": True}},
    )
    with httpx.Client(timeout=30) as client:
        with client.stream(
            "POST", f"{first.url}/agui", content=orjson.dumps(body), headers=SSE
        ) as response:
            for line in response.iter_lines():
                if "TOOL_CALL_RESULT" in line:
                    break
        first.stop()  # asserts the server thread ended: no stream held it up
    # Stopped by the shutdown, not cancelled by anyone: left for another process to recover.
    assert asyncio.run(_status(tmp_path, "r1")) == "running"
    recovered = subprocess.run(
        [
            sys.executable,
            "-m",
            "tiller",
            "runs",
            "resume",
            "r1",
            "--store",
            f"sqlite:///{tmp_path / 'serve.db'}",
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert recovered.returncode == 0, recovered.stderr
    assert "Finished all steps." in recovered.stdout
    assert asyncio.run(_status(tmp_path, "r1")) == "finished"


async def _crashed_run(tmp_path: Path) -> None:
    """What a process killed mid-run leaves: a `running` checkpoint, the start of the event
    log, and no lease (it lapsed)."""
    bus = await open_bus(f"sqlite:///{tmp_path / 'serve.db'}")
    try:
        state = RunState(run_id="r1", thread_id="t1", messages=[UserMessage(text="hi")])
        await CheckpointStore(bus).save(state, "running")
        writer = EventLog(bus).writer("r1", batch_size=1)
        writer(RunStartedEvent("t1", "r1", protocol_version="1.0"))
        await writer.wait()
    finally:
        await bus.aclose()


def test_a_follower_of_a_run_whose_process_died_is_told_how_to_recover_it(
    tmp_path: Path,
) -> None:
    asyncio.run(_crashed_run(tmp_path))
    server = _server(tmp_path)
    try:
        replay = httpx.get(f"{server.url}/runs/r1/events", headers=AUTH, timeout=30).text
        events = parse_sse(replay)
        assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_ERROR"]
        assert events[-1]["code"] == "RUN_LOST"
        assert "tiller runs resume r1" in events[-1]["message"]
        # No one would ever apply a steer or a cancel: refused, with the same advice.
        steer = httpx.post(f"{server.url}/runs/r1/steer", json={"text": "x"}, headers=AUTH)
        assert steer.status_code == 409
        assert "tiller runs resume r1" in steer.json()["error"]
    finally:
        server.stop()

"""Two `tiller serve` processes on different ports, one store (NATS JetStream, and a
SQLite file): a run's
state lives in the store, so an interrupt raised through one is resumed through the
other, and a steer, a cancel or a reattach sent to one reaches a run on the other."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui

from .conftest import (
    AUTH,
    SSE,
    TOKEN,
    free_port,
    last_messages,
    parse_sse,
    post_run,
    run_input,
    wait_for,
)

NATS_URL = "nats://127.0.0.1:4222"


def _nats_up() -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", 4222)) == 0


@pytest.fixture(params=["nats", "sqlite"])
def two_servers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    store = NATS_URL if request.param == "nats" else f"sqlite:///{tmp_path / 'shared.db'}"
    if request.param == "nats" and not _nats_up():
        pytest.fail(
            f"NATS JetStream is not reachable at {NATS_URL}. Start it: run `.ci/run`, or "
            "`nats-server -js -a 127.0.0.1 -p 4222`.",
            pytrace=False,
        )
    namespace = f"t{uuid.uuid4().hex[:16]}"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    processes: list[subprocess.Popen[bytes]] = []
    logs: list[Any] = []
    urls: list[str] = []
    for name in ("a", "b"):
        port = free_port()
        command = [
            sys.executable,
            "-m",
            "tiller",
            "serve",
            "tiller.examples.console_agent:agent",
            "--port",
            str(port),
            "--store",
            store,
            "--namespace",
            namespace,
            "--token",
            TOKEN,
            "--workspace",
            str(workspace),
        ]
        log = open(tmp_path / f"server-{name}.log", "wb")  # noqa: SIM115 - closed below
        logs.append(log)
        processes.append(
            subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ},
            )
        )
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for name, url, process in zip("ab", urls, processes, strict=True):
            deadline = time.monotonic() + 30
            while True:
                if process.poll() is not None:
                    raise AssertionError(
                        f"server {name} exited: {(tmp_path / f'server-{name}.log').read_text()}"
                    )
                try:
                    if httpx.get(f"{url}/runs", headers=AUTH, timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError("a server did not start")
                time.sleep(0.1)
        yield urls[0], urls[1]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in logs:
            log.close()
        if request.param == "nats":
            asyncio.run(_drop_namespace(namespace))


async def _drop_namespace(namespace: str) -> None:
    from tiller.store._nats import NatsBus

    bus = await NatsBus.connect(NATS_URL, namespace=namespace)
    try:
        await bus.delete_namespace()
    finally:
        await bus.aclose()


def _user(text: str) -> list[dict[str, Any]]:
    return [{"id": "u1", "role": "user", "content": text}]


def test_an_interrupt_raised_on_one_server_is_resumed_on_the_other(
    two_servers: tuple[str, str], tmp_path: Path
) -> None:
    a, b = two_servers
    events = post_run(a, run_input("t1", "r1", _user("write shared.txt: from a")))
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    resume = [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "approve"}}
    ]
    events = post_run(b, run_input("t1", "r2", last_messages(events), resume=resume))
    assert events[-1]["outcome"] == {"type": "success"}
    assert (tmp_path / "workspace" / "shared.txt").read_text() == "from a"
    # A second resume, through the first server, runs nothing.
    again = post_run(a, run_input("t1", "r3", [], resume=resume))
    assert again[-1]["type"] == "RUN_ERROR"


def test_a_steer_and_a_reattach_through_one_server_reach_a_run_on_the_other(
    two_servers: tuple[str, str],
) -> None:
    a, b = two_servers
    body = run_input("t2", "r1", _user("slow 4"), forwardedProps={"tiller": {"detach": True}})
    with httpx.Client(timeout=60) as client:
        with client.stream(
            "POST", f"{a}/agui", content=orjson.dumps(body), headers=SSE
        ) as response:
            for line in response.iter_lines():
                if "TOOL_CALL_RESULT" in line:
                    break  # the run is under way on a; the client leaves (it is detached)
        assert (
            client.post(f"{b}/runs/r1/steer", json={"text": "from b"}, headers=AUTH).status_code
            == 202
        )
        with client.stream("GET", f"{b}/runs/r1/events?after=0", headers=AUTH) as replay:
            text = b"".join(replay.iter_bytes()).decode()
    events = parse_sse(text)
    assert_valid_agui(events, max_warnings=0)
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "success"}
    said = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "from b" in said


def test_a_cancel_through_one_server_stops_a_run_on_the_other(two_servers: tuple[str, str]) -> None:
    a, b = two_servers
    body = run_input("t3", "r1", _user("slow 30"), forwardedProps={"tiller": {"detach": True}})
    with httpx.Client(timeout=60) as client:
        with client.stream(
            "POST", f"{a}/agui", content=orjson.dumps(body), headers=SSE
        ) as response:
            lines = response.iter_lines()
            seen: list[str] = []
            for line in lines:
                seen.append(line)
                if "STEP_STARTED" in line:
                    break
            assert client.post(f"{b}/runs/r1/cancel", json={}, headers=AUTH).status_code == 202
            rest = "\n".join([*seen, *lines])
        assert '"outcome":{"type":"cancelled"}' in rest
        assert_valid_agui(parse_sse(rest), max_warnings=0)
        run = wait_for(
            lambda: (
                (r := client.get(f"{b}/runs/r1", headers=AUTH).json())["status"] == "finished" and r
            ),
            what="the cancelled run's checkpoint",
        )
        assert run["stopCause"] == "cancelled"

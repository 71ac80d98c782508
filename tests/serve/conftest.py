"""Real servers for the serve tests: uvicorn on a free loopback port, in a thread.

`serve(agent, **create_app_kwargs)` starts one and returns its base URL; each is stopped
at the end of the test. The app runs on its own event loop (the server thread's), so the
tests talk to it only over HTTP, as a client would.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from ag_ui_validate.pytest_plugin import assert_valid_agui

from tiller.loop import Agent
from tiller.serve import AppSettings, Server, create_app

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SSE = {"Accept": "text/event-stream", "Content-Type": "application/json", **AUTH}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerThread:
    """One uvicorn server on its own thread and loop."""

    def __init__(self, app: Any, port: int) -> None:
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"
        )
        self.server = Server(config)
        self.url = f"http://127.0.0.1:{port}"
        self.app = app
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.run(self.server.serve())

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        assert not self.thread.is_alive(), "the test server did not shut down"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., str]]:
    started: list[ServerThread] = []

    def start(agent: Agent, **kwargs: Any) -> str:
        kwargs.setdefault("store", f"sqlite:///{tmp_path / 'serve.db'}")
        kwargs.setdefault("token", TOKEN)
        kwargs.setdefault("workspace", tmp_path / "workspace")
        server = ServerThread(create_app(agent, AppSettings(**kwargs)), free_port())
        server.start()
        started.append(server)
        return server.url

    yield start
    for server in started:
        server.stop()


def run_input(
    thread_id: str, run_id: str, messages: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "threadId": thread_id,
        "runId": run_id,
        "state": {},
        "messages": messages,
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    body.update(extra)
    return body


def parse_sse(text: str) -> list[dict[str, Any]]:
    """The events of an SSE body (keep-alive comments and `id:` lines skipped)."""
    events = []
    for block in text.split("\n\n"):
        data = [line[6:] for line in block.split("\n") if line.startswith("data: ")]
        if data:
            events.append(orjson.loads("\n".join(data)))
    return events


def post_run(url: str, body: dict[str, Any], *, timeout: float = 30.0) -> list[dict[str, Any]]:
    """POST a run, read its whole stream, and check it with `ag-ui-validate` (zero
    warnings): every stream the tests are served is validated."""
    with httpx.Client(timeout=timeout) as client:
        response = client.post(f"{url}/agui", content=orjson.dumps(body), headers=SSE)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/event-stream")
        events = parse_sse(response.text)
        assert_valid_agui(events, max_warnings=0)
        return events


def types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def last_messages(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages of the stream's last MESSAGES_SNAPSHOT."""
    snapshots = [e for e in events if e["type"] == "MESSAGES_SNAPSHOT"]
    assert snapshots, types(events)
    messages: list[dict[str, Any]] = snapshots[-1]["messages"]
    return messages


def wait_for(check: Callable[[], Any], *, timeout: float = 20.0, what: str = "a condition") -> Any:
    """Poll `check` until it returns something truthy (a hang guard, not a timing test)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)

"""`tiller serve` re-read the workspace's `tiller.toml` on every request (issue 13,
defect 2): a served run's model plants a policy, and the next request must run under the
person's policy still (no full_access, no planted hook)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from .conftest import Host, call
from .test_policy_rewrite import evil_toml

TOKEN = "redteam-token"
HEADERS = {
    "Authorization": f"Bearer {TOKEN}",
    "Accept": "text/event-stream",
    "Content-Type": "application/json",
}
#: The person's policy: auto, so the model's write_file runs without a person.
PERSON_TOML = '[policy]\nmode = "auto"\n'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    """`tiller serve` on loopback with a token, on a scripted model (the server keeps
    one model, so its steps go on from one request to the next)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.process: subprocess.Popen[bytes] | None = None
        self.log = host.tmp / "serve.log"

    def start(self, turns: list[Any]) -> str:
        script = self.host.script(turns, name="serve")
        port = free_port()
        command = [
            sys.executable, "-m", "tiller", "serve",
            "--model", f"scripted:{script}",
            "--port", str(port),
            "--token", TOKEN,
            "--workspace", str(self.host.workspace),
            "--store", self.host.store,
        ]  # fmt: skip
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        url = f"http://127.0.0.1:{port}"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"tiller serve exited: {self.log.read_text()}")
            try:
                if httpx.get(f"{url}/runs", headers=auth, timeout=2).status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"tiller serve did not start: {self.log.read_text()}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)


@pytest.fixture
def served(host: Host) -> Iterator[Served]:
    server = Served(host)
    try:
        yield server
    finally:
        server.stop()


def post_run(url: str, thread: str, run: str, text: str) -> list[dict[str, Any]]:
    body = {
        "threadId": thread,
        "runId": run,
        "state": {},
        "messages": [{"id": f"{run}-user", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    with httpx.Client(timeout=60) as client:
        response = client.post(f"{url}/agui", content=orjson.dumps(body), headers=HEADERS)
    assert response.status_code == 200, response.text
    events = []
    for block in response.text.split("\n\n"):
        data = [line[6:] for line in block.split("\n") if line.startswith("data: ")]
        if data:
            events.append(orjson.loads("\n".join(data)))
    assert events and events[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR"), events[-3:]
    return events


def test_a_served_run_cannot_change_the_next_requests_policy(host: Host, served: Served) -> None:
    (host.workspace / "tiller.toml").write_text(PERSON_TOML)
    adopted = host.workspace / "adopted-by-request-2.txt"
    url = served.start(
        [
            # Request 1: plant the policy.
            call("write_file", path="tiller.toml", content=evil_toml(host)),
            "Planted.",
            # Request 2: a command auto asks a person for (a network command); it runs
            # only under the planted full_access.
            call(
                "execute_command",
                command=f"touch {adopted.name} && curl -s {host.listener.url}/served",
            ),
            "Done.",
        ]
    )
    first = post_run(url, "t-1", "r-1", "set the project up")
    assert first[-1]["type"] == "RUN_FINISHED", first[-3:]
    second = post_run(url, "t-2", "r-2", "carry on")
    assert second[-1]["type"] == "RUN_FINISHED", second[-3:]
    assert not adopted.exists(), "the second request ran under the planted full_access"
    host.assert_untouched()
    assert (host.workspace / "tiller.toml").read_text() == PERSON_TOML

"""The real AG-UI client, `@ag-ui/client` 1.0.0 under node, against `tiller serve`.

`node/client.mjs` drives an `HttpAgent` through a plain run, an approval interrupt answered
with `resume`, and a frontend tool whose result the client sends back (see the script). A
real client accepting a stream is not the same as the stream being right: the client only
`console.warn`s on a state patch that does not apply, and resolves on a stream that never
ends. So what the client rebuilt (state, messages) is compared with what the server says:
its stored event log, replayed through `GET /runs/{id}/events` and folded here. Every stream
the client saw is also checked by `ag-ui-validate` (zero warnings), and the live endpoint
by the validator's own HTTP client (its CLI, and `assert_valid_agui_endpoint`).

Skipped only when node or npm is missing; `npm ci` runs once when `node/node_modules` is
absent (it needs the npm registry or a warm npm cache), and a failing install fails.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui, assert_valid_agui_endpoint

from tiller.examples.console_agent import make_agent
from tiller.serve import AppSettings, create_app

from .conftest import AUTH, TOKEN, ServerThread, free_port, parse_sse, run_input, types

NODE_DIR = Path(__file__).with_name("node")
CONVERSATIONS = ("plain", "approve", "frontend")
#: The tool the page offers in `client.mjs`, and what the page answers.
BANNER_RESULT = "banner shown to the person"


def _agent() -> Any:
    # A little model latency, as with a real model: the first step of each request waits
    # 20 ms, so a stream arrives in several chunks, as a streamed response does.
    return make_agent(step_delay=0.01, first_delay=0.02)


@pytest.fixture(scope="session")
def node() -> str:
    """The node binary, with `@ag-ui/client` installed next to `client.mjs`."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed to run @ag-ui/client (install Node.js >= 18)")
    if not (NODE_DIR / "node_modules" / "@ag-ui" / "client" / "package.json").is_file():
        install = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if install.returncode != 0:
            pytest.fail(
                f"`npm ci` in {NODE_DIR} failed (it needs the npm registry or a warm cache):\n"
                + install.stdout
                + install.stderr
            )
    return node


@dataclass
class Session:
    """One run of `client.mjs` against one server, and the server's account of it."""

    url: str
    workspace: Path
    #: What the script printed: per conversation the client's state, messages and runs.
    client: dict[str, Any]
    #: Each run's stored events, replayed by `GET /runs/{id}/events?after=0`.
    server_events: dict[str, list[dict[str, Any]]]
    #: `GET /runs`, by run id.
    server_runs: dict[str, dict[str, Any]]

    def runs(self, conversation: str) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = self.client["conversations"][conversation]["runs"]
        return runs

    def thread_events(self, conversation: str) -> list[dict[str, Any]]:
        """The server's events of the conversation's runs, in order."""
        return [e for run in self.runs(conversation) for e in self.server_events[run["runId"]]]


@pytest.fixture(scope="module")
def session(node: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """The script, run once against one server (the tests below each judge one aspect)."""
    tmp = tmp_path_factory.mktemp("agui-client-node")
    workspace = tmp / "workspace"
    app = create_app(
        _agent(),
        AppSettings(store=f"sqlite:///{tmp / 'serve.db'}", token=TOKEN, workspace=workspace),
    )
    server = ServerThread(app, free_port())
    server.start()
    try:
        done = subprocess.run(
            [node, "client.mjs", server.url, TOKEN],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.stdout.strip(), f"client.mjs printed nothing:\n{done.stderr}"
        client = orjson.loads(done.stdout)
        assert done.returncode == 0 and client["ok"], client.get("error", "") + done.stderr
        server_events = {
            run["runId"]: _replay(server.url, run["runId"])
            for conversation in client["conversations"].values()
            for run in conversation["runs"]
        }
        listed = httpx.get(f"{server.url}/runs", headers=AUTH, timeout=30).json()["runs"]
        yield Session(
            url=server.url,
            workspace=workspace,
            client=client,
            server_events=server_events,
            server_runs={run["runId"]: run for run in listed},
        )
    finally:
        server.stop()


def _replay(url: str, run_id: str) -> list[dict[str, Any]]:
    """A finished run's stored events (the endpoint ends its stream at the terminal one)."""
    with httpx.Client(timeout=30) as client:
        response = client.get(f"{url}/runs/{run_id}/events", params={"after": 0}, headers=AUTH)
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


# ── what the server says, folded from its event log ────────────────────────────────────


def fold_state(events: list[dict[str, Any]]) -> Any:
    """The state a consumer of `events` ends with: the last snapshot, its deltas applied."""
    state: Any = None
    for event in events:
        if event["type"] == "STATE_SNAPSHOT":
            state = copy.deepcopy(event["snapshot"])
        elif event["type"] == "STATE_DELTA":
            state = jsonpatch.apply_patch(state, event["delta"])
    return state


def fold_messages(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The thread a consumer of `events` ends with. A `MESSAGES_SNAPSHOT` is the whole
    conversation (each served run opens with one), so it replaces what came before."""
    messages: list[dict[str, Any]] = []

    def message(message_id: str) -> dict[str, Any]:
        (found,) = [m for m in messages if m["id"] == message_id]
        return found

    def call(call_id: str) -> dict[str, Any]:
        calls: list[dict[str, Any]] = [
            c for m in messages for c in m.get("toolCalls", ()) if c["id"] == call_id
        ]
        (found,) = calls
        return found

    for event in events:
        kind = event["type"]
        if kind == "MESSAGES_SNAPSHOT":
            messages = copy.deepcopy(event["messages"])
        elif kind == "TEXT_MESSAGE_START":
            role = event.get("role", "assistant")
            messages.append({"id": event["messageId"], "role": role, "content": ""})
        elif kind == "TEXT_MESSAGE_CONTENT":
            message(event["messageId"])["content"] += event["delta"]
        elif kind == "TOOL_CALL_START":
            parent_id = event.get("parentMessageId", event["toolCallId"])
            parents = [m for m in messages if m["id"] == parent_id]
            if parents:
                parent = parents[0]
            else:
                parent = {"id": parent_id, "role": "assistant"}
                messages.append(parent)
            parent.setdefault("toolCalls", []).append(
                {
                    "id": event["toolCallId"],
                    "type": "function",
                    "function": {"name": event["toolCallName"], "arguments": ""},
                }
            )
        elif kind == "TOOL_CALL_ARGS":
            call(event["toolCallId"])["function"]["arguments"] += event["delta"]
        elif kind == "TOOL_CALL_RESULT":
            messages.append(
                {
                    "id": event["messageId"],
                    "role": "tool",
                    "toolCallId": event["toolCallId"],
                    "content": event["content"],
                }
            )
    return messages


def essence(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a message says: id, role, content, tool calls, the call a result answers.

    Ids are kept and compared: the client takes every id from the stream (the
    TEXT_MESSAGE_START / TOOL_CALL_RESULT `messageId`, a TOOL_CALL_START's
    `parentMessageId`, the MESSAGES_SNAPSHOT's messages) or made it itself (the user and
    tool messages it sent, which the server echoes back). The only id the protocol lets a
    client mint, an assistant message's for a TOOL_CALL_START without `parentMessageId`,
    never arises: tiller always names the parent. An empty or absent `content` is the same
    (the client opens a text message with `""`; the server omits an assistant's absent text).
    """
    out = []
    for m in messages:
        kept = {"id": m["id"], "role": m["role"]}
        if m.get("content"):
            kept["content"] = m["content"]
        if m.get("toolCalls"):
            kept["toolCalls"] = [
                {
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
                for c in m["toolCalls"]
            ]
        if "toolCallId" in m:
            kept["toolCallId"] = m["toolCallId"]
        out.append(kept)
    return out


# ── the verdicts ───────────────────────────────────────────────────────────────────────


def test_the_client_runs_every_feature_to_its_end(session: Session) -> None:
    for name in CONVERSATIONS:
        for run in session.runs(name):
            assert run["status"] == 200, run["runId"]
            assert run["contentType"].startswith("text/event-stream")
            assert run["runError"] is None
            live = parse_sse(run["sse"])
            # The client applied exactly the events it was sent, and the last one ends the run.
            assert run["events"] == live, run["runId"]
            assert types(live)[0] == "RUN_STARTED"
            assert types(live)[-1] == "RUN_FINISHED", (run["runId"], types(live))
            assert live[-1]["runId"] == run["runId"]

    (plain,) = session.runs("plain")
    assert plain["finished"]["outcome"] == "success"

    paused, resumed = session.runs("approve")
    assert paused["finished"]["outcome"] == "interrupt"
    (interrupt,) = paused["pendingInterrupts"]
    assert interrupt["reason"] == "tool_call"
    assert interrupt["id"] == f"approve-{interrupt['toolCallId']}"
    assert resumed["request"]["resume"] == [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "approve"}}
    ]
    assert resumed["finished"]["outcome"] == "success"
    assert resumed["pendingInterrupts"] == []
    approve = session.client["conversations"]["approve"]
    assert approve["pendingInterrupts"] == []
    # The plan's task, ticked off after the write, reached the client through state deltas.
    assert [t["status"] for t in approve["state"]["tiller"]["tasks"]] == ["completed"]

    calling, continued = session.runs("frontend")
    (call_id,) = calling["finished"]["pendingToolCallIds"]
    assert calling["events"][-1]["outcome"] == {"type": "success", "pendingToolCallIds": [call_id]}
    tool_message = continued["request"]["messages"][-1]
    assert tool_message == {
        "id": "node-frontend-tool-1",
        "role": "tool",
        "toolCallId": call_id,
        "content": BANNER_RESULT,
    }
    assert continued["finished"]["pendingToolCallIds"] == []
    last = session.client["conversations"]["frontend"]["messages"][-1]
    assert last["content"] == f"The page answered: {BANNER_RESULT}"


def test_every_stream_the_client_saw_is_valid_and_is_what_the_server_stored(
    session: Session,
) -> None:
    for name in CONVERSATIONS:
        for run in session.runs(name):
            live = parse_sse(run["sse"])
            # Every served run publishes its state: declaring shared state adds AGUI305.
            assert_valid_agui(live, features=["shared-state"], max_warnings=0)
            # Reattaching from index 0 replays exactly what the live client was sent.
            assert session.server_events[run["runId"]] == live, run["runId"]


def test_the_write_ran_once(session: Session) -> None:
    assert (session.workspace / "a.txt").read_text() == "hi"
    events = session.thread_events("approve")
    writes = [
        e["toolCallId"]
        for e in events
        if e["type"] == "TOOL_CALL_START" and e["toolCallName"] == "write_file"
    ]
    (write,) = set(writes)
    results = [e for e in events if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == write]
    assert [r["content"] for r in results] == ["created a.txt (2 bytes)"]
    paused, resumed = (run["runId"] for run in session.runs("approve"))
    assert session.server_runs[paused]["status"] == "continued"
    assert session.server_runs[resumed]["status"] == "finished"


@pytest.mark.parametrize("name", CONVERSATIONS)
def test_the_client_state_is_the_servers(session: Session, name: str) -> None:
    # Patch failures in the client are only a console warning: compare the result.
    server_state = fold_state(session.thread_events(name))
    assert server_state is not None and "tiller" in server_state
    assert session.client["conversations"][name]["state"] == server_state


@pytest.mark.parametrize(
    "name",
    [
        "plain",
        "approve",
        "frontend",
    ],
)
def test_the_client_messages_are_the_servers(session: Session, name: str) -> None:
    client = essence(session.client["conversations"][name]["messages"])
    assert client == essence(fold_messages(session.thread_events(name)))


def test_a_snapshot_names_each_message_as_it_was_streamed(session: Session) -> None:
    """A run's closing MESSAGES_SNAPSHOT, and the next run's opening one, repeat the
    messages already streamed under the same ids (so a client merging by id keeps order)."""
    paused, resumed = (session.server_events[run["runId"]] for run in session.runs("approve"))
    closing = paused[-2]
    assert closing["type"] == "MESSAGES_SNAPSHOT"
    streamed = fold_messages(paused[:-2])
    assert essence(closing["messages"]) == essence(streamed)
    opening = resumed[1]
    assert opening["type"] == "MESSAGES_SNAPSHOT"
    assert essence(opening["messages"]) == essence(closing["messages"])


# ── the live endpoint, through ag-ui-validate's own HTTP client ───────────────────────


def _validator_cli() -> str:
    beside = Path(sys.executable).with_name("ag-ui-validate")
    found = str(beside) if beside.is_file() else shutil.which("ag-ui-validate")
    assert found, "ag-ui-validate is a dev dependency: pip install -e '.[dev]'"
    return found


def test_the_validator_cli_passes_the_live_endpoint(serve: Callable[..., str]) -> None:
    url = serve(_agent())
    done = subprocess.run(
        [
            _validator_cli(),
            f"{url}/agui",
            "--header",
            f"Authorization: Bearer {TOKEN}",
            "--fail-on",
            "warning",
            "--no-color",
            "--timeout",
            "60",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


BANNER_TOOL = {
    "name": "show_banner",
    "description": "Shows a banner at the top of the page.",
    "parameters": {"type": "object", "properties": {"reason": {"type": "string"}}},
}


@pytest.mark.parametrize(
    ("text", "extra"),
    [
        ("write b.txt: x", {}),  # ends with an approval interrupt
        ("ask", {}),  # ends with a question interrupt
        ("client", {"tools": [BANNER_TOOL]}),  # ends with a pending frontend tool call
        ("think", {}),  # reasoning, then text
    ],
)
async def test_the_live_endpoint_is_valid_for_each_feature(
    serve: Callable[..., str], text: str, extra: dict[str, Any]
) -> None:
    url = serve(_agent())
    body = run_input("live", "live-r1", [{"id": "u1", "role": "user", "content": text}], **extra)
    await assert_valid_agui_endpoint(
        f"{url}/agui", input=body, headers=AUTH, timeout_ms=60_000, max_warnings=0
    )

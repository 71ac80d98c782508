"""A served run takes the request's `traceparent`: its span goes under the caller's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.serve.conftest import SSE, ServerThread, free_port, parse_sse, run_input
from tiller.loop import Agent, RunOptions
from tiller.model import ScriptedModel
from tiller.serve import AppSettings, create_app

from ._tree import Recorded

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def server(recorded: Recorded, tmp_path: Path) -> Iterator[str]:
    agent = Agent(ScriptedModel(["hello from the server"]), [], name="served")
    settings = AppSettings(
        store=f"sqlite:///{tmp_path / 'serve.db'}",
        token="t",
        workspace=tmp_path / "workspace",
        options=RunOptions().with_telemetry(recorded.telemetry),
    )
    thread = ServerThread(create_app(agent, settings), free_port())
    thread.start()
    yield thread.url
    thread.stop()


def test_a_served_run_goes_under_the_requests_traceparent(server: str, recorded: Recorded) -> None:
    body = run_input("t1", "r1", [{"id": "m1", "role": "user", "content": "hi"}])
    headers = {**SSE, "Authorization": "Bearer t", "traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"}
    response = httpx.post(f"{server}/agui", content=orjson.dumps(body), headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED"
    span = recorded.one("invoke_agent served")
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.parent is not None and f"{span.parent.span_id:016x}" == CALLER_SPAN
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.conversation.id"] == "t1"
    assert attrs["tiller.run.id"] == "r1"
    chat = recorded.named(f"chat {ScriptedModel(['x']).name}")
    assert len(chat) == 1 and chat[0].parent is not None
    assert chat[0].parent.span_id == span.context.span_id


def test_without_a_traceparent_the_served_run_is_a_root(server: str, recorded: Recorded) -> None:
    body = run_input("t2", "r2", [{"id": "m1", "role": "user", "content": "hi"}])
    headers = {**SSE, "Authorization": "Bearer t"}
    response = httpx.post(f"{server}/agui", content=orjson.dumps(body), headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    span = recorded.one("invoke_agent served")
    assert span.parent is None

"""A served run keeps the mailbox it started with when it is resumed, on this server or
another sharing the store, whatever that server's `--mailbox` (law 11; review of issue
18: the route was the resuming server's, not the run's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tiller.conversation import Taint
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.serve import AppSettings, create_app
from tiller.store import Bus, MailboxStore, MailIdentity, open_bus

from .conftest import parse_sse, run_input


def _next(messages: list[Any], info: Any) -> Any:
    if getattr(messages[-1], "tool_results", ()):
        said = [m.text for m in messages if getattr(m, "text", None)]
        return "after: " + " | ".join(said)
    return {"tool_calls": [{"name": "message_send", "arguments": {"to": "lead", "text": "ok"}}]}


async def _post(bus: Bus, workspace: Path, mailbox: str | None, body: dict[str, Any]) -> Any:
    agent = Agent(ScriptedModel(_next), [], name="mine")
    settings = AppSettings(store=bus, token=None, workspace=workspace, mailbox=mailbox)
    app = create_app(agent, settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            response = await client.post("/agui", json=body)
    return parse_sse(response.text)


async def test_a_served_run_resumed_elsewhere_keeps_its_mailbox(tmp_path: Path) -> None:
    bus = await open_bus("memory://")
    user = [{"id": "u1", "role": "user", "content": "go"}]
    paused = await _post(bus, tmp_path, "ops", run_input("t1", "r1", user))
    (interrupt,) = paused[-1]["outcome"]["interrupts"]
    mail = MailboxStore(bus)
    await mail.send("ops", "hello ops", sender=MailIdentity("lead"), taint=Taint.NONE)
    answer = {"interruptId": interrupt["id"], "status": "resolved",
              "payload": {"decision": "approve"}}  # fmt: skip
    # Another server on the same store, started without --mailbox, resumes it.
    resumed = await _post(bus, tmp_path, None, run_input("t1", "r2", user, resume=[answer]))
    text = "".join(e["delta"] for e in resumed if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "[message from agent lead] hello ops" in text, resumed
    claim = await mail.claim("lead", run_id="reader", session="s")
    # The approved send went out as the run's mailbox name.
    assert [(m.sender, m.text) for m in claim.messages] == [("ops", "ok")]
    await bus.aclose()

"""`tiller demo --agui`: run the bundled AG-UI example agent offline and show its stream.

Two runs on one thread, as a web page would make them: the first ends with an approval
interrupt; the second resumes it with the person's answer. No model, no network, no
service: everything runs in this process on embedded defaults.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console

from ..events import Event, MessageLog, RunOutcome, approval_interrupt_id, encode_sse, run_agent
from ..examples.agui_tour import WeatherTour
from ._render import describe

__all__ = ["run_tour"]


async def _show(console: Console, events: Any, *, raw: bool) -> list[Event]:
    seen: list[Event] = []
    async for event in events:
        seen.append(event)
        if raw:
            sys.stdout.buffer.write(encode_sse(event))
            sys.stdout.flush()
        else:
            console.print(describe(event))
    return seen


async def run_tour(*, approve: bool = True, raw: bool = False, city: str = "Oslo") -> int:
    """Run the tour; returns a process exit code (0 when both runs end as expected)."""
    console = Console(highlight=False, soft_wrap=True)
    user = {"id": "demo-user-1", "role": "user", "content": f"What's the weather in {city}?"}
    first_input = {"threadId": "demo-thread", "runId": "demo-run-1", "messages": [user]}

    if not raw:
        console.rule("[bold]run 1: the agent works, then asks before publishing")
    first = await _show(console, run_agent(WeatherTour(), first_input), raw=raw)

    finished = first[-1].to_wire()
    outcome = finished.get("outcome") or {}
    if outcome.get("type") != "interrupt":
        console.print("[red]the first run did not end with an interrupt[/red]")
        return 1
    # What a client does next: rebuild the conversation from the stream, answer the interrupt.
    history = MessageLog([user]).feed_all(first)
    state: Any = next(
        (e.to_wire()["snapshot"] for e in reversed(first) if e.type == "STATE_SNAPSHOT"), {}
    )
    (interrupt,) = outcome["interrupts"]
    decision = "approve" if approve else "deny"
    answer = {"decision": decision, "reason": "demo says so"}
    if not raw:
        console.rule(f"[bold]run 2: the person answers {decision!r}; the run resumes")
    second_input = {
        "threadId": "demo-thread",
        "runId": "demo-run-2",
        "messages": history.messages,
        "state": state,
        "resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": answer}],
    }
    assert interrupt["id"] == approval_interrupt_id(interrupt["toolCallId"])
    second = await _show(console, run_agent(WeatherTour(), second_input), raw=raw)
    last = second[-1].to_wire()
    ok = last["type"] == "RUN_FINISHED" and last.get("outcome") == RunOutcome.success().to_wire()
    if not raw:
        console.rule(f"[bold]{'done' if ok else 'the resumed run did not finish'}")
    return 0 if ok else 1
